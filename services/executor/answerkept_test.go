package executor_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	busv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/bus/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/metrics"
	"github.com/agentmesh/agentmesh/pkg/natstest"
	"github.com/agentmesh/agentmesh/pkg/poll"
	"github.com/agentmesh/agentmesh/pkg/scriptedmodel"
	"github.com/agentmesh/agentmesh/pkg/subjects"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"github.com/agentmesh/agentmesh/services/executor"
)

// An answer the model gave that no agent process recorded is checkpointed
// by the executor as the turn the child would have written, so the next
// attempt replays it: each model turn is asked (and paid) once. The
// answer is lost to no child: one that dies after reading it, one that
// dies before asking for the first turn the executor asked ahead, and no
// child at all when none can be started.
func TestAnswerKeptForTheNextAttempt(t *testing.T) {
	for _, tc := range []struct {
		name, input, why string
		noChild          bool
	}{
		{"the child dies after the answer", "x " + DieAfterAnswerMarker, "simulated crash after the model's answer", false},
		{"the child dies before asking", "x " + CrashFirstMarker, "simulated crash before the first model turn", false},
		{"no child can start", "x", "no-such-agent", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			model := e.useScript(`{"scenarios": [{"turns": [
			  {"content": "let me echo", "tool_calls": [{"name": "echo", "arguments": {"text": "kept"}}]},
			  {"content": "done: {{last_tool_result}}"}
			]}]}`)
			if tc.noChild {
				e.cfg.ChildCommand = []string{"/nonexistent/no-such-agent"}
			}
			stop := e.startExecutor()
			task := e.submitTask(&agentmeshv1.Task{Input: tc.input, RetryPolicy: &agentmeshv1.RetryPolicy{MaxAttempts: 2}})

			failed := e.waitStatus(task.Id, taskstate.Queued, 30*time.Second)
			if failed.RetryCount != 1 || !strings.Contains(failed.LastError, tc.why) {
				t.Fatalf("after attempt 1: retry count %d, last failure %q; want 1 and %q", failed.RetryCount, failed.LastError, tc.why)
			}
			turns := modelTurns(e.history(task.Id))
			if len(turns) != 1 || turns[0].Index != 0 || turns[0].Attempt != 1 || turns[0].Content != "let me echo" ||
				len(turns[0].ToolCalls) != 1 || turns[0].ToolCalls[0].Name != "echo" || turns[0].ToolCalls[0].Id == "" ||
				turns[0].Usage.GetTotalTokens() == 0 {
				t.Fatalf("model turns after attempt 1: %v, want the answer kept as step 0 of attempt 1, its tool call and usage", turns)
			}
			if tc.noChild {
				stop()
				e.cfg.ChildCommand = []string{os.Args[0]}
				e.startExecutor()
			}

			done := secondAttemptEndsOnce(t, e, model, task.Id)
			// The kept turn's usage counts in the task's, as its call was paid.
			var sum int64
			all := modelTurns(e.history(task.Id))
			for _, st := range all {
				sum += st.Usage.GetTotalTokens()
			}
			if u := done.GetUsage().GetTotalTokens(); len(all) != 2 || u != sum {
				t.Errorf("task usage %d tokens over %d turns, want the sum of both turns' (%d)", u, len(all), sum)
			}
		})
	}
}

// The child that takes over from one released while its model thought
// dies before it asks for the answer kept for it: the executor checkpoints
// that answer, and the next attempt ends with it without asking again.
func TestAnswerKeptWhenTheChildTakingOverDies(t *testing.T) {
	e := newEnv(t)
	e.cfg.ReleaseAfter = 100 * time.Millisecond
	model := e.useScript(`{"scenarios": [{"turns": [
	  {"content": "let me echo", "tool_calls": [{"name": "echo", "arguments": {"text": "kept"}}]},
	  {"content": "done: {{last_tool_result}}", "delay_ms": 1500}
	]}]}`)
	e.startExecutor()
	task := e.submitTask(&agentmeshv1.Task{Input: "x " + CrashTakeOverMarker, RetryPolicy: &agentmeshv1.RetryPolicy{MaxAttempts: 2}})

	failed := e.waitStatus(task.Id, taskstate.Queued, 30*time.Second)
	if !strings.Contains(failed.LastError, "simulated crash before the first model turn") {
		t.Fatalf("after attempt 1: last failure %q, want the taking-over child's crash", failed.LastError)
	}
	turns := modelTurns(e.history(task.Id))
	if len(turns) != 2 || turns[1].Index != 3 || turns[1].Attempt != 1 || turns[1].Content != "done: kept" || turns[1].Usage.GetTotalTokens() == 0 {
		t.Fatalf("model turns after attempt 1: %v, want the released call's answer kept as step 3 of attempt 1", turns)
	}
	secondAttemptEndsOnce(t, e, model, task.Id)
}

// secondAttemptEndsOnce runs the task's second attempt, which must
// complete with "done: kept", every model turn asked once in all.
func secondAttemptEndsOnce(t *testing.T, e *env, model *scriptedmodel.Server, id string) *agentmeshv1.Task {
	t.Helper()
	e.publishWork(e.assign(id))
	done := e.waitStatus(id, taskstate.Completed, 30*time.Second)
	if done.Attempt != 2 || done.Result != "done: kept" {
		t.Errorf("attempt %d result %q, want attempt 2 and %q", done.Attempt, done.Result, "done: kept")
	}
	for turn := range 2 {
		if n := model.RequestsAt(turn); n != 1 {
			t.Errorf("model turn %d asked %d times, want once", turn, n)
		}
	}
	return done
}

func modelTurns(events []*agentmeshv1.TaskEvent) []*agentmeshv1.Step {
	var out []*agentmeshv1.Step
	for _, st := range steps(events) {
		if st.Kind == agentmeshv1.StepKind_STEP_KIND_MODEL_TURN {
			out = append(out, st)
		}
	}
	return out
}

// A slow model's answer that waits for an agent process to start is
// checkpointed while that process starts, and is in its history: the
// first turn asked before the child, and the turn of a child released
// while the model thought. The test child (NeedsKeptMarker) fails unless
// its Start's history ends with the answer it was started for, so an
// executor that died while its children started would have lost no answer.
// The children replay the kept turns: each model turn is asked once, no
// step is written twice, and the task completes in its one attempt.
func TestSlowAnswerKeptWhileItsChildStarts(t *testing.T) {
	e := newEnv(t)
	e.cfg.ReleaseAfter = 100 * time.Millisecond
	model := e.useScript(`{"scenarios": [{"turns": [
	  {"content": "let me echo", "tool_calls": [{"name": "echo", "arguments": {"text": "kept"}}], "delay_ms": 300},
	  {"content": "done: {{last_tool_result}}", "delay_ms": 600}
	]}]}`)
	keptBefore := counterValue(t, metrics.AnswersKept.WithLabelValues("before_child"))
	takenBefore := counterValue(t, metrics.ChildrenTakenOver)
	e.startExecutor()
	task := e.submitTask(&agentmeshv1.Task{Input: "x " + NeedsKeptMarker, RetryPolicy: oneAttempt})

	done := e.waitStatus(task.Id, taskstate.Completed, 30*time.Second)
	if done.Attempt != 1 || done.Result != "done: kept" {
		t.Fatalf("attempt %d result %q (last error %q), want attempt 1 and %q", done.Attempt, done.Result, done.LastError, "done: kept")
	}
	for turn := range 2 {
		if n := model.RequestsAt(turn); n != 1 {
			t.Errorf("model turn %d asked %d times, want once", turn, n)
		}
	}
	all := steps(e.history(task.Id))
	seen := map[int32]bool{}
	for _, st := range all {
		if seen[st.Index] {
			t.Errorf("step %d written twice", st.Index)
		}
		seen[st.Index] = true
	}
	turns := modelTurns(e.history(task.Id))
	if len(all) != 4 || len(turns) != 2 || turns[0].Index != 0 || turns[1].Index != 3 || turns[1].Content != "done: kept" ||
		turns[0].Usage.GetTotalTokens() == 0 || turns[1].Usage.GetTotalTokens() == 0 {
		t.Fatalf("steps %v, model turns %v; want 4 steps, the two turns at 0 and 3 with their usage", all, turns)
	}
	if n := counterValue(t, metrics.AnswersKept.WithLabelValues("before_child")) - keptBefore; n != 2 {
		t.Errorf("answers kept before their child: %v, want 2", n)
	}
	if n := counterValue(t, metrics.ChildrenTakenOver) - takenBefore; n != 1 {
		t.Errorf("children taken over: %v, want 1", n)
	}
}

// A slow model's answer handed to the agent process waiting for it is
// written by the executor beside the hand-over, before the agent reports
// it: an executor that died meanwhile would lose no paid answer. The test
// child (HangAfterAnswerMarker) takes the answer and never reports it, so
// the turn can only be in the history if the executor wrote it. A quick
// answer is not written early (it is written with the step that follows
// it, as before).
func TestSlowAnswerWrittenWhileItsChildTakesIt(t *testing.T) {
	for _, tc := range []struct {
		name  string
		delay int
		early bool
	}{{"slow", 300, true}, {"quick", 0, false}} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			model := e.useScript(fmt.Sprintf(`{"scenarios": [{"turns": [
			  {"content": "let me echo", "tool_calls": [{"name": "echo", "arguments": {"text": "kept"}}], "delay_ms": %d},
			  {"content": "done: {{last_tool_result}}"}
			]}]}`, tc.delay))
			handed := counterValue(t, metrics.AnswersKept.WithLabelValues("handed"))
			// A warm agent process is ready, so the first turn (asked
			// before it) is handed to it rather than started with.
			e.cfg.WarmPool = 1
			ex, err := executor.New(context.Background(), e.cfg, executor.Deps{NC: natstest.ConnectAs(t, e.srv, subjects.ServiceExecutor), Log: e.log})
			if err != nil {
				t.Fatalf("executor.New: %v", err)
			}
			runService(t, ex.Run)
			poll.Until(t, 60*time.Second, func() error {
				if n := ex.WarmStats().Idle; n != 1 {
					return fmt.Errorf("%d idle warm agent processes, want 1", n)
				}
				return nil
			})
			task := e.submitTask(&agentmeshv1.Task{Input: "x " + HangAfterAnswerMarker, RetryPolicy: oneAttempt})
			if !tc.early {
				// The child took the quick answer and hangs: cancel the
				// task, whose end records nothing more (its attempt is
				// fenced), and check no early write was made.
				poll.Until(t, 30*time.Second, func() error {
					if model.RequestsAt(0) == 0 {
						return errors.New("turn 0 not asked yet")
					}
					return nil
				})
				cancelTask(t, e, task.Id)
				e.waitStatus(task.Id, taskstate.Cancelled, 30*time.Second)
				if n := counterValue(t, metrics.AnswersKept.WithLabelValues("handed")) - handed; n != 0 {
					t.Errorf("quick answers written early: %v, want 0", n)
				}
				return
			}
			var turns []*agentmeshv1.Step
			poll.Until(t, 30*time.Second, func() error {
				turns = modelTurns(e.history(task.Id))
				if len(turns) == 0 {
					return errors.New("the answer is not in the history while its agent process holds it")
				}
				return nil
			})
			if st := e.get(task.Id).Status; st != taskstate.Running {
				t.Fatalf("the answer was recorded only once the attempt had ended (%s)", taskstate.Name(st))
			}
			if len(turns) != 1 || turns[0].Index != 0 || turns[0].Attempt != 1 || turns[0].Content != "let me echo" ||
				len(turns[0].ToolCalls) != 1 || turns[0].ToolCalls[0].Id == "" || turns[0].Usage.GetTotalTokens() == 0 {
				t.Fatalf("model turns: %v, want the answer as step 0 of attempt 1 with its tool call and usage", turns)
			}
			if n := counterValue(t, metrics.AnswersKept.WithLabelValues("handed")) - handed; n != 1 {
				t.Errorf("answers written while handed: %v, want 1", n)
			}
			cancelTask(t, e, task.Id)
			e.waitStatus(task.Id, taskstate.Cancelled, 30*time.Second)
			if n := model.RequestsAt(0); n != 1 {
				t.Errorf("turn 0 asked %d times, want once", n)
			}
		})
	}
}

// cancelTask cancels a task through the state service, as the API does.
func cancelTask(t *testing.T, e *env, id string) {
	t.Helper()
	var tr busv1.TransitionResponse
	if err := bus.Request(context.Background(), e.nc, e.names.State(subjects.StateCancel), &busv1.TransitionRequest{
		TaskId: id, Org: "acme", To: taskstate.Cancelled, Reason: "test over",
	}, &tr); err != nil {
		t.Fatalf("cancel: %v", err)
	}
}
