package scheduler

import (
	"context"
	"fmt"
	"strconv"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"github.com/agentmesh/agentmesh/pkg/telemetry"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Delivery: the work of an assigned attempt reaches the work stream.
//
// Once state has recorded an assignment, its work message must go out:
// nothing else moves the task (an executor takes it from the work stream
// only). The publish is idempotent — the message id is "<task>:<attempt>",
// which JetStream de-duplicates within bus.DuplicateWindow — so it is
// sent again until the stream acknowledges it, or the attempt is fenced
// (the task moved on: cancelled, re-queued, started) or this replica stops
// leading:
//
//   - dispatch publishes at once; a publish that fails goes to the work
//     outbox (bus.Outbox), which sends it again with backoff (20 ms
//     doubling to 1 s) while the leader's model still shows the task
//     assigned under that attempt;
//   - a dispatch whose reply was lost or refused, and the model learning
//     from the record that a task is assigned (refresh), publish the work
//     of the recorded attempt the same way;
//   - a new leader (a restarted scheduler, a replica taking over from a
//     dead one) publishes the work of every task assigned within the
//     duplicate window as soon as it has rebuilt its model: what the dead
//     leader published is de-duplicated, what it did not is delivered.
//     Older assignments are the reconcile loop's (AssignedGrace, with a
//     message id of its own round, since JetStream no longer remembers the
//     first id).

// republishWithin is how recent an assignment must be for its work to be
// published again under the attempt's own message id: within the
// duplicate window, with a margin for clocks and the time the publish
// takes, so a copy of work already stored is always de-duplicated.
const republishWithin = bus.DuplicateWindow - 15*time.Second

// workMsg builds the work message of task's current attempt; round, when
// set, makes a message id of its own (reconcile).
func (s *Service) workMsg(ctx context.Context, task *agentmeshv1.Task, round string) (*nats.Msg, error) {
	// Published again (a lost reply, a new leader, reconcile), the work
	// still carries the task's trace.
	msg, err := bus.NewMsg(telemetry.InTrace(ctx, task.GetTraceparent()), s.names.Work(task.Agent), workItem(task))
	if err != nil {
		return nil, err
	}
	id := task.Id + ":" + strconv.Itoa(int(task.Attempt))
	if round != "" {
		id += ":" + round
	}
	msg.Header.Set(jetstream.MsgIDHeader, id)
	return msg, nil
}

// publishWork publishes the work of task's attempt once.
func (s *Service) publishWork(ctx context.Context, task *agentmeshv1.Task, round string) error {
	msg, err := s.workMsg(ctx, task, round)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, bus.PublishTryTimeout)
	defer cancel()
	if _, err := s.js.PublishMsg(ctx, msg); err != nil {
		return fmt.Errorf("publish work of %s: %w", task.Id, err)
	}
	s.log.DebugContext(ctx, "dispatched", "task_id", task.Id, "agent", task.Agent, "attempt", task.Attempt)
	return nil
}

// deliver publishes the work of a task just assigned; a publish that
// fails for a passing reason is handed to the outbox, which sends it again
// until stored or fenced.
func (s *Service) deliver(ctx context.Context, task *agentmeshv1.Task) error {
	err := s.publishWork(ctx, task, "")
	if err == nil {
		return nil
	}
	if !bus.PublishRetryable(err) {
		return err
	}
	s.log.InfoContext(ctx, "work not stored yet; sending it again until it is", "task_id", task.Id, "attempt", task.Attempt, "err", err)
	return s.deliverLater(ctx, task)
}

// deliverLater hands the work of task's current attempt to the outbox.
func (s *Service) deliverLater(ctx context.Context, task *agentmeshv1.Task) error {
	msg, err := s.workMsg(context.WithoutCancel(ctx), task, "")
	if err != nil {
		return err
	}
	id, attempt := task.Id, task.Attempt
	return s.out.Add(msg, func() bool { return s.awaitsWork(id, attempt) })
}

// redeliver publishes again the work of a task the record shows assigned
// recently (see republishWithin): after a dispatch whose reply was lost,
// or when a new leader rebuilds its model.
func (s *Service) redeliver(ctx context.Context, task *agentmeshv1.Task, now time.Time) bool {
	if task.Status != taskstate.Assigned || now.Sub(task.GetUpdatedAt().AsTime()) > republishWithin {
		return false
	}
	if err := s.deliverLater(ctx, task); err != nil {
		s.log.WarnContext(ctx, "work of an assigned task not queued for publishing; reconcile will", "task_id", task.Id, "err", err)
		return false
	}
	return true
}

// awaitsWork reports whether this replica leads and its model shows the
// task assigned under attempt, so its work is still to be delivered.
func (s *Service) awaitsWork(id string, attempt int32) bool {
	if !s.leader.Load() {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.m.tasks[id]
	return e != nil && e.state == stAssigned && e.attempt == attempt
}
