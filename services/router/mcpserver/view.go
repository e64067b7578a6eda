package mcpserver

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"github.com/agentmesh/agentmesh/services/router/door"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// previewBytes bounds the result a status view quotes (get_result and the
// resource give all of it).
const previewBytes = 2000

// taskView is a task as the tools and resources show it: what a client (or
// its model) needs to follow the task, in plain JSON.
type taskView struct {
	TaskID   string `json:"task_id"`
	URI      string `json:"uri" jsonschema:"the task as a resource (subtask://ID)"`
	Status   string `json:"status" jsonschema:"created, queued, assigned, running, blocked, completed, failed or cancelled"`
	Finished bool   `json:"finished" jsonschema:"the task has ended (completed, failed or cancelled)"`
	Title    string `json:"title,omitempty"`
	Agent    string `json:"agent,omitempty"`
	Priority string `json:"priority,omitempty"`
	// Input is the task's text (resources only).
	Input      string `json:"input,omitempty"`
	CreatedAt  string `json:"created_at,omitempty"`
	UpdatedAt  string `json:"updated_at,omitempty"`
	FinishedAt string `json:"finished_at,omitempty"`
	Steps      int32  `json:"steps"`
	// BlockedOn says what a blocked task waits for: approval, dependencies,
	// subtasks or proposal.
	BlockedOn       string        `json:"blocked_on,omitempty"`
	WaitingOn       []string      `json:"waiting_on,omitempty"`
	PendingApproval *approvalView `json:"pending_approval,omitempty"`
	Result          string        `json:"result,omitempty"`
	ResultTruncated bool          `json:"result_truncated,omitempty"`
	Error           string        `json:"error,omitempty"`
	FailureKind     string        `json:"failure_kind,omitempty"`
	Usage           *usageView    `json:"usage,omitempty"`
	ParentTaskID    string        `json:"parent_task_id,omitempty"`
	ContinueFrom    string        `json:"continue_from,omitempty"`
	ThreadID        string        `json:"thread_id,omitempty"`
	CachedFrom      string        `json:"cached_from,omitempty" jsonschema:"the completed task whose result answered this one from the result cache (no model was asked)"`
	Tags            []string      `json:"tags,omitempty"`
}

// approvalView is the tool call a blocked task waits for a person to
// decide: the exact arguments that will run if approved.
type approvalView struct {
	ID        string          `json:"id"`
	Tool      string          `json:"tool"`
	Arguments json.RawMessage `json:"arguments,omitempty" jsonschema:"the exact arguments that run if approved (JSON)"`
	SHA256    string          `json:"arguments_sha256,omitempty"`
	Risk      string          `json:"risk,omitempty"`
	Reason    string          `json:"reason,omitempty"`
	Deadline  string          `json:"deadline,omitempty"`
}

type usageView struct {
	PromptTokens     int64   `json:"prompt_tokens"`
	CompletionTokens int64   `json:"completion_tokens"`
	TotalTokens      int64   `json:"total_tokens"`
	CostUSD          float64 `json:"cost_usd"`
}

// viewOf returns the view of t; full adds the input and the whole result.
func viewOf(t *agentmeshv1.Task, full bool) taskView {
	v := taskView{
		TaskID: t.GetId(), URI: taskstate.SubtaskURI(t.GetId()),
		Status: taskstate.Name(t.GetStatus()), Finished: taskstate.Terminal(t.GetStatus()),
		Title: t.GetTitle(), Agent: t.GetAgent(), Priority: door.PriorityName(t.GetPriority()),
		CreatedAt: stamp(t.GetCreatedAt()), UpdatedAt: stamp(t.GetUpdatedAt()), FinishedAt: stamp(t.GetFinishedAt()),
		Steps: t.GetStepCount(), BlockedOn: door.BlockedOnName(t.GetBlockedOn()), WaitingOn: t.GetWaitingOn(),
		Error: t.GetError(), ParentTaskID: t.GetParentTaskId(), ContinueFrom: t.GetContinueFrom(), Tags: t.GetTags(),
		Result: t.GetResult(), ThreadID: t.GetThreadId(), CachedFrom: t.GetCachedFrom(),
	}
	if t.GetStatus() == agentmeshv1.TaskStatus_TASK_STATUS_FAILED {
		v.FailureKind = taskstate.KindName(t.GetFailureKind())
	}
	if u := t.GetUsage(); u != nil {
		v.Usage = &usageView{u.GetPromptTokens(), u.GetCompletionTokens(), u.GetTotalTokens(), u.GetCostUsd()}
	}
	if a := t.GetPendingApproval(); a != nil && t.GetStatus() == agentmeshv1.TaskStatus_TASK_STATUS_BLOCKED {
		v.PendingApproval = approvalOf(a)
	}
	if full {
		v.Input = t.GetInput()
	} else if len(v.Result) > previewBytes {
		v.Result, v.ResultTruncated = door.Cut(v.Result, previewBytes), true
	}
	return v
}

func approvalOf(a *agentmeshv1.Approval) *approvalView {
	v := &approvalView{ID: a.GetId(), Tool: a.GetTool(), SHA256: a.GetArgumentsSha256(), Risk: a.GetRisk(),
		Reason: a.GetReason(), Deadline: stamp(a.GetDeadline())}
	if args := a.GetArguments(); args != "" {
		// The exact bytes that will run (a JSON value), not a re-encoding.
		if json.Valid([]byte(args)) {
			v.Arguments = json.RawMessage(args)
		} else {
			v.Arguments, _ = json.Marshal(args)
		}
	}
	return v
}

func stamp(ts *timestamppb.Timestamp) string {
	if ts == nil {
		return ""
	}
	return ts.AsTime().UTC().Format(time.RFC3339Nano)
}

// summary is a task in one or two sentences, for a model to read.
func summary(t *agentmeshv1.Task) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Task %s is %s", t.GetId(), taskstate.Name(t.GetStatus()))
	if t.GetAgent() != "" {
		fmt.Fprintf(&b, " (agent %s)", t.GetAgent())
	}
	switch {
	case t.GetStatus() == agentmeshv1.TaskStatus_TASK_STATUS_COMPLETED:
		b.WriteString(". Its result: use get_result.")
	case taskstate.Terminal(t.GetStatus()):
		fmt.Fprintf(&b, ": %s", t.GetError())
	case t.GetPendingApproval() != nil && t.GetStatus() == agentmeshv1.TaskStatus_TASK_STATUS_BLOCKED:
		a := t.GetPendingApproval()
		fmt.Fprintf(&b, ", waiting for a person to approve the tool call %s %s (approval %s).", a.GetTool(), a.GetArguments(), a.GetId())
	case t.GetStatus() == agentmeshv1.TaskStatus_TASK_STATUS_BLOCKED:
		fmt.Fprintf(&b, ", waiting on %s.", door.BlockedOnName(t.GetBlockedOn()))
	default:
		fmt.Fprintf(&b, ". Follow it with check_status or the resource %s.", taskstate.SubtaskURI(t.GetId()))
	}
	return b.String()
}
