package taskstate

import (
	"strings"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"google.golang.org/protobuf/proto"
)

// proposalSuffix ends a proposal's id: a task has at most one proposal,
// named after it.
const proposalSuffix = "-p"

// ProposalID is the id of the agent proposal of a task.
func ProposalID(taskID string) string { return taskID + proposalSuffix }

// TaskOfProposal returns the task id a proposal id names. A bare task id
// (no "-p") is accepted as naming its task's proposal.
func TaskOfProposal(id string) (string, bool) {
	id = strings.TrimSpace(id)
	task := strings.TrimSuffix(id, proposalSuffix)
	if task == "" || len(task) > 128 || strings.ContainsAny(task, " \t\r\n.*>/\\\x00") {
		return "", false
	}
	return task, true
}

// ProposalPending reports whether t waits for a person's decision on a
// proposed agent.
func ProposalPending(t *agentmeshv1.Task) bool {
	return t.Status == Blocked && t.PendingProposal.GetStatus() == agentmeshv1.ProposalStatus_PROPOSAL_STATUS_PENDING
}

// applyProposal folds the proposal an event carries into t: the task keeps
// its proposal (pending, then decided) in pending_proposal, and an approved
// one's agent becomes the task's agent.
func applyProposal(t *agentmeshv1.Task, ev *agentmeshv1.TaskEvent) {
	p := ev.GetProposal()
	if p == nil {
		return
	}
	t.PendingProposal = proto.Clone(p).(*agentmeshv1.Proposal)
	switch p.Status {
	case agentmeshv1.ProposalStatus_PROPOSAL_STATUS_APPROVED, agentmeshv1.ProposalStatus_PROPOSAL_STATUS_APPROVED_PERMANENT:
		if ev.Type == agentmeshv1.EventType_EVENT_TYPE_STATUS && p.Agent != nil {
			t.AgentSpec = proto.Clone(p.Agent).(*agentmeshv1.Agent)
			t.Agent = p.Agent.Name
		}
	}
}
