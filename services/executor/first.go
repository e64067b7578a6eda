package executor

// The first model turn before the child (docs/architecture.md, "The first
// model turn before the child").
//
// A task's first model request follows from its Start alone when the agent
// starts no stdio MCP server and its history leaves no tool call to run
// (child.FirstRequest: the child's own code, without the child). The
// executor asks the model with it as soon as the attempt starts, before any
// agent process runs, so a spawn never sits between dispatch and the first
// model call:
//   - a child that needs no spawn (an idle warm child, or with reuse on a
//     parked one of the task's key) takes the task at once and builds its
//     conversation while the model answers;
//   - otherwise the child is started when the answer is in hand: a task
//     waiting for its first answer holds no process, and a slow model's
//     thousand waiting tasks cost no spawns, no memory of children and no
//     CPU until their answers come;
//   - with releasing off (AGENTMESH_RELEASE_AFTER=0) the child is started
//     at once, beside the call, as before.
// The child asks for its first turn as always and is handed the answer
// already received, after the executor checked that it asked the same
// (sameRequest); a child that asked something else is answered by a
// call of its own (it never should: the same code builds both).

import (
	"context"
	"errors"

	childv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/child/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/metrics"
)

// askFirst asks the model for the Start's first turn when the Start alone
// decides it (nil otherwise: the child asks, as always).
func (a *attempt) askFirst(ctx context.Context) *asked {
	req, ok := firstRequest(a.start)
	if !ok {
		return nil
	}
	return a.ask(ctx, req)
}

// childFor gives the attempt its agent child: at once when the first turn
// was not asked ahead, when releasing is off, or when a child is ready
// without a spawn; otherwise when the first turn's answer came.
//
// A slow first answer is checkpointed while its child starts
// (startKeeping): kept is that step, at index a.next (nil: not kept).
func (a *attempt) childFor(ctx context.Context) (p *process, kept *agentmeshv1.Step, err error) {
	s, first := a.s, a.first
	if first == nil || releaseAfter(s.cfg) == 0 {
		p, err = s.startChildFor(ctx, a.task)
		return p, nil, err
	}
	if p := s.tracedReadyChild(ctx, a.task); p != nil { // tracing.go
		metrics.FirstTurns.WithLabelValues("ready").Inc()
		return p, nil, nil
	}
	select {
	case <-first.done:
	case <-ctx.Done():
		return nil, nil, context.Cause(ctx)
	}
	if first.endsAttempt() {
		return nil, nil, errNoChild // asked.ended says how
	}
	metrics.FirstTurns.WithLabelValues("after").Inc()
	s.childAfterAnswer.Add(1)
	return a.startKeeping(ctx, first.resp, a.keepsEarly(first.resp))
}

// errNoChild: the first turn, asked before a child, ended the attempt
// (asked.ended): no child is started for it.
var errNoChild = errors.New("the attempt ended with its first model call")

// ended reports whether the answered call c ends the attempt by itself,
// and how: a budget ran out before the call, or the model call failed —
// the child would only report "model call failed", as its loop does, and
// mr.failed makes it a MODEL failure. A model that is down so costs no
// spawn per attempt.
func (c *asked) ended(mr *modelRun) (serveResult, bool) {
	switch {
	case !c.endsAttempt():
		return serveResult{}, false
	case c.stop != nil:
		return *c.stop, true
	}
	return mr.failed(&childv1.Failure{Reason: "model call failed: " + c.resp.GetError()}), true
}

// endsAttempt reports whether the answered call c ends the attempt by
// itself (ended says how).
func (c *asked) endsAttempt() bool { return c.stop != nil || c.resp.GetError() != "" }

// firstAnswer is the call asked ahead for the child's first request req,
// or nil when req is not what was asked (the call's end awaited first: it
// counts in the attempt's budgets, which the next call reads).
func (a *attempt) firstAnswer(first *asked, req *childv1.ModelRequest) *asked {
	if sameRequest(first.req, req) {
		return first
	}
	<-first.done
	metrics.FirstTurns.WithLabelValues("differed").Inc()
	a.log.Error("the agent process's first model request differs from the one asked before it ran; asking the model again")
	return nil
}

// unclaimed is the answer of the call c, asked ahead, when it is in and
// no child asked for it (nil: none asked ahead, still under way, taken, or
// a failure).
func (c *asked) unclaimed() *childv1.ModelResponse {
	if c == nil {
		return nil
	}
	select {
	case <-c.done:
	default:
		return nil
	}
	if c.endsAttempt() {
		return nil
	}
	return c.resp
}

// An answer in hand while its child starts (docs/architecture.md, "An
// answer no child recorded"). When no child is ready for an answer — the
// first turn asked before the child, a released child's turn — one is
// started for it, and until that child reports the turn, the answer lives
// only in this executor: a spawn waiting for its slot behind a burst of
// answers can hold hundreds of paid answers for seconds, all asked again
// if the executor dies meanwhile. An answer the model took KeepAnswersAfter
// or more to give is therefore checkpointed while its child starts, beside
// the spawn (not in front of it), and the child gets it in its Start's
// history, as a retry would: it replays the turn (runs its tool calls, or
// ends with its answer) and never asks for it. A quicker answer is handed
// over as before, and written with the step that follows it: it costs
// little to ask again, and its extra write would cost every fast task.
// The threshold is Config.KeepAnswersAfter (AGENTMESH_KEEP_ANSWERS_AFTER,
// DefaultKeepAnswersAfter): an operator who would rather pay a write per
// turn than any answer twice keeps every answer (0), one who wants the
// fewest writes none (off).

// startKeeping starts a child for the task (startChildFor) and, when
// keep, checkpoints the answer resp meanwhile as the MODEL_TURN step at
// index a.next. kept is that step once written; nil when not asked or the
// write failed (then the child is handed the answer, as before).
func (a *attempt) startKeeping(ctx context.Context, resp *childv1.ModelResponse, keep bool) (p *process, kept *agentmeshv1.Step, err error) {
	if !keep {
		p, err = a.s.startChildFor(ctx, a.task)
		return p, nil, err
	}
	type started struct {
		p   *process
		err error
	}
	ch := make(chan started, 1)
	go func() {
		p, err := a.s.startChildFor(ctx, a.task)
		ch <- started{p, err}
	}()
	kept, werr := a.writeAnswer(ctx, resp, a.next, "before_child")
	if werr != nil {
		a.log.Warn("the model's answer was not checkpointed while its agent process started; the agent process records it", "step", a.next, "err", werr)
	}
	r := <-ch
	return r.p, kept, r.err
}

// ChildrenAfterAnswer is how many agent processes were started only when
// the first model turn, asked before them, had answered.
func (s *Service) ChildrenAfterAnswer() int64 { return s.childAfterAnswer.Load() }
