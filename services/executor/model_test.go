package executor_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	busv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/bus/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/poll"
	"github.com/agentmesh/agentmesh/pkg/scriptedmodel"
	"github.com/agentmesh/agentmesh/pkg/subjects"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"github.com/agentmesh/agentmesh/pkg/testlog"
	"github.com/agentmesh/agentmesh/services/executor/llm"
	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
)

// recorded is one request the scripted model received.
type recorded struct {
	at     time.Time
	auth   string
	body   map[string]any
	stream bool
}

// recordingModel serves script over real HTTP and records every chat
// request (time, Authorization header, body).
type recordingModel struct {
	srv *scriptedmodel.Server
	url string

	mu   sync.Mutex
	reqs []recorded
}

func newRecordingModel(t *testing.T, script string) *recordingModel {
	t.Helper()
	s, err := scriptedmodel.ParseScript([]byte(script))
	if err != nil {
		t.Fatal(err)
	}
	m := &recordingModel{srv: scriptedmodel.New(s, scriptedmodel.WithLogger(testlog.New(t)))}
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/chat/completions") {
			b, _ := io.ReadAll(r.Body)
			var body map[string]any
			_ = json.Unmarshal(b, &body)
			stream, _ := body["stream"].(bool)
			m.mu.Lock()
			m.reqs = append(m.reqs, recorded{at: time.Now(), auth: r.Header.Get("Authorization"), body: body, stream: stream})
			m.mu.Unlock()
			r.Body = io.NopCloser(bytes.NewReader(b))
		}
		m.srv.ServeHTTP(w, r)
	}))
	t.Cleanup(hs.Close)
	m.url = hs.URL + "/v1"
	return m
}

func (m *recordingModel) requests() []recorded {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]recorded(nil), m.reqs...)
}

// submitTask creates task (org acme) with its own agent spec and budget,
// assigns it and publishes its work.
func (e *env) submitTask(task *agentmeshv1.Task) *agentmeshv1.Task {
	e.t.Helper()
	if task.Org == "" {
		task.Org = "acme"
	}
	if task.AgentSpec == nil {
		task.AgentSpec = agent
	}
	task.Agent = task.AgentSpec.Name
	if task.RetryPolicy == nil {
		task.RetryPolicy = oneAttempt
	}
	var created busv1.CreateTaskResponse
	if err := bus.Request(context.Background(), e.nc, e.names.State(subjects.StateCreateTask), &busv1.CreateTaskRequest{Task: task}, &created); err != nil {
		e.t.Fatalf("create task: %v", err)
	}
	assigned := e.assign(created.Task.Id)
	e.publishWork(assigned)
	return assigned
}

func withModel(settings *agentmeshv1.ModelSettings) *agentmeshv1.Agent {
	a := proto.Clone(agent).(*agentmeshv1.Agent)
	a.Model = settings
	return a
}

func wantFailure(t *testing.T, got *agentmeshv1.Task, kind agentmeshv1.FailureKind, parts ...string) {
	t.Helper()
	if got.FailureKind != kind {
		t.Errorf("failure kind = %v, want %v (error %q)", got.FailureKind, kind, got.Error)
	}
	for _, p := range parts {
		if !strings.Contains(got.Error, p) {
			t.Errorf("error %q does not contain %q", got.Error, p)
		}
	}
}

const reactScript = `{"scenarios": [
  {"match": "^react ok", "turns": [
    {"content": "{\"thought\": \"I should echo\", \"action\": {\"tool\": \"echo\", \"arguments\": {\"text\": \"ping\"}}}"},
    {"content": "` + "```json\\n" + `{\"thought\": \"done\", \"final_answer\": \"the echo said pong\"}\n` + "```" + `"}
  ]},
  {"match": "^react repaired", "turns": [
    {"content": "I think the answer is 4."},
    {"content": "{\"final_answer\": \"4\"}"}
  ]},
  {"match": "^react hopeless", "turns": [
    {"content": "{\"thought\": \"hm\", \"action\": {\"tool\": \"echo\", \"arguments\": {\"text\": \"x\"}}, \"final_answer\": \"both\"}"},
    {"content": "{\"thought\": 42, \"final_answer\": \"still wrong\"}"}
  ]}
]}`

func TestReActAgentCompletesThroughTool(t *testing.T) {
	e := newEnv(t)
	m := newRecordingModel(t, reactScript)
	e.cfg.Model.BaseURL = m.url
	e.startExecutor()
	a := withModel(&agentmeshv1.ModelSettings{ToolProtocol: "react"})
	task := e.submitTask(&agentmeshv1.Task{Input: "react ok please", AgentSpec: a})
	got := e.waitStatus(task.Id, taskstate.Completed, 20*time.Second)
	if got.Result != "the echo said pong" {
		t.Errorf("result = %q", got.Result)
	}
	st := steps(e.history(task.Id))
	if len(st) != 4 {
		t.Fatalf("%d steps, want 4 (turn, call, result, turn): %v", len(st), st)
	}
	if c := st[0].ToolCalls; len(c) != 1 || c[0].Name != "echo" || c[0].Arguments != `{"text":"ping"}` || !strings.HasPrefix(c[0].Id, "react_") || st[0].Content != "I should echo" {
		t.Errorf("model turn = %v", st[0])
	}
	if st[2].Kind != agentmeshv1.StepKind_STEP_KIND_TOOL_RESULT || st[2].Content != "ping" || st[2].IsError {
		t.Errorf("tool result = %v", st[2])
	}
	reqs := m.requests()
	if len(reqs) != 2 {
		t.Fatalf("%d model requests, want 2", len(reqs))
	}
	for i, r := range reqs {
		if _, ok := r.body["tools"]; ok {
			t.Errorf("request %d offered native tools to a ReAct model", i)
		}
		msgs, _ := r.body["messages"].([]any)
		sys, _ := msgs[0].(map[string]any)
		if c, _ := sys["content"].(string); sys["role"] != "system" || !strings.Contains(c, "You are a helpful agent.") || !strings.Contains(c, `"final_answer"`) || !strings.Contains(c, "- echo: ") {
			t.Errorf("request %d system message = %v", i, sys)
		}
		for _, raw := range msgs {
			if mm, _ := raw.(map[string]any); mm["role"] == "tool" || mm["tool_calls"] != nil {
				t.Errorf("request %d holds a native tool message: %v", i, mm)
			}
		}
	}
	// The second request renders the tool call and its result as text.
	msgs, _ := reqs[1].body["messages"].([]any)
	var text []string
	for _, raw := range msgs {
		mm, _ := raw.(map[string]any)
		c, _ := mm["content"].(string)
		text = append(text, fmt.Sprint(mm["role"], ": ", c))
	}
	joined := strings.Join(text, "\n")
	if !strings.Contains(joined, `assistant: {"thought":"I should echo","action":{"tool":"echo","arguments":{"text":"ping"}}}`) ||
		!strings.Contains(joined, "user: Observation from echo (call react_") || !strings.HasSuffix(joined, "\nping") {
		t.Errorf("conversation of the second request:\n%s", joined)
	}
}

func TestReActInvalidOutputGetsOneRepairTurn(t *testing.T) {
	e := newEnv(t)
	m := newRecordingModel(t, reactScript)
	e.cfg.Model.BaseURL = m.url
	e.startExecutor()
	a := withModel(&agentmeshv1.ModelSettings{ToolProtocol: "react"})

	ok := e.submitTask(&agentmeshv1.Task{Input: "react repaired", AgentSpec: a})
	got := e.waitStatus(ok.Id, taskstate.Completed, 20*time.Second)
	if got.Result != "4" {
		t.Errorf("result = %q", got.Result)
	}
	reqs := m.requests()
	if len(reqs) != 2 {
		t.Fatalf("%d model requests, want 2 (the turn and one repair)", len(reqs))
	}
	msgs, _ := reqs[1].body["messages"].([]any)
	last, _ := msgs[len(msgs)-1].(map[string]any)
	if c, _ := last["content"].(string); last["role"] != "user" || !strings.Contains(c, "not valid") || !strings.Contains(c, "one JSON object") {
		t.Errorf("repair message = %v", last)
	}
	// One model turn recorded, with the usage of both calls.
	st := steps(e.history(ok.Id))
	if len(st) != 1 || st[0].Usage.GetTotalTokens() == 0 {
		t.Errorf("steps = %v", st)
	}

	bad := e.submitTask(&agentmeshv1.Task{Input: "react hopeless", AgentSpec: a})
	failed := e.waitStatus(bad.Id, taskstate.Failed, 20*time.Second)
	wantFailure(t, failed, agentmeshv1.FailureKind_FAILURE_KIND_MODEL, "after one repair turn", `"thought" must be a string`)
	if n := len(m.requests()) - 2; n != 2 {
		t.Errorf("%d model requests for the hopeless task, want 2 (no more than one repair)", n)
	}
}

func TestRetryAfterHonoured(t *testing.T) {
	e := newEnv(t)
	m := newRecordingModel(t, `[{"turns": [{"content": "patience pays", "status": 429, "times": 1, "retry_after": "2"}]}]`)
	e.cfg.Model.BaseURL = m.url
	e.startExecutor()
	task := e.submitTask(&agentmeshv1.Task{Input: "hi"})
	got := e.waitStatus(task.Id, taskstate.Completed, 20*time.Second)
	if got.Result != "patience pays" {
		t.Errorf("result = %q", got.Result)
	}
	reqs := m.requests()
	if len(reqs) != 2 {
		t.Fatalf("%d requests, want 2", len(reqs))
	}
	// The executor's own backoff is 250 ms: only Retry-After makes it wait 2 s.
	if gap := reqs[1].at.Sub(reqs[0].at); gap < 1900*time.Millisecond || gap > 10*time.Second {
		t.Errorf("retried after %v, want about 2s (Retry-After)", gap)
	}
	if !reqs[0].stream || !reqs[1].stream {
		t.Error("the model was not called with stream: true")
	}
}

func TestModelDownFailsWithKindModel(t *testing.T) {
	e := newEnv(t)
	m := newRecordingModel(t, `[{"turns": [{"content": "never", "status": 503}]}]`)
	e.cfg.Model.BaseURL = m.url
	e.startExecutor()
	task := e.submitTask(&agentmeshv1.Task{Input: "hi"})
	got := e.waitStatus(task.Id, taskstate.Failed, 20*time.Second)
	wantFailure(t, got, agentmeshv1.FailureKind_FAILURE_KIND_MODEL, "model call failed", "503", "(3 attempts)")
	if n := len(m.requests()); n != 3 {
		t.Errorf("%d requests, want 3 (one try, two retries)", n)
	}
}

// budgetScript: every turn calls echo and uses 1000 prompt + 1000
// completion tokens.
const budgetScript = `[{"turns": [
  {"tool_calls": [{"name": "echo", "arguments": {"text": "a"}}], "usage": {"prompt_tokens": 1000, "completion_tokens": 1000}},
  {"tool_calls": [{"name": "echo", "arguments": {"text": "b"}}], "usage": {"prompt_tokens": 1000, "completion_tokens": 1000}},
  {"tool_calls": [{"name": "echo", "arguments": {"text": "c"}}], "usage": {"prompt_tokens": 1000, "completion_tokens": 1000}},
  {"content": "finally", "usage": {"prompt_tokens": 1000, "completion_tokens": 1000}}
]}]`

func TestBudgets(t *testing.T) {
	tests := []struct {
		name     string
		budget   *agentmeshv1.Budget
		requests int
		want     []string
	}{
		{"max_tokens", &agentmeshv1.Budget{MaxTokens: 3000}, 2, []string{"budget exhausted: 4000 tokens used, max_tokens 3000"}},
		// 1000 × $10/1M + 1000 × $30/1M = $0.04 a turn.
		{"max_cost_usd", &agentmeshv1.Budget{MaxCostUsd: 0.1}, 3, []string{"budget exhausted: $0.12 spent, max_cost_usd 0.1"}},
		{"max_steps", &agentmeshv1.Budget{MaxSteps: 2}, 2, []string{"budget exhausted: 2 steps used, max_steps 2"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			m := newRecordingModel(t, budgetScript)
			e.cfg.Model.BaseURL = m.url
			e.cfg.Model.Prices = llm.Prices{"costly": {PromptPerM: 10, CompletionPerM: 30}}
			e.startExecutor()
			task := e.submitTask(&agentmeshv1.Task{Input: "spend", Budget: tt.budget, AgentSpec: withModel(&agentmeshv1.ModelSettings{Model: "costly"})})
			got := e.waitStatus(task.Id, taskstate.Failed, 20*time.Second)
			wantFailure(t, got, agentmeshv1.FailureKind_FAILURE_KIND_BUDGET, tt.want...)
			if n := len(m.requests()); n != tt.requests {
				t.Errorf("%d model requests, want %d", n, tt.requests)
			}
			// What was paid for is on the task.
			if u := got.Usage; u.GetTotalTokens() != int64(2000*tt.requests) {
				t.Errorf("task usage = %v, want %d tokens", u, 2000*tt.requests)
			}
			evs := e.history(task.Id)
			if last := evs[len(evs)-1]; last.FailureKind != agentmeshv1.FailureKind_FAILURE_KIND_BUDGET || last.Status != taskstate.Failed {
				t.Errorf("last event = %v", last)
			}
		})
	}
}

func TestWallTimeBudget(t *testing.T) {
	e := newEnv(t)
	m := newRecordingModel(t, `[{"turns": [{"content": "too late", "delay_ms": 20000}]}]`)
	e.cfg.Model.BaseURL = m.url
	e.startExecutor()
	began := time.Now()
	task := e.submitTask(&agentmeshv1.Task{Input: "slow", Budget: &agentmeshv1.Budget{MaxWallTime: durationpb.New(time.Second)}})
	got := e.waitStatus(task.Id, taskstate.Failed, 15*time.Second)
	wantFailure(t, got, agentmeshv1.FailureKind_FAILURE_KIND_BUDGET, "budget exhausted", "max_wall_time 1s")
	if d := time.Since(began); d > 15*time.Second { // the turn takes 20s: it was cut, not waited for
		t.Errorf("failed after %v", d)
	}
}

func TestCostPerStepAndTask(t *testing.T) {
	e := newEnv(t)
	m := newRecordingModel(t, `[{"turns": [
	  {"tool_calls": [{"name": "echo", "arguments": {"text": "a"}}], "usage": {"prompt_tokens": 1000, "completion_tokens": 200}},
	  {"content": "done", "usage": {"prompt_tokens": 3000, "completion_tokens": 500}}
	]}]`)
	e.cfg.Model.BaseURL = m.url
	prices, err := llm.ParsePrices("gpt-4o-mini=0.15/0.60, other=1/1")
	if err != nil {
		t.Fatal(err)
	}
	e.cfg.Model.Prices = prices
	e.startExecutor()
	task := e.submitTask(&agentmeshv1.Task{Input: "price me", AgentSpec: withModel(&agentmeshv1.ModelSettings{Model: "gpt-4o-mini"})})
	got := e.waitStatus(task.Id, taskstate.Completed, 20*time.Second)
	want1 := (1000*0.15 + 200*0.60) / 1e6
	want2 := (3000*0.15 + 500*0.60) / 1e6
	var turns []*agentmeshv1.Step
	for _, s := range steps(e.history(task.Id)) {
		if s.Kind == agentmeshv1.StepKind_STEP_KIND_MODEL_TURN {
			turns = append(turns, s)
		}
	}
	if len(turns) != 2 {
		t.Fatalf("%d model turns", len(turns))
	}
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-12 }
	if !near(turns[0].Usage.GetCostUsd(), want1) || !near(turns[1].Usage.GetCostUsd(), want2) {
		t.Errorf("step costs = %v, %v; want %v, %v", turns[0].Usage.GetCostUsd(), turns[1].Usage.GetCostUsd(), want1, want2)
	}
	if !near(got.Usage.GetCostUsd(), want1+want2) || got.Usage.GetTotalTokens() != 4700 {
		t.Errorf("task usage = %v, want cost %v and 4700 tokens", got.Usage, want1+want2)
	}

	// A model the table does not price costs nothing.
	free := e.submitTask(&agentmeshv1.Task{Input: "price me", AgentSpec: withModel(&agentmeshv1.ModelSettings{Model: "unpriced"})})
	if u := e.waitStatus(free.Id, taskstate.Completed, 20*time.Second).Usage; u.GetCostUsd() != 0 || u.GetTotalTokens() != 4700 {
		t.Errorf("unpriced usage = %v", u)
	}
}

func TestTokensStreamOnTheBus(t *testing.T) {
	e := newEnv(t)
	answer := strings.Repeat("streamed words arrive one by one; ", 12)
	m := newRecordingModel(t, fmt.Sprintf(`[{"turns": [{"content": %q, "chunk_delay_ms": 15}]}]`, answer))
	e.cfg.Model.BaseURL = m.url
	e.startExecutor()

	type got struct {
		ev *agentmeshv1.TaskEvent
		at time.Time
	}
	var mu sync.Mutex
	var tokens []got
	var firstStep time.Time
	sub, err := e.nc.Subscribe(e.names.TokensAll(), func(msg *nats.Msg) {
		ev := new(agentmeshv1.TaskEvent)
		if bus.DecodeEvent(msg.Data, ev) != nil {
			return
		}
		mu.Lock()
		tokens = append(tokens, got{ev, time.Now()})
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	ssub, err := e.nc.Subscribe(e.names.TaskEventsOfType(subjects.EventStep), func(*nats.Msg) {
		mu.Lock()
		if firstStep.IsZero() {
			firstStep = time.Now()
		}
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	defer ssub.Unsubscribe()

	task := e.submitTask(&agentmeshv1.Task{Input: "stream it"})
	done := e.waitStatus(task.Id, taskstate.Completed, 20*time.Second)
	if done.Result != answer {
		t.Fatalf("result = %q", done.Result)
	}
	// The step's event is published after its commit, which the task's
	// status may show first: wait until it has been delivered.
	poll.Until(t, 10*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		if firstStep.IsZero() {
			return fmt.Errorf("no step event delivered yet")
		}
		return nil
	})
	mu.Lock()
	defer mu.Unlock()
	var text strings.Builder
	for _, g := range tokens {
		ev := g.ev
		if ev.Type != agentmeshv1.EventType_EVENT_TYPE_TOKEN || ev.Seq != 0 || ev.TaskId != task.Id || ev.Attempt != 1 {
			t.Errorf("token event = %v", ev)
		}
		text.WriteString(ev.Token)
	}
	if text.String() != answer {
		t.Errorf("tokens = %q, want the answer %q", text.String(), answer)
	}
	// Batched (not one event per 16-byte chunk), yet several while it streams.
	if n := len(tokens); n < 3 || n >= len(answer)/16 {
		t.Errorf("%d token events for %d bytes in %d chunks", n, len(answer), len(answer)/16)
	}
	if len(tokens) > 0 && !tokens[0].at.Before(firstStep) {
		t.Errorf("the first token came at %v, after the model turn was checkpointed at %v", tokens[0].at, firstStep)
	}
	// Tokens are not history.
	for _, ev := range e.history(task.Id) {
		if ev.Type == agentmeshv1.EventType_EVENT_TYPE_TOKEN {
			t.Errorf("token event in the history: %v", ev)
		}
	}
}

func TestModelAPIKeySecret(t *testing.T) {
	e := newEnv(t)
	m := newRecordingModel(t, `[{"turns": [{"content": "keyed"}]}]`)
	e.cfg.Model.APIKey = "sk-executor"
	// The agents' model is on loopback: the operator allowlists it.
	e.cfg.Model.Allow = []string{strings.TrimSuffix(strings.TrimPrefix(m.url, "http://"), "/v1")}
	e.cfg.Model.LookupEnv = func(k string) (string, bool) {
		if k == "AGENTMESH_SECRET_ACME__TEAM_A_KEY" {
			return "sk-team-a", true
		}
		return "", false
	}
	e.startExecutor()

	// The agent's own base URL: the executor's key is not sent there, the
	// named secret is.
	ok := e.submitTask(&agentmeshv1.Task{Input: "hi", AgentSpec: withModel(&agentmeshv1.ModelSettings{BaseUrl: m.url, ApiKeySecret: "team-a-key"})})
	if r := e.waitStatus(ok.Id, taskstate.Completed, 20*time.Second).Result; r != "keyed" {
		t.Errorf("result = %q", r)
	}
	nokey := e.submitTask(&agentmeshv1.Task{Input: "hi", AgentSpec: withModel(&agentmeshv1.ModelSettings{BaseUrl: m.url})})
	e.waitStatus(nokey.Id, taskstate.Completed, 20*time.Second)
	reqs := m.requests()
	if len(reqs) != 2 || reqs[0].auth != "Bearer sk-team-a" || reqs[1].auth != "" {
		t.Errorf("authorization headers = %q", func() (a []string) {
			for _, r := range reqs {
				a = append(a, r.auth)
			}
			return
		}())
	}

	unknown := e.submitTask(&agentmeshv1.Task{Input: "hi", AgentSpec: withModel(&agentmeshv1.ModelSettings{BaseUrl: m.url, ApiKeySecret: "nope"})})
	got := e.waitStatus(unknown.Id, taskstate.Failed, 20*time.Second)
	wantFailure(t, got, agentmeshv1.FailureKind_FAILURE_KIND_AGENT, `api_key_secret "nope"`, "AGENTMESH_SECRET_ACME__NOPE is not set")

	// Another org naming acme's secret (at a URL of its choosing) does not
	// get it: secrets resolve among the task's org's only.
	other := e.submitTask(&agentmeshv1.Task{Org: "globex", Input: "hi", AgentSpec: withModel(&agentmeshv1.ModelSettings{BaseUrl: m.url, ApiKeySecret: "team-a-key"})})
	got = e.waitStatus(other.Id, taskstate.Failed, 20*time.Second)
	wantFailure(t, got, agentmeshv1.FailureKind_FAILURE_KIND_AGENT, `api_key_secret "team-a-key" is unknown to org globex`, "AGENTMESH_SECRET_GLOBEX__TEAM_A_KEY is not set")
	if len(m.requests()) != 2 {
		t.Error("the model was called for a task whose key is unknown")
	}
}

func TestFailureKinds(t *testing.T) {
	e := newEnv(t)
	e.cfg.WallTime = time.Second
	e.startExecutor()
	slow := e.submit("slow please")
	crash := e.submit("please " + CrashMarker)
	wantFailure(t, e.waitStatus(slow.Id, taskstate.Failed, 15*time.Second), agentmeshv1.FailureKind_FAILURE_KIND_TIMEOUT, "wall time 1s exceeded")
	wantFailure(t, e.waitStatus(crash.Id, taskstate.Failed, 15*time.Second), agentmeshv1.FailureKind_FAILURE_KIND_INTERNAL, "agent process exited with status 2")
}
