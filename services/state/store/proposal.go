package store

import (
	"context"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Proposals record agent proposals (docs/proposals.md). A task created
// with pending_proposal set goes to blocked instead of queued, its status
// event carrying the proposal (PlanCreate); a decision is a transition
// carrying it (Transition.Proposal); each is then noted by one
// EVENT_TYPE_PROPOSAL event in the task's history.
type Proposals interface {
	// RecordProposal appends to the task's history one PROPOSAL event
	// carrying its current proposal (the status unchanged).
	// failed_precondition when the task has no proposal.
	RecordProposal(ctx context.Context, taskID string) (*agentmeshv1.Task, *agentmeshv1.TaskEvent, error)
}

var (
	proposalPending   = agentmeshv1.ProposalStatus_PROPOSAL_STATUS_PENDING
	proposalApproved  = agentmeshv1.ProposalStatus_PROPOSAL_STATUS_APPROVED
	proposalPermanent = agentmeshv1.ProposalStatus_PROPOSAL_STATUS_APPROVED_PERMANENT
	proposalRejected  = agentmeshv1.ProposalStatus_PROPOSAL_STATUS_REJECTED
)

// planProposalCreate makes the second event of a task created with a
// proposal (and no dependencies) a move to blocked carrying it.
func planProposalCreate(in *agentmeshv1.Task, task *agentmeshv1.Task, second *agentmeshv1.TaskEvent, now time.Time) {
	if in.PendingProposal == nil || len(in.DependsOn) > 0 {
		task.PendingProposal = nil
		return
	}
	p := proto.Clone(in.PendingProposal).(*agentmeshv1.Proposal)
	p.Id, p.TaskId, p.Org = taskstate.ProposalID(task.Id), task.Id, task.Org
	p.Status = proposalPending
	p.CreatedAt = timestamppb.New(now)
	p.DecidedAt, p.DecidedBy, p.Comment = nil, "", ""
	second.Status = taskstate.Blocked
	second.Proposal = p
	second.Reason = "waiting for a person to approve the proposed agent " + p.GetAgent().GetName() + " (proposal " + p.Id + ")"
	task.PendingProposal = nil
}

// planProposal checks the proposal decision a transition carries and
// returns the decided proposal. A task blocked on a proposal leaves
// blocked only with its decision, or by cancel.
func planProposal(cur *agentmeshv1.Task, tr Transition, now time.Time) (*agentmeshv1.Proposal, error) {
	d := tr.Proposal
	pending := cur.PendingProposal
	if d == nil {
		if taskstate.ProposalPending(cur) && tr.To != taskstate.Cancelled {
			return nil, bus.Errorf(bus.CodeFailedPrecondition, "task %s waits for a decision on proposal %s; approve or reject it first", cur.Id, pending.Id)
		}
		return nil, nil
	}
	switch {
	case pending == nil:
		return nil, bus.Errorf(bus.CodeFailedPrecondition, "task %s has no agent proposal", cur.Id)
	case d.Id != "" && d.Id != pending.Id:
		return nil, bus.Errorf(bus.CodeFailedPrecondition, "task %s has proposal %s, not %s", cur.Id, pending.Id, d.Id)
	case pending.Status != proposalPending:
		by := ""
		if pending.DecidedBy != "" {
			by = " by " + pending.DecidedBy
		}
		return nil, bus.Errorf(bus.CodeFailedPrecondition, "proposal %s was already decided (%s%s)", pending.Id, ProposalStatusName(pending.Status), by)
	case cur.Status != taskstate.Blocked:
		return nil, bus.Errorf(bus.CodeFailedPrecondition, "task %s is %s: its proposal can no longer be decided", cur.Id, taskstate.Name(cur.Status))
	}
	out := proto.Clone(pending).(*agentmeshv1.Proposal)
	out.Status, out.DecidedAt, out.DecidedBy, out.Comment = d.Status, timestamppb.New(now), d.DecidedBy, d.Comment
	switch d.Status {
	case proposalApproved, proposalPermanent:
		if tr.To != taskstate.Queued {
			return nil, bus.FieldError("to", "an approved proposal queues the task: to must be queued")
		}
		if d.Agent != nil {
			if d.Agent.Name != pending.GetAgent().GetName() {
				return nil, bus.FieldError("proposal.agent.name", "the approved agent must keep the proposed name %q", pending.GetAgent().GetName())
			}
			out.Agent = proto.Clone(d.Agent).(*agentmeshv1.Agent)
		}
	case proposalRejected:
		if tr.To != taskstate.Failed {
			return nil, bus.FieldError("to", "a rejected proposal fails the task: to must be failed")
		}
	default:
		return nil, bus.FieldError("proposal.status", "a decision must be approved, approved_permanent or rejected")
	}
	return out, nil
}

// PlanProposalEvent returns the task after a PROPOSAL event noting its
// current proposal, and the event.
func PlanProposalEvent(cur *agentmeshv1.Task, now time.Time) (*agentmeshv1.Task, *agentmeshv1.TaskEvent, error) {
	if cur.PendingProposal == nil {
		return nil, nil, bus.Errorf(bus.CodeFailedPrecondition, "task %s has no agent proposal", cur.Id)
	}
	ev := &agentmeshv1.TaskEvent{
		TaskId: cur.Id, Seq: cur.LastEventSeq + 1, Type: agentmeshv1.EventType_EVENT_TYPE_PROPOSAL,
		Time: timestamppb.New(now), Status: cur.Status, Attempt: cur.Attempt, Org: cur.Org, Node: cur.Node,
		Proposal: proto.Clone(cur.PendingProposal).(*agentmeshv1.Proposal),
		Reason:   proposalReason(cur.PendingProposal),
	}
	return taskstate.Apply(cur, ev), ev, nil
}

func proposalReason(p *agentmeshv1.Proposal) string {
	switch p.Status {
	case proposalPending:
		return "agent " + p.GetAgent().GetName() + " proposed: " + p.Reason
	case proposalRejected:
		return "proposal rejected by " + orSomeone(p.DecidedBy) + ": " + p.Comment
	}
	return "proposal " + ProposalStatusName(p.Status) + " by " + orSomeone(p.DecidedBy)
}

func orSomeone(s string) string {
	if s == "" {
		return "an unnamed key"
	}
	return s
}

// ProposalStatusName is a proposal status as people read it.
func ProposalStatusName(s agentmeshv1.ProposalStatus) string {
	switch s {
	case proposalPending:
		return "pending"
	case proposalApproved:
		return "approved for this task"
	case proposalPermanent:
		return "approved permanently"
	case proposalRejected:
		return "rejected"
	}
	return "unspecified"
}

// RecordProposalWith is Proposals.RecordProposal over a store's write loop.
func RecordProposalWith(ctx context.Context, write WriteFunc, now func() time.Time, taskID string) (*agentmeshv1.Task, *agentmeshv1.TaskEvent, error) {
	return write(ctx, taskID, func(cur *agentmeshv1.Task) (*agentmeshv1.Task, *agentmeshv1.TaskEvent, error) {
		return PlanProposalEvent(cur, now())
	})
}

func (i instrumented) RecordProposal(ctx context.Context, id string) (t *agentmeshv1.Task, ev *agentmeshv1.TaskEvent, err error) {
	defer func(start time.Time) { observe("record_proposal", start, err) }(time.Now())
	return i.s.RecordProposal(ctx, id)
}
