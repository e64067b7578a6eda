package scheduler

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	busv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/bus/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/poll"
	"github.com/agentmesh/agentmesh/pkg/subjects"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"github.com/nats-io/nats.go/jetstream"
)

// audited counts the requests state served on op (its audit records, which
// state sends in batches: it waits for the first record of a batched
// dispatch to be stored, then counts).
func audited(t *testing.T, js jetstream.JetStream, op string) int {
	t.Helper()
	counts := func() map[string]int {
		n := map[string]int{}
		if _, err := bus.ReadAudit(context.Background(), js, names.AuditStream(), 0, func(_ uint64, rec *busv1.AuditRecord) error {
			n[rec.GetSubject()]++
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return n
	}
	poll.Until(t, 10*time.Second, func() error {
		if counts()[names.State(subjects.StateDispatchBatch)] == 0 {
			return fmt.Errorf("no audit record of a batched dispatch yet")
		}
		return nil
	})
	return counts()[names.State(op)]
}

// workOrder is the task ids of the work stream, in stream order.
func workOrder(t *testing.T, js jetstream.JetStream) []string {
	t.Helper()
	var ids []string
	for _, w := range workItems(t, js) {
		ids = append(ids, w.Task.Id)
	}
	return ids
}

// Tasks found ready together go out in one batch: one state request for
// all their moves, their work published together — the highest priorities
// first, no more than the capacity, in priority order on the work stream.
func TestBurstDispatchedInOneBatchByPriority(t *testing.T) {
	s, nc, js := setup(t, Config{ReconcileInterval: 10 * time.Minute, QueuedGrace: time.Hour, AssignedGrace: time.Hour})
	runScheduler(t, s)
	prios := []agentmeshv1.Priority{
		agentmeshv1.Priority_PRIORITY_LOW, agentmeshv1.Priority_PRIORITY_CRITICAL, agentmeshv1.Priority_PRIORITY_NORMAL,
		agentmeshv1.Priority_PRIORITY_BACKLOG, agentmeshv1.Priority_PRIORITY_HIGH, agentmeshv1.Priority_PRIORITY_LOW,
	}
	byPrio := map[agentmeshv1.Priority][]string{}
	for _, p := range prios {
		byPrio[p] = append(byPrio[p], submit(t, nc, withPriority(p)).Id)
	}
	poll.Until(t, 10*time.Second, func() error {
		if n := waiting(s); n != len(prios) {
			return fmt.Errorf("%d tasks waiting, want %d", n, len(prios))
		}
		return nil
	})
	heartbeat(nc, "n1", 4) // room for four of the six
	want := []string{
		byPrio[agentmeshv1.Priority_PRIORITY_CRITICAL][0], byPrio[agentmeshv1.Priority_PRIORITY_HIGH][0],
		byPrio[agentmeshv1.Priority_PRIORITY_NORMAL][0], byPrio[agentmeshv1.Priority_PRIORITY_LOW][0],
	}
	waitAll(t, nc, want, taskstate.Assigned, 20*time.Second)
	poll.Until(t, 10*time.Second, func() error {
		if got := workOrder(t, js); !slices.Equal(got, want) {
			return fmt.Errorf("work stream %v, want %v (priority order, four)", got, want)
		}
		return nil
	})
	for _, id := range []string{byPrio[agentmeshv1.Priority_PRIORITY_LOW][1], byPrio[agentmeshv1.Priority_PRIORITY_BACKLOG][0]} {
		if got := getTask(t, nc, id); got.Status != taskstate.Queued {
			t.Errorf("task %s beyond the capacity is %s, want queued", id, taskstate.Name(got.Status))
		}
	}
	if b, one := audited(t, js, subjects.StateDispatchBatch), audited(t, js, subjects.StateDispatch); b != 1 || one != 0 {
		t.Errorf("state served %d batched and %d single dispatches, want the four in one batch", b, one)
	}
}

// Item 2 of issue 26 for a batch: the work of a batch whose publishes fail
// (the work stream down) is sent again with the same id until stored — by
// the dispatch, not by the reconcile loop (minutes away here).
func TestBatchWorkDeliveredAfterAFailedPublish(t *testing.T) {
	s, nc, js := setup(t, Config{ReconcileInterval: 10 * time.Minute, QueuedGrace: time.Hour, AssignedGrace: time.Hour})
	ctx := context.Background()
	runScheduler(t, s)
	var ids []string
	for range 3 {
		ids = append(ids, createTask(t, nc).Id)
	}
	poll.Until(t, 10*time.Second, func() error {
		if n := waiting(s); n != len(ids) {
			return fmt.Errorf("%d tasks waiting, want %d", n, len(ids))
		}
		return nil
	})
	if err := js.DeleteStream(ctx, names.WorkStream()); err != nil {
		t.Fatal(err)
	}
	heartbeat(nc, "n1", 4)
	waitAll(t, nc, ids, taskstate.Assigned, 20*time.Second)
	time.Sleep(2 * time.Second) // the stream stays down while the first tries fail
	if _, err := bus.EnsureStreams(ctx, js, names, bus.StreamOptions{}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 30*time.Second, func() error {
		for _, id := range ids {
			if a := workFor(t, js, id); len(a) != 1 || a[0] != 1 {
				return fmt.Errorf("work of %s in the stream: %v, want [1]", id, a)
			}
		}
		return nil
	})
	for _, id := range ids {
		if got := getTask(t, nc, id); got.Status != taskstate.Assigned || got.Attempt != 1 {
			t.Errorf("task %s = %s attempt %d, want assigned attempt 1 (delivered, not dispatched again)", id, taskstate.Name(got.Status), got.Attempt)
		}
	}
	if b := audited(t, js, subjects.StateDispatchBatch); b != 1 {
		t.Errorf("%d batched dispatches, want 1", b)
	}
}

// A move of a batch that state refuses because it was recorded already (a
// reply lost before) is settled from the record: the work of the recorded
// attempt goes out, and the batch's other moves are not held back.
func TestBatchDeliversAMoveRecordedBefore(t *testing.T) {
	s, nc, js := setup(t, Config{ReconcileInterval: 10 * time.Minute, QueuedGrace: time.Hour, AssignedGrace: time.Hour})
	runScheduler(t, s) // no executor: nothing is dispatched but by the test
	lost, fresh := createTask(t, nc), createTask(t, nc)
	poll.Until(t, 10*time.Second, func() error {
		if n := waiting(s); n != 2 {
			return fmt.Errorf("%d tasks waiting, want 2", n)
		}
		return nil
	})
	if err := bus.Request(context.Background(), nc, names.State(subjects.StateDispatch), &busv1.TransitionRequest{
		TaskId: lost.Id, From: taskstate.Queued, To: taskstate.Assigned, NextAttempt: true,
	}, &busv1.TransitionResponse{}); err != nil {
		t.Fatal(err)
	}
	s.dispatchBatch(context.Background(), []job{{kind: jobDispatch, task: lost.Id}, {kind: jobDispatch, task: fresh.Id}})
	poll.Until(t, 20*time.Second, func() error {
		for _, id := range []string{lost.Id, fresh.Id} {
			if a := workFor(t, js, id); len(a) != 1 || a[0] != 1 {
				return fmt.Errorf("work of %s: %v, want [1]", id, a)
			}
		}
		return nil
	})
}

// A batch that cannot start before its context ends (every batch token
// taken) gives its picked tasks back to waiting, to be picked again —
// not left dispatching in the model, where nothing would pick them.
func TestBatchNotSentGivesItsTasksBack(t *testing.T) {
	s, nc, _ := setup(t, Config{ReconcileInterval: 10 * time.Minute, QueuedGrace: time.Hour, AssignedGrace: time.Hour})
	runScheduler(t, s) // no executor: nothing is dispatched but by the test
	a, b := createTask(t, nc), createTask(t, nc)
	poll.Until(t, 10*time.Second, func() error {
		if n := waiting(s); n != 2 {
			return fmt.Errorf("%d tasks waiting, want 2", n)
		}
		return nil
	})
	s.mu.Lock()
	for _, id := range []string{a.Id, b.Id} {
		s.m.setState(s.m.tasks[id], stDispatching, "") // picked, as serve does
	}
	s.mu.Unlock()
	for range cap(s.batches) {
		s.batches <- struct{}{}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	s.dispatchBatch(ctx, []job{{kind: jobDispatch, task: a.Id}, {kind: jobDispatch, task: b.Id}})
	for range cap(s.batches) {
		<-s.batches
	}
	if n := waiting(s); n != 2 {
		t.Errorf("%d tasks waiting after a batch that never went, want 2", n)
	}
	for _, id := range []string{a.Id, b.Id} {
		if got := getTask(t, nc, id); got.Status != taskstate.Queued {
			t.Errorf("task %s is %s, want queued", id, taskstate.Name(got.Status))
		}
	}
}
