package scheduler

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	busv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/bus/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/poll"
	"github.com/agentmesh/agentmesh/pkg/subjects"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"github.com/agentmesh/agentmesh/pkg/testlog"
	"github.com/nats-io/nats.go"
)

// blockWithDeadline makes a task that runs at attempt 1, spawns one
// sub-task and waits for it (wait_tasks) with a timeout of seconds, as an
// executor would; it returns the blocked parent.
func blockWithDeadline(t *testing.T, nc *nats.Conn, seconds int32) *agentmeshv1.Task {
	t.Helper()
	parent := createTask(t, nc)
	for _, to := range []agentmeshv1.TaskStatus{taskstate.Assigned, taskstate.Running} {
		if err := advance(nc, parent.Id, to, ""); err != nil {
			t.Fatalf("%s → %s: %v", parent.Id, taskstate.Name(to), err)
		}
	}
	names := subjects.Must("")
	var sp busv1.SpawnSubtaskResponse
	if err := bus.Request(context.Background(), nc, names.State(subjects.StateSpawn), &busv1.SpawnSubtaskRequest{
		ParentTaskId: parent.Id, Attempt: 1, ToolCallId: "call-1", AgentSpec: &agentmeshv1.Agent{Name: "helper"}, Input: "sub",
	}, &sp); err != nil {
		t.Fatalf("spawn: %v", err)
	}
	var w busv1.WaitSubtasksResponse
	if err := bus.Request(context.Background(), nc, names.State(subjects.StateWait), &busv1.WaitSubtasksRequest{
		TaskId: parent.Id, Attempt: 1, ToolCallId: "call-2", TimeoutSeconds: seconds,
	}, &w); err != nil {
		t.Fatalf("wait: %v", err)
	}
	if !w.Blocked || w.Task.GetSubtaskWait().GetDeadline() == nil {
		t.Fatalf("wait answered at once (blocked %v, task %v); want blocked with a deadline", w.Blocked, w.Task)
	}
	return w.Task
}

// released polls until the parent is re-queued by its wait's timeout (the
// bound is generous; the reconcile sweep, the only other way, is an hour
// away).
func released(t *testing.T, nc *nats.Conn, id string) {
	t.Helper()
	poll.Until(t, time.Minute, func() error {
		got := getTask(t, nc, id)
		if got.Status != taskstate.Queued {
			return errors.New("parent is " + taskstate.Name(got.Status) + ", want queued by its wait's deadline")
		}
		return nil
	})
	evs := history(t, nc, id)
	last := evs[len(evs)-1]
	for i := len(evs) - 1; i >= 0; i-- {
		if evs[i].Type == agentmeshv1.EventType_EVENT_TYPE_STATUS {
			last = evs[i]
			break
		}
	}
	if !strings.Contains(last.Reason, "wait_tasks timed out") {
		t.Errorf("re-queued with reason %q, want the wait's timeout", last.Reason)
	}
}

// A wait's deadline fires from the leader's timer, not the reconcile
// sweep (its interval is an hour): the deadline comes with the blocked
// event.
func TestWaitDeadlineFiresWithoutTheSweep(t *testing.T) {
	s, nc, _ := setup(t, Config{ReconcileInterval: time.Hour})
	runScheduler(t, s)
	parent := blockWithDeadline(t, nc, 3)
	released(t, nc, parent.Id)
}

// A deadline armed before the scheduler started (or before a new leader's
// term) is read from the record when the term starts.
func TestWaitDeadlineSurvivesARestart(t *testing.T) {
	s, nc, _ := setup(t, Config{ReconcileInterval: time.Hour})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	poll.Until(t, 20*time.Second, func() error {
		if !s.Leader() {
			return errors.New("not leader yet")
		}
		return nil
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// No scheduler runs while the task blocks: its event is never seen by
	// the next one, which starts after it.
	parent := blockWithDeadline(t, nc, 3)
	s2, err := New(context.Background(), Config{ReconcileInterval: time.Hour}, Deps{NC: nc, Log: testlog.New(t)})
	if err != nil {
		t.Fatal(err)
	}
	runScheduler(t, s2)
	if got := getTask(t, nc, parent.Id); got.Status != taskstate.Blocked && got.Status != taskstate.Queued {
		t.Fatalf("parent is %s, want still blocked or released", taskstate.Name(got.Status))
	}
	released(t, nc, parent.Id)
}

func TestWaitDeadlinesHeap(t *testing.T) {
	w := newWaitDeadlines()
	t0 := time.Unix(1000, 0)
	w.set("a", t0.Add(3*time.Second))
	w.set("b", t0.Add(time.Second))
	w.set("c", t0.Add(2*time.Second))
	w.set("b", t0.Add(5*time.Second)) // moved: its first item is stale
	w.drop("c")                       // ended
	if got := w.next(); !got.Equal(t0.Add(3 * time.Second)) {
		t.Fatalf("next = %v, want a's deadline", got)
	}
	if got := w.due(t0.Add(4 * time.Second)); len(got) != 1 || got[0] != "a" {
		t.Fatalf("due at +4s = %v, want [a]", got)
	}
	if got := w.due(t0.Add(4 * time.Second)); len(got) != 0 {
		t.Fatalf("due again = %v, want nothing (popped once)", got)
	}
	if got := w.due(t0.Add(5 * time.Second)); len(got) != 1 || got[0] != "b" {
		t.Fatalf("due at +5s = %v, want [b]", got)
	}
	if !w.next().IsZero() {
		t.Fatalf("next = %v, want none", w.next())
	}
	ev := &agentmeshv1.TaskEvent{TaskId: "d", Status: taskstate.Blocked, SubtaskWait: &agentmeshv1.SubtaskWait{}}
	if w.noteWait(ev) {
		t.Fatal("a wait without a deadline armed a timer")
	}
}
