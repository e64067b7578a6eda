package executor_test

import (
	"context"
	"strings"
	"testing"
	"time"

	busv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/bus/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/subjects"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
)

// A child that, resumed after a person approved one shell command,
// presents the approved call id with other arguments is denied: the
// decision is recorded on the step, nothing runs, the task carries on.
func TestResumedCallWithOtherArgumentsIsDenied(t *testing.T) {
	e := newEnv(t)
	e.startExecutor()
	careful := &agentmeshv1.Agent{Name: "careful", Tools: []string{"shell"},
		ToolPolicies: map[string]agentmeshv1.ToolPolicy{"shell": agentmeshv1.ToolPolicy_TOOL_POLICY_REQUIRE_APPROVAL}}
	var created busv1.CreateTaskResponse
	ctx := context.Background()
	if err := bus.Request(ctx, e.nc, e.names.State(subjects.StateCreateTask), &busv1.CreateTaskRequest{Task: &agentmeshv1.Task{
		Org: "acme", Input: "please " + LieResumeMarker, Agent: careful.Name, AgentSpec: careful,
	}}, &created); err != nil {
		t.Fatalf("create task: %v", err)
	}
	e.publishWork(e.assign(created.Task.Id))
	id := created.Task.Id
	blocked := e.waitStatus(id, taskstate.Blocked, 30*time.Second)
	p := blocked.GetPendingApproval()
	if p == nil || p.Tool != "shell" || !strings.Contains(p.Arguments, ApprovedCommand) || len(p.ArgumentsSha256) != 64 {
		t.Fatalf("pending approval = %v, want shell %q with its SHA-256", p, ApprovedCommand)
	}
	var tr busv1.TransitionResponse
	if err := bus.Request(ctx, e.nc, e.names.State(subjects.StateDecide), &busv1.TransitionRequest{
		TaskId: id, Org: "acme", From: taskstate.Blocked, To: taskstate.Queued, Reason: "approved",
		Approval: &agentmeshv1.Approval{Id: p.Id, Status: agentmeshv1.ApprovalStatus_APPROVAL_STATUS_APPROVED, DecidedBy: "alice"},
	}, &tr); err != nil {
		t.Fatalf("approve: %v", err)
	}
	e.publishWork(e.assign(id))
	done := e.waitStatus(id, taskstate.Completed, 30*time.Second)
	if !strings.Contains(done.Result, "DENIED") || !strings.Contains(done.Result, "not the call a person decided") {
		t.Errorf("result = %q, want the swapped call denied", done.Result)
	}
	var swapped *agentmeshv1.Step
	for _, ev := range e.history(id) {
		s := ev.GetStep()
		if s.GetKind() == agentmeshv1.StepKind_STEP_KIND_TOOL_RESULT && !s.GetIsError() {
			t.Errorf("a tool ran: %v", s)
		}
		if s.GetKind() == agentmeshv1.StepKind_STEP_KIND_TOOL_CALL && strings.Contains(s.GetArguments(), SwappedCommand) {
			swapped = s
		}
	}
	if swapped == nil || swapped.Decision != agentmeshv1.ToolDecision_TOOL_DECISION_DENIED || swapped.ArgumentsSha256 == p.ArgumentsSha256 {
		t.Fatalf("swapped call step = %v, want decision DENIED recorded", swapped)
	}
}
