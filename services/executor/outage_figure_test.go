package executor_test

import (
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/pkg/poll"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
)

// TestStateOutageResumeFigure measures (for docs/benchmarks.md; it asserts
// no time) how soon work goes on after a state outage: 8 tasks are asked
// their first model turn, the state service is stopped for
// AGENTMESH_BENCH_OUTAGE (e.g. 5s) while the model answers, then started
// again; it logs the time from state's return to the first and to the last
// completion. It checks what must hold whatever the timing: every task
// completes in its first attempt and every model turn is asked once.
//
//	AGENTMESH_BENCH_OUTAGE=5s go test -run StateOutageResumeFigure -v ./services/executor/
func TestStateOutageResumeFigure(t *testing.T) {
	outage, err := time.ParseDuration(os.Getenv("AGENTMESH_BENCH_OUTAGE"))
	if err != nil || outage <= 0 {
		t.Skip("a measurement: set AGENTMESH_BENCH_OUTAGE (e.g. 5s) to run it")
	}
	const n = 8
	e := newEnv(t)
	e.cfg.Capacity = n
	model := e.useScript(`{"scenarios": [{"turns": [
	  {"content": "let me echo", "delay_ms": 1000, "tool_calls": [{"name": "echo", "arguments": {"text": "{{input}}"}}]},
	  {"content": "done: {{last_tool_result}}"}
	]}]}`)

	startState := e.restartableState()
	stopState := startState()
	e.startExecutor()

	ids := make([]string, n)
	for i := range ids {
		ids[i] = e.submit(fmt.Sprintf("outage %d", i)).Id
	}
	poll.Until(t, 30*time.Second, func() error {
		if got := model.RequestsAt(0); got < n {
			return fmt.Errorf("the model was asked %d first turns, want %d", got, n)
		}
		return nil
	})
	stopState()
	down := time.NewTimer(outage) // the outage itself, not a wait for a condition
	<-down.C
	startState()
	back := time.Now()

	var done []time.Duration
	finished := map[string]bool{}
	poll.Until(t, time.Minute, func() error {
		for _, id := range ids {
			if finished[id] {
				continue
			}
			task := e.get(id)
			if taskstate.Terminal(task.Status) {
				finished[id] = true
				done = append(done, time.Since(back))
				if task.Status != taskstate.Completed || task.Attempt != 1 {
					t.Errorf("task %s ended %s in attempt %d (%s)", id, taskstate.Name(task.Status), task.Attempt, task.Error)
				}
			}
		}
		if len(finished) < n {
			return fmt.Errorf("%d of %d finished", len(finished), n)
		}
		return nil
	})
	slices.Sort(done)
	for turn := range 2 {
		if got := model.RequestsAt(turn); got != n {
			t.Errorf("model turn %d asked %d times for %d tasks, want once each", turn, got, n)
		}
	}
	t.Logf("state down for %v: first completion %v after its return, last %v (%d tasks; polled every 10 ms)",
		outage, done[0].Round(time.Millisecond), done[len(done)-1].Round(time.Millisecond), n)
}
