package state

import (
	"context"
	"slices"

	busv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/bus/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/subjects"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
)

// Agent proposals (docs/proposals.md): a task the router creates with
// pending_proposal set is recorded blocked (the store's PlanCreate); a
// person's decision comes as one of the router's two proposal intents,
// org-scoped like its other intents:
//
//	task.proposal.approve  blocked → queued, the approved agent becomes the task's
//	task.proposal.reject   blocked → failed, FAILURE_KIND_PROPOSAL
//
// Each proposal and each decision is then noted by an EVENT_TYPE_PROPOSAL
// event in the task's history (the status event carries it as well, so a
// crash between the two loses only the note).

var (
	proposalApprove = intent{op: subjects.StateApproveProposal, from: []agentmeshv1.TaskStatus{taskstate.Blocked}, to: taskstate.Queued, org: true,
		proposals: []agentmeshv1.ProposalStatus{agentmeshv1.ProposalStatus_PROPOSAL_STATUS_APPROVED, agentmeshv1.ProposalStatus_PROPOSAL_STATUS_APPROVED_PERMANENT}}
	proposalReject = intent{op: subjects.StateRejectProposal, from: []agentmeshv1.TaskStatus{taskstate.Blocked}, to: taskstate.Failed, org: true,
		failure: true, kinds: []agentmeshv1.FailureKind{agentmeshv1.FailureKind_FAILURE_KIND_PROPOSAL},
		proposals: []agentmeshv1.ProposalStatus{agentmeshv1.ProposalStatus_PROPOSAL_STATUS_REJECTED}}
)

// checkProposal refuses a proposal the intent does not carry, or its
// absence where the intent needs one.
func (in intent) checkProposal(req *busv1.TransitionRequest) error {
	p := req.Proposal
	switch {
	case p == nil && len(in.proposals) > 0:
		return bus.FieldError("proposal", "%s needs a proposal decision", in.op)
	case p == nil:
		return nil
	case !slices.Contains(in.proposals, p.Status):
		return bus.FieldError("proposal.status", "%s does not carry a proposal %s", in.op, p.Status)
	case p.Status != agentmeshv1.ProposalStatus_PROPOSAL_STATUS_REJECTED && p.Agent == nil:
		return bus.FieldError("proposal.agent", "an approval names the agent the task runs on")
	case p.Agent != nil && !p.Agent.Ephemeral && p.Status == agentmeshv1.ProposalStatus_PROPOSAL_STATUS_APPROVED:
		return bus.FieldError("proposal.agent.ephemeral", "an agent approved for one task only is ephemeral")
	}
	return nil
}

// recordProposal notes t's proposal by a PROPOSAL event; a failure is
// logged (the status event already carries the proposal).
func (s *Service) recordProposal(ctx context.Context, t *agentmeshv1.Task) *agentmeshv1.Task {
	next, ev, err := s.store.RecordProposal(ctx, t.Id)
	if err != nil {
		s.log.WarnContext(ctx, "proposal event not recorded", "task_id", t.Id, "err", err)
		return t
	}
	s.publishTaskEvents(ctx, next, ev)
	return next
}
