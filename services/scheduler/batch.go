package scheduler

import (
	"context"
	"errors"
	"fmt"
	"time"

	busv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/bus/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/backoff"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/subjects"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/trace"
)

// Dispatch in batches: when one look at the queue finds several tasks to
// dispatch (a burst of submissions, capacity coming back, a new leader),
// they go out in batches of at most DispatchBatch instead of one request
// and one publish each:
//
//   - one state request (task.dispatch.batch) moves them all queued →
//     assigned; state checks and applies each as the single task.dispatch
//     would, commits them together (the store's group commit) and answers
//     each with its own outcome, so the record holds every assignment
//     before any work goes out (accepted means durable);
//   - their work items are published asynchronously, all at once, and
//     the acknowledgements collected for the batch; a publish that fails
//     goes to the work outbox with the same message id, so it is sent
//     again until stored or fenced (delivery.go), as a single dispatch's;
//   - a move refused or lost (the task moved on, a lost reply) is settled
//     by reading the record, as a single dispatch's (refresh).
//
// A look that finds one task dispatches it alone (task.dispatch): the
// latency of the common case and its trace stay as they were. Each task of
// a batch still gets its queue.wait and dispatch spans in its own trace,
// and its work carries the dispatch span; the batch's state request is in
// no task's trace.

// DispatchBatch bounds the tasks of one batched dispatch.
const DispatchBatch = 64

// batchesInFlight bounds the batches under way at once (the others wait
// for a token): 512 moves, two groups of the store's group commit — one
// committing while the next gathers — while bounding how long a batch
// waits in state. With every batch of a 5,000-task burst sent at once,
// the last ones waited for the commits of all the others and, on a loaded
// machine, past their request's timeout (10 s), each then settled task by
// task.
const batchesInFlight = 8

// dispatchJobs turns the picks of one look at the queue into jobs: one
// single dispatch, or batches of at most DispatchBatch.
func dispatchJobs(picks []job) []job {
	if len(picks) == 1 {
		return picks
	}
	var out []job
	for len(picks) > 0 {
		n := min(len(picks), DispatchBatch)
		out = append(out, job{kind: jobDispatchBatch, batch: picks[:n:n]})
		picks = picks[n:]
	}
	return out
}

// dispatched is one task of a batch on its way: its dispatch span, and
// its work's publish once the move is recorded.
type dispatched struct {
	j       job
	ctx     context.Context
	span    trace.Span
	attempt int32
	msg     *nats.Msg
	ack     jetstream.PubAckFuture
	err     error
	// read: the record is read again once the batch's work is out (the
	// move failed, or the reply left its task out, or its work was
	// refused), as after a single dispatch (refresh).
	read bool
}

// dispatchBatch moves the batch's tasks queued → assigned in one state
// request, then publishes their work together.
func (s *Service) dispatchBatch(ctx context.Context, jobs []job) {
	select {
	case s.batches <- struct{}{}:
		defer func() { <-s.batches }()
	case <-ctx.Done():
		s.giveBack(jobs)
		return
	}
	ds := make([]dispatched, len(jobs))
	req := &busv1.DispatchBatchRequest{Requests: make([]*busv1.TransitionRequest, len(jobs))}
	for i, j := range jobs {
		ds[i].j = j
		ds[i].ctx, ds[i].span = traceDispatch(ctx, j) // tracing.go
		req.Requests[i] = &busv1.TransitionRequest{TaskId: j.task, From: taskstate.Queued, To: taskstate.Assigned, NextAttempt: true}
	}
	var resp busv1.DispatchBatchResponse
	err := bus.Request(ctx, s.nc, s.names.State(subjects.StateDispatchBatch), req, &resp)
	if err == nil && len(resp.Items) != len(jobs) {
		err = fmt.Errorf("dispatch batch: %d answers to %d requests", len(resp.Items), len(jobs))
	}
	if err != nil {
		s.batchFailed(ctx, ds, err)
		return
	}
	for i, it := range resp.Items {
		d := &ds[i]
		switch {
		case it.Error != nil:
			d.err, d.read = bus.FromProto(it.Error), true
		case it.TaskOmitted || it.Response.GetTask() == nil:
			s.applyEvent(it.Response.GetEvent())
			d.read = true // refresh reads the task and delivers its work
		default:
			s.applyEvent(it.Response.Event)
			s.startWork(d, it.Response.Task)
		}
	}
	s.awaitWork(ctx, ds)
	for i := range ds {
		s.settle(ctx, &ds[i])
	}
}

// settle reads again the record of a task of a batch whose move or
// publish did not go through (see dispatched.read), then ends its span.
func (s *Service) settle(ctx context.Context, d *dispatched) {
	if d.read {
		if d.err != nil && !errors.Is(d.err, bus.ErrFailedPrecondition) && !errors.Is(d.err, bus.ErrNotFound) {
			s.log.WarnContext(d.ctx, "dispatch failed; will retry", "task_id", d.j.task, "err", d.err)
		}
		if err := s.refresh(ctx, d.j.task); err != nil && d.err == nil {
			d.err = err
		}
	}
	endSpan(d.span, d.err)
}

// giveBack returns the picked tasks of a batch that was never sent to
// waiting in the model, to be picked again.
func (s *Service) giveBack(jobs []job) {
	s.mu.Lock()
	for _, j := range jobs {
		if e := s.m.tasks[j.task]; e != nil {
			s.m.requeue(e)
		}
	}
	s.mu.Unlock()
	s.wake()
}

// batchFailed handles a batch whose request failed as a whole, as a
// single dispatch's failure: wait, then learn from the record whether
// each move happened.
func (s *Service) batchFailed(ctx context.Context, ds []dispatched, err error) {
	s.log.WarnContext(ctx, "dispatch batch failed; will retry", "tasks", len(ds), "err", err)
	for _, d := range ds {
		endSpan(d.span, err)
	}
	backoff.Sleep(ctx, 200*time.Millisecond)
	for _, d := range ds {
		_ = s.refresh(ctx, d.j.task)
	}
}

// startWork starts the publish of a just-assigned task's work, without
// waiting for its acknowledgement (awaitWork collects them).
func (s *Service) startWork(d *dispatched, task *agentmeshv1.Task) {
	msg, err := s.workMsg(d.ctx, task, "")
	if err != nil {
		d.err, d.read = err, true
		return
	}
	d.msg, d.attempt = msg, task.Attempt
	if d.ack, err = s.js.PublishMsgAsync(msg); err != nil {
		d.ack = nil
		s.workLater(d, err)
	}
}

// awaitWork waits for the acknowledgement of each work published by
// startWork; one that failed, or is still unanswered when ctx ends, goes
// to the outbox with the same message id (a second copy of a stored one
// is a duplicate the stream drops).
func (s *Service) awaitWork(ctx context.Context, ds []dispatched) {
	for i := range ds {
		d := &ds[i]
		if d.ack == nil {
			continue
		}
		select {
		case <-d.ack.Ok():
			s.log.DebugContext(d.ctx, "dispatched", "task_id", d.j.task, "attempt", d.attempt)
		case err := <-d.ack.Err():
			s.workLater(d, err)
		case <-ctx.Done():
			s.workLater(d, ctx.Err())
		}
	}
}

// workLater hands the work of a dispatched task whose publish failed to
// the outbox, which sends it again until stored or fenced (delivery.go).
func (s *Service) workLater(d *dispatched, err error) {
	id := d.j.task
	if !bus.PublishRetryable(err) {
		s.log.WarnContext(d.ctx, "work refused by the bus; reading the task again", "task_id", id, "err", err)
		d.err, d.read = err, true
		return
	}
	s.log.InfoContext(d.ctx, "work not stored yet; sending it again until it is", "task_id", id, "attempt", d.attempt, "err", err)
	attempt := d.attempt
	if aerr := s.out.Add(d.msg, func() bool { return s.awaitsWork(id, attempt) }); aerr != nil {
		d.err, d.read = aerr, true
	}
}
