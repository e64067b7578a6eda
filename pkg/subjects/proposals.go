package subjects

// The router's proposal intents (docs/proposals.md): a person's decision on
// the agent the registry drafted for a task blocked on a proposal. They
// carry busv1.TransitionRequest with proposal set.
const (
	// StateApproveProposal: blocked → queued on the approved agent.
	StateApproveProposal = "task.proposal.approve"
	// StateRejectProposal: blocked → failed (FAILURE_KIND_PROPOSAL).
	StateRejectProposal = "task.proposal.reject"
)

// EventProposal is the last token of a task's EVENT_TYPE_PROPOSAL events
// (an agent proposed for it, or the proposal decided).
const EventProposal = "proposal"
