package executor

import (
	"crypto/sha256"
	"encoding/hex"
	"testing"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
)

// The gate runs a resumed call as approved only when its tool and the
// SHA-256 of its exact arguments equal the approval's.
func TestGateApprovalIntegrity(t *testing.T) {
	const approvedArgs = `{"command":"ls"}`
	sum := sha256.Sum256([]byte(approvedArgs))
	task := &agentmeshv1.Task{Id: "t1", AgentSpec: &agentmeshv1.Agent{Tools: []string{"shell", "code_run"}, ToolPolicies: map[string]agentmeshv1.ToolPolicy{
		"shell": agentmeshv1.ToolPolicy_TOOL_POLICY_REQUIRE_APPROVAL, "code_run": agentmeshv1.ToolPolicy_TOOL_POLICY_REQUIRE_APPROVAL,
	}}}
	approval := func(status agentmeshv1.ApprovalStatus, withSum bool) *agentmeshv1.Approval {
		a := &agentmeshv1.Approval{Id: "t1-a2", ToolCallId: "call_1", Tool: "shell", Arguments: approvedArgs, Status: status}
		if withSum {
			a.ArgumentsSha256 = hex.EncodeToString(sum[:])
		}
		return a
	}
	approved := agentmeshv1.ApprovalStatus_APPROVAL_STATUS_APPROVED
	tests := []struct {
		name     string
		approval *agentmeshv1.Approval
		tool     string
		args     string
		want     agentmeshv1.ToolDecision
	}{
		{"the approved call", approval(approved, true), "shell", approvedArgs, agentmeshv1.ToolDecision_TOOL_DECISION_APPROVED},
		{"the approved call, hash computed", approval(approved, false), "shell", approvedArgs, agentmeshv1.ToolDecision_TOOL_DECISION_APPROVED},
		{"other arguments", approval(approved, true), "shell", `{"command":"rm -rf ~"}`, agentmeshv1.ToolDecision_TOOL_DECISION_DENIED},
		{"same arguments, one more space", approval(approved, true), "shell", `{"command": "ls"}`, agentmeshv1.ToolDecision_TOOL_DECISION_DENIED},
		{"other arguments, hash computed", approval(approved, false), "shell", `{"command":"id"}`, agentmeshv1.ToolDecision_TOOL_DECISION_DENIED},
		{"other tool", approval(approved, true), "code_run", `{"language":"python","code":"print(1)"}`, agentmeshv1.ToolDecision_TOOL_DECISION_DENIED},
		{"rejected, other arguments", approval(agentmeshv1.ApprovalStatus_APPROVAL_STATUS_REJECTED, true), "shell", `{"command":"id"}`, agentmeshv1.ToolDecision_TOOL_DECISION_DENIED},
		{"rejected, same call", approval(agentmeshv1.ApprovalStatus_APPROVAL_STATUS_REJECTED, true), "shell", approvedArgs, agentmeshv1.ToolDecision_TOOL_DECISION_REJECTED},
		{"no decision yet", nil, "shell", approvedArgs, agentmeshv1.ToolDecision_TOOL_DECISION_PENDING_APPROVAL},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			approvals := map[string]*agentmeshv1.Approval{}
			if tc.approval != nil {
				approvals["call_1"] = tc.approval
			}
			g := newGate(task, approvals, nil, nil)
			step := &agentmeshv1.Step{Kind: agentmeshv1.StepKind_STEP_KIND_TOOL_CALL, ToolCallId: "call_1", ToolName: tc.tool, Arguments: tc.args}
			v := g.decide(step)
			if v.decision != tc.want || step.Decision != tc.want {
				t.Fatalf("decision: got %v (step %v), want %v; message %q", v.decision, step.Decision, tc.want, v.message)
			}
		})
	}
}
