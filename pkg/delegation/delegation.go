// Package delegation holds what the executor, the state service and the
// router share about sub-tasks: the subtask:// URI, the arguments of the
// delegation tools (call_agent, call_model, get_task_status, wait_tasks),
// how a call's overrides apply to the target agent without escalating its
// tools, the budget ceiling a parent puts on its sub-tasks, and the limits'
// defaults.
package delegation

import (
	"errors"
	"fmt"

	"github.com/agentmesh/agentmesh/pkg/taskstate"
)

// URIScheme prefixes a sub-task's id in what the delegation tools return
// (one definition, in taskstate: the router and amctl read it too).
const URIScheme = taskstate.SubtaskScheme

// Tool names.
const (
	ToolCallAgent     = "call_agent"
	ToolCallModel     = "call_model"
	ToolGetTaskStatus = "get_task_status"
	ToolWaitTasks     = "wait_tasks"
)

// Default limits (state's Config overrides them).
const (
	// DefaultMaxDepth: levels below the root task a sub-task may be at.
	DefaultMaxDepth = 5
	// DefaultMaxPerTask: sub-tasks one task may spawn.
	DefaultMaxPerTask = 100
	// DefaultMaxPerTree: sub-tasks one tree (a root and all below) may hold.
	DefaultMaxPerTree = 1000
)

// MaxWaitSeconds bounds wait_tasks' timeout_seconds (one day).
const MaxWaitSeconds = 86400

// MaxWaitTasks bounds the tasks of one wait_tasks call.
const MaxWaitTasks = 1000

// ErrBadTaskRef: a task reference that is neither an id nor a subtask URI.
var ErrBadTaskRef = errors.New("not a task id or subtask:// URI")

// maxIDLen bounds an id (ULIDs are 26 characters; ids are kept short).
const maxIDLen = 128

// URI returns the subtask URI of a task id.
func URI(id string) string { return taskstate.SubtaskURI(id) }

// TaskID returns the task id a reference names: "subtask://ID" or a bare
// ID. An id is 1-128 characters of letters, digits, '-' and '_'.
func TaskID(ref string) (string, error) {
	id := taskstate.NormalizeTaskID(ref)
	if id == "" || len(id) > maxIDLen {
		return "", fmt.Errorf("%w: %q", ErrBadTaskRef, clip(ref))
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return "", fmt.Errorf("%w: %q", ErrBadTaskRef, clip(ref))
		}
	}
	return id, nil
}

func clip(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}
