package storetest

import (
	"testing"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"github.com/agentmesh/agentmesh/services/state/store"
	"google.golang.org/protobuf/types/known/timestamppb"
)

func pendingApproval() *agentmeshv1.Approval {
	return &agentmeshv1.Approval{
		Status: agentmeshv1.ApprovalStatus_APPROVAL_STATUS_PENDING, Tool: "shell", ToolCallId: "call_1",
		Arguments: `{"command":"rm -rf build"}`, Risk: "execute", Reason: "shell needs approval",
		Deadline: timestamppb.New(time.Now().Add(time.Hour)),
	}
}

// blockOnApproval brings a new task to running and then blocks it on an
// approval, as an executor does.
func blockOnApproval(t *testing.T, s store.Store) *agentmeshv1.Task {
	t.Helper()
	task := taskIn(t, s, taskstate.Running)
	task = move(t, s, task.Id, store.Transition{To: taskstate.Blocked, Attempt: task.Attempt, Approval: pendingApproval(), Reason: "waiting for approval"})
	p := task.PendingApproval
	if task.Status != taskstate.Blocked || p == nil {
		t.Fatalf("after blocking: status %s, pending %v", taskstate.Name(task.Status), p)
	}
	if p.Id != taskstate.ApprovalID(task.Id, task.LastEventSeq) || p.TaskId != task.Id || p.Org != task.Org || p.Agent != task.Agent || p.CreatedAt == nil || p.Attempt != task.Attempt {
		t.Fatalf("pending approval not filled in: %v", p)
	}
	if got, ok := taskstate.TaskOfApproval(p.Id); !ok || got != task.Id {
		t.Fatalf("TaskOfApproval(%q) = %q %v, want %q", p.Id, got, ok, task.Id)
	}
	return task
}

func testApprovals(t *testing.T, s store.Store) {
	decide := func(task *agentmeshv1.Task, status agentmeshv1.ApprovalStatus, to agentmeshv1.TaskStatus) (*agentmeshv1.Task, *agentmeshv1.TaskEvent, error) {
		return s.Transition(ctxT(t), store.Transition{
			TaskID: task.Id, From: taskstate.Blocked, To: to,
			Approval: &agentmeshv1.Approval{Id: task.PendingApproval.Id, Status: status, DecidedBy: "acme", Comment: "ok"},
		})
	}
	t.Run("approve resumes", func(t *testing.T) {
		task := blockOnApproval(t, s)
		got, ev, err := decide(task, agentmeshv1.ApprovalStatus_APPROVAL_STATUS_APPROVED, taskstate.Queued)
		if err != nil {
			t.Fatal(err)
		}
		if got.Status != taskstate.Queued || got.PendingApproval != nil {
			t.Fatalf("after approval: %s pending %v", taskstate.Name(got.Status), got.PendingApproval)
		}
		a := ev.Approval
		if a.GetStatus() != agentmeshv1.ApprovalStatus_APPROVAL_STATUS_APPROVED || a.Tool != "shell" || a.DecidedBy != "acme" || a.DecidedAt == nil || a.ToolCallId != "call_1" {
			t.Fatalf("decision event carries %v", a)
		}
		// The decision is in the history for the resumed attempt to find.
		h, err := s.History(ctxT(t), task.Id, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		if last := h[len(h)-1]; last.Approval.GetStatus() != agentmeshv1.ApprovalStatus_APPROVAL_STATUS_APPROVED {
			t.Fatalf("last history event = %v", last)
		}
	})
	t.Run("reject resumes", func(t *testing.T) {
		task := blockOnApproval(t, s)
		got, _, err := decide(task, agentmeshv1.ApprovalStatus_APPROVAL_STATUS_REJECTED, taskstate.Queued)
		if err != nil || got.Status != taskstate.Queued {
			t.Fatalf("reject: %v %v", got, err)
		}
	})
	t.Run("expiry fails", func(t *testing.T) {
		task := blockOnApproval(t, s)
		got, _, err := s.Transition(ctxT(t), store.Transition{
			TaskID: task.Id, From: taskstate.Blocked, To: taskstate.Failed, Reason: "approval expired",
			FailureKind: agentmeshv1.FailureKind_FAILURE_KIND_APPROVAL,
			Approval:    &agentmeshv1.Approval{Id: task.PendingApproval.Id, Status: agentmeshv1.ApprovalStatus_APPROVAL_STATUS_EXPIRED, DecidedBy: "system"},
		})
		if err != nil {
			t.Fatal(err)
		}
		if got.Status != taskstate.Failed || got.FailureKind != agentmeshv1.FailureKind_FAILURE_KIND_APPROVAL || got.PendingApproval != nil {
			t.Fatalf("after expiry: %s %s pending %v", taskstate.Name(got.Status), got.FailureKind, got.PendingApproval)
		}
	})
	t.Run("wrong id refused", func(t *testing.T) {
		task := blockOnApproval(t, s)
		_, _, err := s.Transition(ctxT(t), store.Transition{TaskID: task.Id, To: taskstate.Queued,
			Approval: &agentmeshv1.Approval{Id: task.Id + "-a999", Status: agentmeshv1.ApprovalStatus_APPROVAL_STATUS_APPROVED}})
		wantCode(t, "decision with another id", err, bus.ErrFailedPrecondition)
	})
	t.Run("no decision refused", func(t *testing.T) {
		task := blockOnApproval(t, s)
		_, _, err := s.Transition(ctxT(t), store.Transition{TaskID: task.Id, To: taskstate.Queued})
		wantCode(t, "leaving blocked without the decision", err, bus.ErrFailedPrecondition)
	})
	t.Run("decided twice refused", func(t *testing.T) {
		task := blockOnApproval(t, s)
		if _, _, err := decide(task, agentmeshv1.ApprovalStatus_APPROVAL_STATUS_APPROVED, taskstate.Queued); err != nil {
			t.Fatal(err)
		}
		_, _, err := decide(task, agentmeshv1.ApprovalStatus_APPROVAL_STATUS_REJECTED, taskstate.Queued)
		wantCode(t, "second decision", err, bus.ErrFailedPrecondition)
	})
	t.Run("cancel while waiting", func(t *testing.T) {
		task := blockOnApproval(t, s)
		got := move(t, s, task.Id, store.Transition{To: taskstate.Cancelled, Reason: "no"})
		if got.PendingApproval != nil {
			t.Fatalf("cancelled task still has a pending approval: %v", got.PendingApproval)
		}
	})
	t.Run("decision without pending refused", func(t *testing.T) {
		task := taskIn(t, s, taskstate.Queued)
		_, _, err := s.Transition(ctxT(t), store.Transition{TaskID: task.Id, To: taskstate.Assigned, NextAttempt: true,
			Approval: &agentmeshv1.Approval{Id: "x-a1", Status: agentmeshv1.ApprovalStatus_APPROVAL_STATUS_APPROVED}})
		wantCode(t, "decision for a task that waits for none", err, bus.ErrFailedPrecondition)
	})
}
