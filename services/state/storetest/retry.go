package storetest

import (
	"strings"
	"testing"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"github.com/agentmesh/agentmesh/services/state/store"
	"google.golang.org/protobuf/types/known/durationpb"
)

// testRetries: a retryable failure of a running task goes back to queued
// (never to failed first) with the failure, the retry count and a
// not-before time on the event and the task, until the policy's attempts
// are spent; a failure kind that never retries fails at once.
func testRetries(t *testing.T, s store.Store) {
	model := agentmeshv1.FailureKind_FAILURE_KIND_MODEL
	task := newTask("org", "agent", "")
	task.RetryPolicy = &agentmeshv1.RetryPolicy{MaxAttempts: 2, InitialBackoff: durationpb.New(time.Second)}
	task.QueueTimeout = durationpb.New(time.Minute)
	task = create(t, s, task)
	run := func() *agentmeshv1.Task {
		cur := move(t, s, task.Id, store.Transition{From: taskstate.Queued, To: taskstate.Assigned, NextAttempt: true})
		return move(t, s, task.Id, store.Transition{From: taskstate.Assigned, To: taskstate.Running, Attempt: cur.Attempt, Node: "n1"})
	}
	cur := run()
	before := time.Now()
	got, ev, err := s.Transition(ctxT(t), store.Transition{TaskID: task.Id, From: taskstate.Running, To: taskstate.Failed, Attempt: cur.Attempt, Reason: "model down", FailureKind: model})
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != taskstate.Queued || ev.Status != taskstate.Queued || ev.FailureKind != model {
		t.Fatalf("first failure: task %s, event %s kind %s; want queued with the failure", taskstate.Name(got.Status), taskstate.Name(ev.Status), ev.FailureKind)
	}
	if got.RetryCount != 1 || got.LastFailureKind != model || !strings.Contains(got.LastError, "model down") || got.Node != "" {
		t.Fatalf("retried task: count %d, kind %s, error %q, node %q", got.RetryCount, got.LastFailureKind, got.LastError, got.Node)
	}
	if nb := got.NextRetryAt.AsTime(); nb.Before(before.Add(500*time.Millisecond)) || nb.After(time.Now().Add(2*time.Second)) {
		t.Fatalf("next retry at %s, want about 1s (±20%%) after the failure", nb)
	}
	if ev.Agent != "agent" || ev.Priority != agentmeshv1.Priority_PRIORITY_NORMAL || ev.QueueTimeout.AsDuration() != time.Minute || ev.RetryCount != 1 || ev.NotBefore == nil {
		t.Fatalf("queued event lacks what the scheduler needs: %v", ev)
	}
	if got.Error != "" || got.FinishedAt != nil {
		t.Fatalf("a retried task has error %q finished %v", got.Error, got.FinishedAt)
	}

	cur = run()
	if cur.NextRetryAt != nil {
		t.Fatalf("running task still shows a next retry: %v", cur.NextRetryAt)
	}
	got = move(t, s, task.Id, store.Transition{From: taskstate.Running, To: taskstate.Failed, Attempt: cur.Attempt, Reason: "still down", FailureKind: model})
	if got.Status != taskstate.Failed || got.RetryCount != 1 || got.Error != "still down" {
		t.Fatalf("attempts spent: %s retries %d error %q, want failed", taskstate.Name(got.Status), got.RetryCount, got.Error)
	}

	// BUDGET never retries, whatever the policy.
	other := taskIn(t, s, taskstate.Running)
	got = move(t, s, other.Id, store.Transition{To: taskstate.Failed, Attempt: other.Attempt, Reason: "budget", FailureKind: agentmeshv1.FailureKind_FAILURE_KIND_BUDGET})
	if got.Status != taskstate.Failed {
		t.Fatalf("budget failure: %s, want failed", taskstate.Name(got.Status))
	}
	// A queued task that fails (queue timeout) is not retried.
	queued := create(t, s, newTask("org", "agent", ""))
	got = move(t, s, queued.Id, store.Transition{From: taskstate.Queued, To: taskstate.Failed, Reason: "queue_timeout", FailureKind: agentmeshv1.FailureKind_FAILURE_KIND_TIMEOUT})
	if got.Status != taskstate.Failed {
		t.Fatalf("queue timeout: %s, want failed", taskstate.Name(got.Status))
	}
	// Replaying the history gives the same task.
	evs, err := s.History(ctxT(t), task.Id, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	replayed := &agentmeshv1.Task{Id: task.Id}
	for _, e := range evs {
		replayed = taskstate.Apply(replayed, e)
	}
	if replayed.RetryCount != 1 || replayed.Status != taskstate.Failed || replayed.LastFailureKind != model {
		t.Fatalf("replayed: %s retries %d kind %s", taskstate.Name(replayed.Status), replayed.RetryCount, replayed.LastFailureKind)
	}
}

// testRequeueNotBefore: a requeue that says when the task may go again (a
// model's rate-limit wait) puts the time on the event and the task, and
// is no retry: the retry count and last error stay.
func testRequeueNotBefore(t *testing.T, s store.Store) {
	cur := taskIn(t, s, taskstate.Running)
	at := time.Now().Add(30 * time.Second).Truncate(time.Microsecond)
	got, ev, err := s.Transition(ctxT(t), store.Transition{TaskID: cur.Id, From: taskstate.Running, To: taskstate.Queued, Attempt: cur.Attempt,
		Reason: "waiting for the model's rate limit", NotBefore: at})
	if err != nil {
		t.Fatal(err)
	}
	if ev.NotBefore == nil || !ev.NotBefore.AsTime().Equal(at) || ev.FailureKind != agentmeshv1.FailureKind_FAILURE_KIND_UNSPECIFIED {
		t.Fatalf("event not_before %v kind %s, want %s and no failure", ev.NotBefore.AsTime(), ev.FailureKind, at)
	}
	if got.Status != taskstate.Queued || got.NextRetryAt == nil || !got.NextRetryAt.AsTime().Equal(at) || got.RetryCount != 0 || got.LastError != "" {
		t.Fatalf("task %s next %v retries %d error %q", taskstate.Name(got.Status), got.NextRetryAt, got.RetryCount, got.LastError)
	}
	// Dispatched again, the time is gone.
	again := move(t, s, cur.Id, store.Transition{From: taskstate.Queued, To: taskstate.Assigned, NextAttempt: true})
	if again.NextRetryAt != nil {
		t.Fatalf("assigned task keeps not-before %v", again.NextRetryAt)
	}
	// A requeue without one leaves none.
	run := move(t, s, cur.Id, store.Transition{From: taskstate.Assigned, To: taskstate.Running, Attempt: again.Attempt})
	if back := move(t, s, cur.Id, store.Transition{From: taskstate.Running, To: taskstate.Queued, Attempt: run.Attempt}); back.NextRetryAt != nil {
		t.Fatalf("plain requeue has not-before %v", back.NextRetryAt)
	}
}
