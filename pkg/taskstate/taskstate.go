// Package taskstate is the one task state machine: the transition table
// every status change is checked against, and Apply, the pure function that
// folds an event into a task. Both stores use it; nothing else decides
// whether a status may change.
package taskstate

import (
	"fmt"
	"strconv"
	"strings"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"google.golang.org/protobuf/proto"
)

type status = agentmeshv1.TaskStatus

const (
	Created   = agentmeshv1.TaskStatus_TASK_STATUS_CREATED
	Queued    = agentmeshv1.TaskStatus_TASK_STATUS_QUEUED
	Assigned  = agentmeshv1.TaskStatus_TASK_STATUS_ASSIGNED
	Running   = agentmeshv1.TaskStatus_TASK_STATUS_RUNNING
	Blocked   = agentmeshv1.TaskStatus_TASK_STATUS_BLOCKED
	Completed = agentmeshv1.TaskStatus_TASK_STATUS_COMPLETED
	Failed    = agentmeshv1.TaskStatus_TASK_STATUS_FAILED
	Cancelled = agentmeshv1.TaskStatus_TASK_STATUS_CANCELLED
)

// table lists, for each status, the statuses it may move to. A task that
// lost its executor goes back from assigned or running to queued; blocked
// waits on dependencies or an approval.
var table = map[status][]status{
	// Created → completed: answered from the result cache at create.
	Created:  {Queued, Blocked, Cancelled, Failed, Completed},
	Blocked:  {Queued, Running, Cancelled, Failed},
	Queued:   {Assigned, Blocked, Cancelled, Failed},
	Assigned: {Running, Queued, Cancelled, Failed},
	Running:  {Completed, Failed, Cancelled, Queued, Blocked},
}

// Terminal reports whether s never changes again.
func Terminal(s status) bool {
	return s == Completed || s == Failed || s == Cancelled
}

// Allowed reports whether a task may move from `from` to `to`.
func Allowed(from, to status) bool {
	for _, s := range table[from] {
		if s == to {
			return true
		}
	}
	return false
}

// ErrInvalidTransition is returned (wrapped) for a move the table forbids.
type ErrInvalidTransition struct {
	From, To status
}

func (e *ErrInvalidTransition) Error() string {
	return fmt.Sprintf("task cannot go from %s to %s", Name(e.From), Name(e.To))
}

// Check returns an *ErrInvalidTransition unless from → to is allowed.
func Check(from, to status) error {
	if !Allowed(from, to) {
		return &ErrInvalidTransition{From: from, To: to}
	}
	return nil
}

// Name is the short lower-case name of a status ("running").
func Name(s status) string {
	switch s {
	case Created:
		return "created"
	case Queued:
		return "queued"
	case Assigned:
		return "assigned"
	case Running:
		return "running"
	case Blocked:
		return "blocked"
	case Completed:
		return "completed"
	case Failed:
		return "failed"
	case Cancelled:
		return "cancelled"
	}
	return "unspecified"
}

// Parse returns the status named s (as Name prints it, or the enum name).
func Parse(s string) (status, bool) {
	for _, st := range []status{Created, Queued, Assigned, Running, Blocked, Completed, Failed, Cancelled} {
		if s == Name(st) || s == st.String() {
			return st, true
		}
	}
	return agentmeshv1.TaskStatus_TASK_STATUS_UNSPECIFIED, false
}

// Apply returns the task after ev. It does not validate: the store checks
// the transition (Check, fencing) before it records the event, and replays
// recorded events through Apply. ev.Seq must be task.LastEventSeq+1.
func Apply(task *agentmeshv1.Task, ev *agentmeshv1.TaskEvent) *agentmeshv1.Task {
	t := proto.Clone(task).(*agentmeshv1.Task)
	t.LastEventSeq = ev.Seq
	t.UpdatedAt = ev.Time
	switch ev.Type {
	case agentmeshv1.EventType_EVENT_TYPE_CREATED:
		t.Status = ev.Status
		t.CreatedAt = ev.Time
		// A task without a parent is the root of its own tree.
		if t.RootTaskId == "" || t.RootTaskId == t.Id {
			t.RootTaskId = ev.TaskId
		}
	case agentmeshv1.EventType_EVENT_TYPE_STATUS:
		t.Status = ev.Status
		t.Attempt = ev.Attempt
		if ev.Node != "" || ev.Status == Queued {
			t.Node = ev.Node
		}
		if ev.Isolation != "" || ev.Status == Queued {
			t.Isolation = ev.Isolation
		}
		if ev.Status == Running && t.StartedAt == nil {
			t.StartedAt = ev.Time
		}
		applyRetry(t, ev)
		// An approval requested with the move to blocked is pending until
		// the task leaves blocked.
		if ev.Status == Blocked && ev.Approval != nil {
			t.PendingApproval = ev.Approval
		} else if ev.Status != Blocked {
			t.PendingApproval = nil
		}
		if Terminal(ev.Status) {
			t.FinishedAt = ev.Time
			if ev.Status == Completed {
				t.Result = ev.Result
			} else {
				t.Error = ev.Reason
				t.FailureKind = ev.FailureKind
			}
		}
	case agentmeshv1.EventType_EVENT_TYPE_STEP:
		t.StepCount++
		if i := ev.GetStep().GetIndex(); i >= t.NextStepIndex {
			t.NextStepIndex = i + 1
		}
		if u := ev.GetStep().GetUsage(); u != nil {
			if t.Usage == nil {
				t.Usage = &agentmeshv1.Usage{}
			}
			AddUsage(t.Usage, u)
		}
	}
	applyProposal(t, ev)
	applyGraph(t, ev)
	applySubtask(t, ev)
	return t
}

// AddUsage adds u (nil: nothing) to sum.
func AddUsage(sum, u *agentmeshv1.Usage) {
	if u == nil {
		return
	}
	sum.PromptTokens += u.PromptTokens
	sum.CompletionTokens += u.CompletionTokens
	sum.TotalTokens += u.TotalTokens
	sum.CostUsd += u.CostUsd
}

// ApprovalID is the id of the approval a task asks for with the event of
// seq: unique, and it names its task.
func ApprovalID(taskID string, seq int64) string {
	return fmt.Sprintf("%s-a%d", taskID, seq)
}

// TaskOfApproval returns the task id an approval id names.
func TaskOfApproval(id string) (string, bool) {
	i := strings.LastIndex(id, "-a")
	if i <= 0 {
		return "", false
	}
	if _, err := strconv.ParseInt(id[i+2:], 10, 64); err != nil {
		return "", false
	}
	return id[:i], true
}
