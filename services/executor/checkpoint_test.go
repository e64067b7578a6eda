package executor_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/poll"
	"github.com/agentmesh/agentmesh/pkg/scriptedmodel"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
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
	e.log = slog.New(counting{Handler: testLog().Handler(), substr: "checkpoint not answered", n: &retries})

	// A model of our own whose first turn takes a while: the state service
	// is stopped while the model thinks.
	s, err := scriptedmodel.ParseScript([]byte(`{"scenarios": [{"turns": [
	  {"content": "let me echo", "delay_ms": 700, "tool_calls": [{"name": "echo", "arguments": {"text": "{{input}}"}}]},
	  {"content": "done: {{last_tool_result}}"}
	]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	model := scriptedmodel.New(s)
	url, err := model.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { model.Close() })
	e.cfg.Model.BaseURL = url

	// A second state service on the same store, which this test stops and
	// starts; the one newEnv started is stopped first.
	ctx := context.Background()
	st, err := kvstore.Open(ctx, e.js, e.names, kvstore.Options{Memory: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	startState := func() (stop func()) {
		svc, err := state.New(ctx, state.Config{Prefix: "am", Streams: bus.StreamOptions{Memory: true}}, state.Deps{NC: e.nc, Store: st, Log: e.log})
		if err != nil {
			t.Fatalf("state.New: %v", err)
		}
		return runService(t, svc.Run)
	}
	e.stopState()
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
