package e2e

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/busauth"
	"github.com/agentmesh/agentmesh/pkg/modeltable"
	"github.com/agentmesh/agentmesh/pkg/scriptedmodel"
	"github.com/agentmesh/agentmesh/pkg/subjects"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"github.com/agentmesh/agentmesh/services/executor"
	"github.com/agentmesh/agentmesh/services/stack"
	"github.com/nats-io/nats.go"
)

// TestRateLimitAcrossExecutors: a planner fans out to 12 sub-tasks, all on
// one model whose key allows 6 requests a window (3 s here, a minute in
// production: the mechanism is the same), run by two executors. The model
// server is a provider that answers 429 past that limit. Every task
// completes; the provider never once answers 429 (the executors share the
// budget and space their calls); no window holds more than 6 requests;
// tasks that had to wait went back to the queue (their history says so)
// instead of holding a slot; both executors ran tasks.
func TestRateLimitAcrossExecutors(t *testing.T) {
	const subtasks, perWindow = 12, 6
	const window = 3 * time.Second
	var calls strings.Builder
	for i := range subtasks {
		if i > 0 {
			calls.WriteString(",")
		}
		fmt.Fprintf(&calls, `{"name": "call_agent", "arguments": {"agent": "rl-worker", "input": "part %d"}}`, i)
	}
	script := fmt.Sprintf(`{"rate_limit": {"requests": %d, "window_ms": %d}, "scenarios": [
	  {"match": "^fan out", "turns": [
	    {"content": "Fanning out.", "tool_calls": [%s]},
	    {"content": "Waiting.", "tool_calls": [{"name": "wait_tasks", "arguments": {}}]},
	    {"content": "all done"}]},
	  {"match": "^part", "turns": [{"content": "did {{input}}"}]}
	]}`, perWindow, window.Milliseconds(), calls.String())
	sc, err := scriptedmodel.ParseScript([]byte(script))
	if err != nil {
		t.Fatal(err)
	}
	model := scriptedmodel.New(sc)
	url, err := model.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = model.Close() })
	table, err := modeltable.Parse([]byte(fmt.Sprintf(`{"models": {"limited": {"base_url": %q, "no_key": true, "model": "scripted",
	  "limits": {"requests_per_minute": %d}}}}`, url, perWindow)))
	if err != nil {
		t.Fatal(err)
	}
	limits := func(node string) func(*executor.Config) {
		return func(c *executor.Config) {
			c.Node, c.Capacity = node, 4
			c.Model.BaseURL, c.Model.Table = url, table
			c.Model.WaitInPlace = time.Second
			c.LimitWindow = window
		}
	}
	e := start(t, opts{script: script, executor: limits("rl-node-1")})
	secondExecutor(t, e, limits("rl-node-2"))

	model1 := &agentmeshv1.ModelSettings{Model: "limited"}
	e.createAgentWith(t, &agentmeshv1.Agent{Name: "rl-planner", Tools: []string{"call_agent", "wait_tasks"}, Model: model1, MaxSteps: 10})
	e.createAgentWith(t, &agentmeshv1.Agent{Name: "rl-worker", Tools: []string{"echo"}, Model: model1})
	parent := e.submit(t, &agentmeshv1.SubmitTaskRequest{Input: "fan out", Agent: "rl-planner"})
	done := e.waitStatus(t, parent.Id, taskstate.Completed, 3*time.Minute)
	if done.Result != "all done" {
		t.Errorf("result %q", done.Result)
	}
	subs := e.subtasks(t, parent.Id)
	nodes, waited := map[string]int{}, 0
	for _, s := range subs {
		if s.Status != taskstate.Completed {
			t.Errorf("sub-task %s is %s (%s)", s.Id, taskstate.Name(s.Status), s.Error)
		}
		nodes[s.Node]++
		for _, ev := range e.history(t, s.Id) {
			if ev.Status == taskstate.Queued && ev.NotBefore != nil && strings.Contains(ev.Reason, "rate limit key.limited") {
				waited++
			}
		}
	}
	if len(subs) != subtasks {
		t.Fatalf("%d sub-tasks, want %d", len(subs), subtasks)
	}
	if n := model.RateLimited(); n != 0 {
		t.Errorf("the provider answered 429 %d times: the limit did not hold across the executors", n)
	}
	// Slots are spaced exactly; a request leaves a few ms after its slot.
	if most := mostInWindow(model.RequestTimes(), window-150*time.Millisecond); most > perWindow {
		t.Errorf("%d requests in one window, limit %d", most, perWindow)
	}
	if waited == 0 {
		t.Error("no sub-task waited in the queue for its slot")
	}
	if len(nodes) < 2 {
		t.Errorf("sub-tasks ran on %v: want both executors", nodes)
	}
	t.Logf("%d model requests, %d waits in the queue, nodes %v", len(model.RequestTimes()), waited, nodes)
}

// secondExecutor runs another executor on e's bus, with e's settings as
// change makes them.
func secondExecutor(t *testing.T, e *env, change func(*executor.Config)) {
	t.Helper()
	creds, err := e.stack.Auth().Creds(subjects.ServiceExecutor)
	if err != nil {
		t.Fatal(err)
	}
	cfg := stack.Config{Log: logger(), Dial: func(ctx context.Context, service string) (*nats.Conn, error) {
		opts, err := busauth.ClientOptions(creds, service, logger())
		if err != nil {
			return nil, err
		}
		return nats.Connect(e.stack.NATSURL(), opts...)
	}}
	cfg.Executor.ChildCommand = []string{os.Args[0]}
	cfg.Executor.WallTime = 2 * time.Minute
	cfg.Executor.DrainGrace = time.Second
	change(&cfg.Executor)
	ctx, cancel := context.WithCancel(context.Background())
	st, err := stack.NewService(ctx, subjects.ServiceExecutor, cfg)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- st.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Error("the second executor did not stop")
		}
	})
}

// mostInWindow is the most requests in any window [t, t+w).
func mostInWindow(times []time.Time, w time.Duration) int {
	most := 0
	for _, a := range times {
		n := 0
		for _, b := range times {
			if !b.Before(a) && b.Sub(a) < w {
				n++
			}
		}
		most = max(most, n)
	}
	return most
}
