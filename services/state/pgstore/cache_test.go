package pgstore_test

import (
	"context"
	"errors"
	"testing"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/pgtest"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"github.com/agentmesh/agentmesh/services/state/pgstore"
	"github.com/agentmesh/agentmesh/services/state/store"
)

// Two state processes on one database: each remembers the rows it wrote
// (the write cache), so each is behind whenever the other wrote. Their
// writes must still decide on the truth: a stale guess loses the
// compare-and-set or fails its plan, and is decided again on a fresh read.
func TestWriteCacheWithTwoWriters(t *testing.T) {
	url := pgtest.NewDatabase(t)
	a, b := open(t, url), open(t, url)
	ctx := context.Background()
	task, _, _, err := a.CreateTask(ctx, &agentmeshv1.Task{Org: "acme", Agent: "helper", Input: "x"})
	if err != nil {
		t.Fatal(err)
	}
	step := func(s *pgstore.Store, what string, tr store.Transition) *agentmeshv1.Task {
		t.Helper()
		tr.TaskID = task.Id
		got, _, err := s.Transition(ctx, tr)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return got
	}
	// a remembers the task queued; b moves it on twice.
	got := step(b, "b assigns", store.Transition{To: taskstate.Assigned, NextAttempt: true})
	step(b, "b requeues", store.Transition{To: taskstate.Queued, Attempt: got.Attempt})
	got = step(b, "b assigns again", store.Transition{To: taskstate.Assigned, NextAttempt: true})
	// a's guess (queued, attempt 0) would refuse attempt 2: the plan is
	// decided again on the row b wrote.
	got = step(a, "a starts attempt 2", store.Transition{From: taskstate.Assigned, To: taskstate.Running, Attempt: got.Attempt})
	if got.Attempt != 2 || got.LastEventSeq != 6 {
		t.Fatalf("a wrote attempt %d seq %d, want 2 and 6", got.Attempt, got.LastEventSeq)
	}
	// b's guess (assigned, seq 5) plans a step that loses the
	// compare-and-set, and is planned again on seq 6.
	_, ev, err := b.AppendStep(ctx, task.Id, 2, &agentmeshv1.Step{Index: 0})
	if err != nil || ev.Seq != 7 {
		t.Fatalf("b's step: event %v, err %v; want seq 7", ev, err)
	}
	// A real refusal is still one.
	_, _, err = a.Transition(ctx, store.Transition{TaskID: task.Id, From: taskstate.Assigned, To: taskstate.Running, Attempt: 2})
	if !errors.Is(err, bus.ErrFailedPrecondition) {
		t.Fatalf("a starts a running task: got %v, want failed_precondition", err)
	}
	hist, err := a.History(ctx, task.Id, 0, 0)
	if err != nil || len(hist) != 7 {
		t.Fatalf("history: %d events, err %v; want 7", len(hist), err)
	}
}
