package scheduler

import (
	"context"
	"errors"
	"fmt"
	"time"

	"slices"

	busv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/bus/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/backoff"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/subjects"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/trace"
)

// job is work for the dispatch workers (bus requests are made outside the
// model's lock).
type job struct {
	kind    jobKind
	task    string
	attempt int32
	node    string
	reason  string
	// jobDispatch: when the task was queued and its trace (tracing.go).
	queued time.Time
	trace  trace.SpanContext
	// jobDispatchBatch: the dispatches of the batch (batch.go).
	batch []job
}

type jobKind int

const (
	jobDispatch      jobKind = iota + 1
	jobExpire                // fail a task queued past its queue timeout
	jobFence                 // fail the attempt of a task whose node was lost
	jobAgent                 // read an agent's max_concurrency
	jobWait                  // release a wait on sub-tasks whose deadline passed
	jobDispatchBatch         // several dispatches in one state request (batch.go)
)

// lead runs this replica's term as leader: rebuild the model from the
// record, follow the events, dispatch, reconcile. It returns when term ends.
func (s *Service) lead(term context.Context) {
	s.follow().Run(term, s.js, func(term context.Context) {
		s.wake()
		s.leader.Store(true)
		s.mu.Lock()
		assigned := s.assignedAtRebuild
		s.assignedAtRebuild = nil
		s.mu.Unlock()
		s.redeliverAll(term, assigned)
		s.serve(term)
		s.leader.Store(false)
	})
	s.mu.Lock()
	s.m.reset()
	s.waits.reset()
	s.mu.Unlock()
}

// follow is the leader's view of the record: the model rebuilt from it,
// then kept by the events.
func (s *Service) follow() bus.Follow {
	// Agent changes (limits), status changes (capacity) and updates
	// (UpdateTask re-orders a queued task whose priority changed).
	filters := []string{s.names.AgentEvents(), s.names.TaskEventsOfType(subjects.EventUpdated)}
	for _, st := range statusTokens {
		filters = append(filters, s.names.TaskEventsOfType(subjects.StatusToken(st)))
	}
	return bus.Follow{
		Stream: s.names.EventsStream(), Filters: filters, List: s.rebuild, Handle: s.onEvent,
		Failed: func(err error) { s.log.Warn("scheduler: rebuild from the record failed; retrying", "err", err) },
	}
}

// statusTokens are the events that change what holds or waits for capacity.
var statusTokens = []agentmeshv1.TaskStatus{
	taskstate.Queued, taskstate.Assigned, taskstate.Running, taskstate.Blocked,
	taskstate.Completed, taskstate.Failed, taskstate.Cancelled,
}

// redeliverAll publishes, through the outbox, the work of the tasks the
// record showed assigned when this term began (a dead leader may have
// recorded the assignment and died before the publish).
func (s *Service) redeliverAll(ctx context.Context, assigned []*agentmeshv1.Task) {
	now, n := time.Now(), 0
	for _, t := range assigned {
		if s.redeliver(ctx, t, now) {
			n++
		}
	}
	if n > 0 {
		s.log.Info("new leader: publishing the work of the assigned tasks again (duplicates are dropped)", "tasks", n)
	}
}

// rebuild reads the queued, assigned and running tasks and the agents from
// the record into a fresh model (follow then follows the events from the
// point the events stream had reached before the reads, from; events older
// than what was read are skipped by their seq).
func (s *Service) rebuild(ctx context.Context, from uint64) error {
	limits := map[string]int{}
	for token := ""; ; {
		var resp busv1.ListAgentsResponse
		if err := bus.Request(ctx, s.nc, s.names.State(subjects.StateListAgents), &busv1.ListAgentsRequest{PageSize: 1000, PageToken: token}, &resp); err != nil {
			return fmt.Errorf("list agents: %w", err)
		}
		for _, a := range resp.Agents {
			limits[taskstate.AgentKey(a.Org, a.Name)] = int(a.MaxConcurrency)
		}
		if token = resp.NextPageToken; token == "" {
			break
		}
	}
	var tasks []update
	var assigned []*agentmeshv1.Task
	for token := ""; ; {
		var resp busv1.ListTasksResponse
		if err := bus.Request(ctx, s.nc, s.names.State(subjects.StateListTasks), &busv1.ListTasksRequest{
			Statuses: []agentmeshv1.TaskStatus{taskstate.Queued, taskstate.Assigned, taskstate.Running},
			PageSize: 1000, PageToken: token,
		}, &resp); err != nil {
			return fmt.Errorf("list tasks: %w", err)
		}
		for _, t := range resp.Tasks {
			tasks = append(tasks, updateFromTask(t))
			if t.Status == taskstate.Assigned {
				assigned = append(assigned, t)
			}
		}
		if token = resp.NextPageToken; token == "" {
			break
		}
	}
	waits, err := s.blockedWaits(ctx)
	if err != nil {
		return fmt.Errorf("list blocked tasks: %w", err)
	}
	now := time.Now()
	s.mu.Lock()
	s.m.reset()
	s.waits.reset()
	for id, at := range waits {
		s.waits.set(id, at)
	}
	for name, l := range limits {
		s.m.agent(name).limit = l
	}
	// Oldest first, so FIFO order within a level follows the record.
	for i := len(tasks) - 1; i >= 0; i-- {
		s.m.apply(tasks[i], now)
	}
	s.leadSince = now
	s.fencing = map[string]bool{}
	s.assignedAtRebuild = assigned
	s.mu.Unlock()

	s.log.Info("scheduler model rebuilt from the record", "tasks", len(tasks), "agents", len(limits), "events_from", from)
	return nil
}

// onEvent folds one task or agent event into the model. Events are the
// public JSON of <p>.evt.<org>.<kind>.…: kind "agent" or "task".
func (s *Service) onEvent(m jetstream.Msg) {
	if subj, ok := s.names.ParseEvent(m.Subject()); ok && subj.Kind == subjects.KindAgent {
		var ev busv1.AgentEvent
		if err := bus.DecodeEvent(m.Data(), &ev); err != nil || ev.Agent == nil {
			return
		}
		s.mu.Lock()
		a := s.m.agent(taskstate.AgentKey(ev.Agent.Org, ev.Agent.Name))
		a.limit = int(ev.Agent.MaxConcurrency)
		if ev.Deleted {
			a.limit = 0
		}
		s.mu.Unlock()
		s.wake()
		return
	}
	var ev agentmeshv1.TaskEvent
	if err := bus.DecodeEvent(m.Data(), &ev); err != nil || ev.TaskId == "" {
		s.log.Warn("malformed event skipped", "subject", m.Subject(), "err", err)
		return
	}
	if u := ev.GetUpdate(); ev.Type == agentmeshv1.EventType_EVENT_TYPE_UPDATED && slices.Contains(u.GetMask(), "priority") {
		s.Reprioritize(ev.TaskId, u.GetPriority())
		return
	}
	s.applyEventIn(&ev, eventTrace(m)) // the task's trace, from its headers (tracing.go)
}

// applyEvent folds a status event into the model and wakes the dispatcher
// when capacity or work changed.
func (s *Service) applyEvent(ev *agentmeshv1.TaskEvent) { s.applyEventIn(ev, trace.SpanContext{}) }

// applyEventIn is applyEvent of an event published in the trace sc.
func (s *Service) applyEventIn(ev *agentmeshv1.TaskEvent, sc trace.SpanContext) {
	if ev == nil || ev.Type != agentmeshv1.EventType_EVENT_TYPE_STATUS {
		return
	}
	u := updateFromEvent(ev)
	u.trace = sc
	s.mu.Lock()
	changed := s.m.apply(u, time.Now())
	if taskstate.Terminal(ev.Status) || ev.Status == taskstate.Queued {
		delete(s.fencing, ev.TaskId)
	}
	if s.waits.noteWait(ev) {
		changed = true // the timer may have to wake sooner
	}
	s.mu.Unlock()
	if changed {
		s.wake()
	}
}

// learn adds a task read from the record to the model when the model does
// not hold it; it reports whether it did.
func (s *Service) learn(t *agentmeshv1.Task) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.m.tasks[t.Id]; ok || !s.leader.Load() {
		return false
	}
	s.m.apply(updateFromTask(t), time.Now())
	return true
}

// refresh reads a task the model may have wrong and folds it in.
func (s *Service) refresh(ctx context.Context, id string) error {
	var gt busv1.GetTaskResponse
	err := bus.Request(ctx, s.nc, s.names.State(subjects.StateGetTask), &busv1.GetTaskRequest{Id: id}, &gt)
	s.mu.Lock()
	defer func() {
		s.mu.Unlock()
		s.wake()
	}()
	e := s.m.tasks[id]
	switch {
	case errors.Is(err, bus.ErrNotFound):
		if e != nil {
			s.m.remove(e)
		}
		return nil
	case err != nil:
		if e != nil {
			s.m.requeue(e)
		}
		return err
	}
	u := updateFromTask(gt.Task)
	if e == nil || u.seq > e.seq {
		s.m.apply(u, time.Now())
	} else {
		// The record says nothing newer than the model knows: a picked
		// task goes back to waiting.
		s.m.requeue(e)
	}
	if gt.Task.Status == taskstate.Assigned {
		// Assigned, maybe by a dispatch whose reply was lost: its work
		// may never have gone out (delivery.go). The outbox asks the
		// model under s.mu, which is held here: it runs after.
		s.redeliver(ctx, gt.Task, time.Now())
	}
	return nil
}

// wake tells the dispatcher to look again.
func (s *Service) wake() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// serve dispatches until term ends.
func (s *Service) serve(term context.Context) {
	rec := time.NewTicker(s.cfg.ReconcileInterval)
	defer rec.Stop()
	nodes := time.NewTicker(nodeCheckInterval(s.cfg.NodeTTL))
	defer nodes.Stop()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	reconciling := make(chan struct{}, 1)
	defer func() { reconciling <- struct{}{} }() // wait for a reconcile under way
	for {
		now := time.Now()
		var out []job
		s.mu.Lock()
		for _, e := range s.m.due(now) {
			out = append(out, job{kind: jobExpire, task: e.id, reason: fmt.Sprintf("waited in the queue longer than its queue_timeout %s", e.timeout)})
		}
		var picks []job
		for {
			e := s.m.next(now)
			if e == nil {
				break
			}
			picks = append(picks, job{kind: jobDispatch, task: e.id, queued: e.queued, trace: e.trace})
		}
		out = append(out, dispatchJobs(picks)...)
		for _, id := range s.waits.due(now) {
			out = append(out, job{kind: jobWait, task: id})
		}
		for name, a := range s.m.agents {
			if a.limit < 0 && !s.fetching[name] {
				s.fetching[name] = true
				out = append(out, job{kind: jobAgent, task: name})
			}
		}
		next := s.m.nextTimer()
		if w := s.waits.next(); !w.IsZero() && (next.IsZero() || w.Before(next)) {
			next = w
		}
		s.mu.Unlock()
		for _, j := range out {
			select {
			case s.jobs <- j:
			case <-term.Done():
				return
			}
		}
		if !next.IsZero() {
			timer.Reset(max(time.Until(next), 0))
		} else {
			timer.Reset(time.Hour)
		}
		select {
		case <-term.Done():
			return
		case <-s.kick:
		case <-timer.C:
		case <-nodes.C:
			s.checkNodes(term)
		case <-rec.C:
			select {
			case reconciling <- struct{}{}:
				go func() {
					defer func() { <-reconciling }()
					if n, err := s.Reconcile(term); err != nil && term.Err() == nil {
						s.log.Warn("reconcile", "err", err)
					} else if n > 0 {
						s.log.Info("reconcile found lost work", "tasks", n)
					}
				}()
			default:
			}
		}
	}
}

// do runs one job.
func (s *Service) do(ctx context.Context, j job) {
	if j.kind != jobAgent && !s.leader.Load() {
		return // decided by a term that has ended: the next leader decides again
	}
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	switch j.kind {
	case jobDispatch:
		dctx, span := traceDispatch(ctx, j) // tracing.go
		err := s.dispatch(dctx, j.task)
		endSpan(span, err)
		if err != nil {
			s.log.WarnContext(dctx, "dispatch failed; will retry", "task_id", j.task, "err", err)
			backoff.Sleep(ctx, 200*time.Millisecond)
			// Learn whether the move happened (a lost reply) or not: a task
			// the record still shows queued goes back to waiting.
			_ = s.refresh(ctx, j.task)
		}
	case jobDispatchBatch:
		s.dispatchBatch(ctx, j.batch)
	case jobExpire:
		s.finishWith(ctx, j.task, subjects.StateTimeout, &busv1.TransitionRequest{
			TaskId: j.task, From: taskstate.Queued, To: taskstate.Failed, Reason: j.reason,
			FailureKind: agentmeshv1.FailureKind_FAILURE_KIND_TIMEOUT,
		})
	case jobFence:
		s.finishWith(ctx, j.task, subjects.StateLost, &busv1.TransitionRequest{
			TaskId: j.task, From: taskstate.Running, To: taskstate.Failed, Attempt: j.attempt, Reason: j.reason,
			FailureKind: agentmeshv1.FailureKind_FAILURE_KIND_EXECUTOR_LOST,
		})
	case jobWait:
		s.releaseWait(ctx, j.task)
	case jobAgent:
		var resp busv1.GetAgentResponse
		org, name := taskstate.SplitAgentKey(j.task)
		err := bus.Request(ctx, s.nc, s.names.State(subjects.StateGetAgent), &busv1.GetAgentRequest{Org: org, Name: name}, &resp)
		s.mu.Lock()
		delete(s.fetching, j.task)
		a := s.m.agent(j.task)
		switch {
		case err == nil:
			a.limit = int(resp.Agent.GetMaxConcurrency())
		case errors.Is(err, bus.ErrNotFound):
			a.limit = 0 // deleted: its tasks still run, unbounded
		default:
			s.log.Warn("read agent limit; will retry", "agent", j.task, "err", err)
		}
		s.mu.Unlock()
		if err != nil && !errors.Is(err, bus.ErrNotFound) {
			backoff.Sleep(ctx, time.Second)
		}
		s.wake()
	}
}

// finishWith applies a transition the scheduler decided on its own and
// folds the result into the model.
func (s *Service) finishWith(ctx context.Context, id, op string, req *busv1.TransitionRequest) {
	var tr busv1.TransitionResponse
	err := bus.Request(ctx, s.nc, s.names.State(op), req, &tr)
	switch {
	case err == nil:
		s.log.InfoContext(ctx, "task moved by the scheduler", "task_id", id, "to", taskstate.Name(tr.Task.GetStatus()), "reason", req.Reason)
		s.applyEvent(tr.Event)
	case errors.Is(err, bus.ErrFailedPrecondition), errors.Is(err, bus.ErrNotFound):
		_ = s.refresh(ctx, id)
	default:
		s.log.WarnContext(ctx, "scheduler transition failed; will retry", "task_id", id, "to", taskstate.Name(req.To), "err", err)
		backoff.Sleep(ctx, time.Second)
		_ = s.refresh(ctx, id)
	}
}

// orgLimit is the number of tasks org may run at once (0 = no limit).
func (s *Service) orgLimit(org string) int {
	if n, ok := s.cfg.OrgLimits[org]; ok {
		return n
	}
	return s.cfg.OrgLimit
}

// agentLimit is the limit of an agent the model meets first in a task
// event: unknown (-1) until read from the record.
func (s *Service) agentLimit(string) int { return -1 }

// Reprioritize tells the leader's queue that a queued task's priority
// changed (the record is already changed): it is re-ordered at once.
func (s *Service) Reprioritize(taskID string, p agentmeshv1.Priority) {
	s.mu.Lock()
	ok := s.m.reprioritize(taskID, p)
	s.mu.Unlock()
	if ok {
		s.wake()
	}
}
