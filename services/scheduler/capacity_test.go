package scheduler

import (
	"context"
	"errors"
	"fmt"
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
)

const (
	prioLow      = agentmeshv1.Priority_PRIORITY_LOW
	prioCritical = agentmeshv1.Priority_PRIORITY_CRITICAL
)

// waiting reports how many tasks the leader's model holds waiting.
func waiting(s *Service) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, e := range s.m.tasks {
		if e.state == stWaiting {
			n++
		}
	}
	return n
}

func TestPriorityAtCapacityOne(t *testing.T) {
	s, nc, _ := setup(t, Config{})
	gate := make(chan struct{})
	startFakeExecutor(t, nc, fakeExecutor{node: "n1", capacity: 1, gate: gate})
	runScheduler(t, s)

	blocker := submit(t, nc)
	waitStatus(t, nc, blocker.Id, taskstate.Running, 10*time.Second)
	var lows []string
	for range 3 {
		lows = append(lows, submit(t, nc, withPriority(prioLow)).Id)
	}
	critical := submit(t, nc, withPriority(prioCritical))
	poll.Until(t, 10*time.Second, func() error {
		if n := waiting(s); n != 4 {
			return fmt.Errorf("%d tasks waiting, want 4", n)
		}
		return nil
	})
	close(gate) // every task runs to its end at once from now on
	waitAll(t, nc, append(lows, critical.Id, blocker.Id), taskstate.Completed, 20*time.Second)

	order := []string{critical.Id}
	order = append(order, lows...)
	for i := 1; i < len(order); i++ {
		a, b := startedAt(t, nc, order[i-1]), startedAt(t, nc, order[i])
		if !a.Before(b) {
			t.Errorf("task %d of the expected order (critical, low×3 FIFO) started at %s, not before the next at %s", i-1, a.Format(time.RFC3339Nano), b.Format(time.RFC3339Nano))
		}
	}
}

func TestMaxConcurrencyNeverExceeded(t *testing.T) {
	const tasks = 200
	for _, limit := range []int{1, 3} {
		t.Run(fmt.Sprintf("max_concurrency=%d", limit), func(t *testing.T) {
			s, nc, _ := setup(t, Config{})
			putAgent(t, nc, &agentmeshv1.Agent{Name: "capped", MaxConcurrency: int32(limit)})
			startFakeExecutor(t, nc, fakeExecutor{node: "n1", capacity: 8, hold: 2 * time.Millisecond})
			startFakeExecutor(t, nc, fakeExecutor{node: "n2", capacity: 8, hold: 2 * time.Millisecond})
			runScheduler(t, s)

			var ids []string
			for range tasks {
				ids = append(ids, submit(t, nc, withAgent("capped")).Id)
			}
			waitAll(t, nc, ids, taskstate.Completed, 120*time.Second)
			iv := runningIntervals(t, nc, ids)
			if len(iv) < tasks {
				t.Fatalf("%d running intervals for %d tasks", len(iv), tasks)
			}
			// With max_concurrency 1 no two running intervals overlap.
			if got := maxOverlap(iv); got > limit {
				t.Fatalf("up to %d tasks of the agent ran at once, want at most max_concurrency %d", got, limit)
			}
		})
	}
}

func TestOrgFairness(t *testing.T) {
	const flood, few = 1000, 10
	s, nc, _ := setup(t, Config{Workers: 16})
	startFakeExecutor(t, nc, fakeExecutor{node: "n1", capacity: 4, hold: time.Millisecond})
	var a []string
	for range flood {
		a = append(a, submit(t, nc, withOrg("a")).Id)
	}
	var b []string
	for range few {
		b = append(b, submit(t, nc, withOrg("b")).Id)
	}
	// Start the scheduler with both orgs' work in the record: it rebuilds
	// the queue from it, as after a restart.
	runScheduler(t, s)
	waitAll(t, nc, b, taskstate.Completed, 120*time.Second)
	lastB := time.Time{}
	for _, id := range b {
		if at := startedAt(t, nc, id); at.After(lastB) {
			lastB = at
		}
	}
	// Count A's tasks that started before B's last one.
	before := 0
	for _, id := range a {
		got := getTask(t, nc, id)
		if got.StartedAt != nil && got.StartedAt.AsTime().Before(lastB) {
			before++
		}
	}
	// Fair sharing alternates the orgs: B's 10 tasks are done after about
	// 10 of A's (plus the executor's 4 slots of slack). FIFO would have
	// started all 1,000 of A's first.
	const bound = 2*few + 8
	if before > bound {
		t.Fatalf("%d of org a's tasks started before org b's last, want at most %d", before, bound)
	}
	t.Logf("%d of org a's tasks started before org b's last (bound %d)", before, bound)
}

func TestOrgLimit(t *testing.T) {
	s, nc, _ := setup(t, Config{OrgLimits: map[string]int{"small": 1}})
	startFakeExecutor(t, nc, fakeExecutor{node: "n1", capacity: 8, hold: 20 * time.Millisecond})
	runScheduler(t, s)
	var ids []string
	for range 12 {
		ids = append(ids, submit(t, nc, withOrg("small")).Id)
	}
	waitAll(t, nc, ids, taskstate.Completed, 60*time.Second)
	if got := maxOverlap(runningIntervals(t, nc, ids)); got > 1 {
		t.Fatalf("org with limit 1 ran %d tasks at once", got)
	}
}

func TestQueueTimeout(t *testing.T) {
	s, nc, _ := setup(t, Config{})
	runScheduler(t, s) // no executor: nothing can start
	task := submit(t, nc, withQueueTimeout(time.Second))
	patient := submit(t, nc)
	got := waitStatus(t, nc, task.Id, taskstate.Failed, 20*time.Second)
	if got.FailureKind != agentmeshv1.FailureKind_FAILURE_KIND_TIMEOUT || !strings.Contains(got.Error, "queue_timeout") {
		t.Fatalf("failed with %s %q, want TIMEOUT naming queue_timeout", got.FailureKind, got.Error)
	}
	if d := got.FinishedAt.AsTime().Sub(got.CreatedAt.AsTime()); d < time.Second {
		t.Fatalf("failed after %s, before its queue timeout of 1s", d)
	}
	if st := getTask(t, nc, patient.Id).Status; st != taskstate.Queued {
		t.Fatalf("task without a queue timeout is %s, want still queued", taskstate.Name(st))
	}
}

func TestLostNodeIsFencedAndItsTaskRetried(t *testing.T) {
	s, nc, _ := setup(t, Config{})
	gate := make(chan struct{})
	lost := startFakeExecutor(t, nc, fakeExecutor{node: "doomed", capacity: 1, gate: gate, ttl: 500 * time.Millisecond})
	runScheduler(t, s)
	task := submit(t, nc)
	waitStatus(t, nc, task.Id, taskstate.Running, 10*time.Second)
	lost.stop() // the node goes silent mid-task
	startFakeExecutor(t, nc, fakeExecutor{node: "spare", capacity: 1, hold: time.Millisecond})
	got := waitStatus(t, nc, task.Id, taskstate.Completed, 30*time.Second)
	if got.Node != "spare" || got.Attempt < 2 || got.RetryCount != 1 || got.LastFailureKind != agentmeshv1.FailureKind_FAILURE_KIND_EXECUTOR_LOST {
		t.Fatalf("completed on %q attempt %d retries %d last failure %s, want spare, attempt ≥ 2, 1 retry of kind EXECUTOR_LOST",
			got.Node, got.Attempt, got.RetryCount, got.LastFailureKind)
	}
	// The lost node's attempt is fenced: its late write is refused.
	err := bus.Request(context.Background(), nc, names.State(subjects.StateFail), &busv1.TransitionRequest{
		TaskId: task.Id, From: taskstate.Running, To: taskstate.Failed, Attempt: 1, Node: "doomed", Reason: "late",
	}, &busv1.TransitionResponse{})
	if !errors.Is(err, bus.ErrFailedPrecondition) {
		t.Fatalf("write of the lost node's attempt: %v, want failed_precondition", err)
	}
}

func TestLeaderFailover(t *testing.T) {
	s1, nc, _ := setup(t, Config{LeaseTTL: time.Second})
	s2, err := New(context.Background(), Config{LeaseTTL: time.Second}, Deps{NC: nc, Log: testlog.New(t)})
	if err != nil {
		t.Fatal(err)
	}
	startFakeExecutor(t, nc, fakeExecutor{node: "n1", capacity: 2, hold: time.Millisecond})
	ctx1, stop1 := context.WithCancel(context.Background())
	done1 := make(chan struct{})
	go func() { _ = s1.Run(ctx1); close(done1) }()
	poll.Until(t, 10*time.Second, func() error {
		if !s1.Leader() {
			return errors.New("s1 not leader")
		}
		return nil
	})
	runSchedulerNoWait(t, s2)
	if s2.Leader() {
		t.Fatal("two leaders")
	}
	first := submit(t, nc)
	waitStatus(t, nc, first.Id, taskstate.Completed, 10*time.Second)
	stop1()
	<-done1
	poll.Until(t, 10*time.Second, func() error {
		if !s2.Leader() {
			return errors.New("s2 did not take over")
		}
		return nil
	})
	second := submit(t, nc)
	waitStatus(t, nc, second.Id, taskstate.Completed, 10*time.Second)
}

func runSchedulerNoWait(t *testing.T, s *Service) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = s.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
}

// Two replicas run; only the lease holder dispatches, so an agent's cap
// holds across them even when several orgs tie for the next slot (each
// replica would break the tie its own way).
func TestTwoSchedulersNeverOverDispatch(t *testing.T) {
	const limit = 3
	s1, nc, _ := setup(t, Config{LeaseTTL: time.Second})
	s2, err := New(context.Background(), Config{LeaseTTL: time.Second}, Deps{NC: nc, Log: testlog.New(t)})
	if err != nil {
		t.Fatal(err)
	}
	putAgent(t, nc, &agentmeshv1.Agent{Name: "capped", MaxConcurrency: limit})
	startFakeExecutor(t, nc, fakeExecutor{node: "n1", capacity: 8, hold: 5 * time.Millisecond})
	startFakeExecutor(t, nc, fakeExecutor{node: "n2", capacity: 8, hold: 5 * time.Millisecond})
	runSchedulerNoWait(t, s1)
	runSchedulerNoWait(t, s2)
	var ids []string
	for i := range 200 {
		ids = append(ids, submit(t, nc, withAgent("capped"), withOrg(fmt.Sprintf("org-%d", i%10))).Id)
	}
	waitAll(t, nc, ids, taskstate.Completed, 120*time.Second)
	if got := maxOverlap(runningIntervals(t, nc, ids)); got > limit {
		t.Fatalf("up to %d tasks of the agent ran at once with two scheduler replicas, want at most %d", got, limit)
	}
}

// Raising an agent's max_concurrency takes effect at once (the agent's
// event reaches the leader).
func TestAgentLimitChangeTakesEffect(t *testing.T) {
	s, nc, _ := setup(t, Config{})
	putAgent(t, nc, &agentmeshv1.Agent{Name: "grow", MaxConcurrency: 1})
	gate := make(chan struct{})
	defer close(gate)
	startFakeExecutor(t, nc, fakeExecutor{node: "n1", capacity: 8, gate: gate})
	runScheduler(t, s)
	var ids []string
	for range 6 {
		ids = append(ids, submit(t, nc, withAgent("grow")).Id)
	}
	running := func(want int) {
		t.Helper()
		poll.Until(t, 10*time.Second, func() error {
			n := 0
			for _, id := range ids {
				if getTask(t, nc, id).Status == taskstate.Running {
					n++
				}
			}
			if n != want {
				return fmt.Errorf("%d running, want %d", n, want)
			}
			return nil
		})
	}
	running(1)
	if err := bus.Request(context.Background(), nc, names.State(subjects.StatePutAgent), &busv1.PutAgentRequest{
		Agent: &agentmeshv1.Agent{Name: "grow", MaxConcurrency: 3},
	}, &busv1.PutAgentResponse{}); err != nil {
		t.Fatal(err)
	}
	running(3)
}
