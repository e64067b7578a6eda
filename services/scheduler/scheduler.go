// Package scheduler decides when each task runs and dispatches it.
//
// It consumes <p>.evt.task.*.queued from the events stream (durable
// consumer "scheduler"). For each queued task it asks state to move it
// queued → assigned with a new attempt — the attempt is the fencing token
// the executor must present — and publishes a busv1.WorkItem to
// <p>.work.<agent> with Nats-Msg-Id "<task>:<attempt>", so a republish is
// de-duplicated by JetStream and a stale copy is refused by state.
//
// A reconcile loop finds what the bus may have lost: tasks queued for
// longer than QueuedGrace are dispatched again, and tasks assigned for
// longer than AssignedGrace get their work republished. It also fails the
// tasks whose pending approval passed its deadline.
//
// Dependencies: a resolver (deps.go) releases or fails the tasks blocked
// on a parent when the parent ends.
package scheduler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	busv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/bus/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/subjects"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Config of the scheduler.
type Config struct {
	Prefix  string
	Streams bus.StreamOptions
	// Workers dispatch tasks in parallel (default 64).
	Workers int
	// ReconcileInterval between scans for lost work (default 10s).
	ReconcileInterval time.Duration
	// QueuedGrace: a task queued this long without dispatch is dispatched
	// again (default 15s).
	QueuedGrace time.Duration
	// AssignedGrace: a task assigned this long without an executor taking
	// it gets its work republished (default 2m).
	AssignedGrace time.Duration
}

// Deps are the scheduler's required dependencies.
type Deps struct {
	NC  *nats.Conn
	Log *slog.Logger
}

// Service is a running scheduler.
type Service struct {
	cfg   Config
	names subjects.Names
	nc    *nats.Conn
	js    jetstream.JetStream
	cons  jetstream.Consumer
	log   *slog.Logger
	deps  *resolver // deps.go
}

// New validates cfg, ensures the streams and the durable consumer.
func New(ctx context.Context, cfg Config, deps Deps) (*Service, error) {
	if deps.NC == nil {
		return nil, errors.New("scheduler: Deps.NC is required")
	}
	if deps.Log == nil {
		return nil, errors.New("scheduler: Deps.Log is required")
	}
	names, err := subjects.New(cfg.Prefix)
	if err != nil {
		return nil, fmt.Errorf("scheduler: %w", err)
	}
	if cfg.Workers <= 0 {
		cfg.Workers = 64
	}
	if cfg.ReconcileInterval <= 0 {
		cfg.ReconcileInterval = 10 * time.Second
	}
	if cfg.QueuedGrace <= 0 {
		cfg.QueuedGrace = 15 * time.Second
	}
	if cfg.AssignedGrace <= 0 {
		cfg.AssignedGrace = 2 * time.Minute
	}
	js, err := jetstream.New(deps.NC)
	if err != nil {
		return nil, fmt.Errorf("scheduler: %w", err)
	}
	// The state service owns the streams; the scheduler owns its consumer.
	if err := bus.WaitStream(ctx, js, names.EventsStream()); err != nil {
		return nil, fmt.Errorf("scheduler: %w", err)
	}
	if err := bus.WaitStream(ctx, js, names.WorkStream()); err != nil {
		return nil, fmt.Errorf("scheduler: %w", err)
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, names.EventsStream(), jetstream.ConsumerConfig{
		Durable:       subjects.ConsumerScheduler,
		Description:   "scheduler: dispatches queued tasks",
		FilterSubject: names.TaskEventsOfType(subjects.StatusToken(taskstate.Queued)),
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       30 * time.Second,
		MaxAckPending: 10000,
		DeliverPolicy: jetstream.DeliverAllPolicy,
	})
	if err != nil {
		return nil, fmt.Errorf("scheduler: consumer: %w", err)
	}
	res, err := newResolver(ctx, js, names, deps.NC, deps.Log.With("service", "scheduler"), cfg.ReconcileInterval)
	if err != nil {
		return nil, fmt.Errorf("scheduler: %w", err)
	}
	return &Service{cfg: cfg, names: names, nc: deps.NC, js: js, cons: cons, log: deps.Log.With("service", "scheduler"), deps: res}, nil
}

// Run dispatches until ctx ends, then drains and returns nil.
func (s *Service) Run(ctx context.Context) error {
	jobs := make(chan jetstream.Msg)
	var wg sync.WaitGroup
	for i := 0; i < s.cfg.Workers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for m := range jobs {
				s.handle(ctx, m)
			}
		}()
	}
	cc, err := s.cons.Consume(func(m jetstream.Msg) {
		select {
		case jobs <- m:
		case <-ctx.Done():
			_ = m.Nak()
		}
	}, jetstream.PullMaxMessages(2*s.cfg.Workers))
	if err != nil {
		close(jobs)
		wg.Wait()
		return fmt.Errorf("scheduler: consume: %w", err)
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		s.reconcileLoop(ctx)
	}()
	wg.Go(func() {
		if err := s.deps.run(ctx); err != nil {
			s.log.Error("dependency resolver stopped", "err", err)
		}
	})
	<-ctx.Done()
	cc.Drain()
	<-cc.Closed()
	close(jobs)
	wg.Wait()
	return nil
}

func (s *Service) handle(ctx context.Context, m jetstream.Msg) {
	var ev agentmeshv1.TaskEvent
	if err := bus.DecodeEvent(m.Data(), &ev); err != nil || ev.TaskId == "" {
		s.log.Warn("malformed event set aside", "subject", m.Subject(), "err", err)
		_ = m.Term()
		return
	}
	ctx = bus.Extract(ctx, nats.Header(m.Headers()))
	if err := bus.Retry(ctx, dispatchBackoff, func(ctx context.Context) error { return s.dispatch(ctx, ev.TaskId) }); err != nil {
		s.log.Warn("dispatch failed; will retry", "task", ev.TaskId, "err", err)
		_ = m.NakWithDelay(time.Second)
		return
	}
	_ = m.Ack()
}

// dispatch moves a queued task to assigned (new attempt) and publishes its
// work. A task already assigned gets the work of its current attempt
// published again (the first publish may have been lost). Any other status
// means there is nothing to do.
func (s *Service) dispatch(ctx context.Context, taskID string) error {
	return s.dispatchAs(ctx, taskID, "")
}

// dispatchAs is dispatch; a non-empty republish suffixes the Msg-Id of a
// republished work item.
func (s *Service) dispatchAs(ctx context.Context, taskID, republish string) error {
	var tr busv1.TransitionResponse
	err := bus.Request(ctx, s.nc, s.names.State(subjects.StateDispatch), &busv1.TransitionRequest{
		TaskId: taskID, From: taskstate.Queued, To: taskstate.Assigned, NextAttempt: true,
	}, &tr)
	switch {
	case err == nil:
		return s.publishWork(ctx, tr.Task, "")
	case errors.Is(err, bus.ErrFailedPrecondition):
		var gt busv1.GetTaskResponse
		if err := bus.Request(ctx, s.nc, s.names.State(subjects.StateGetTask), &busv1.GetTaskRequest{Id: taskID}, &gt); err != nil {
			if errors.Is(err, bus.ErrNotFound) {
				return nil
			}
			return err
		}
		if gt.Task.Status == taskstate.Assigned {
			// Republish under the dispatch's own Msg-Id when this is a
			// redelivered event (the first publish may not have happened),
			// under a fresh one when reconcile found the work lost: JetStream
			// remembers Msg-Ids for its duplicate window even after the
			// message is gone. A second copy is harmless: the executor's
			// assigned → running is fenced by the attempt.
			return s.publishWork(ctx, gt.Task, republish)
		}
		return nil
	case errors.Is(err, bus.ErrNotFound):
		s.log.Warn("queued event for an unknown task", "task", taskID)
		return nil
	default:
		return err
	}
}

func (s *Service) publishWork(ctx context.Context, task *agentmeshv1.Task, republish string) error {
	msg, err := bus.NewMsg(ctx, s.names.Work(task.Agent), workItem(task))
	if err != nil {
		return err
	}
	id := task.Id + ":" + strconv.Itoa(int(task.Attempt))
	if republish != "" {
		id += ":" + republish
	}
	msg.Header.Set(jetstream.MsgIDHeader, id)
	if _, err := s.js.PublishMsg(ctx, msg); err != nil {
		return fmt.Errorf("publish work of %s: %w", task.Id, err)
	}
	s.log.Debug("dispatched", "task", task.Id, "agent", task.Agent, "attempt", task.Attempt)
	return nil
}

func (s *Service) reconcileLoop(ctx context.Context) {
	t := time.NewTicker(s.cfg.ReconcileInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if n, err := s.Reconcile(ctx); err != nil {
				s.log.Warn("reconcile", "err", err)
			} else if n > 0 {
				s.log.Info("reconcile re-dispatched lost work", "tasks", n)
			}
		}
	}
}

// Reconcile re-dispatches tasks left queued or assigned past their grace
// and reports how many it touched.
func (s *Service) Reconcile(ctx context.Context) (int, error) {
	n := 0
	round := "r" + strconv.FormatInt(time.Now().UnixNano(), 36)
	for _, st := range []struct {
		status agentmeshv1.TaskStatus
		grace  time.Duration
	}{{taskstate.Queued, s.cfg.QueuedGrace}, {taskstate.Assigned, s.cfg.AssignedGrace}} {
		var resp busv1.ListTasksResponse
		err := bus.Request(ctx, s.nc, s.names.State(subjects.StateListTasks), &busv1.ListTasksRequest{
			Statuses:      []agentmeshv1.TaskStatus{st.status},
			UpdatedBefore: timestamppb.New(time.Now().Add(-st.grace)),
			PageSize:      500,
		}, &resp)
		if err != nil {
			return n, err
		}
		for _, t := range resp.Tasks {
			if ctx.Err() != nil {
				return n, nil
			}
			if err := s.dispatchAs(ctx, t.Id, round); err != nil {
				s.log.Warn("reconcile dispatch", "task", t.Id, "err", err)
				continue
			}
			n++
		}
	}
	expired, err := s.expireApprovals(ctx)
	return n + expired, err
}

// expireApprovals fails the blocked tasks whose pending approval is past
// its deadline, and reports how many.
func (s *Service) expireApprovals(ctx context.Context) (int, error) {
	n := 0
	now := time.Now()
	token := ""
	for {
		var resp busv1.ListTasksResponse
		err := bus.Request(ctx, s.nc, s.names.State(subjects.StateListTasks), &busv1.ListTasksRequest{
			Statuses: []agentmeshv1.TaskStatus{taskstate.Blocked}, PageSize: 500, PageToken: token,
		}, &resp)
		if err != nil {
			return n, err
		}
		for _, t := range resp.Tasks {
			p := t.GetPendingApproval()
			if p == nil || p.Deadline == nil || p.Deadline.AsTime().After(now) {
				continue
			}
			err := bus.Request(ctx, s.nc, s.names.State(subjects.StateExpire), &busv1.TransitionRequest{
				TaskId: t.Id, From: taskstate.Blocked, To: taskstate.Failed,
				Reason: fmt.Sprintf("approval %s for tool %s expired: nobody decided by %s",
					p.Id, p.Tool, p.Deadline.AsTime().UTC().Format(time.RFC3339)),
				FailureKind: agentmeshv1.FailureKind_FAILURE_KIND_APPROVAL,
				Approval:    &agentmeshv1.Approval{Id: p.Id, Status: agentmeshv1.ApprovalStatus_APPROVAL_STATUS_EXPIRED, DecidedBy: "system"},
			}, &busv1.TransitionResponse{})
			if err != nil {
				if !errors.Is(err, bus.ErrFailedPrecondition) { // decided meanwhile
					s.log.Warn("expire approval", "task", t.Id, "approval", p.Id, "err", err)
				}
				continue
			}
			s.log.Info("approval expired; task failed", "task", t.Id, "approval", p.Id, "tool", p.Tool)
			n++
		}
		if token = resp.NextPageToken; token == "" || ctx.Err() != nil {
			return n, nil
		}
	}
}
