package executor_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/poll"
	"github.com/agentmesh/agentmesh/pkg/scriptedmodel"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"github.com/agentmesh/agentmesh/pkg/testlog"
	"github.com/agentmesh/agentmesh/services/executor"
	"github.com/agentmesh/agentmesh/services/executor/webfetch"
	"github.com/agentmesh/agentmesh/services/state"
	"github.com/agentmesh/agentmesh/services/state/kvstore"
)

// counting passes records on and counts those whose message contains
// substr.
type counting struct {
	slog.Handler
	substr string
	n      *atomic.Int64
}

func (c counting) Handle(ctx context.Context, r slog.Record) error {
	if strings.Contains(r.Message, c.substr) {
		c.n.Add(1)
	}
	return c.Handler.Handle(ctx, r)
}

func (c counting) WithAttrs(as []slog.Attr) slog.Handler {
	return counting{Handler: c.Handler.WithAttrs(as), substr: c.substr, n: c.n}
}

func (c counting) WithGroup(name string) slog.Handler {
	return counting{Handler: c.Handler.WithGroup(name), substr: c.substr, n: c.n}
}

// A step checkpoint that cannot be written because the state service is
// down is sent again until state is back: the attempt goes on, and every
// model turn is asked exactly once (invariant 10, "paid once"). Before,
// the failed checkpoint threw the attempt away and the next attempt asked
// the model again for the answer it had already given.
func TestCheckpointSurvivesStateRestart(t *testing.T) {
	e := newEnv(t)
	var retries atomic.Int64
	e.log = slog.New(counting{Handler: testlog.New(t).Handler(), substr: "checkpoint not answered", n: &retries})

	// A model of our own whose first turn takes a while: the state service
	// is stopped while the model thinks.
	model := e.useScript(`{"scenarios": [{"turns": [
	  {"content": "let me echo", "delay_ms": 700, "tool_calls": [{"name": "echo", "arguments": {"text": "{{input}}"}}]},
	  {"content": "done: {{last_tool_result}}"}
	]}]}`)

	// A second state service on the same store, which this test stops and
	// starts; the one newEnv started is stopped first.
	startState := e.restartableState()
	stopState := startState()
	e.startExecutor()

	task := e.submit("blip")
	// Stop state while the model is answering turn 0 (a stopping state
	// service answers what it has in flight, then takes nothing more).
	poll.Until(t, 30*time.Second, func() error {
		if model.RequestsAt(0) == 0 {
			return fmt.Errorf("the model has not been asked yet")
		}
		return nil
	})
	stopState()
	// The checkpoint of the answer fails and is retried...
	poll.Until(t, 30*time.Second, func() error {
		if retries.Load() < 1 {
			return fmt.Errorf("%d checkpoint retries so far", retries.Load())
		}
		return nil
	})
	// ...until state is back.
	startState()
	got := e.waitStatus(task.Id, taskstate.Completed, 60*time.Second)

	if got.Attempt != 1 {
		t.Errorf("attempt %d, want 1 (the attempt went on)", got.Attempt)
	}
	for turn := range 2 {
		if n := model.RequestsAt(turn); n != 1 {
			t.Errorf("model turn %d asked %d times, want once", turn, n)
		}
	}
	seen := map[int32]int{}
	for _, st := range steps(e.history(task.Id)) {
		seen[st.Index]++
		if seen[st.Index] > 1 {
			t.Errorf("step %d recorded twice", st.Index)
		}
	}
	if len(seen) != 4 { // model turn, tool call, tool result, model turn
		t.Errorf("steps %v, want 4", seen)
	}
	if !strings.Contains(got.Result, "done: ") {
		t.Errorf("result %q", got.Result)
	}
}

// web_fetch, run by the executor for the child, sends the call's
// idempotency key — <task id>:<tool call id>, the key its TOOL_CALL step
// records — as the Idempotency-Key header to a real HTTP server.
func TestWebFetchSendsIdempotencyKey(t *testing.T) {
	e := newEnv(t)
	keys := make(chan string, 4)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		keys <- r.Header.Get("Idempotency-Key")
		fmt.Fprint(w, "charged")
	}))
	t.Cleanup(hs.Close)
	fns, closeTools, err := executor.PrivilegedTools(context.Background(), executor.ToolsConfig{
		WebFetch: webfetch.Config{Allow: []string{hs.Listener.Addr().String()}},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeTools)
	e.cfg.Tools = fns

	e.useScript(`{"scenarios": [{"turns": [
	  {"tool_calls": [{"id": "call_pay", "name": "web_fetch", "arguments": {"url": "` + hs.URL + `/pay", "method": "POST", "body": "1 EUR"}}]},
	  {"content": "paid: {{last_tool_result}}"}
	]}]}`)
	e.startExecutor()

	saved := agent
	agent = &agentmeshv1.Agent{Name: "payer", SystemPrompt: "You pay.", Tools: []string{"web_fetch"}}
	task := e.submit("pay 1 EUR")
	agent = saved
	e.waitStatus(task.Id, taskstate.Completed, 60*time.Second)
	var recorded string
	for _, st := range steps(e.history(task.Id)) {
		if st.Kind == agentmeshv1.StepKind_STEP_KIND_TOOL_CALL {
			recorded = st.IdempotencyKey
		}
	}
	select {
	case got := <-keys:
		if want := task.Id + ":call_pay"; got != want || recorded != want {
			t.Fatalf("server got Idempotency-Key %q, step recorded %q; want %q", got, recorded, want)
		}
	default:
		t.Fatal("the server was never called")
	}
}

// useScript points the executor at a scripted model of its own, serving
// script, and returns it.
func (e *env) useScript(script string) *scriptedmodel.Server {
	e.t.Helper()
	s, err := scriptedmodel.ParseScript([]byte(script))
	if err != nil {
		e.t.Fatal(err)
	}
	model := scriptedmodel.New(s, scriptedmodel.WithLogger(e.log))
	url, err := model.Start("127.0.0.1:0")
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { model.Close() })
	e.model = model
	e.cfg.Model.BaseURL = url
	return model
}

// restartableState stops the state service newEnv started and returns a
// starter of another on a store of its own that outlives it, so a test can
// stop and start state (an outage) without losing the record.
func (e *env) restartableState() (start func() (stop func())) {
	e.t.Helper()
	ctx := context.Background()
	st, err := kvstore.Open(ctx, e.js, e.names, kvstore.Options{Memory: true})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { st.Close() })
	e.stopState()
	return func() (stop func()) {
		svc, err := state.New(ctx, state.Config{Prefix: "am", Streams: bus.StreamOptions{Memory: true}}, state.Deps{NC: e.nc, Store: st, Log: e.log})
		if err != nil {
			e.t.Fatalf("state.New: %v", err)
		}
		return runService(e.t, svc.Run)
	}
}
