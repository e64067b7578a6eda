package executor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	busv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/bus/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/subjects"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"github.com/agentmesh/agentmesh/pkg/telemetry"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

const (
	statusQueued    = taskstate.Queued
	statusAssigned  = taskstate.Assigned
	statusRunning   = taskstate.Running
	statusCompleted = taskstate.Completed
	statusFailed    = taskstate.Failed
	statusCancelled = taskstate.Cancelled
)

// stateTimeout bounds one request to the state service.
const stateTimeout = 10 * time.Second

// handle takes one delivery of a work item to its end: the task ran and
// its outcome is recorded, or the work was set aside, and the message is
// acked, naked or termed accordingly.
func (s *Service) handle(msg jetstream.Msg) {
	var item busv1.WorkItem
	if err := proto.Unmarshal(msg.Data(), &item); err != nil || item.GetTask().GetId() == "" || item.Attempt <= 0 {
		s.log.Warn("malformed work item set aside", "subject", msg.Subject(), "bytes", len(msg.Data()), "err", err)
		_ = msg.Term()
		return
	}
	// The attempt continues the task's trace, which the work message's
	// headers carry (tracing.go).
	ctx, span := startAttempt(bus.Extract(context.Background(), nats.Header(msg.Headers())), &item, s.cfg.Node)
	defer span.End()
	key := runKey{task: item.Task.Id, attempt: item.Attempt}
	log := telemetry.TaskLogger(ctx, s.log, key.task).With("attempt", key.attempt)

	r, rctx, existing := s.register(ctx, key, msg, log)
	switch {
	case existing != nil:
		// Our own work came back (an in-progress signal was lost): keep
		// running and answer for the newest delivery from now on.
		existing.mu.Lock()
		existing.msg = msg
		existing.mu.Unlock()
		return
	case r == nil:
		_ = msg.Nak() // closing: another executor takes it
		return
	}
	defer s.unregister(r)

	if md, err := msg.Metadata(); err == nil && md.NumDelivered > 1 {
		s.redelivered(ctx, log, msg, &item)
		return
	}

	resp, err := s.start(ctx, key)
	if err != nil {
		if gone(err) {
			log.Info("work dropped: the task moved on", "reason", err)
			_ = msg.Ack()
			return
		}
		log.Warn("could not start task; the work will come back", "err", err)
		_ = msg.NakWithDelay(time.Second)
		return
	}

	stopProgress := s.inProgress(r)
	out, teardown := s.runTask(rctx, log, resp.GetTask(), key.attempt, telemetry.Traceparent(ctx))
	stopProgress()
	s.finish(ctx, log, r, out)
	// The child's exit and its sandbox's removal, after the outcome is
	// recorded and before the slot is freed (see runTask).
	teardown()
}

// start moves the task assigned → running for this attempt, sending the
// move again (bounded) while state is unavailable. A try whose reply was
// lost may have committed: when a later try is refused, the task is read,
// and if it runs this attempt on this node, the attempt is ours.
func (s *Service) start(ctx context.Context, key runKey) (*busv1.TransitionResponse, error) {
	req := &busv1.TransitionRequest{TaskId: key.task, From: statusAssigned, To: statusRunning, Attempt: key.attempt, Node: s.cfg.Node,
		Isolation: s.sb.Label()}
	var resp *busv1.TransitionResponse
	tries := 0
	err := bus.Retry(ctx, outcomeBackoff, func(ctx context.Context) error {
		tries++
		r, err := s.transition(ctx, subjects.StateStart, req)
		if err == nil {
			resp = r
			return nil
		}
		if tries > 1 && errors.Is(err, bus.ErrFailedPrecondition) {
			var got busv1.GetTaskResponse
			if gerr := s.request(ctx, subjects.StateGetTask, &busv1.GetTaskRequest{Id: key.task}, &got); gerr == nil {
				if t := got.GetTask(); t.Status == statusRunning && t.Attempt == key.attempt && t.Node == s.cfg.Node {
					resp = &busv1.TransitionResponse{Task: t}
					return nil
				}
			}
		}
		return err
	})
	return resp, err
}

// outcomeBackoff retries a transition that state did not answer for about
// 30 s (20 ms doubling to 250 ms, plus up to half of it as jitter): long
// enough for a state or Postgres restart, after which the work is nak'ed
// and comes back. The short ceiling makes a task go on within about 0.4 s of
// state's return (a request to a state service that is down fails at once,
// so a try costs nothing while it is away).
var outcomeBackoff = bus.Backoff{Initial: 20 * time.Millisecond, Max: 250 * time.Millisecond, Tries: 128}

// redelivered handles work delivered again: the executor that had it died
// or went silent. If the task still waits for that attempt, it goes back to
// the queue for the scheduler to dispatch a new attempt — unless the
// attempt runs on another node: JetStream redelivers work whose in-progress
// signals did not reach it in time, which a bus blip (a NATS restart
// longer than AckWait) or a pause causes as well as a death, and failing a
// live attempt throws away the model answer it holds (paid twice). Whether
// a node is gone is the scheduler's to say, from its heartbeats (NodeTTL:
// it fails the node's attempts, task.lost); this executor hands the work
// back (NakWithDelay AckWait), and the live owner's next in-progress signal
// takes it back — or, once the scheduler failed the attempt, the next
// delivery finds the task moved on.
func (s *Service) redelivered(ctx context.Context, log *slog.Logger, msg jetstream.Msg, item *busv1.WorkItem) {
	var got busv1.GetTaskResponse
	err := s.request(ctx, subjects.StateGetTask, &busv1.GetTaskRequest{Id: item.Task.Id}, &got)
	if err != nil {
		if errors.Is(err, bus.ErrNotFound) {
			_ = msg.Ack()
			return
		}
		log.Warn("redelivered work: task not read; will retry", "err", err)
		_ = msg.NakWithDelay(time.Second)
		return
	}
	t := got.GetTask()
	if (t.Status != statusAssigned && t.Status != statusRunning) || t.Attempt != item.Attempt {
		log.Info("redelivered work dropped: the task moved on", "status", taskstate.Name(t.Status), "task_attempt", t.Attempt)
		_ = msg.Ack()
		return
	}
	if t.Status == statusRunning && t.Node != "" && t.Node != s.cfg.Node {
		log.Info("redelivered work of an attempt running on another node: left to it (the scheduler fails it if that node is lost)", "owner", t.Node)
		_ = msg.NakWithDelay(s.cfg.AckWait)
		return
	}
	// A failure of kind EXECUTOR_LOST: the task's retry policy re-queues it
	// for a new attempt (or fails it once its attempts are spent).
	_, err = s.transition(ctx, subjects.StateFail, &busv1.TransitionRequest{
		TaskId: t.Id, From: t.Status, To: statusFailed, Attempt: item.Attempt,
		Reason: "executor lost: its work was redelivered", FailureKind: agentmeshv1.FailureKind_FAILURE_KIND_EXECUTOR_LOST,
	})
	switch {
	case err == nil:
		log.Info("executor lost; task re-queued or failed under its retry policy", "was", taskstate.Name(t.Status))
		_ = msg.Ack()
	case gone(err) || errors.Is(err, bus.ErrConflict):
		_ = msg.Ack()
	default:
		log.Warn("redelivered work: re-queue failed; will retry", "err", err)
		_ = msg.NakWithDelay(time.Second)
	}
}

// outcome is how a run ended.
type outcome struct {
	kind   outcomeKind
	result string // completed
	reason string // failed, requeue
	// failKind says why a task failed, for programs (BUDGET, MODEL, ...).
	failKind agentmeshv1.FailureKind
	// steps not yet checkpointed, written with the completion (the model
	// turn that gave the answer).
	steps []*agentmeshv1.Step
	// notBefore (requeue): the task is not dispatched before it (a model
	// rate-limit wait).
	notBefore time.Time
}

type outcomeKind int

const (
	outCompleted outcomeKind = iota
	outFailed
	// outGone: the task is no longer ours (cancelled, or a stale attempt);
	// nothing to record.
	outGone
	// outRequeue: put the task back in the queue (shutdown, a transient
	// failure of the state service).
	outRequeue
)

// finish records the outcome and settles the message.
func (s *Service) finish(ctx context.Context, log *slog.Logger, r *run, out outcome) {
	noteOutcome(ctx, out) // on the attempt's span (tracing.go)
	msg := r.current()
	var tr *busv1.TransitionRequest
	var op string
	switch out.kind {
	case outGone:
		log.Info("task ended elsewhere; nothing to record", "reason", out.reason)
		_ = msg.Ack()
		return
	case outCompleted:
		tr, op = &busv1.TransitionRequest{To: statusCompleted, Result: out.result, Steps: out.steps}, subjects.StateComplete
		log.Info("task completed")
	case outFailed:
		tr, op = &busv1.TransitionRequest{To: statusFailed, Reason: out.reason, FailureKind: out.failKind}, subjects.StateFail
		log.Info("task failed", "reason", out.reason, "kind", out.failKind)
	case outRequeue:
		tr, op = &busv1.TransitionRequest{To: statusQueued, Reason: out.reason}, subjects.StateRequeue
		if !out.notBefore.IsZero() {
			tr.NotBefore = timestamppb.New(out.notBefore)
		}
		log.Info("task goes back to the queue", "reason", out.reason, "not_before", out.notBefore)
	}
	tr.TaskId, tr.From, tr.Attempt = r.key.task, statusRunning, r.key.attempt
	// A transient failure (state restarting, its database down) is sent
	// again, bounded; a retry whose first try committed unheard is refused
	// as gone (the task is no longer running), which is right.
	err := bus.Retry(ctx, outcomeBackoff, func(ctx context.Context) error {
		_, err := s.transition(ctx, op, tr)
		return err
	})
	switch {
	case err == nil:
		_ = msg.Ack()
	case gone(err):
		log.Info("outcome not recorded: the task moved on", "reason", err)
		_ = msg.Ack()
	default:
		// The work comes back, the task is re-queued and resumes from its
		// checkpoints (a final answer already checkpointed is not redone):
		// the answer's model turn, if it went with the completion, is
		// checkpointed on its own first, as long as it takes.
		if len(out.steps) > 0 {
			if serr := s.appendSteps(ctx, r.key.task, r.key.attempt, out.steps...); serr != nil {
				log.Error("the answer's model turn not checkpointed either", "err", serr)
			}
		}
		log.Error("outcome not recorded; the work will be redelivered", "err", err)
		_ = msg.Nak()
	}
}

// inProgress tells JetStream the work is alive every AckWait/3 until the
// returned function is called.
func (s *Service) inProgress(r *run) (stop func()) {
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(s.cfg.AckWait / 3)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				if err := r.current().InProgress(); err != nil {
					r.log.Warn("in-progress signal not sent", "err", err)
				}
			case <-done:
				return
			}
		}
	}()
	return func() { close(done); <-finished }
}

// history returns the steps checkpointed by earlier attempts, in order, and
// the approvals people decided, by tool call id.
func (s *Service) history(ctx context.Context, taskID string) ([]*agentmeshv1.Step, map[string]*agentmeshv1.Approval, error) {
	var steps []*agentmeshv1.Step
	approvals := map[string]*agentmeshv1.Approval{}
	after := int64(0)
	const page = 1000
	for {
		var resp busv1.HistoryResponse
		err := bus.Retry(ctx, bus.DefaultBackoff, func(ctx context.Context) error {
			return s.request(ctx, subjects.StateHistory, &busv1.HistoryRequest{TaskId: taskID, AfterSeq: after, Limit: page}, &resp)
		})
		if err != nil {
			return nil, nil, err
		}
		for _, ev := range resp.Events {
			after = ev.Seq
			if ev.Type == agentmeshv1.EventType_EVENT_TYPE_STEP && ev.Step != nil {
				steps = append(steps, ev.Step)
			}
			if a := ev.Approval; a != nil && a.Status != agentmeshv1.ApprovalStatus_APPROVAL_STATUS_PENDING {
				approvals[a.ToolCallId] = a
			}
		}
		if len(resp.Events) < page || (resp.LastSeq > 0 && after >= resp.LastSeq) {
			return steps, approvals, nil
		}
	}
}

// block moves the task from running to blocked on a pending approval.
func (s *Service) block(ctx context.Context, task *agentmeshv1.Task, attempt int32, a *agentmeshv1.Approval) error {
	_, err := s.transition(ctx, subjects.StateBlock, &busv1.TransitionRequest{
		TaskId: task.Id, From: taskstate.Running, To: taskstate.Blocked, Attempt: attempt,
		Reason: "waiting for approval: " + a.Reason, Approval: a, Node: s.cfg.Node,
	})
	if err == nil {
		s.log.InfoContext(ctx, "task waits for approval", "task_id", task.Id, "tool", a.Tool, "risk", a.Risk)
	}
	return err
}

// transition asks state to move a task by one of the executor's intents
// (subjects.StateStart, ...).
func (s *Service) transition(ctx context.Context, op string, req *busv1.TransitionRequest) (*busv1.TransitionResponse, error) {
	var resp busv1.TransitionResponse
	if err := s.request(ctx, op, req, &resp); err != nil {
		return nil, fmt.Errorf("transition task %s to %s: %w", req.TaskId, taskstate.Name(req.To), err)
	}
	return &resp, nil
}

// appendSteps checkpoints steps, in one write when there are several.
// Step writes are idempotent on (task, attempt, step index), so a
// checkpoint that got no answer — the state service restarting, NATS
// reconnecting, Postgres down — is sent again with backoff until state
// answers: the model's answer or the tool's result the step records is
// never paid for again. It stops at once when the attempt is fenced
// (failed_precondition: stale, cancelled, finished) and when ctx ends (the
// attempt's wall time, a cancel, shutdown).
func (s *Service) appendSteps(ctx context.Context, taskID string, attempt int32, steps ...*agentmeshv1.Step) error {
	req := &busv1.AppendStepRequest{TaskId: taskID, Attempt: attempt, Step: steps[0], MoreSteps: steps[1:]}
	last := steps[len(steps)-1]
	tries := 0
	err := bus.Retry(ctx, stepBackoff, func(ctx context.Context) error {
		if tries++; tries == 2 || tries%20 == 0 {
			s.log.WarnContext(ctx, "checkpoint not answered; sending it again", "task_id", taskID, "step", last.GetIndex(), "try", tries)
		}
		ctx, cancel := context.WithTimeout(ctx, stepTryWait(tries))
		defer cancel()
		var resp busv1.AppendStepResponse
		return bus.Request(ctx, s.nc, s.names.State(subjects.StateAppendStep), req, &resp)
	})
	if err != nil {
		return fmt.Errorf("checkpoint step %d of task %s: %w", last.GetIndex(), taskID, err)
	}
	return nil
}

// stepBackoff retries a checkpoint until the context ends (no try limit):
// 20 ms doubling to 250 ms (plus jitter), so a state service that comes
// back is heard from within about 0.4 s.
var stepBackoff = bus.Backoff{Initial: 20 * time.Millisecond, Max: 250 * time.Millisecond}

// stepTryTimeout bounds the first try of a checkpoint: a request lost with
// a state process that died is sent again after this, not after the bus's
// 10 s default. A slow answer that comes later is harmless (idempotent).
const stepTryTimeout = 3 * time.Second

// stepTryWait is how long try n (from 1) waits for its answer: 3 s, then
// twice the try before, at most 24 s. A state service slower than one
// try's wait — behind a burst of thousands of answers — then answers a
// later try instead of being sent a new copy every 3 s: at a fixed wait
// each resend lengthened its queue until no try was ever answered in time
// (docs/benchmarks.md, "5,000 waiting on a 45 s model").
func stepTryWait(n int) time.Duration { return stepTryTimeout << min(max(n-1, 0), 3) }

func (s *Service) request(ctx context.Context, op string, req, resp proto.Message) error {
	ctx, cancel := context.WithTimeout(ctx, stateTimeout)
	defer cancel()
	return bus.Request(ctx, s.nc, s.names.State(op), req, resp)
}

// gone reports whether err says the task is no longer ours to write:
// cancelled, finished, re-dispatched (a stale attempt) or unknown.
func gone(err error) bool {
	return errors.Is(err, bus.ErrFailedPrecondition) || errors.Is(err, bus.ErrNotFound)
}
