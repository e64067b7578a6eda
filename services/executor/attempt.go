package executor

// One attempt of a task, from the work item to its outcome.
//
// An attempt is an object (attempt) that owns everything the attempt
// holds while it runs: the task and its attempt number (the fencing token
// of every write), the Start the child gets, the model use and its budgets
// (modelRun), the walls (its context's deadline: Config.WallTime or what
// max_wall_time leaves), the tool gate and the delegator, the child
// serving it now and its frame reader and writer, and the frames in
// flight: the model answer not yet recorded, an answer held for a child
// that takes over, a model turn acknowledged and not yet written, a turn
// being written early. Its methods are the steps of the attempt:
//
//	run            prepare → walls → MCP → the child (first.go) → serve → end
//	serve          the loop: read a frame, dispatch it, until the
//	               conversation ends (like net/http's (*conn).serve)
//	frame          one frame: settle what the previous frame left, then
//	onModelRequest   the model answer's path (answer.go)
//	onToolRequest    a tool the executor runs for the child (toolgate.go)
//	onStep           a step the child reports: judged, checkpointed, acked
//	onToolsDiscovered, onFinal, onFailure
//	end            the child's exit and the outcome
//
// Each frame method returns nil to read the next frame, or how the
// conversation ended (serveResult).

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"time"

	childv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/child/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/metrics"
	"github.com/agentmesh/agentmesh/services/executor/child"
	"github.com/agentmesh/agentmesh/services/executor/childproto"
	"github.com/agentmesh/agentmesh/services/executor/llm"
)

// attempt is one attempt of a task running here.
type attempt struct {
	s    *Service
	log  *slog.Logger
	task *agentmeshv1.Task
	num  int32 // the attempt number: the fencing token of its writes

	// model answers the model calls (Service.model); rec takes the
	// checkpoints and the move to blocked (the Service, over the bus).
	// The unit tests give fakes.
	model llm.Client
	rec   recorder

	start     *childv1.Start
	approvals map[string]*agentmeshv1.Approval // decided by people, by tool call id
	mr        *modelRun                        // the model use and its budgets (budget.go)
	gate      *gate
	dl        *delegator
	// first is the first model turn, asked before the child (first.go);
	// nil once a child asked for it, or when none was asked.
	first *asked
	// teardown, set by end when the child gave its final answer, lets the
	// child exit and removes its sandbox after the outcome is recorded
	// (runTask); cancel ends the attempt's context, its walls.
	teardown func()
	cancel   context.CancelFunc

	// The child serving the attempt now (another one takes over from a
	// child released while its model call ran: release.go), and its frames.
	p   *process
	r   *childproto.Reader
	w   *childproto.Writer
	rel *releasable

	// next is the index of the child's next step (child.NextIndex, then
	// each step it reports).
	next int32
	// The frames in flight (answer.go): observed is the last model answer
	// not yet recorded by a MODEL_TURN step; held is the answer of a
	// released child's call, for the child that took over to ask for
	// again; deferred is a model turn acked to the child and not yet
	// written; early is a slow answer's turn being written while its child
	// takes it.
	observed *childv1.ModelResponse
	held     *childv1.ModelResponse
	deferred *agentmeshv1.Step
	early    *earlyTurn
	// tools are the spans of the tool calls under way (tracing.go).
	tools toolSpans
}

// recorder is what an attempt writes to the state service: its steps, and
// the move to blocked on a person's approval. *Service writes them over
// the bus.
type recorder interface {
	appendSteps(ctx context.Context, taskID string, attempt int32, steps ...*agentmeshv1.Step) error
	block(ctx context.Context, task *agentmeshv1.Task, attempt int32, a *agentmeshv1.Approval) error
}

func (s *Service) newAttempt(log *slog.Logger, task *agentmeshv1.Task, num int32) *attempt {
	return &attempt{s: s, log: log, task: task, num: num, model: s.model, rec: s}
}

// runTask runs one attempt of task in a child process and returns how it
// ended. ctx's cause says why it was stopped from outside, if it was.
//
// teardown (never nil) waits for the child's exit and removes its sandbox
// (cgroups, workspace). When the child gave its final answer, teardown is
// left to the caller, to be called after the completion is recorded: the
// answer is all the outcome needs, and the child's exit and the removal of
// its cgroups (an RCU-synchronised rmdir each) and workspace take
// milliseconds that no longer sit between the answer and the task's
// completed event. The caller calls it before freeing the task's slot, so
// an executor never holds more than Capacity children.
func (s *Service) runTask(ctx context.Context, log *slog.Logger, task *agentmeshv1.Task, num int32, tp string) (out outcome, teardown func()) {
	a := s.newAttempt(log, task, num)
	out = a.run(ctx, tp)
	if a.teardown == nil {
		return out, func() {}
	}
	return out, a.teardown
}

// run runs the attempt to its outcome.
func (a *attempt) run(ctx context.Context, tp string) outcome {
	if bad := a.prepare(ctx, tp); bad != nil {
		return *bad
	}
	limit, wall := a.mr.attemptLimit(a.s.cfg.WallTime)
	ctx, a.cancel = context.WithTimeoutCause(ctx, limit, wall)
	defer func() {
		if a.teardown == nil {
			a.cancel()
		}
	}()

	// MCP servers: the executor connects the HTTP ones (it calls them on
	// the child's behalf); the child starts the stdio ones in its sandbox.
	mc, err := a.s.connectMCP(ctx, a.log, a.task)
	defer mc.close()
	if err != nil {
		if cause := context.Cause(ctx); cause != nil {
			return stopped(cause)
		}
		return outcome{kind: outFailed, reason: err.Error(), failKind: agentmeshv1.FailureKind_FAILURE_KIND_AGENT}
	}
	a.start.ExecutorTools = append(a.start.ExecutorTools, mc.specs...)
	a.start.McpServers = mc.stdio

	if bad := a.startChild(ctx); bad != nil {
		return *bad
	}
	a.log.Info("agent process started", "pid", a.p.pid, "warm", a.p.warm, "resumed_steps", len(a.start.History))
	a.dl = a.s.newDelegator(a.task, a.num, a.mr, a.start.History)
	a.gate = newGate(a.task, a.approvals, a.withMemoryTools(a.dl.tools(mc.execTools(a.s.execTools))), mc.tools)
	defer a.tools.endAll()
	return a.end(ctx, a.serve(ctx))
}

// prepare reads what the attempt starts from — the steps and approvals of
// earlier attempts, the conversation it continues — and builds the Start
// and the model use; an outcome when the attempt ends there.
func (a *attempt) prepare(ctx context.Context, tp string) *outcome {
	// The work item carries the task as it was dispatched: with no step
	// checkpointed by an earlier attempt there is nothing to resume from
	// and no history to read.
	var steps []*agentmeshv1.Step
	if a.task.StepCount > 0 {
		var err error
		steps, a.approvals, err = a.s.history(ctx, a.task.Id)
		if err != nil {
			if gone(err) {
				return &outcome{kind: outGone, reason: err.Error()}
			}
			return &outcome{kind: outRequeue, reason: "could not read the task's checkpoints: " + err.Error()}
		}
	}
	spec := a.task.GetAgentSpec()
	a.start = &childv1.Start{
		TaskId:       a.task.Id,
		Attempt:      a.num,
		SystemPrompt: spec.GetSystemPrompt(),
		Input:        inputWithDependencies(a.task),
		Tools:        spec.GetTools(),
		MaxSteps:     spec.GetMaxSteps(),
		History:      steps,
		Traceparent:  tp,
	}
	if a.start.MaxSteps <= 0 {
		a.start.MaxSteps = int32(a.s.cfg.MaxSteps)
	}
	a.next = child.NextIndex(steps)
	// The model key (from a named secret) and the budget (see budget.go).
	var bad *outcome
	if a.mr, bad = a.s.newModelRun(a.task, steps); bad != nil {
		return bad
	}
	// A continued conversation: the earlier thread (conversation.go).
	if a.mr.thread, bad = a.s.conversation(ctx, a.task); bad != nil {
		return bad
	}
	a.start.MaxSteps = a.mr.maxSteps(a.start.MaxSteps)
	return nil
}

// startChild gives the attempt its child. The first model turn is asked
// now when the start alone decides it; the child comes beside it or after
// it (first.go). An outcome when none could be had.
func (a *attempt) startChild(ctx context.Context) *outcome {
	a.first = a.askFirst(ctx)
	p, kept, err := a.childFor(ctx)
	if kept != nil {
		// The answer is checkpointed: the child replays it from its
		// history, as a retry would, and never asks for it.
		a.start.History = append(slices.Clip(a.start.History), kept)
		a.first = nil
	}
	if errors.Is(err, errNoChild) {
		res, _ := a.first.ended(a.mr)
		if res.wait != nil {
			out := waited(res.wait)
			return &out
		}
		if !modelFailure(res.kind) || ctx.Err() == nil {
			return &outcome{kind: outFailed, reason: res.failure.GetReason(), failKind: res.kind}
		}
	}
	if err != nil {
		if resp := a.first.unclaimed(); resp != nil { // (none after errNoChild, or once kept)
			// The answer came and no child could be started for it.
			kctx, cancel := endContext(ctx)
			a.keepAnswer(kctx, resp)
			cancel()
		}
		if cause := context.Cause(ctx); cause != nil {
			out := stopped(cause)
			return &out
		}
		return &outcome{kind: outFailed, reason: err.Error(), failKind: agentmeshv1.FailureKind_FAILURE_KIND_INTERNAL}
	}
	a.serveBy(p)
	a.start.Reusable = a.s.reusable(p, a.start)
	return nil
}

// serveBy makes p the child that serves the attempt.
func (a *attempt) serveBy(p *process) {
	a.p = p
	a.r, a.w = p.frames()
}

// serveResult is how a conversation with a child ended.
type serveResult struct {
	final    *childv1.Final
	failure  *childv1.Failure
	stepErr  error // a checkpoint was refused or failed
	protoErr error // a malformed or unexpected frame
	// last is true when the child sent its last frame (Final, Failure, or
	// got a stop ack) and should exit by itself.
	last bool
	// blocked: the task now waits for a person's approval or for its
	// sub-tasks (blockedOn says which).
	blocked   bool
	blockedOn string
	// kind of a failure (MODEL, BUDGET, AGENT).
	kind agentmeshv1.FailureKind
	// takeOverErr: no child could take over from one released while its
	// model call ran.
	takeOverErr error
	// unsettled: a call state did not answer may have had its effect (a
	// sub-task spawn): it is not answered, and the next attempt presents
	// it again (delegation.go).
	unsettled error
	// steps: with final, the model turn that gave the answer, acked and not
	// yet written: the completion records it (finish).
	steps []*agentmeshv1.Step
	// wait: a model call had no budget under its rate limits; the task
	// waits in the queue (answer.go, rateWait).
	wait *rateWait
}

// modelFailure reports whether kind is a failed model call's (which a
// context that ended may have caused: then the context's cause says why).
func modelFailure(kind agentmeshv1.FailureKind) bool {
	return kind == agentmeshv1.FailureKind_FAILURE_KIND_MODEL || kind == agentmeshv1.FailureKind_FAILURE_KIND_MODEL_REJECTED
}

// waited is the outcome of an attempt whose model call had no budget: the
// task goes back to the queue until w.until, counted and logged.
func waited(w *rateWait) outcome {
	d := time.Until(w.until)
	metrics.ModelRateLimitWaits.WithLabelValues(w.scope, "requeued").Inc()
	metrics.ModelRateLimitWait.WithLabelValues("requeued").Observe(max(d, 0).Seconds())
	return outcome{kind: outRequeue, reason: w.reason, notBefore: w.until}
}

// brokeOff is the end of a conversation the child broke off (its pipe
// closed, it exited): the exit status tells why.
func brokeOff() *serveResult { return &serveResult{} }

// protocolError ends a conversation on a malformed or unexpected frame.
func protocolError(err error) *serveResult { return &serveResult{protoErr: err} }

// serve answers the child's frames in order until it sends Final or
// Failure, breaks the protocol, or its stdout ends.
func (a *attempt) serve(ctx context.Context) serveResult {
	a.rel = newReleasable(releaseAfter(a.s.cfg), a.start)
	a.next = child.NextIndex(a.start.GetHistory())
	// However the conversation ends, what it leaves unwritten is written
	// (answer.go, keepUnrecorded).
	defer a.keepUnrecorded(ctx)
	if err := a.send(&childv1.Frame{Kind: &childv1.Frame_Start{Start: a.start}}); err != nil {
		return serveResult{}
	}
	for {
		f, err := readFrame(a.r)
		if err != nil {
			if errors.Is(err, io.EOF) || ctx.Err() != nil {
				return serveResult{}
			}
			if errors.Is(err, childproto.ErrMalformed) || errors.Is(err, childproto.ErrFrameTooLarge) {
				return serveResult{protoErr: err}
			}
			return serveResult{} // the pipe broke: the exit status tells why
		}
		if res := a.frame(ctx, f); res != nil {
			return *res
		}
	}
}

// frame handles one frame of the child.
func (a *attempt) frame(ctx context.Context, f *childv1.Frame) *serveResult {
	if _, ok := f.Kind.(*childv1.Frame_ModelRequest); a.held != nil && !ok {
		return protocolError(fmt.Errorf("a child taking over sent %s before asking for its model turn", childproto.Kind(f)))
	}
	// The turn written early is settled before anything else is written
	// or done: the child's next frame is its report of it.
	recorded := a.settleEarly()
	// A deferred turn is written before anything that depends on it
	// happens; a step or the final answer takes it along.
	switch f.Kind.(type) {
	case *childv1.Frame_Step, *childv1.Frame_Final:
	default:
		if err := a.flush(ctx); err != nil {
			return &serveResult{stepErr: err}
		}
	}
	switch k := f.Kind.(type) {
	case *childv1.Frame_ModelRequest:
		return a.onModelRequest(ctx, k.ModelRequest)
	case *childv1.Frame_ToolRequest:
		return a.onToolRequest(ctx, k.ToolRequest)
	case *childv1.Frame_Step:
		return a.onStep(ctx, k.Step.GetStep(), recorded)
	case *childv1.Frame_ToolsDiscovered:
		return a.onToolsDiscovered(k.ToolsDiscovered)
	case *childv1.Frame_Final:
		return a.onFinal(k.Final)
	case *childv1.Frame_Failure:
		return a.onFailure(k.Failure)
	}
	return protocolError(fmt.Errorf("unexpected %s frame from the agent", childproto.Kind(f)))
}

// send writes a frame to the child.
func (a *attempt) send(f *childv1.Frame) error { return a.w.Write(f) }

// onToolRequest runs a tool the gate allowed to run in the executor and
// answers with its result.
func (a *attempt) onToolRequest(ctx context.Context, req *childv1.ToolRequest) *serveResult {
	resp, unsettled := a.gate.run(a.tools.context(ctx, req.GetCall().GetId()), req)
	if unsettled != nil {
		return &serveResult{unsettled: unsettled}
	}
	if err := a.send(&childv1.Frame{Kind: &childv1.Frame_ToolResponse{ToolResponse: resp}}); err != nil {
		return brokeOff()
	}
	return nil
}

// onToolsDiscovered lets the tools of the stdio MCP servers the child
// started through the gate (mcp_exec.go).
func (a *attempt) onToolsDiscovered(d *childv1.ToolsDiscovered) *serveResult {
	if err := mcpDiscovered(a.task, a.gate, d); err != nil {
		return protocolError(err)
	}
	return nil
}

// onFinal ends the conversation with the child's answer; a model turn
// still deferred goes with the completion.
func (a *attempt) onFinal(f *childv1.Final) *serveResult {
	res := &serveResult{final: f, last: true}
	if a.deferred != nil {
		res.steps = []*agentmeshv1.Step{a.deferred} // written with the completion
		a.deferred = nil
	}
	return res
}

// onFailure ends the conversation with the child's failure, classified
// (budget.go, modelRun.failed).
func (a *attempt) onFailure(f *childv1.Failure) *serveResult {
	res := a.mr.failed(f)
	return &res
}

// end waits for the child and maps how the conversation ended to the
// attempt's outcome. A final answer is all the outcome needs: the child's
// exit and its sandbox's removal are left to a.teardown, called after the
// completion is recorded; the attempt's context stays alive until then,
// as its end would kill the child before it exits by itself.
func (a *attempt) end(ctx context.Context, res serveResult) outcome {
	p := a.p
	if !res.blocked && res.final != nil {
		a.teardown = func() {
			if a.start.Reusable && a.s.park(a.task, p) {
				a.cancel() // the child is unlinked from the task's context
				return
			}
			p.background()
			_ = p.wait(res.last)
			p.cleanup()
			a.cancel()
		}
		return outcome{kind: outCompleted, result: res.final.Answer, steps: res.steps}
	}
	defer p.cleanup()
	return a.outcomeOf(ctx, res, p.wait(res.last))
}

// outcomeOf is the outcome of a conversation that ended without a final
// answer, its child gone (status says how it ended).
func (a *attempt) outcomeOf(ctx context.Context, res serveResult, status string) outcome {
	p := a.p
	switch {
	case res.blocked:
		return outcome{kind: outGone, reason: res.blockedOn}
	case res.final != nil:
		return outcome{kind: outCompleted, result: res.final.Answer, steps: res.steps}
	case res.wait != nil && ctx.Err() == nil:
		return waited(res.wait)
	case res.failure != nil && !(modelFailure(res.kind) && ctx.Err() != nil):
		return outcome{kind: outFailed, reason: res.failure.Reason, failKind: res.kind}
	case res.takeOverErr != nil && ctx.Err() == nil:
		// The model's answer is checkpointed (keepAnswer): the next
		// attempt replays it.
		return outcome{kind: outRequeue, reason: res.takeOverErr.Error()}
	case res.unsettled != nil && ctx.Err() == nil:
		return outcome{kind: outRequeue, reason: res.unsettled.Error()}
	}
	if cause := context.Cause(ctx); cause != nil {
		return stopped(cause)
	}
	switch {
	case res.stepErr != nil && gone(res.stepErr):
		return outcome{kind: outGone, reason: res.stepErr.Error()}
	case res.stepErr != nil:
		return outcome{kind: outRequeue, reason: "checkpoint failed: " + res.stepErr.Error()}
	case res.protoErr != nil:
		return outcome{kind: outFailed, reason: withTail("agent process broke the protocol: "+res.protoErr.Error(), p.stderr.String()), failKind: agentmeshv1.FailureKind_FAILURE_KIND_AGENT}
	}
	// A memory overrun is the task's own doing: report it as resource
	// exhaustion (retrying cannot help).
	if p.sb != nil && p.sb.OOMKilled() {
		return outcome{kind: outFailed, reason: p.sb.MemoryError().Error(), failKind: agentmeshv1.FailureKind_FAILURE_KIND_RESOURCE}
	}
	reason := "agent process " + status
	if strings.TrimSpace(p.stderr.String()) == "" {
		reason += " without a final answer"
	}
	return outcome{kind: outFailed, reason: withTail(reason, p.stderr.String()), failKind: agentmeshv1.FailureKind_FAILURE_KIND_INTERNAL}
}
