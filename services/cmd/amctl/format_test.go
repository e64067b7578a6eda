package main

import (
	"strings"
	"testing"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
)

func TestDescribeEvent(t *testing.T) {
	tests := []struct {
		name     string
		ev       *agentmeshv1.TaskEvent
		wantKind string
		wantIn   []string
	}{
		{"blocked on an approval tells how to decide",
			&agentmeshv1.TaskEvent{Type: agentmeshv1.EventType_EVENT_TYPE_STATUS, Status: taskstate.Blocked,
				Reason:   "waiting for approval: shell needs approval",
				Approval: &agentmeshv1.Approval{Id: "T1-a7", Status: agentmeshv1.ApprovalStatus_APPROVAL_STATUS_PENDING}},
			"blocked", []string{"waiting for approval", "amctl approvals approve|reject T1-a7"}},
		{"a decision does not repeat the hint",
			&agentmeshv1.TaskEvent{Type: agentmeshv1.EventType_EVENT_TYPE_STATUS, Status: taskstate.Queued,
				Reason:   "approval T1-a7 approved",
				Approval: &agentmeshv1.Approval{Id: "T1-a7", Status: agentmeshv1.ApprovalStatus_APPROVAL_STATUS_APPROVED}},
			"queued", []string{"approval T1-a7 approved"}},
		{"running names the node",
			&agentmeshv1.TaskEvent{Type: agentmeshv1.EventType_EVENT_TYPE_STATUS, Status: taskstate.Running, Node: "n1"},
			"running", []string{"on n1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			kind, text := describeEvent(tt.ev)
			if kind != tt.wantKind {
				t.Errorf("kind = %q, want %q", kind, tt.wantKind)
			}
			for _, w := range tt.wantIn {
				if !strings.Contains(text, w) {
					t.Errorf("text = %q, want it to contain %q", text, w)
				}
			}
			if tt.ev.Approval.GetStatus() != agentmeshv1.ApprovalStatus_APPROVAL_STATUS_PENDING && strings.Contains(text, "decide with") {
				t.Errorf("text = %q: hint on a decided approval", text)
			}
		})
	}
}

func TestPrintTaskShowsIsolation(t *testing.T) {
	var b strings.Builder
	printTask(&b, &agentmeshv1.Task{Id: "t1", Status: taskstate.Completed, Node: "n1", Isolation: "reduced", Attempt: 1})
	if !strings.Contains(b.String(), "isolation: reduced") {
		t.Errorf("amctl get output lacks the isolation:\n%s", b.String())
	}
}
