package taskstate

// Trees of tasks: a sub-task names its parent (Task.parent_task_id); every
// ancestor's history records its descendants' lifecycle as
// EVENT_TYPE_SUBTASK events, and an ended descendant's own usage is folded
// into each ancestor's subtree_usage by Apply, once per event.

import (
	"fmt"
	"strings"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
)

// SubtaskScheme is the URI scheme of a sub-task reference: subtask://<id>.
const SubtaskScheme = "subtask://"

// NormalizeTaskID returns the task id a reference names: "subtask://ID"
// (the scheme in any case) and "ID" both give ID; surrounding blanks are
// dropped. It does not validate the id.
func NormalizeTaskID(s string) string {
	s = strings.TrimSpace(s)
	if len(s) >= len(SubtaskScheme) && strings.EqualFold(s[:len(SubtaskScheme)], SubtaskScheme) {
		s = strings.TrimSpace(s[len(SubtaskScheme):])
	}
	return s
}

// SubtaskURI returns the subtask:// reference of a task id.
func SubtaskURI(id string) string { return SubtaskScheme + id }

// CascadeReason is the reason a sub-task is cancelled with because its
// parent ended: "parent <id> ended <status>"; when the parent was itself
// cancelled by such a cascade, the reason names the ancestor where it began:
// "ancestor <id> ended <status>".
func CascadeReason(parent *agentmeshv1.Task) string {
	if parent.GetStatus() == Cancelled {
		if id, st, ok := cascadeOrigin(parent.GetError()); ok {
			return fmt.Sprintf("ancestor %s ended %s", id, st)
		}
	}
	return fmt.Sprintf("parent %s ended %s", parent.GetId(), Name(parent.GetStatus()))
}

// cascadeOrigin parses a CascadeReason.
func cascadeOrigin(reason string) (id, status string, ok bool) {
	f := strings.Fields(reason)
	if len(f) != 4 || (f[0] != "parent" && f[0] != "ancestor") || f[2] != "ended" {
		return "", "", false
	}
	return f[1], f[3], true
}

// applySubtask folds a SUBTASK event into the task holding it: the end of
// a descendant adds that descendant's own usage to subtree_usage.
func applySubtask(t *agentmeshv1.Task, ev *agentmeshv1.TaskEvent) {
	sub := ev.GetSubtask()
	if ev.Type != agentmeshv1.EventType_EVENT_TYPE_SUBTASK || sub == nil || !Terminal(sub.Status) {
		return
	}
	u := sub.GetOwnUsage()
	if u == nil {
		return
	}
	if t.SubtreeUsage == nil {
		t.SubtreeUsage = &agentmeshv1.Usage{}
	}
	AddUsage(t.SubtreeUsage, u)
}
