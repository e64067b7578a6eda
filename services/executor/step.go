package executor

// A step the child reports: judged, checkpointed, acknowledged.
//
// Every step the child records (a model turn, a tool call, a tool result)
// comes as a Step frame and is answered by a StepAck once it is durable.
// The executor first judges it (judge): a tool call goes through the gate,
// which decides it and stamps the audit fields; a tool result gets the
// decision the gate recorded for its call; a model turn gets the usage and
// model the executor saw, not the child's word. Then it is written:
//   - a model turn written early (answer.go) is only acknowledged;
//   - a model turn that may wait (deferrable) is acknowledged and written
//     with the step after it, one write instead of two (docs/architecture.md,
//     "Checkpoints written together");
//   - anything else is written, with the deferred turn before it, then
//     acknowledged; a budget that ran out with the turn ends the attempt,
//     a wait_tasks call or a call that needs a person's approval may block
//     the task (block).

import (
	"context"
	"errors"
	"fmt"

	childv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/child/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/delegation"
	"google.golang.org/protobuf/proto"
)

// report is a step the child reported, as the executor handles it.
type report struct {
	step *agentmeshv1.Step
	ack  *childv1.StepAck
	// v is the gate's verdict on a tool call.
	v verdict
	// stop: a budget ran out with the model turn the step records (the
	// attempt ends once it is checkpointed).
	stop *serveResult
}

// onStep handles a Step frame; recorded is the model turn the executor
// wrote early for the answer the child reports now (nil: none).
func (a *attempt) onStep(ctx context.Context, step, recorded *agentmeshv1.Step) *serveResult {
	if step == nil {
		return protocolError(errors.New("step frame without a step"))
	}
	rp, bad := a.judge(step, recorded)
	if bad != nil {
		return bad
	}
	a.tools.step(ctx, rp) // a tool call's span (tracing.go)
	if recorded != nil {
		return a.ackRecorded(ctx, rp)
	}
	if step.Kind == agentmeshv1.StepKind_STEP_KIND_MODEL_TURN && rp.stop == nil && a.deferred == nil && deferrable(step) {
		a.deferred = step
		return a.ack(rp.ack)
	}
	steps, bad := a.withDeferred(ctx, step)
	if bad != nil {
		return bad
	}
	err := a.rec.appendSteps(ctx, a.task.Id, a.num, steps...)
	if err == nil {
		if a.deferred != nil {
			a.rel.recorded(a.deferred, verdict{})
			a.deferred = nil
		}
		a.rel.recorded(step, rp.v)
	}
	return a.afterWrite(ctx, rp, err)
}

// judge stamps step with what the executor knows of it — the gate's
// decision, the usage and model it saw — and makes its ack; a protocol
// error when the step cannot be what the child says.
func (a *attempt) judge(step, recorded *agentmeshv1.Step) (*report, *serveResult) {
	step.Attempt = a.num
	a.next = max(a.next, step.Index+1)
	rp := &report{step: step, ack: &childv1.StepAck{Index: step.Index}}
	switch step.Kind {
	case agentmeshv1.StepKind_STEP_KIND_TOOL_CALL:
		rp.v = a.gate.decide(step)
		rp.ack.Decision, rp.ack.Message, rp.ack.RunInExecutor = rp.v.decision, rp.v.message, rp.v.inExecutor
	case agentmeshv1.StepKind_STEP_KIND_TOOL_RESULT:
		// The decision recorded is the gate's, not the child's word.
		if err := a.gate.result(step); err != nil {
			return nil, protocolError(err)
		}
	case agentmeshv1.StepKind_STEP_KIND_MODEL_TURN:
		if bad := a.modelTurnReported(step, recorded); bad != nil {
			return nil, bad
		}
	}
	if recorded != nil && step.Kind != agentmeshv1.StepKind_STEP_KIND_MODEL_TURN {
		return nil, protocolError(fmt.Errorf("the agent reported a %s step before the model turn it asked for", step.Kind))
	}
	rp.stop = a.mr.stepDone(step)
	return rp, nil
}

// ackRecorded acknowledges a model turn the executor wrote early: it is
// durable already.
func (a *attempt) ackRecorded(ctx context.Context, rp *report) *serveResult {
	a.rel.recorded(rp.step, verdict{})
	if rp.stop != nil {
		return a.ackEnd(rp.ack, rp.stop.failure.Reason, rp.stop)
	}
	a.dl.prefetch(ctx, a.gate, rp.step)
	return a.ack(rp.ack)
}

// withDeferred is what a step's write holds: the step, after the model
// turn deferred before it (the deferred turn alone first when the two
// would be too large together).
func (a *attempt) withDeferred(ctx context.Context, step *agentmeshv1.Step) ([]*agentmeshv1.Step, *serveResult) {
	if a.deferred == nil {
		return []*agentmeshv1.Step{step}, nil
	}
	if proto.Size(a.deferred)+proto.Size(step) > maxTogether {
		if err := a.flush(ctx); err != nil { // each on its own, as large as before
			return nil, &serveResult{stepErr: err}
		}
		return []*agentmeshv1.Step{step}, nil
	}
	if step.Index <= a.deferred.Index {
		return nil, protocolError(fmt.Errorf("step %d after step %d: step indexes must increase", step.Index, a.deferred.Index))
	}
	return []*agentmeshv1.Step{a.deferred, step}, nil
}

// afterWrite acknowledges a step whose write ended with err: a budget that
// ran out with it ends the attempt, a model turn starts its sub-tasks'
// spawns, a call may block the task; a failed write is in the ack and ends
// the conversation.
func (a *attempt) afterWrite(ctx context.Context, rp *report, err error) *serveResult {
	if err == nil && rp.stop != nil {
		return a.ackEnd(rp.ack, rp.stop.failure.Reason, rp.stop) // a budget ran out with this model turn
	}
	if err == nil && rp.step.Kind == agentmeshv1.StepKind_STEP_KIND_MODEL_TURN {
		a.dl.prefetch(ctx, a.gate, rp.step) // the turn's spawns start together
	}
	if err == nil {
		var blocked *serveResult
		if blocked, err = a.block(ctx, rp); blocked != nil {
			return blocked
		}
	}
	if err != nil {
		rp.ack.Error = err.Error()
	}
	if werr := a.send(&childv1.Frame{Kind: &childv1.Frame_StepAck{StepAck: rp.ack}}); werr != nil && err == nil {
		return brokeOff()
	}
	if err != nil {
		return &serveResult{stepErr: err}
	}
	return nil
}

// block blocks the task when the checkpointed step asks for it: a
// wait_tasks call the gate let run (on its unfinished sub-tasks: a later
// attempt replays the call), or a call that waits for a person's approval.
// It returns the blocked end, or the error of the move (nil, nil: the
// step blocks nothing).
func (a *attempt) block(ctx context.Context, rp *report) (*serveResult, error) {
	v := rp.v
	if rp.step.ToolName == delegation.ToolWaitTasks && v.inExecutor &&
		(v.decision == agentmeshv1.ToolDecision_TOOL_DECISION_ALLOWED || v.decision == agentmeshv1.ToolDecision_TOOL_DECISION_APPROVED) {
		blocked, err := a.dl.wait(ctx, rp.step)
		if blocked {
			return a.ackEnd(rp.ack, "waiting for sub-tasks", &serveResult{blocked: true, blockedOn: "waiting for sub-tasks", last: true}), nil
		}
		if err != nil {
			return nil, err
		}
	}
	if v.approval != nil && v.decision == agentmeshv1.ToolDecision_TOOL_DECISION_PENDING_APPROVAL {
		if err := a.rec.block(ctx, a.task, a.num, v.approval); err != nil {
			return nil, err
		}
		return a.ackEnd(rp.ack, "waiting for approval of "+v.approval.Tool, &serveResult{blocked: true, blockedOn: "waiting for approval", last: true}), nil
	}
	return nil, nil
}

// ack acknowledges a step.
func (a *attempt) ack(ack *childv1.StepAck) *serveResult {
	if err := a.send(&childv1.Frame{Kind: &childv1.Frame_StepAck{StepAck: ack}}); err != nil {
		return brokeOff()
	}
	return nil
}

// ackEnd acknowledges the step that ends the conversation with why, and
// returns how it ended.
func (a *attempt) ackEnd(ack *childv1.StepAck, why string, res *serveResult) *serveResult {
	ack.Error = why
	_ = a.send(&childv1.Frame{Kind: &childv1.Frame_StepAck{StepAck: ack}})
	return res
}

// maxTogether bounds the steps written in one request: larger ones go on
// their own, so no request is larger than it was before steps were written
// together (the bus's message limit).
const maxTogether = 256 << 10

// deferrable tells whether a model turn may wait to be written with the
// step after it. A large turn is written at once, and so is a turn that
// asks for sub-tasks: their spawns start as soon as it is recorded
// (delegator.prefetch), and must not start from an answer the store does
// not hold.
func deferrable(turn *agentmeshv1.Step) bool {
	if proto.Size(turn) > maxTogether {
		return false
	}
	for _, c := range turn.GetToolCalls() {
		switch c.GetName() {
		case delegation.ToolCallAgent, delegation.ToolCallModel, delegation.ToolWaitTasks:
			return false
		}
	}
	return true
}
