package storetest

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/poll"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"github.com/agentmesh/agentmesh/services/state/store"
)

// testGroupCommit: the status changes and step appends of many tasks that
// wait at the same moment commit as one group, each caller answered only
// after that commit, with its own outcome: of two writes of one task planned
// against the same state, one commits and the other is refused
// (failed_precondition, after re-reading); a stale attempt is refused at
// once without waiting for the group; the others all commit, each with
// exactly one event.
func testGroupCommit(t *testing.T, s store.Store) {
	gc, ok := s.(store.GroupCommitter)
	if !ok {
		t.Fatalf("%T does not commit in groups (store.GroupCommitter)", s)
	}
	const n = 12
	running := make([]*agentmeshv1.Task, n)
	for i := range running {
		running[i] = taskIn(t, s, taskstate.Running)
	}
	stepTask, raced := running[n-2], running[n-1]
	before := gc.CommitStats()
	resume := gc.PauseCommits()
	defer resume()

	type result struct {
		what string
		ev   *agentmeshv1.TaskEvent
		err  error
	}
	results := make(chan result, n+2)
	var wg sync.WaitGroup
	write := func(what string, fn func() (*agentmeshv1.Task, *agentmeshv1.TaskEvent, error)) {
		wg.Go(func() {
			_, ev, err := fn()
			results <- result{what, ev, err}
		})
	}
	for _, task := range running[:n-2] {
		write("complete "+task.Id, func() (*agentmeshv1.Task, *agentmeshv1.TaskEvent, error) {
			return s.Transition(ctxT(t), store.Transition{TaskID: task.Id, From: taskstate.Running, To: taskstate.Completed,
				Attempt: task.Attempt, Result: "done " + task.Id})
		})
	}
	write("step", func() (*agentmeshv1.Task, *agentmeshv1.TaskEvent, error) {
		return s.AppendStep(ctxT(t), stepTask.Id, stepTask.Attempt, &agentmeshv1.Step{Index: 0, Kind: agentmeshv1.StepKind_STEP_KIND_MODEL_TURN, Content: "turn"})
	})
	for _, to := range []agentmeshv1.TaskStatus{taskstate.Completed, taskstate.Cancelled} {
		write("race", func() (*agentmeshv1.Task, *agentmeshv1.TaskEvent, error) {
			return s.Transition(ctxT(t), store.Transition{TaskID: raced.Id, From: taskstate.Running, To: to, Attempt: raced.Attempt})
		})
	}
	queued := n + 1 // n-2 completes, the step, the two racing writes
	poll.Until(t, 20*time.Second, func() error {
		if w := gc.WaitingCommits(); w != queued {
			return fmt.Errorf("%d writes wait for the commit, want %d", w, queued)
		}
		return nil
	})
	// A stale attempt is refused at once: it never waits for the group.
	_, _, err := s.Transition(ctxT(t), store.Transition{TaskID: running[0].Id, From: taskstate.Running, To: taskstate.Completed,
		Attempt: running[0].Attempt + 1})
	wantCode(t, "stale attempt while a group waits", err, bus.ErrFailedPrecondition)
	// Nobody is answered before the commit.
	if len(results) != 0 {
		r := <-results
		t.Fatalf("%s answered (%v) before its group committed", r.what, r.err)
	}
	if got := gc.CommitStats(); got != before {
		t.Fatalf("commits while paused: %+v, before %+v", got, before)
	}
	resume()
	wg.Wait()
	close(results)

	raceWins, raceRefused := 0, 0
	for r := range results {
		switch {
		case r.what == "race" && r.err == nil:
			raceWins++
		case r.what == "race" && errors.Is(r.err, bus.ErrFailedPrecondition):
			raceRefused++
		case r.err != nil:
			t.Errorf("%s: %v", r.what, r.err)
		case r.ev == nil:
			t.Errorf("%s: no event returned", r.what)
		}
	}
	if raceWins != 1 || raceRefused != 1 {
		t.Errorf("two writes of one task in one group: %d committed, %d refused; want 1 and 1", raceWins, raceRefused)
	}
	after := gc.CommitStats()
	if groups, writes := after.Groups-before.Groups, after.Writes-before.Writes; groups != 1 || writes != int64(queued) {
		t.Errorf("the %d waiting writes committed in %d groups (%d writes); want 1 group", queued, groups, writes)
	}

	// Each write appended exactly one event, and the record shows it.
	for _, task := range running[:n-2] {
		got, err := s.GetTask(ctxT(t), task.Id)
		if err != nil {
			t.Fatal(err)
		}
		if got.Status != taskstate.Completed || got.Result != "done "+task.Id {
			t.Errorf("task %s: status %s result %q after the group", task.Id, taskstate.Name(got.Status), got.Result)
		}
		checkHistory(t, s, task.Id, task.LastEventSeq+1)
	}
	got, err := s.GetTask(ctxT(t), stepTask.Id)
	if err != nil {
		t.Fatal(err)
	}
	if got.StepCount != 1 || got.Status != taskstate.Running {
		t.Errorf("step task: %d steps, status %s; want 1, running", got.StepCount, taskstate.Name(got.Status))
	}
	checkHistory(t, s, stepTask.Id, stepTask.LastEventSeq+1)
	got, err = s.GetTask(ctxT(t), raced.Id)
	if err != nil {
		t.Fatal(err)
	}
	if !taskstate.Terminal(got.Status) {
		t.Errorf("raced task is %s, want finished", taskstate.Name(got.Status))
	}
	checkHistory(t, s, raced.Id, raced.LastEventSeq+1)
}
