// Package scheduler decides when and where each task runs and dispatches it.
//
// Scheduler replicas elect a leader with a lease in the KV bucket
// <P>_SCHEDULER (lease.go). The leader rebuilds its queue model from the
// record (the queued, assigned and running tasks, listed from state), then
// follows the task events from the events stream with an ordered consumer
// (<p>.evt.task.*.<status>, <p>.evt.agent.*) and executor heartbeats
// (<p>.exec.heartbeat.*, core NATS). It dispatches a queued task when its
// agent, its org and the live executors have room, by priority with aging
// within an org and fairly between orgs (queue.go): it asks state to move
// the task queued → assigned with a new attempt — the attempt is the
// fencing token the executor must present — and publishes a
// busv1.WorkItem to <p>.work.<agent> with Nats-Msg-Id "<task>:<attempt>",
// so a republish is de-duplicated by JetStream and a stale copy is refused
// by state. Dispatch is event-driven: a terminal, blocked or re-queued
// task's event frees its slot and the next task is published at once.
//
// Timers fail tasks queued past their queue timeout (kind TIMEOUT) and
// release retries at their not-before time. Executors that miss heartbeats
// are no longer placed on, and their running attempts are failed with kind
// EXECUTOR_LOST (retried under the task's retry policy), which fences the
// node if it returns (placement.go).
//
// The work of an assigned attempt is published until JetStream stores it or
// the attempt is fenced, and a new leader publishes at once the work of the
// tasks assigned within the duplicate window (delivery.go). A reconcile
// loop finds what the bus may have lost beyond that: tasks queued for
// longer than QueuedGrace that the model does not know are queued again,
// and tasks assigned for longer than AssignedGrace get their work
// republished. It also fails the tasks whose pending approval passed its
// deadline.
//
// Dependencies: a resolver (deps.go) releases or fails the tasks blocked
// on a parent when the parent ends.
//
// Trees: a tree keeper (trees.go) records each task's end in its ancestors
// and cancels the unfinished sub-tasks of a task that ended.
//
// Schedules (schedules.go): the leader fires the schedules' slots
// (<p>.state.schedule.fire) after matching their templates' agents
// (<p>.registry.match). Webhooks (webhooks.go): every replica fans the
// events out to deliveries (durable "webhooks" on the events stream, jobs
// on <p>.whk.<org>.<endpoint>) and delivers them (durable "deliveries" on
// the deliveries stream), recording each try (<p>.state.webhook.deliveries.record).
package scheduler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	busv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/bus/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/subjects"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
	"google.golang.org/protobuf/types/known/timestamppb"
)

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
	kv    jetstream.KeyValue
	log   *slog.Logger
	id    string // this replica

	leader atomic.Bool
	mu     sync.Mutex
	m      *model
	kick   chan struct{}
	jobs   chan job
	// fencing holds the tasks whose lost node's attempt is being failed.
	fencing map[string]bool
	// leadSince is when this replica last became leader.
	leadSince time.Time
	// hearing is when this replica's connection last came back (it heard
	// no heartbeat while it was away), and reconnects its count then
	// (placement.go, checkNodes); guarded by mu.
	hearing    time.Time
	reconnects uint64
	// heartbeats reads the executors' heartbeats (placement.go).
	heartbeats *bus.HeartbeatReader
	// fetching holds agents whose limit is being read.
	fetching map[string]bool
	// deps releases dependents when their parents end (deps.go).
	deps *resolver
	// trees settles ended tasks: ancestors and orphans (trees.go).
	trees *treeKeeper
	// waits holds the deadlines of the waits on sub-tasks (waits.go),
	// guarded by mu.
	waits *waitDeadlines
	// out sends again the work whose first publish failed (delivery.go).
	out *bus.Outbox
	// batches holds a token per dispatch batch under way (batch.go).
	batches chan struct{}
	// assignedAtRebuild are the tasks the record showed assigned when
	// this term's model was rebuilt, for the new leader to deliver again
	// (redeliverAll); guarded by mu.
	assignedAtRebuild []*agentmeshv1.Task
	// fires fires the schedules' slots while this replica leads
	// (schedules.go); hooks deliver webhooks on every replica
	// (webhooks.go).
	fires *firer
	hooks *deliverer
}

// New validates cfg, ensures the streams and the leader-lease bucket.
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
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("scheduler: %w", err)
	}
	// Every async publish (a batch's work, batch.go) is answered within
	// the try timeout, so a failed one goes to the outbox.
	js, err := jetstream.New(deps.NC, jetstream.WithPublishAsyncTimeout(bus.PublishTryTimeout))
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
	kv, reps, err := bus.EnsureKeyValue(ctx, js, jetstream.KeyValueConfig{
		Bucket:      names.SchedulerBucket(),
		Description: "agentmesh scheduler leader lease",
		TTL:         cfg.LeaseTTL,
		History:     1,
		Replicas:    bus.Replicas(deps.NC, cfg.Streams.Replicas),
	})
	bus.LogReplication(deps.Log.With("service", "scheduler"), reps)
	if err != nil {
		return nil, fmt.Errorf("scheduler: lease bucket: %w", err)
	}
	res, err := newResolver(ctx, js, names, deps.NC, deps.Log.With("service", "scheduler"), cfg.ReconcileInterval)
	if err != nil {
		return nil, fmt.Errorf("scheduler: %w", err)
	}
	trees, err := newTreeKeeper(ctx, js, names, deps.NC, deps.Log.With("service", "scheduler"), cfg.ReconcileInterval)
	if err != nil {
		return nil, fmt.Errorf("scheduler: %w", err)
	}
	s := &Service{
		cfg: cfg, names: names, nc: deps.NC, js: js, kv: kv, id: nuid.Next(),
		log:  deps.Log.With("service", "scheduler"),
		kick: make(chan struct{}, 1), jobs: make(chan job, 4*cfg.Workers),
		batches: make(chan struct{}, batchesInFlight),
		fencing: map[string]bool{}, fetching: map[string]bool{}, deps: res, trees: trees,
		waits: newWaitDeadlines(),
		out:   bus.NewOutbox(js, deps.Log.With("service", "scheduler"), "work"),
	}
	s.heartbeats = bus.NewHeartbeatReader(names, s.log)
	s.m = newModel(max(cfg.Aging, 0), s.orgLimit, s.agentLimit)
	s.fires = newFirer(s, cfg.Clock)
	if s.hooks, err = newDeliverer(ctx, s); err != nil {
		return nil, fmt.Errorf("scheduler: %w", err)
	}
	return s, nil
}

// Leader reports whether this replica is the leader now.
func (s *Service) Leader() bool { return s.leader.Load() }

// Run schedules until ctx ends, then steps down and returns nil.
func (s *Service) Run(ctx context.Context) error {
	hb, err := s.nc.Subscribe(s.names.Heartbeats(), s.onHeartbeat)
	if err != nil {
		return fmt.Errorf("scheduler: subscribe to heartbeats: %w", err)
	}
	defer func() { _ = hb.Unsubscribe() }()
	var wg sync.WaitGroup
	for i := 0; i < s.cfg.Workers; i++ {
		wg.Go(func() {
			for j := range s.jobs {
				s.do(ctx, j)
			}
		})
	}
	wg.Go(func() { s.out.Run(ctx) })
	wg.Go(func() {
		if err := s.deps.run(ctx); err != nil {
			s.log.Error("dependency resolver stopped", "err", err)
		}
	})
	wg.Go(func() {
		if err := s.trees.run(ctx); err != nil {
			s.log.Error("tree keeper stopped", "err", err)
		}
	})
	wg.Go(func() { s.hooks.run(ctx) })
	s.lease(ctx, s.kv, func(term context.Context) {
		var lead sync.WaitGroup
		lead.Go(func() { s.fires.run(term) })
		s.lead(term)
		lead.Wait()
	})
	close(s.jobs)
	wg.Wait()
	return nil
}

// dispatch moves a queued task to assigned (new attempt) and publishes its
// work. When the task has moved on (cancelled, already assigned) the model
// learns where it stands from the record (and an assignment whose work may
// not have gone out is delivered: refresh).
func (s *Service) dispatch(ctx context.Context, taskID string) error {
	var tr busv1.TransitionResponse
	err := bus.Request(ctx, s.nc, s.names.State(subjects.StateDispatch), &busv1.TransitionRequest{
		TaskId: taskID, From: taskstate.Queued, To: taskstate.Assigned, NextAttempt: true,
	}, &tr)
	switch {
	case err == nil:
		s.applyEvent(tr.Event)
		// Published now, or sent again until stored or fenced
		// (delivery.go); the task holds its slot meanwhile.
		return s.deliver(ctx, tr.Task)
	case errors.Is(err, bus.ErrFailedPrecondition), errors.Is(err, bus.ErrNotFound):
		return s.refresh(ctx, taskID)
	default:
		return err
	}
}

// Reconcile finds work the bus may have lost: tasks queued past
// QueuedGrace that the model does not hold are queued in it, and tasks
// assigned past AssignedGrace get their work republished. It reports how
// many tasks it touched.
func (s *Service) Reconcile(ctx context.Context) (int, error) {
	n := 0
	round := "r" + strconv.FormatInt(time.Now().UnixNano(), 36)
	for _, st := range []struct {
		status agentmeshv1.TaskStatus
		grace  time.Duration
	}{{taskstate.Queued, s.cfg.QueuedGrace}, {taskstate.Assigned, s.cfg.AssignedGrace}} {
		token := ""
		for {
			var resp busv1.ListTasksResponse
			err := bus.Request(ctx, s.nc, s.names.State(subjects.StateListTasks), &busv1.ListTasksRequest{
				Statuses:      []agentmeshv1.TaskStatus{st.status},
				UpdatedBefore: timestamppb.New(time.Now().Add(-st.grace)),
				PageSize:      500, PageToken: token,
			}, &resp)
			if err != nil {
				return n, err
			}
			for _, t := range resp.Tasks {
				if ctx.Err() != nil {
					return n, nil
				}
				if st.status == taskstate.Queued {
					if s.learn(t) {
						n++
					}
					continue
				}
				if err := s.publishWork(ctx, t, round); err != nil {
					s.log.WarnContext(ctx, "reconcile: republish work", "task_id", t.Id, "err", err)
					continue
				}
				n++
			}
			if token = resp.NextPageToken; token == "" {
				break
			}
		}
	}
	s.wake()
	expired, err := s.expireApprovals(ctx)
	if err != nil {
		return n + expired, err
	}
	released, err := s.expireWaits(ctx)
	return n + expired + released, err
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
					s.log.WarnContext(ctx, "expire approval", "task_id", t.Id, "approval", p.Id, "err", err)
				}
				continue
			}
			s.log.InfoContext(ctx, "approval expired; task failed", "task_id", t.Id, "approval", p.Id, "tool", p.Tool)
			n++
		}
		if token = resp.NextPageToken; token == "" || ctx.Err() != nil {
			return n, nil
		}
	}
}
