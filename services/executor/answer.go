package executor

// What happens to a model answer inside the executor.
//
// The child has no network and no key: every model turn it takes is a
// ModelRequest frame the executor answers. A model answer is paid for, so
// the executor's rule is that an answer it received is never asked for
// again — not after a child's crash, a release, a retry, nor (for a slow
// answer) the executor's own death (invariant 10, "Paid once"). Its path,
// all in this file:
//
//  1. Asked. The child's ModelRequest reaches onModelRequest. The budgets
//     are checked first (modelTurn: a budget used up answers with an error
//     and ends the attempt, no call). The call is made by the model client
//     (package llm, llm.Client) with the conversation the task continues
//     inserted (conversation.go). Two things may have asked earlier:
//     the first turn, asked when the attempt started, before any child
//     (first.go: the child is handed that answer once it asks the same);
//     and a call whose child was released while it ran (release.go: the
//     answer is held for the child that takes over, which asks again and
//     is handed it — the model is not asked twice). awaitModel waits for
//     the answer, and releases the waiting child when the call is slow and
//     many children wait.
//  2. Streamed. While the model answers, its content goes out as TOKEN
//     events (tokens.go): live only, the step holds the text.
//  3. Counted. The answer's usage is added to the task's tokens and cost;
//     a budget it overruns stops the task once the answer is checkpointed.
//  4. Kept. An answer is in the executor's hands only until it is
//     checkpointed. A quick one is written with the step that follows it
//     (the child's report of it, deferred: step.go). A slow one (at least
//     Config.KeepAnswersAfter) is written at once, beside the hand-over
//     (handEarly), or while a child starts for it (first.go, startKeeping),
//     so an executor lost meanwhile loses no slow paid answer.
//  5. Handed over. The answer goes to the child as a ModelResponse frame;
//     observed remembers it until the child reports it.
//  6. Acknowledged. The child reports the answer as a MODEL_TURN step:
//     modelTurnReported gives it the usage and model the executor saw (not
//     the child's word) — or, when the executor wrote it early, checks that
//     the child reports that very turn, and it is acknowledged without a
//     second write.
//  7. Never lost at the end. However the conversation ends — the child's
//     exit, a broken pipe, a protocol error — an answer no child recorded
//     (the first turn nobody asked for, an answer its child did not live
//     to report, one held for a successor that died) is written as the
//     MODEL_TURN step the child would have written (keepUnrecorded,
//     keepAnswer), so the next attempt replays it instead of asking again.

import (
	"context"
	"errors"
	"fmt"
	"time"

	childv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/child/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/metrics"
	"github.com/agentmesh/agentmesh/services/executor/llm"
	"google.golang.org/protobuf/proto"
)

// onModelRequest answers the child's model request (steps 1–5).
func (a *attempt) onModelRequest(ctx context.Context, req *childv1.ModelRequest) *serveResult {
	if a.held != nil {
		// The child that took over asks for the turn its predecessor
		// asked for: the answer is in hand.
		resp := a.held
		a.held = nil
		resp.Id = req.GetId()
		return a.handOver(ctx, resp, nil)
	}
	var ahead *asked
	if a.first != nil {
		ahead, a.first = a.firstAnswer(a.first, req), nil
	}
	resp, stop, released := a.awaitModel(ctx, req, ahead)
	if released && stop == nil {
		// A slow answer is checkpointed while the child that takes over
		// starts, and is in that child's history; else it is held for it.
		return a.takeOver(ctx, resp)
	}
	return a.handOver(ctx, resp, stop)
}

// handOver hands the answer resp to the child that asked for it: kept at
// once when it was slow (handEarly), remembered until the child reports
// it. stop, when a budget ran out before the call, ends the conversation.
func (a *attempt) handOver(ctx context.Context, resp *childv1.ModelResponse, stop *serveResult) *serveResult {
	if resp.GetError() == "" {
		a.observed = resp // what the next MODEL_TURN step must record
	}
	if stop == nil && a.keepsEarly(resp) {
		a.early = a.handEarly(ctx, resp)
	}
	if err := a.send(&childv1.Frame{Kind: &childv1.Frame_ModelResponse{ModelResponse: resp}}); err != nil && stop == nil {
		return brokeOff()
	}
	return stop // a budget ran out: no model call
}

// modelTurn makes the model call of req (steps 1–3): the budgets are
// checked, the model is called with its streamed content published as
// TOKEN events, the usage is added. It returns the response for the child
// and, when the task must stop now, how the conversation ends.
func (a *attempt) modelTurn(ctx context.Context, req *childv1.ModelRequest) (*childv1.ModelResponse, *serveResult) {
	r := a.mr
	if why := r.check(false); why != "" {
		return &childv1.ModelResponse{Id: req.GetId(), Error: why},
			&serveResult{failure: &childv1.Failure{Reason: why, Permanent: true}, kind: agentmeshv1.FailureKind_FAILURE_KIND_BUDGET, last: true}
	}
	tp := newTokenPublisher(ctx, a.s.nc, a.s.names.TaskTokens(a.task.GetOrg(), a.task.GetId()), a.task, a.num)
	call := r.call
	call.OnToken, call.Turn = tp.write, withConversation(req, r.thread)
	mctx, span := a.startModelCall(ctx, call) // tracing.go
	resp, err := a.model.Complete(mctx, call)
	endModelCall(span, resp, err)
	tp.close()
	if err != nil {
		if w := waitFor(err); w != nil && ctx.Err() == nil {
			// No budget now: the task waits in the queue, holding no
			// process (answer asked: nothing was paid).
			return &childv1.ModelResponse{Id: req.GetId(), Error: err.Error()}, &serveResult{wait: w, last: true}
		}
		r.modelErr, r.modelKind = err.Error(), llm.KindOf(err).FailureKind()
		return &childv1.ModelResponse{Id: req.GetId(), Error: err.Error()}, nil
	}
	r.turns++
	r.tokens += totalTokens(resp.GetUsage())
	r.cost += resp.GetUsage().GetCostUsd()
	r.answered(resp)
	return resp, nil
}

// rateWait is a model call that had no budget: the task goes back to the
// queue, not dispatched before until (when its slot was reserved, the
// next attempt takes it).
type rateWait struct {
	until  time.Time
	reason string
	scope  string
}

// maxRateWait bounds how far ahead a rate-limit wait puts a task (the
// state service refuses more).
const maxRateWait = time.Hour

// waitFor is the wait of a model call that failed for a rate limit, or
// nil.
func waitFor(err error) *rateWait {
	var e *llm.Error
	if !errors.As(err, &e) || e.Kind != llm.KindRateLimited {
		return nil
	}
	until := e.NotBefore
	if until.IsZero() {
		until = e.Until
	}
	if lim := time.Now().Add(maxRateWait); until.After(lim) {
		until = lim
	}
	return &rateWait{until: until, scope: e.ScopeKind(), reason: "waiting for the model's rate limit: " + e.Error()}
}

// asked is a model call under way: its answer once done is closed.
type asked struct {
	req  *childv1.ModelRequest
	done chan struct{}
	resp *childv1.ModelResponse
	stop *serveResult
}

// ask makes the model call of req in the background.
func (a *attempt) ask(ctx context.Context, req *childv1.ModelRequest) *asked {
	c := &asked{req: req, done: make(chan struct{})}
	go func() {
		defer close(c.done)
		c.resp, c.stop = a.modelTurn(ctx, req)
	}()
	return c
}

// answer waits for the call and returns its answer, addressed to the
// request id id.
func (c *asked) answer(id int64) (*childv1.ModelResponse, *serveResult) {
	<-c.done
	c.resp.Id = id
	return c.resp, c.stop
}

// awaitModel makes the model call of req, or awaits the one asked ahead
// for it (ahead, nil when none was: first.go). When the child may be
// released (release.go) and the call has not answered within the release
// delay while more than Config.ReleaseAbove children wait, it ends the
// child, which waits for nothing but this answer, and removes its sandbox,
// then waits for the answer: released reports that, and the caller starts
// a child to take over.
func (a *attempt) awaitModel(ctx context.Context, req *childv1.ModelRequest, ahead *asked) (resp *childv1.ModelResponse, stop *serveResult, released bool) {
	if ahead == nil && !a.rel.can() {
		resp, stop = a.modelTurn(ctx, req)
		return resp, stop, false
	}
	if ahead == nil {
		ahead = a.ask(ctx, req)
	}
	if !a.rel.can() {
		resp, stop = ahead.answer(req.GetId())
		return resp, stop, false
	}
	s := a.s
	s.waitingChildren.Add(1)
	t := time.NewTimer(a.rel.after)
	defer t.Stop()
	select {
	case <-ahead.done:
		s.waitingChildren.Add(-1)
		resp, stop = ahead.answer(req.GetId())
		return resp, stop, false
	case <-t.C:
	}
	if s.waitingChildren.Load() <= releaseAbove(s.cfg) {
		// Few children wait: this one waits on (it counts among them
		// until its answer), as a released one would cost a spawn.
		resp, stop = ahead.answer(req.GetId())
		s.waitingChildren.Add(-1)
		metrics.ChildrenKeptWaiting.Inc()
		return resp, stop, false
	}
	s.waitingChildren.Add(-1)
	a.release()
	resp, stop = ahead.answer(req.GetId())
	return resp, stop, true
}

// keepsEarly reports whether the answer resp, in hand while a child is
// started for it or handed to the child that asked for it (its call did
// not end the attempt), is checkpointed at once by the executor (step 4):
// a slow enough call's answer (Config.KeepAnswersAfter), not an error, and
// no budget ran out with it (the child reports such a turn, and the
// attempt ends with it). A quicker answer costs little to ask again, and
// its extra write would cost every fast task.
func (a *attempt) keepsEarly(resp *childv1.ModelResponse) bool {
	after, keep := keepAnswersAfter(a.s.cfg)
	return keep && resp.GetError() == "" && a.mr.pending == "" &&
		time.Duration(resp.GetDurationMs())*time.Millisecond >= after
}

// earlyTurn is a slow answer's MODEL_TURN step being written by the
// executor while the child that asked for it takes the answer.
type earlyTurn struct {
	done chan struct{}
	step *agentmeshv1.Step // once done: the step written, nil if it was not
	err  error
}

// wait waits for the write and returns its error.
func (et *earlyTurn) wait() error {
	<-et.done
	return et.err
}

// handEarly writes resp, a slow call's answer (keepsEarly) that is handed
// to the child waiting for it, as the MODEL_TURN step at index a.next —
// the step the child will report (child.TurnStep) — beside the hand-over,
// not in front of it. Until the child reports the turn, and that report is
// written with the step that follows it, the answer would live only in
// this executor: a few milliseconds, but a paid answer asked again if the
// executor dies then (docs/architecture.md, "A slow answer waiting for its
// child"). The child's report is then acknowledged without a second write.
func (a *attempt) handEarly(ctx context.Context, resp *childv1.ModelResponse) *earlyTurn {
	et := &earlyTurn{done: make(chan struct{})}
	resp, next := proto.CloneOf(resp), a.next
	go func() {
		defer close(et.done)
		et.step, et.err = a.writeAnswer(ctx, resp, next, "handed")
		if et.err != nil {
			a.log.Warn("the model's answer was not checkpointed while its agent process took it; the agent process records it", "step", next, "err", et.err)
		}
	}()
	return et
}

// settleEarly waits for the turn being written early, before the child's
// next frame is handled (that frame is its report of it), and returns the
// step written (nil: none, or its write failed and the child's report is
// written as usual).
func (a *attempt) settleEarly() *agentmeshv1.Step {
	et := a.early
	if et == nil {
		return nil
	}
	a.early = nil
	if et.wait() != nil {
		return nil
	}
	a.observed = nil
	return et.step
}

// modelTurnReported checks the MODEL_TURN step the child reports for the
// answer it was handed (step 6) and stamps it with what the executor saw:
// usage and model feed cost, usage totals and budgets. recorded is the
// turn the executor wrote early: the child must report that very turn.
func (a *attempt) modelTurnReported(step, recorded *agentmeshv1.Step) *serveResult {
	if recorded != nil {
		if !proto.Equal(step, recorded) {
			return protocolError(fmt.Errorf("the agent reported model turn %d other than the model's answer, which was recorded", step.Index))
		}
		return nil
	}
	if a.observed == nil {
		return protocolError(errors.New("a model turn step without a model call"))
	}
	step.Usage, step.Model = a.observed.GetUsage(), a.observed.GetModel()
	step.ModelProvider, step.ModelFallback = a.observed.GetProvider(), a.observed.GetFallback()
	a.observed = nil
	return nil
}

// flush writes the model turn deferred to go with the next step, before
// anything that is not that step (step 4).
func (a *attempt) flush(ctx context.Context) error {
	if a.deferred == nil {
		return nil
	}
	step := a.deferred
	a.deferred = nil
	if err := a.rec.appendSteps(ctx, a.task.Id, a.num, step); err != nil {
		return err
	}
	a.rel.recorded(step, verdict{})
	return nil
}

// endWrites bounds the checkpoints an attempt writes as its conversation
// ends (a held turn, an answer no child recorded) after the attempt's own
// context ended.
const endWrites = 5 * time.Second

// endContext is the context of those writes: ctx's values without its
// end, bounded by endWrites.
func endContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), endWrites)
}

// keepUnrecorded writes, as a conversation ends however it ends (step 7),
// a turn still deferred (the final answer's goes with the completion
// instead) and an answer the model gave that no child recorded: the first
// turn asked ahead that no child asked for, an answer its child did not
// live to report, or one held for a child that took over and died before
// asking for it. Both are written even when the attempt's context has
// ended (a draining executor, the wall time; a cancelled task's attempt
// is fenced and refused), within endWrites.
func (a *attempt) keepUnrecorded(ctx context.Context) {
	if a.early != nil && a.early.wait() == nil {
		a.observed = nil // recorded: the child died before reporting it
	}
	if resp := a.first.unclaimed(); resp != nil {
		a.observed = resp
	}
	if a.held != nil && a.held.GetError() == "" {
		a.observed = a.held
	}
	if a.deferred == nil && a.observed == nil {
		return // the common end: nothing left to write
	}
	ctx, cancel := endContext(ctx)
	defer cancel()
	if err := a.flush(ctx); err != nil {
		a.log.Warn("model turn not checkpointed after the agent's end", "err", err)
		return
	}
	if a.observed != nil {
		a.keepAnswer(ctx, a.observed)
	}
}

// keepAnswer checkpoints the model's answer resp, which no child recorded
// — its child died before reporting it, or none could be started for it —
// as the MODEL_TURN step the child would have recorded at index a.next
// (child.TurnStep, with the usage and model the executor saw), so the
// next attempt replays the answer instead of asking the model again, and
// the task's usage counts the call. It is an answer to the conversation
// the child had (the first turn: to child.FirstRequest, the child's own),
// so the step is the one the child would have written.
func (a *attempt) keepAnswer(ctx context.Context, resp *childv1.ModelResponse) {
	if _, err := a.writeAnswer(ctx, resp, a.next, "unrecorded"); err != nil {
		a.log.Warn("the model's answer no agent process recorded was not checkpointed; the next attempt asks again", "step", a.next, "err", err)
		return
	}
	a.log.Info("checkpointed the model's answer no agent process recorded", "step", a.next)
}

// writeAnswer writes resp as the MODEL_TURN step at index next (see
// keepAnswer) and returns the step; when says why, for the metric.
func (a *attempt) writeAnswer(ctx context.Context, resp *childv1.ModelResponse, next int32, when string) (*agentmeshv1.Step, error) {
	step := childTurnStep(resp, next)
	step.Attempt = a.num
	if err := a.rec.appendSteps(ctx, a.task.GetId(), a.num, step); err != nil {
		return nil, err
	}
	metrics.AnswersKept.WithLabelValues(when).Inc()
	return step, nil
}
