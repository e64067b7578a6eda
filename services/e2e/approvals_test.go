package e2e

import (
	"strings"
	"testing"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/poll"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// careful is an agent whose echo calls need a person's approval.
func (e *env) careful(t *testing.T) {
	t.Helper()
	_, err := e.agents.CreateAgent(ctxT(t), &agentmeshv1.CreateAgentRequest{Agent: &agentmeshv1.Agent{
		Name: "careful", Tools: []string{"echo"},
		ToolPolicies: map[string]agentmeshv1.ToolPolicy{"echo": agentmeshv1.ToolPolicy_TOOL_POLICY_REQUIRE_APPROVAL},
	}})
	if err != nil {
		t.Fatal(err)
	}
}

func (e *env) pendingApproval(t *testing.T, taskID string) *agentmeshv1.Approval {
	t.Helper()
	e.waitStatus(t, taskID, taskstate.Blocked, 30*time.Second)
	approvals := agentmeshv1.NewApprovalServiceClient(e.conn)
	var got *agentmeshv1.Approval
	poll.Until(t, 10*time.Second, func() error {
		resp, err := approvals.ListApprovals(ctxShort(t), &agentmeshv1.ListApprovalsRequest{})
		if err != nil {
			return err
		}
		for _, a := range resp.Approvals {
			if a.TaskId == taskID {
				got = a
				return nil
			}
		}
		return errStatus{taskstate.Blocked, taskstate.Blocked}
	})
	return got
}

// steps counts the task's steps by kind and returns the TOOL_RESULTs.
func steps(h []*agentmeshv1.TaskEvent) (modelTurns int, results []*agentmeshv1.Step, calls []*agentmeshv1.Step) {
	for _, ev := range h {
		s := ev.GetStep()
		switch s.GetKind() {
		case agentmeshv1.StepKind_STEP_KIND_MODEL_TURN:
			modelTurns++
		case agentmeshv1.StepKind_STEP_KIND_TOOL_RESULT:
			results = append(results, s)
		case agentmeshv1.StepKind_STEP_KIND_TOOL_CALL:
			calls = append(calls, s)
		}
	}
	return
}

func TestApprovalApprovedRunsOnceAndResumes(t *testing.T) {
	e := start(t, opts{})
	e.careful(t)
	task := e.submit(t, &agentmeshv1.SubmitTaskRequest{Input: "ship it", Agent: "careful"})
	a := e.pendingApproval(t, task.Id)
	if a.Tool != "echo" || !strings.Contains(a.Arguments, "ship it") || a.Status != agentmeshv1.ApprovalStatus_APPROVAL_STATUS_PENDING || a.Deadline == nil {
		t.Fatalf("pending approval = %v", a)
	}
	blocked, err := e.tasks.GetTask(ctxT(t), &agentmeshv1.GetTaskRequest{Id: task.Id})
	if err != nil {
		t.Fatal(err)
	}
	if blocked.Task.PendingApproval.GetId() != a.Id {
		t.Fatalf("task's pending approval = %v, want %s", blocked.Task.PendingApproval, a.Id)
	}
	requestsBefore := e.stack.ScriptedModel().Requests()

	approvals := agentmeshv1.NewApprovalServiceClient(e.conn)
	resp, err := approvals.ApproveToolCall(ctxT(t), &agentmeshv1.ApproveToolCallRequest{ApprovalId: a.Id, Comment: "go ahead"})
	if err != nil {
		t.Fatalf("approve: %v", err)
	}
	if resp.Approval.Status != agentmeshv1.ApprovalStatus_APPROVAL_STATUS_APPROVED || resp.Approval.Comment != "go ahead" {
		t.Fatalf("approval after approve = %v", resp.Approval)
	}
	done := e.waitStatus(t, task.Id, taskstate.Completed, 30*time.Second)
	if done.Result != "final answer: ship it" {
		t.Errorf("result = %q", done.Result)
	}
	// Same conversation: the first model turn was not asked again; the
	// approved call ran exactly once.
	if got := e.stack.ScriptedModel().Requests() - requestsBefore; got != 1 {
		t.Errorf("model requests after the approval = %d, want 1 (only the final turn)", got)
	}
	turns, results, calls := steps(e.history(t, task.Id))
	if turns != 2 {
		t.Errorf("model turns = %d, want 2", turns)
	}
	if len(results) != 1 || results[0].Content != "ship it" || results[0].Decision != agentmeshv1.ToolDecision_TOOL_DECISION_APPROVED {
		t.Errorf("tool results = %v, want one approved echo", results)
	}
	if len(calls) != 2 || calls[0].Decision != agentmeshv1.ToolDecision_TOOL_DECISION_PENDING_APPROVAL ||
		calls[1].Decision != agentmeshv1.ToolDecision_TOOL_DECISION_APPROVED || calls[1].ApprovalId != a.Id ||
		calls[0].ArgumentsSha256 == "" || calls[0].ArgumentsSha256 != calls[1].ArgumentsSha256 {
		t.Errorf("tool call audit = %v", calls)
	}

	// Deciding again is refused; an unknown approval is not found.
	if _, err := approvals.RejectToolCall(ctxT(t), &agentmeshv1.RejectToolCallRequest{ApprovalId: a.Id}); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("second decision: got %v, want FailedPrecondition", err)
	}
	if _, err := approvals.ApproveToolCall(ctxT(t), &agentmeshv1.ApproveToolCallRequest{ApprovalId: task.Id + "-a99"}); status.Code(err) != codes.FailedPrecondition && status.Code(err) != codes.NotFound {
		t.Errorf("unknown approval of a finished task: got %v", err)
	}
	if _, err := approvals.ApproveToolCall(ctxT(t), &agentmeshv1.ApproveToolCallRequest{ApprovalId: "nonsense"}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("malformed approval id: got %v, want InvalidArgument", err)
	}
}

func TestApprovalRejectedModelCarriesOn(t *testing.T) {
	e := start(t, opts{})
	e.careful(t)
	task := e.submit(t, &agentmeshv1.SubmitTaskRequest{Input: "delete everything", Agent: "careful"})
	a := e.pendingApproval(t, task.Id)
	_, err := agentmeshv1.NewApprovalServiceClient(e.conn).RejectToolCall(ctxT(t), &agentmeshv1.RejectToolCallRequest{ApprovalId: a.Id, Comment: "not today"})
	if err != nil {
		t.Fatalf("reject: %v", err)
	}
	done := e.waitStatus(t, task.Id, taskstate.Completed, 30*time.Second)
	// The script's final turn quotes the last tool result: the rejection.
	if !strings.Contains(done.Result, "rejected") || !strings.Contains(done.Result, "not today") {
		t.Errorf("result = %q, want the model to have been told of the rejection", done.Result)
	}
	_, results, _ := steps(e.history(t, task.Id))
	if len(results) != 1 || !results[0].IsError || results[0].Decision != agentmeshv1.ToolDecision_TOOL_DECISION_REJECTED {
		t.Errorf("tool results = %v, want one rejected (not run)", results)
	}
}

func TestListTools(t *testing.T) {
	e := start(t, opts{})
	resp, err := agentmeshv1.NewToolServiceClient(e.conn).ListTools(ctxT(t), &agentmeshv1.ListToolsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]*agentmeshv1.Tool{}
	for _, tool := range resp.Tools {
		byName[tool.Name] = tool
	}
	for _, want := range []string{"echo", "current_time", "code_run", "shell", "fs_read", "fs_write", "fs_list", "web_fetch", "sql_query"} {
		if byName[want] == nil {
			t.Errorf("ListTools lacks %s", want)
		}
	}
	if w := byName["web_fetch"]; w != nil && (w.RunsIn != "executor" || w.Risk != "network" || w.ParametersJson == "") {
		t.Errorf("web_fetch = %v", w)
	}
}
