package state_test

import (
	"errors"
	"testing"

	busv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/bus/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/subjects"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"google.golang.org/protobuf/proto"
)

// The state service itself — where the data lives — answers not_found to
// an org asking for another org's task, history, approval decision,
// cancel or agent, permission_denied to an org changing a shared agent,
// and sums and lists only the asking org's.
func TestStateChecksTheOrg(t *testing.T) {
	r := startKV(t)
	nc := r.nc
	done := runTask(t, nc, "acme")
	open := mustCall(t, nc, subjects.StateCreateTask, newTask("acme"), &busv1.CreateTaskResponse{}).Task
	mustCall(t, nc, subjects.StatePutAgent, &busv1.PutAgentRequest{Agent: &agentmeshv1.Agent{Org: "acme", Name: "writer"}, Create: true}, &busv1.PutAgentResponse{})
	mustCall(t, nc, subjects.StatePutAgent, &busv1.PutAgentRequest{Agent: &agentmeshv1.Agent{Name: "shared"}, Create: true}, &busv1.PutAgentResponse{})

	tests := []struct {
		name string
		op   string
		req  proto.Message
		resp proto.Message
		want error
	}{
		{"get", subjects.StateGetTask, &busv1.GetTaskRequest{Id: done.Id, Org: "globex"}, &busv1.GetTaskResponse{}, bus.ErrNotFound},
		{"history", subjects.StateHistory, &busv1.HistoryRequest{TaskId: done.Id, Org: "globex"}, &busv1.HistoryResponse{}, bus.ErrNotFound},
		{"cancel", subjects.StateCancel, &busv1.TransitionRequest{TaskId: open.Id, Org: "globex", To: taskstate.Cancelled}, &busv1.TransitionResponse{}, bus.ErrNotFound},
		{"decide", subjects.StateDecide, &busv1.TransitionRequest{TaskId: open.Id, Org: "globex", From: taskstate.Blocked, To: taskstate.Queued,
			Approval: &agentmeshv1.Approval{Id: open.Id + "-a3", Status: agentmeshv1.ApprovalStatus_APPROVAL_STATUS_APPROVED}}, &busv1.TransitionResponse{}, bus.ErrNotFound},
		{"get agent", subjects.StateGetAgent, &busv1.GetAgentRequest{Name: "writer", Org: "globex"}, &busv1.GetAgentResponse{}, bus.ErrNotFound},
		{"update agent", subjects.StatePutAgent, &busv1.PutAgentRequest{Agent: &agentmeshv1.Agent{Org: "globex", Name: "writer"}}, &busv1.PutAgentResponse{}, bus.ErrNotFound},
		{"delete agent", subjects.StateDeleteAgent, &busv1.DeleteAgentRequest{Name: "writer", Org: "globex"}, &busv1.DeleteAgentResponse{}, bus.ErrNotFound},
		{"update shared agent", subjects.StatePutAgent, &busv1.PutAgentRequest{Agent: &agentmeshv1.Agent{Org: "globex", Name: "shared", SystemPrompt: "x"}}, &busv1.PutAgentResponse{}, bus.ErrPermissionDenied},
		{"delete shared agent", subjects.StateDeleteAgent, &busv1.DeleteAgentRequest{Name: "shared", Org: "globex"}, &busv1.DeleteAgentResponse{}, bus.ErrPermissionDenied},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := call(t, nc, tc.op, tc.req, tc.resp)
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
		})
	}
	// Nothing changed.
	got := mustCall(t, nc, subjects.StateGetTask, &busv1.GetTaskRequest{Id: open.Id, Org: "acme"}, &busv1.GetTaskResponse{}).Task
	if got.Status != taskstate.Queued || got.LastEventSeq != open.LastEventSeq {
		t.Errorf("acme's open task: %v at seq %d, want queued at %d", got.Status, got.LastEventSeq, open.LastEventSeq)
	}
	if a := mustCall(t, nc, subjects.StateGetAgent, &busv1.GetAgentRequest{Name: "writer", Org: "acme"}, &busv1.GetAgentResponse{}).Agent; a.Version != 1 {
		t.Errorf("acme's agent at version %d, want 1", a.Version)
	}
	if a := mustCall(t, nc, subjects.StateGetAgent, &busv1.GetAgentRequest{Name: "shared", Org: "globex"}, &busv1.GetAgentResponse{}).Agent; a.Version != 1 || a.Org != "" {
		t.Errorf("the shared agent as globex reads it: %v, want version 1, shared", a)
	}
	list := mustCall(t, nc, subjects.StateListTasks, &busv1.ListTasksRequest{Org: "globex"}, &busv1.ListTasksResponse{})
	if len(list.Tasks) != 0 {
		t.Errorf("globex lists %d tasks, want none", len(list.Tasks))
	}
	u := mustCall(t, nc, subjects.StateUsage, &busv1.UsageRequest{Org: "globex"}, &busv1.UsageResponse{})
	if u.Tasks != 0 || u.GetUsage().GetTotalTokens() != 0 {
		t.Errorf("globex's usage: %v over %d tasks, want nothing", u.Usage, u.Tasks)
	}
}
