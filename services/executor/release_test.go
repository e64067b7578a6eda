package executor_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/metrics"
	"github.com/agentmesh/agentmesh/pkg/natstest"
	"github.com/agentmesh/agentmesh/pkg/poll"
	"github.com/agentmesh/agentmesh/pkg/subjects"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"github.com/agentmesh/agentmesh/services/executor"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// counterValue reads a Prometheus counter.
func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// startExecutorSvc starts the executor and returns it (for its stats).
func (e *env) startExecutorSvc() *executor.Service {
	e.t.Helper()
	ex, err := executor.New(context.Background(), e.cfg, executor.Deps{NC: natstest.ConnectAs(e.t, e.srv, subjects.ServiceExecutor), Log: e.log})
	if err != nil {
		e.t.Fatalf("executor.New: %v", err)
	}
	runService(e.t, ex.Run)
	return ex
}

// While a slow model call runs, no agent process waits for it: the first
// turn is asked before a child runs, and the child is started when its
// answer came (first.go); the child waiting for a later turn is ended (it
// is released), and when the answer comes a fresh child replays the steps
// and goes on with the answer already received: every model turn is asked
// once, every step recorded once, in the same attempt.
func TestChildReleasedWhileTheModelThinks(t *testing.T) {
	e := newEnv(t)
	e.cfg.ReleaseAfter = 100 * time.Millisecond
	model := e.useScript(`{"scenarios": [{"turns": [
	  {"content": "let me echo", "delay_ms": 3000, "tool_calls": [{"name": "echo", "arguments": {"text": "{{input}}"}}]},
	  {"content": "done: {{last_tool_result}}", "delay_ms": 3000}
	]}]}`)
	ex := e.startExecutorSvc()
	released0, takenOver0 := counterValue(t, metrics.ChildrenReleased), counterValue(t, metrics.ChildrenTakenOver)
	after0 := counterValue(t, metrics.FirstTurns.WithLabelValues("after"))

	task := e.submit("released")
	for turn := range 2 {
		// The model is asked turn N and has not answered it: no child is
		// alive. Turn 0's never started (no warm child was ready); turn 1's
		// was released.
		poll.Until(t, 30*time.Second, func() error {
			if model.RequestsAt(turn) == 0 {
				return fmt.Errorf("model turn %d not asked yet", turn)
			}
			if c := children(t); len(c) != 0 {
				return fmt.Errorf("agent processes %v alive while model turn %d runs", c, turn)
			}
			if st, n := ex.ReleaseStats(), ex.ChildrenAfterAnswer(); st.Released != int64(turn) || n != int64(turn) {
				return fmt.Errorf("release stats %+v, %d children started after the first answer, during turn %d", st, n, turn)
			}
			return nil
		})
		if n := model.RequestsAt(turn + 1); n != 0 {
			t.Fatalf("turn %d asked before turn %d's answer was used", turn+1, turn)
		}
	}
	got := e.waitStatus(task.Id, taskstate.Completed, 60*time.Second)

	if got.Result != "done: released" {
		t.Errorf("result %q, want %q", got.Result, "done: released")
	}
	if got.Attempt != 1 {
		t.Errorf("attempt %d, want 1 (releasing a child is not a retry)", got.Attempt)
	}
	for turn := range 2 {
		if n := model.RequestsAt(turn); n != 1 {
			t.Errorf("model turn %d asked %d times, want once", turn, n)
		}
	}
	var kinds []agentmeshv1.StepKind
	seen := map[int32]bool{}
	for _, st := range steps(e.history(task.Id)) {
		if seen[st.Index] {
			t.Errorf("step %d recorded twice", st.Index)
		}
		seen[st.Index] = true
		kinds = append(kinds, st.Kind)
		if st.Kind == agentmeshv1.StepKind_STEP_KIND_MODEL_TURN && st.GetUsage().GetTotalTokens() == 0 {
			t.Errorf("model turn step %d without the usage of its call", st.Index)
		}
	}
	want := []agentmeshv1.StepKind{agentmeshv1.StepKind_STEP_KIND_MODEL_TURN, agentmeshv1.StepKind_STEP_KIND_TOOL_CALL, agentmeshv1.StepKind_STEP_KIND_TOOL_RESULT, agentmeshv1.StepKind_STEP_KIND_MODEL_TURN}
	if !slices.Equal(kinds, want) {
		t.Errorf("steps %v, want %v", kinds, want)
	}
	if st, n := ex.ReleaseStats(), ex.ChildrenAfterAnswer(); st.Released != 1 || st.Resumed != 1 || n != 1 {
		t.Errorf("release stats %+v, %d children started after the first answer; want 1 released, 1 taken over, 1 started after", st, n)
	}
	if r, o, a := counterValue(t, metrics.ChildrenReleased)-released0, counterValue(t, metrics.ChildrenTakenOver)-takenOver0,
		counterValue(t, metrics.FirstTurns.WithLabelValues("after"))-after0; r != 1 || o != 1 || a != 1 {
		t.Errorf("metrics: %v released, %v taken over, %v started after the first answer; want 1, 1 and 1", r, o, a)
	}
}

// A child a tool wrote files in holds its workspace (a tmpfs that dies
// with it): it is kept through a slow model call, and the file the first
// tool wrote is there for the second.
func TestChildHoldingItsWorkspaceIsKept(t *testing.T) {
	e := newEnv(t)
	e.cfg.ReleaseAfter = 50 * time.Millisecond
	model := e.useScript(`{"scenarios": [{"turns": [
	  {"content": "write", "tool_calls": [{"name": "fs_write", "arguments": {"path": "note.txt", "content": "kept {{input}}"}}]},
	  {"content": "read", "delay_ms": 1500, "tool_calls": [{"name": "fs_read", "arguments": {"path": "note.txt"}}]},
	  {"content": "got: {{last_tool_result}}"}
	]}]}`)
	ex := e.startExecutorSvc()
	a := &agentmeshv1.Agent{Name: "writer", SystemPrompt: "You keep notes.", Tools: []string{"fs_write", "fs_read"}}
	task := e.submitAgent(a, "notes")
	got := e.waitStatus(task.Id, taskstate.Completed, 60*time.Second)

	if !strings.Contains(got.Result, "kept notes") {
		t.Errorf("result %q: the file written before the slow turn is gone", got.Result)
	}
	for turn := range 3 {
		if n := model.RequestsAt(turn); n != 1 {
			t.Errorf("model turn %d asked %d times, want once", turn, n)
		}
	}
	// Turn 0 may have been released (nothing was written yet); turn 1,
	// after fs_write, must not have been.
	if st := ex.ReleaseStats(); st.Released > 1 {
		t.Errorf("release stats %+v: the child was released after a tool wrote to its workspace", st)
	}
}

// A child waiting for a slow model call is released only while more than
// ReleaseAbove children wait: of two tasks waiting at once with a bound of
// one, one child is released (and another takes over when its answer
// comes) and the other waits on; both tasks complete, each turn asked once.
func TestFewWaitingChildrenAreKept(t *testing.T) {
	e := newEnv(t)
	e.cfg.ReleaseAfter = 300 * time.Millisecond
	e.cfg.ReleaseAbove = 1
	model := e.useScript(`{"scenarios": [{"turns": [
	  {"content": "let me echo", "tool_calls": [{"name": "echo", "arguments": {"text": "{{input}}"}}]},
	  {"content": "done: {{last_tool_result}}", "delay_ms": 3000}
	]}]}`)
	ex := e.startExecutorSvc()
	released0, kept0 := counterValue(t, metrics.ChildrenReleased), counterValue(t, metrics.ChildrenKeptWaiting)

	a, b := e.submit("one"), e.submit("two")
	for _, task := range []*agentmeshv1.Task{a, b} {
		got := e.waitStatus(task.Id, taskstate.Completed, 60*time.Second)
		if want := "done: " + got.Input; got.Result != want || got.Attempt != 1 {
			t.Errorf("task %q: attempt %d result %q, want attempt 1 and %q", got.Input, got.Attempt, got.Result, want)
		}
	}
	for turn := range 2 {
		if n := model.RequestsAt(turn); n != 2 {
			t.Errorf("model turn %d asked %d times for the two tasks, want twice", turn, n)
		}
	}
	if st := ex.ReleaseStats(); st.Released != 1 || st.Resumed != 1 {
		t.Errorf("release stats %+v, want 1 released and 1 taken over", st)
	}
	if r, k := counterValue(t, metrics.ChildrenReleased)-released0, counterValue(t, metrics.ChildrenKeptWaiting)-kept0; r != 1 || k != 1 {
		t.Errorf("metrics: %v released, %v kept waiting; want 1 and 1", r, k)
	}
}
