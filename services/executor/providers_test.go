package executor_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/metrics"
	"github.com/agentmesh/agentmesh/pkg/modeltable"
	"github.com/agentmesh/agentmesh/pkg/scriptedmodel"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"github.com/agentmesh/agentmesh/pkg/testlog"
)

// startScripted starts a scripted model server for the test (opts: its
// options) and returns it with its base URL.
func startScripted(t *testing.T, script string, opts ...scriptedmodel.Option) (*scriptedmodel.Server, string) {
	t.Helper()
	s, err := scriptedmodel.ParseScript([]byte(script))
	if err != nil {
		t.Fatal(err)
	}
	srv := scriptedmodel.New(s, append([]scriptedmodel.Option{scriptedmodel.WithLogger(testlog.New(t))}, opts...)...)
	url, err := srv.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	return srv, url
}

func modelTable(t *testing.T, yaml string) *modeltable.Table {
	t.Helper()
	tab, err := modeltable.Parse([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	return tab
}

// An agent on Anthropic's native API runs a whole task with a tool call:
// the executor speaks the Messages API (its headers and key, tool_use and
// tool_result blocks) to the scripted model's Anthropic wire, and the
// steps record the provider.
func TestAnthropicAgentCompletesThroughTool(t *testing.T) {
	e := newEnv(t)
	model, url := startScripted(t, `{"scenarios": [{"turns": [
	  {"content": "Checking the clock.", "tool_calls": [{"name": "current_time", "arguments": {"timezone": "UTC"}}]},
	  {"content": "It is {{last_tool_result}}.", "finish_reason": "stop"}
	]}]}`, scriptedmodel.WithAnthropicKey("sk-ant-test"))
	e.cfg.Model.Table = modelTable(t, fmt.Sprintf("models:\n  claude:\n    provider: anthropic\n    base_url: %q\n    api_key_env: TEST_ANTHROPIC_KEY\n    model: claude-test\n", strings.TrimSuffix(url, "/v1")))
	e.cfg.Model.LookupEnv = func(k string) (string, bool) {
		return map[string]string{"TEST_ANTHROPIC_KEY": "sk-ant-test"}[k], k == "TEST_ANTHROPIC_KEY"
	}
	e.startExecutor()
	task := e.submitTask(&agentmeshv1.Task{Input: "what time is it?", AgentSpec: withModel(&agentmeshv1.ModelSettings{Model: "claude"})})
	got := e.waitStatus(task.Id, taskstate.Completed, 30*time.Second)
	st := steps(e.history(task.Id))
	if len(st) != 4 {
		t.Fatalf("%d steps, want 4", len(st))
	}
	if !strings.HasPrefix(got.Result, "It is 20") || got.Result != "It is "+st[2].Content+"." {
		t.Errorf("result %q (tool said %q)", got.Result, st[2].Content)
	}
	if c := st[0].ToolCalls; len(c) != 1 || c[0].Name != "current_time" || c[0].Arguments != `{"timezone":"UTC"}` {
		t.Errorf("model turn = %v", st[0])
	}
	for _, s := range []int{0, 3} {
		if st[s].ModelProvider != "anthropic" || st[s].Model != "claude-test" || st[s].Usage.GetPromptTokens() == 0 {
			t.Errorf("step %d: provider %q model %q usage %v", s, st[s].ModelProvider, st[s].Model, st[s].Usage)
		}
	}
	if model.RequestsAt(0) != 1 || model.RequestsAt(1) != 1 {
		t.Errorf("turns asked %d and %d times, want once each", model.RequestsAt(0), model.RequestsAt(1))
	}
}

// An answer cut at its token limit is never a success: the task fails
// with its own kind, not retried, and the turn (paid for) is recorded.
func TestTruncatedAnswerFails(t *testing.T) {
	e := newEnv(t)
	model, url := startScripted(t, `[{"turns": [{"content": "The first half of an ans", "finish_reason": "length"}]}]`)
	e.cfg.Model.BaseURL = url
	e.startExecutor()
	task := e.submitTask(&agentmeshv1.Task{Input: "write a lot", RetryPolicy: taskstate.DefaultRetryPolicy()})
	got := e.waitStatus(task.Id, taskstate.Failed, 30*time.Second)
	wantFailure(t, got, agentmeshv1.FailureKind_FAILURE_KIND_MODEL_TRUNCATED, "cut at its token limit", "max_tokens")
	st := steps(e.history(task.Id))
	if len(st) != 1 || st[0].FinishReason != "length" || st[0].Content != "The first half of an ans" {
		t.Errorf("steps %v, want the cut turn recorded", st)
	}
	if model.Requests() != 1 || got.RetryCount != 0 {
		t.Errorf("%d model calls, %d retries; want 1 and none", model.Requests(), got.RetryCount)
	}
}

// Errors no retry can change (401, 400, a content filter) fail the task at
// once with MODEL_REJECTED, which no retry policy retries: the model is
// asked once, not four times.
func TestRejectedModelNotRetried(t *testing.T) {
	for _, tc := range []struct {
		name, turn, want string
	}{
		{"401", `{"content": "x", "status": 401}`, "HTTP 401"},
		{"400", `{"content": "x", "status": 400}`, "HTTP 400"},
		{"content filter", `{"content": "", "finish_reason": "content_filter"}`, "content filter"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			model, url := startScripted(t, `[{"turns": [`+tc.turn+`]}]`)
			e.cfg.Model.BaseURL = url
			e.startExecutor()
			task := e.submitTask(&agentmeshv1.Task{Input: "hi", RetryPolicy: taskstate.DefaultRetryPolicy()})
			got := e.waitStatus(task.Id, taskstate.Failed, 30*time.Second)
			wantFailure(t, got, agentmeshv1.FailureKind_FAILURE_KIND_MODEL_REJECTED, tc.want)
			if model.Requests() != 1 || got.RetryCount != 0 {
				t.Errorf("%d model calls and %d retries, want 1 and none", model.Requests(), got.RetryCount)
			}
		})
	}
}

// The first model of the agent's route answers 503: after its retries
// the fallback answers, and the step records that, and why.
func TestFallbackModelTakesOver(t *testing.T) {
	e := newEnv(t)
	down, downURL := startScripted(t, `[{"turns": [{"content": "x", "status": 503}]}]`)
	up, upURL := startScripted(t, `[{"turns": [{"content": "the spare answers"}]}]`)
	e.cfg.Model.Table = modelTable(t, fmt.Sprintf("models:\n  main: {base_url: %q, no_key: true}\n  spare: {base_url: %q, no_key: true}\n", downURL, upURL))
	e.startExecutor()
	task := e.submitTask(&agentmeshv1.Task{Input: "hi", AgentSpec: withModel(&agentmeshv1.ModelSettings{Model: "main", Fallbacks: []string{"spare"}})})
	got := e.waitStatus(task.Id, taskstate.Completed, 30*time.Second)
	if got.Result != "the spare answers" {
		t.Errorf("result %q", got.Result)
	}
	st := steps(e.history(task.Id))
	if len(st) != 1 || !strings.Contains(st[0].ModelFallback, "main") || !strings.Contains(st[0].ModelFallback, "503") {
		t.Fatalf("steps %v, want the fallback recorded", st)
	}
	if down.Requests() != 3 || up.Requests() != 1 {
		t.Errorf("requests: main %d (want 3: a try and two retries), spare %d", down.Requests(), up.Requests())
	}
}

// Item 9 of the trials, through the executor: a server that repeats the
// function name in every chunk and sends arguments as an object gives the
// agent the tool call it meant; the tool runs with those arguments.
func TestQuirkyServerToolCalls(t *testing.T) {
	for _, quirk := range []string{scriptedmodel.QuirkRepeatName, scriptedmodel.QuirkArgumentsObject, scriptedmodel.QuirkNoIndex,
		scriptedmodel.QuirkNoDone, scriptedmodel.QuirkRejectStreamOptions, scriptedmodel.QuirkRejectParallelToolCalls} {
		t.Run(quirk, func(t *testing.T) {
			e := newEnv(t)
			model, url := startScripted(t, `{"quirks": ["`+quirk+`"], "scenarios": [{"turns": [
			  {"tool_calls": [{"name": "echo", "arguments": {"text": "a long enough text to arrive in several pieces"}}]},
			  {"content": "the tool said {{last_tool_result}}"}]}]}`)
			e.cfg.Model.BaseURL = url
			e.startExecutor()
			task := e.submitTask(&agentmeshv1.Task{Input: "echo please"})
			got := e.waitStatus(task.Id, taskstate.Completed, 30*time.Second)
			if got.Result != "the tool said a long enough text to arrive in several pieces" {
				t.Errorf("result %q", got.Result)
			}
			st := steps(e.history(task.Id))
			if st[1].ToolName != "echo" || st[1].Arguments != `{"text":"a long enough text to arrive in several pieces"}` {
				t.Errorf("tool call %q %s", st[1].ToolName, st[1].Arguments)
			}
			// A refused optional field costs one more request, once.
			if max := int64(2) + boolInt(strings.HasPrefix(quirk, "reject_")); model.Requests() != max {
				t.Errorf("%d model requests, want %d", model.Requests(), max)
			}
		})
	}
}

func boolInt(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// A call with no budget under its rate limit ends the attempt: the task
// goes back to the queue, not before its reserved slot, holding no
// process; the wait is in its history and in the metrics; dispatched
// again, it takes its slot and completes — and the model is never asked
// beyond its limit.
func TestRateLimitWaitRequeues(t *testing.T) {
	e := newEnv(t)
	model, url := startScripted(t, `{"rate_limit": {"requests": 1, "window_ms": 1500}, "scenarios": [{"turns": [{"content": "done"}]}]}`)
	e.cfg.Model.Table = modelTable(t, fmt.Sprintf("models:\n  limited: {base_url: %q, no_key: true, limits: {requests_per_minute: 1}}\n", url))
	e.cfg.LimitWindow = 1500 * time.Millisecond
	e.cfg.Model.WaitInPlace = 50 * time.Millisecond
	e.startExecutor()
	before := counterValue(t, metrics.ModelRateLimitWaits.WithLabelValues("key", "requeued"))
	a := withModel(&agentmeshv1.ModelSettings{Model: "limited"})
	first := e.submitTask(&agentmeshv1.Task{Input: "one", AgentSpec: a})
	e.waitStatus(first.Id, taskstate.Completed, 30*time.Second)
	second := e.submitTask(&agentmeshv1.Task{Input: "two", AgentSpec: a})
	queued := e.waitStatus(second.Id, taskstate.Queued, 30*time.Second)
	if queued.NextRetryAt == nil || time.Until(queued.NextRetryAt.AsTime()) < 500*time.Millisecond || queued.RetryCount != 0 {
		t.Fatalf("requeued task: next %v retries %d", queued.NextRetryAt, queued.RetryCount)
	}
	var waited *agentmeshv1.TaskEvent
	for _, ev := range e.history(second.Id) {
		if ev.Status == taskstate.Queued && ev.NotBefore != nil {
			waited = ev
		}
	}
	if waited == nil || !strings.Contains(waited.Reason, "rate limit key.limited") {
		t.Fatalf("no rate-limit wait in the history: %v", waited)
	}
	if n := counterValue(t, metrics.ModelRateLimitWaits.WithLabelValues("key", "requeued")) - before; n != 1 {
		t.Errorf("%v requeued waits counted, want 1", n)
	}
	// The scheduler's part: dispatch it again once its time has come.
	time.Sleep(time.Until(queued.NextRetryAt.AsTime()))
	e.publishWork(e.assign(second.Id))
	e.waitStatus(second.Id, taskstate.Completed, 30*time.Second)
	if model.RateLimited() != 0 || model.Requests() != 2 {
		t.Errorf("the model refused %d requests (of %d): the limit did not hold", model.RateLimited(), model.Requests())
	}
}

// A rate-limit wait in the middle of a conversation (the agent process
// running, a turn and a tool call checkpointed): the process is let go,
// the task waits in the queue, and its next attempt replays the turn it
// paid for — the model is not asked it again — then takes its slot.
func TestRateLimitWaitMidConversation(t *testing.T) {
	e := newEnv(t)
	model, url := startScripted(t, `{"rate_limit": {"requests": 1, "window_ms": 1500}, "scenarios": [{"turns": [
	  {"tool_calls": [{"name": "echo", "arguments": {"text": "first"}}]},
	  {"content": "then {{last_tool_result}}"}]}]}`)
	e.cfg.Model.Table = modelTable(t, fmt.Sprintf("models:\n  limited: {base_url: %q, no_key: true, limits: {requests_per_minute: 1}}\n", url))
	e.cfg.LimitWindow = 1500 * time.Millisecond
	e.cfg.Model.WaitInPlace = 50 * time.Millisecond
	e.startExecutor()
	task := e.submitTask(&agentmeshv1.Task{Input: "go", AgentSpec: withModel(&agentmeshv1.ModelSettings{Model: "limited"})})
	queued := e.waitStatus(task.Id, taskstate.Queued, 30*time.Second)
	if queued.NextRetryAt == nil || queued.StepCount != 3 {
		t.Fatalf("requeued with next %v and %d steps, want a time and 3 steps (turn, call, result)", queued.NextRetryAt, queued.StepCount)
	}
	time.Sleep(time.Until(queued.NextRetryAt.AsTime()))
	e.publishWork(e.assign(task.Id))
	got := e.waitStatus(task.Id, taskstate.Completed, 30*time.Second)
	if got.Result != "then first" {
		t.Errorf("result %q", got.Result)
	}
	if model.RequestsAt(0) != 1 || model.RequestsAt(1) != 1 || model.RateLimited() != 0 {
		t.Errorf("turn 0 asked %d times, turn 1 %d times, %d refused: want once each, none refused",
			model.RequestsAt(0), model.RequestsAt(1), model.RateLimited())
	}
}
