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
// (child.SameRequest); a child that asked something else is answered by a
// call of its own (it never should: the same code builds both).

import (
	"context"
	"errors"
	"time"

	childv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/child/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/metrics"
	"github.com/agentmesh/agentmesh/services/executor/child"
	"google.golang.org/protobuf/proto"
)

// asked is a model call under way: its answer once done is closed.
type asked struct {
	req  *childv1.ModelRequest
	done chan struct{}
	resp *childv1.ModelResponse
	stop *serveResult
}

// ask makes the model call of req in the background.
func (s *Service) ask(ctx context.Context, task *agentmeshv1.Task, attempt int32, mr *modelRun, req *childv1.ModelRequest) *asked {
	a := &asked{req: req, done: make(chan struct{})}
	go func() {
		defer close(a.done)
		a.resp, a.stop = s.modelTurn(ctx, task, attempt, mr, req)
	}()
	return a
}

// answer waits for the call and returns its answer, addressed to the
// request id id.
func (a *asked) answer(id int64) (*childv1.ModelResponse, *serveResult) {
	<-a.done
	a.resp.Id = id
	return a.resp, a.stop
}

// askFirst asks the model for start's first turn when start alone decides
// it (nil otherwise: the child asks, as always).
func (s *Service) askFirst(ctx context.Context, task *agentmeshv1.Task, attempt int32, mr *modelRun, start *childv1.Start) *asked {
	req, ok := child.FirstRequest(start)
	if !ok {
		return nil
	}
	return s.ask(ctx, task, attempt, mr, req)
}

// childFor gives the attempt its agent child: at once when the first turn
// was not asked ahead, when releasing is off, or when a child is ready
// without a spawn; otherwise when the first turn's answer came.
//
// A slow first answer is checkpointed while its child starts
// (startKeeping): kept is that step, at index next (nil: not kept).
func (s *Service) childFor(ctx context.Context, task *agentmeshv1.Task, attempt int32, mr *modelRun, first *asked, next int32) (p *process, kept *agentmeshv1.Step, err error) {
	if first == nil || releaseAfter(s.cfg) == 0 {
		p, err = s.startChildFor(ctx, task)
		return p, nil, err
	}
	if p := s.readyChild(ctx, task); p != nil {
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
	return s.startKeeping(ctx, task, attempt, first.resp, next, s.keepsEarly(first.resp, mr))
}

// errNoChild: the first turn, asked before a child, ended the attempt
// (asked.ended): no child is started for it.
var errNoChild = errors.New("the attempt ended with its first model call")

// ended reports whether the answered call a ends the attempt by itself,
// and how: a budget ran out before the call, or the model call failed —
// the child would only report "model call failed", as its loop does, and
// mr.failed makes it a MODEL failure. A model that is down so costs no
// spawn per attempt.
func (a *asked) ended(mr *modelRun) (serveResult, bool) {
	switch {
	case !a.endsAttempt():
		return serveResult{}, false
	case a.stop != nil:
		return *a.stop, true
	}
	return mr.failed(&childv1.Failure{Reason: "model call failed: " + a.resp.GetError()}), true
}

// endsAttempt reports whether the answered call a ends the attempt by
// itself (ended says how).
func (a *asked) endsAttempt() bool { return a.stop != nil || a.resp.GetError() != "" }

// firstAnswer is the call asked ahead for the child's first request req,
// or nil when req is not what was asked (the call's end awaited first: it
// counts in the attempt's budgets, which the next call reads).
func (s *Service) firstAnswer(task *agentmeshv1.Task, first *asked, req *childv1.ModelRequest) *asked {
	if child.SameRequest(first.req, req) {
		return first
	}
	<-first.done
	metrics.FirstTurns.WithLabelValues("differed").Inc()
	s.log.Error("the agent process's first model request differs from the one asked before it ran; asking the model again", "task", task.GetId())
	return nil
}

// unclaimed is the answer of the call a, asked ahead, when it is in and
// no child asked for it (nil: none asked ahead, still under way, taken, or
// a failure).
func (a *asked) unclaimed() *childv1.ModelResponse {
	if a == nil {
		return nil
	}
	select {
	case <-a.done:
	default:
		return nil
	}
	if a.endsAttempt() {
		return nil
	}
	return a.resp
}

// keepAnswer checkpoints the model's answer resp, which no child recorded
// — its child died before reporting it, or none could be started for it —
// as the MODEL_TURN step the child would have recorded at index next
// (child.TurnStep, with the usage and model the executor saw), so the
// next attempt replays the answer instead of asking the model again, and
// the task's usage counts the call. It is an answer to the conversation
// the child had (the first turn: to child.FirstRequest, the child's own),
// so the step is the one the child would have written.
func (s *Service) keepAnswer(ctx context.Context, task *agentmeshv1.Task, attempt int32, resp *childv1.ModelResponse, next int32) {
	if _, err := s.writeAnswer(ctx, task, attempt, resp, next, "unrecorded"); err != nil {
		s.log.Warn("the model's answer no agent process recorded was not checkpointed; the next attempt asks again", "task", task.GetId(), "step", next, "err", err)
		return
	}
	s.log.Info("checkpointed the model's answer no agent process recorded", "task", task.GetId(), "step", next)
}

// writeAnswer writes resp as the MODEL_TURN step at index next (see
// keepAnswer) and returns the step.
func (s *Service) writeAnswer(ctx context.Context, task *agentmeshv1.Task, attempt int32, resp *childv1.ModelResponse, next int32, when string) (*agentmeshv1.Step, error) {
	step, _ := child.TurnStep(proto.CloneOf(resp), next)
	step.Attempt = attempt
	if err := s.appendSteps(ctx, task.GetId(), attempt, step); err != nil {
		return nil, err
	}
	metrics.AnswersKept.WithLabelValues(when).Inc()
	return step, nil
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

// keepsEarly reports whether the answer resp, in hand while a child is
// started for it or handed to the child that asked for it (its call did
// not end the attempt), is checkpointed at once by the executor: a slow
// enough call's answer (Config.KeepAnswersAfter), not an error, and no
// budget ran out with it (the child reports such a turn, and the attempt
// ends with it).
func (s *Service) keepsEarly(resp *childv1.ModelResponse, mr *modelRun) bool {
	after, keep := keepAnswersAfter(s.cfg)
	return keep && resp.GetError() == "" && mr.pending == "" &&
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
// to the child waiting for it, as the MODEL_TURN step at index next — the
// step the child will report (child.TurnStep) — beside the hand-over, not
// in front of it. Until the child reports the turn, and that report is
// written with the step that follows it, the answer would live only in
// this executor: a few milliseconds, but a paid answer asked again if the
// executor dies then (docs/architecture.md, "A slow answer waiting for its
// child"). The child's report is then acknowledged without a second write.
// A quicker answer is not written early: it costs little to ask again, and
// the extra write would cost every fast task.
func (s *Service) handEarly(ctx context.Context, task *agentmeshv1.Task, attempt int32, resp *childv1.ModelResponse, next int32) *earlyTurn {
	et := &earlyTurn{done: make(chan struct{})}
	resp = proto.CloneOf(resp)
	go func() {
		defer close(et.done)
		et.step, et.err = s.writeAnswer(ctx, task, attempt, resp, next, "handed")
		if et.err != nil {
			s.log.Warn("the model's answer was not checkpointed while its agent process took it; the agent process records it", "task", task.GetId(), "step", next, "err", et.err)
		}
	}()
	return et
}

// startKeeping starts a child for task (startChildFor) and, when keep,
// checkpoints the answer resp meanwhile as the MODEL_TURN step at index
// next. kept is that step once written; nil when not asked or the write
// failed (then the child is handed the answer, as before).
func (s *Service) startKeeping(ctx context.Context, task *agentmeshv1.Task, attempt int32, resp *childv1.ModelResponse, next int32, keep bool) (p *process, kept *agentmeshv1.Step, err error) {
	if !keep {
		p, err = s.startChildFor(ctx, task)
		return p, nil, err
	}
	type started struct {
		p   *process
		err error
	}
	ch := make(chan started, 1)
	go func() {
		p, err := s.startChildFor(ctx, task)
		ch <- started{p, err}
	}()
	kept, werr := s.writeAnswer(ctx, task, attempt, resp, next, "before_child")
	if werr != nil {
		s.log.Warn("the model's answer was not checkpointed while its agent process started; the agent process records it", "task", task.GetId(), "step", next, "err", werr)
	}
	r := <-ch
	return r.p, kept, r.err
}

// ChildrenAfterAnswer is how many agent processes were started only when
// the first model turn, asked before them, had answered.
func (s *Service) ChildrenAfterAnswer() int64 { return s.childAfterAnswer.Load() }
