package state

import (
	"testing"

	busv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/bus/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
)

// The proposal intents carry only their decisions, and no other intent
// carries one.
func TestProposalIntents(t *testing.T) {
	eph := &agentmeshv1.Agent{Name: "a", Ephemeral: true}
	approved := &agentmeshv1.Proposal{Status: agentmeshv1.ProposalStatus_PROPOSAL_STATUS_APPROVED, Agent: eph}
	rejected := &agentmeshv1.Proposal{Status: agentmeshv1.ProposalStatus_PROPOSAL_STATUS_REJECTED}
	kind := agentmeshv1.FailureKind_FAILURE_KIND_PROPOSAL
	for _, tt := range []struct {
		name  string
		in    intent
		req   *busv1.TransitionRequest
		field string // "" = allowed
	}{
		{"approve", proposalApprove, &busv1.TransitionRequest{TaskId: "t", Org: "o", From: taskstate.Blocked, Proposal: approved}, ""},
		{"approve permanently", proposalApprove, &busv1.TransitionRequest{TaskId: "t", Org: "o", From: taskstate.Blocked,
			Proposal: &agentmeshv1.Proposal{Status: agentmeshv1.ProposalStatus_PROPOSAL_STATUS_APPROVED_PERMANENT, Agent: &agentmeshv1.Agent{Name: "a"}}}, ""},
		{"approve without a decision", proposalApprove, &busv1.TransitionRequest{TaskId: "t", Org: "o", From: taskstate.Blocked}, "proposal"},
		{"approve rejecting", proposalApprove, &busv1.TransitionRequest{TaskId: "t", Org: "o", From: taskstate.Blocked, Proposal: rejected}, "proposal.status"},
		{"approve without an agent", proposalApprove, &busv1.TransitionRequest{TaskId: "t", Org: "o", From: taskstate.Blocked,
			Proposal: &agentmeshv1.Proposal{Status: agentmeshv1.ProposalStatus_PROPOSAL_STATUS_APPROVED}}, "proposal.agent"},
		{"approve for one task a catalogue agent", proposalApprove, &busv1.TransitionRequest{TaskId: "t", Org: "o", From: taskstate.Blocked,
			Proposal: &agentmeshv1.Proposal{Status: agentmeshv1.ProposalStatus_PROPOSAL_STATUS_APPROVED, Agent: &agentmeshv1.Agent{Name: "a"}}}, "proposal.agent.ephemeral"},
		{"approve without the org", proposalApprove, &busv1.TransitionRequest{TaskId: "t", From: taskstate.Blocked, Proposal: approved}, "org"},
		{"approve from running", proposalApprove, &busv1.TransitionRequest{TaskId: "t", Org: "o", From: taskstate.Running, Proposal: approved}, "from"},
		{"reject", proposalReject, &busv1.TransitionRequest{TaskId: "t", Org: "o", From: taskstate.Blocked, FailureKind: kind, Proposal: rejected}, ""},
		{"reject as a timeout", proposalReject, &busv1.TransitionRequest{TaskId: "t", Org: "o", From: taskstate.Blocked,
			FailureKind: agentmeshv1.FailureKind_FAILURE_KIND_TIMEOUT, Proposal: rejected}, "failure_kind"},
		{"reject approving", proposalReject, &busv1.TransitionRequest{TaskId: "t", Org: "o", From: taskstate.Blocked, FailureKind: kind, Proposal: approved}, "proposal.status"},
		{"cancel carrying a decision", intentOf(t, "task.cancel"), &busv1.TransitionRequest{TaskId: "t", Org: "o", Proposal: approved}, "proposal.status"},
		{"approval decision carrying a proposal", intentOf(t, "task.decide"), &busv1.TransitionRequest{TaskId: "t", Org: "o", From: taskstate.Blocked,
			Approval: &agentmeshv1.Approval{Status: agentmeshv1.ApprovalStatus_APPROVAL_STATUS_APPROVED}, Proposal: approved}, "proposal.status"},
	} {
		err := tt.in.check(tt.req)
		var be *bus.Error
		switch {
		case tt.field == "" && err != nil:
			t.Errorf("%s: %v, want allowed", tt.name, err)
		case tt.field != "" && (!asBusError(err, &be) || be.Field != tt.field):
			t.Errorf("%s: %v, want invalid %s", tt.name, err, tt.field)
		}
	}
}

func intentOf(t *testing.T, op string) intent {
	t.Helper()
	for _, in := range intents {
		if in.op == op {
			return in
		}
	}
	t.Fatalf("no intent %s", op)
	return intent{}
}

func asBusError(err error, be **bus.Error) bool {
	e, ok := err.(*bus.Error)
	if ok {
		*be = e
	}
	return ok
}
