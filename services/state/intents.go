package state

import (
	"context"
	"slices"
	"time"

	busv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/bus/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/subjects"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
)

// An intent is one narrow transition operation (<p>.state.task.<intent>).
// The bus lets exactly one service identity publish each (subjects
// Permissions); here the state service decides what each may change, so a
// service can move a task only the way its job needs, whatever it puts in
// the request.
type intent struct {
	op string
	// from lists the statuses the task may be in; nil means any status
	// from which the transition table allows to.
	from []agentmeshv1.TaskStatus
	to   agentmeshv1.TaskStatus
	// fenced: the request must carry the task's attempt (the executor's
	// fencing token).
	fenced bool
	// org: the request must name the caller's org (the router's intents).
	org bool
	// nextAttempt: the intent starts a new attempt (dispatch only).
	nextAttempt bool
	// approvals: the approval statuses the request may carry; none means
	// it must carry no approval.
	approvals []agentmeshv1.ApprovalStatus
	// result, failure: whether Result / FailureKind may be set.
	result, failure bool
	// steps: whether the request may carry steps to checkpoint with the
	// move (fenced intents only).
	steps bool
	// kinds, when set, are the only failure kinds the intent may record.
	kinds []agentmeshv1.FailureKind
	// proposals: the proposal decisions the request must carry (none:
	// it must carry no proposal; proposals.go).
	proposals []agentmeshv1.ProposalStatus
	// notBefore: the request may say when the task may be dispatched
	// again (the executor's requeue of a task waiting for a model's rate
	// limit), at most MaxNotBefore ahead.
	notBefore bool
}

// MaxNotBefore bounds how far ahead a requeue may put a task.
const MaxNotBefore = time.Hour

var (
	approvalPending  = agentmeshv1.ApprovalStatus_APPROVAL_STATUS_PENDING
	approvalApproved = agentmeshv1.ApprovalStatus_APPROVAL_STATUS_APPROVED
	approvalRejected = agentmeshv1.ApprovalStatus_APPROVAL_STATUS_REJECTED
	approvalExpired  = agentmeshv1.ApprovalStatus_APPROVAL_STATUS_EXPIRED
)

// intents is the table of transition intents.
var intents = []intent{
	// scheduler
	{op: subjects.StateDispatch, from: []agentmeshv1.TaskStatus{taskstate.Queued}, to: taskstate.Assigned, nextAttempt: true},
	{op: subjects.StateExpire, from: []agentmeshv1.TaskStatus{taskstate.Blocked}, to: taskstate.Failed,
		approvals: []agentmeshv1.ApprovalStatus{approvalExpired}, failure: true},
	{op: subjects.StateTimeout, from: []agentmeshv1.TaskStatus{taskstate.Queued}, to: taskstate.Failed,
		failure: true, kinds: []agentmeshv1.FailureKind{agentmeshv1.FailureKind_FAILURE_KIND_TIMEOUT}},
	{op: subjects.StateLost, from: []agentmeshv1.TaskStatus{taskstate.Assigned, taskstate.Running}, to: taskstate.Failed, fenced: true,
		failure: true, kinds: []agentmeshv1.FailureKind{agentmeshv1.FailureKind_FAILURE_KIND_EXECUTOR_LOST}},
	// executor
	{op: subjects.StateStart, from: []agentmeshv1.TaskStatus{taskstate.Assigned}, to: taskstate.Running, fenced: true},
	{op: subjects.StateComplete, from: []agentmeshv1.TaskStatus{taskstate.Running}, to: taskstate.Completed, fenced: true, result: true, steps: true},
	{op: subjects.StateFail, from: []agentmeshv1.TaskStatus{taskstate.Assigned, taskstate.Running}, to: taskstate.Failed, fenced: true, failure: true},
	{op: subjects.StateBlock, from: []agentmeshv1.TaskStatus{taskstate.Running}, to: taskstate.Blocked, fenced: true,
		approvals: []agentmeshv1.ApprovalStatus{approvalPending}},
	{op: subjects.StateRequeue, from: []agentmeshv1.TaskStatus{taskstate.Assigned, taskstate.Running}, to: taskstate.Queued, fenced: true, notBefore: true},
	// router
	{op: subjects.StateCancel, to: taskstate.Cancelled, org: true},
	{op: subjects.StateDecide, from: []agentmeshv1.TaskStatus{taskstate.Blocked}, to: taskstate.Queued, org: true,
		approvals: []agentmeshv1.ApprovalStatus{approvalApproved, approvalRejected}},
	proposalApprove, proposalReject,
}

// intentNamed is the intent of the table named op (it panics on an op the
// table does not hold: a programming error).
func intentNamed(op string) intent {
	for _, in := range intents {
		if in.op == op {
			return in
		}
	}
	panic("state: no intent " + op)
}

// check refuses a request the intent does not allow, naming the field.
func (in intent) check(req *busv1.TransitionRequest) error {
	switch {
	case req.To != agentmeshv1.TaskStatus_TASK_STATUS_UNSPECIFIED && req.To != in.to:
		return bus.FieldError("to", "%s moves a task only to %s", in.op, taskstate.Name(in.to))
	case in.from != nil && !slices.Contains(in.from, req.From):
		return bus.FieldError("from", "%s moves a task only from %s", in.op, names(in.from))
	case in.from == nil && req.From != agentmeshv1.TaskStatus_TASK_STATUS_UNSPECIFIED && !taskstate.Allowed(req.From, in.to):
		return bus.FieldError("from", "%s cannot move a task from %s", in.op, taskstate.Name(req.From))
	case in.fenced && req.Attempt <= 0:
		return bus.FieldError("attempt", "%s needs the attempt (fencing token)", in.op)
	case in.org && req.Org == "":
		return bus.FieldError("org", "%s needs the caller's org", in.op)
	case req.NextAttempt && !in.nextAttempt:
		return bus.FieldError("next_attempt", "%s does not start a new attempt", in.op)
	case req.Result != "" && !in.result:
		return bus.FieldError("result", "%s records no result", in.op)
	case req.FailureKind != agentmeshv1.FailureKind_FAILURE_KIND_UNSPECIFIED && !in.failure:
		return bus.FieldError("failure_kind", "%s records no failure", in.op)
	case len(req.Steps) > 0 && !in.steps:
		return bus.FieldError("steps", "%s checkpoints no steps", in.op)
	case in.kinds != nil && !slices.Contains(in.kinds, req.FailureKind):
		return bus.FieldError("failure_kind", "%s records only a failure of kind %v", in.op, in.kinds)
	case req.NotBefore != nil && !in.notBefore:
		return bus.FieldError("not_before", "%s sets no not-before time", in.op)
	case req.NotBefore != nil && (!req.NotBefore.IsValid() || req.NotBefore.AsTime().After(time.Now().Add(MaxNotBefore))):
		return bus.FieldError("not_before", "must be a valid time at most %s ahead", MaxNotBefore)
	}
	if a := req.Approval; a != nil {
		if !slices.Contains(in.approvals, a.Status) {
			return bus.FieldError("approval.status", "%s does not carry an approval %s", in.op, a.Status)
		}
	} else if len(in.approvals) > 0 {
		return bus.FieldError("approval", "%s needs an approval", in.op)
	}
	return in.checkProposal(req)
}

func names(ss []agentmeshv1.TaskStatus) string {
	out := ""
	for i, s := range ss {
		if i > 0 {
			out += " or "
		}
		out += taskstate.Name(s)
	}
	return out
}

// intentHandler serves one intent: it checks the request against the
// intent, then applies it as a transition.
func (s *Service) intentHandler(in intent) bus.HandlerFunc[*busv1.TransitionRequest, *busv1.TransitionResponse] {
	return func(ctx context.Context, req *busv1.TransitionRequest) (*busv1.TransitionResponse, error) {
		if req.TaskId == "" {
			return nil, bus.FieldError("task_id", "a task id is required")
		}
		if err := in.check(req); err != nil {
			s.log.WarnContext(ctx, "transition intent refused", "op", in.op, "task_id", req.TaskId, "err", err)
			return nil, err
		}
		req.To = in.to
		ahead := false
		switch {
		case in.to == taskstate.Completed:
			ahead = s.cacheAhead(ctx, req.TaskId) // cache.go
		case taskstate.Terminal(in.to):
			s.cacheables.take(req.TaskId)
		}
		resp, err := s.transition(ctx, req)
		if err == nil && in.to == taskstate.Completed {
			s.cacheResult(ctx, resp.GetTask(), ahead)
		}
		return resp, err
	}
}
