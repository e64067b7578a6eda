package executor_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	busv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/bus/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/embednats"
	"github.com/agentmesh/agentmesh/pkg/metrics"
	"github.com/agentmesh/agentmesh/pkg/natstest"
	"github.com/agentmesh/agentmesh/pkg/poll"
	"github.com/agentmesh/agentmesh/pkg/scriptedmodel"
	"github.com/agentmesh/agentmesh/pkg/subjects"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"github.com/agentmesh/agentmesh/pkg/testlog"
	"github.com/agentmesh/agentmesh/services/executor"
	"github.com/agentmesh/agentmesh/services/executor/llm"
	"github.com/agentmesh/agentmesh/services/executor/sandbox"
	"github.com/agentmesh/agentmesh/services/state"
	"github.com/agentmesh/agentmesh/services/state/kvstore"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/proto"
)

const script = `{"scenarios": [
  {"match": "^what time", "turns": [
    {"content": "checking", "tool_calls": [{"name": "current_time", "arguments": {"timezone": "UTC"}}]},
    {"content": "It is {{last_tool_result}}."}
  ]},
  {"match": "^echo:", "turns": [
    {"tool_calls": [{"name": "echo", "arguments": {"text": "{{input}}"}}]},
    {"content": "the tool said {{last_tool_result}}"}
  ]},
  {"match": "^slow", "turns": [{"content": "too late", "delay_ms": 20000}]},
  {"match": "^brief", "turns": [{"content": "done in time", "delay_ms": 1500}]},
  {"match": "^garbage", "turns": [{"content": "x", "garbage": true}]},
  {"turns": [{"content": "hello"}]}
]}`

type env struct {
	t *testing.T
	// nc is the test driver's connection (it plays the router and the
	// scheduler); the state service and each executor connect as themselves.
	nc    *nats.Conn
	srv   *embednats.Server
	js    jetstream.JetStream
	names subjects.Names
	model *scriptedmodel.Server
	cfg   executor.Config
	log   *slog.Logger
	// stopState stops the state service newEnv started.
	stopState func()
	// dial connects a service's identity to the bus (startExecutor).
	dial func(service string) *nats.Conn
}

// newEnv starts NATS, the real state service on the embedded store, and
// the scripted model. The executor is started by startExecutor.
func newEnv(t *testing.T) *env {
	t.Helper()
	srv := natstest.Start(t)
	e := newEnvOn(t, natstest.Connect(t, srv), natstest.ConnectAs(t, srv, subjects.ServiceState),
		func(service string) *nats.Conn { return natstest.ConnectAs(t, srv, service) })
	e.srv = srv
	return e
}

// newEnvOn is newEnv on a bus of the caller's: nc is the test driver's
// connection, stateNC the state service's, dial connects the executors.
func newEnvOn(t *testing.T, nc, stateNC *nats.Conn, dial func(service string) *nats.Conn) *env {
	t.Helper()
	ctx := context.Background()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	stateJS, err := jetstream.New(stateNC)
	if err != nil {
		t.Fatal(err)
	}
	names := subjects.Must("am")
	log := testlog.New(t)
	st, err := kvstore.Open(ctx, stateJS, names, kvstore.Options{Memory: true})
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(func() { st.Close() })
	svc, err := state.New(ctx, state.Config{Prefix: "am", Streams: bus.StreamOptions{Memory: true}}, state.Deps{NC: stateNC, Store: st, Log: log})
	if err != nil {
		t.Fatalf("state.New: %v", err)
	}
	stopState := runService(t, svc.Run)

	s, err := scriptedmodel.ParseScript([]byte(script))
	if err != nil {
		t.Fatal(err)
	}
	model := scriptedmodel.New(s, scriptedmodel.WithLogger(log))
	url, err := model.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { model.Close() })

	return &env{t: t, nc: nc, dial: dial, js: js, names: names, model: model, log: log, stopState: stopState, cfg: executor.Config{
		Prefix:   "am",
		Node:     "node-1",
		Capacity: 4,
		// These tests count the agent processes: no warm pool (its own
		// tests are warm_test.go's and TestWarmPoolRunsTasks).
		WarmPool: -1,
		// Release tests release every waiting child unless they say
		// otherwise (TestFewWaitingChildrenAreKept).
		ReleaseAbove:      -1,
		ChildCommand:      []string{os.Args[0]},
		Model:             llm.Config{BaseURL: url, Model: "scripted", Timeout: 30 * time.Second, Retries: 2},
		WallTime:          30 * time.Second,
		AckWait:           5 * time.Second,
		HeartbeatInterval: 50 * time.Millisecond,
		Streams:           bus.StreamOptions{Memory: true},
	}}
}

// runService runs fn until the test ends (or stop is called) and checks
// it returns nil.
func runService(t *testing.T, fn func(context.Context) error) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- fn(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Run returned %v, want nil", err)
				}
			case <-time.After(15 * time.Second):
				t.Errorf("Run did not return after cancel")
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

func (e *env) startExecutor() (stop func()) {
	e.t.Helper()
	ex, err := executor.New(context.Background(), e.cfg, executor.Deps{NC: e.dial(subjects.ServiceExecutor), Log: e.log})
	if err != nil {
		e.t.Fatalf("executor.New: %v", err)
	}
	return runService(e.t, ex.Run)
}

// oneAttempt: these tests watch one attempt's outcome; no scheduler runs
// here to dispatch a retry (retries are the scheduler's and e2e's tests).
var oneAttempt = &agentmeshv1.RetryPolicy{MaxAttempts: 1}

var agent = &agentmeshv1.Agent{
	Name:         "helper",
	SystemPrompt: "You are a helpful agent.",
	Tools:        []string{"echo", "current_time"},
}

// submit does what the router and the scheduler do: create the task, move
// it to assigned with a new attempt, publish its work.
func (e *env) submit(input string) *agentmeshv1.Task {
	e.t.Helper()
	ctx := context.Background()
	var created busv1.CreateTaskResponse
	if err := bus.Request(ctx, e.nc, e.names.State(subjects.StateCreateTask), &busv1.CreateTaskRequest{Task: &agentmeshv1.Task{
		Org: "acme", Title: input, Input: input, Agent: agent.Name, AgentSpec: agent, RetryPolicy: oneAttempt,
	}}, &created); err != nil {
		e.t.Fatalf("create task: %v", err)
	}
	task := e.assign(created.Task.Id)
	e.publishWork(task)
	return task
}

func (e *env) assign(id string) *agentmeshv1.Task {
	e.t.Helper()
	var tr busv1.TransitionResponse
	if err := bus.Request(context.Background(), e.nc, e.names.State(subjects.StateDispatch), &busv1.TransitionRequest{
		TaskId: id, From: taskstate.Queued, To: taskstate.Assigned, NextAttempt: true,
	}, &tr); err != nil {
		e.t.Fatalf("assign: %v", err)
	}
	return tr.Task
}

func (e *env) publishWork(task *agentmeshv1.Task) {
	e.t.Helper()
	msg, err := bus.NewMsg(context.Background(), e.names.Work(task.Agent), &busv1.WorkItem{Task: task, Attempt: task.Attempt})
	if err != nil {
		e.t.Fatal(err)
	}
	msg.Header.Set(jetstream.MsgIDHeader, fmt.Sprintf("%s:%d", task.Id, task.Attempt))
	if _, err := e.js.PublishMsg(context.Background(), msg); err != nil {
		e.t.Fatalf("publish work: %v", err)
	}
}

func (e *env) get(id string) *agentmeshv1.Task {
	e.t.Helper()
	var resp busv1.GetTaskResponse
	if err := bus.Request(context.Background(), e.nc, e.names.State(subjects.StateGetTask), &busv1.GetTaskRequest{Id: id}, &resp); err != nil {
		e.t.Fatalf("get task: %v", err)
	}
	return resp.Task
}

func (e *env) history(id string) []*agentmeshv1.TaskEvent {
	e.t.Helper()
	var resp busv1.HistoryResponse
	if err := bus.Request(context.Background(), e.nc, e.names.State(subjects.StateHistory), &busv1.HistoryRequest{TaskId: id}, &resp); err != nil {
		e.t.Fatalf("history: %v", err)
	}
	return resp.Events
}

func (e *env) waitStatus(id string, want agentmeshv1.TaskStatus, timeout time.Duration) *agentmeshv1.Task {
	e.t.Helper()
	var task *agentmeshv1.Task
	poll.Until(e.t, timeout, func() error {
		task = e.get(id)
		if task.Status != want {
			return fmt.Errorf("task %s is %s (error %q), want %s", id, taskstate.Name(task.Status), task.Error, taskstate.Name(want))
		}
		return nil
	})
	return task
}

func steps(events []*agentmeshv1.TaskEvent) []*agentmeshv1.Step {
	var out []*agentmeshv1.Step
	for _, ev := range events {
		if ev.Type == agentmeshv1.EventType_EVENT_TYPE_STEP {
			out = append(out, ev.Step)
		}
	}
	return out
}

// liveParents maps every live (not zombie) process to its parent, from
// /proc.
func liveParents(t *testing.T) map[int]int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Skip("no /proc")
	}
	parent := map[int]int{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...; comm may hold spaces, so cut at the last ')'.
		s := string(b)
		fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(fields) > 1 && fields[0] != "Z" {
			parent[pid], _ = strconv.Atoi(fields[1])
		}
	}
	return parent
}

// children lists the live processes whose parent is this test process.
func children(t *testing.T) []int {
	t.Helper()
	all := liveParents(t)
	// The agent children are the test process's own (AGENTMESH_SPAWNER=
	// direct) or its spawner's (fork-server, the default).
	parents := map[int]bool{os.Getpid(): true}
	for pid, ppid := range all {
		if cmd, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline"); parents[ppid] && strings.HasSuffix(string(cmd), "\x00spawner\x00") {
			parents[pid] = true
		}
	}
	var out []int
	for pid, ppid := range all {
		if parents[ppid] && !parents[pid] {
			out = append(out, pid)
		}
	}
	slices.Sort(out)
	return out
}

func TestTaskCompletesWithToolCall(t *testing.T) {
	e := newEnv(t)
	e.startExecutor()
	task := e.submit("what time is it?")
	got := e.waitStatus(task.Id, taskstate.Completed, 20*time.Second)
	if !strings.HasPrefix(got.Result, "It is 20") || got.Node != "node-1" || got.Attempt != 1 {
		t.Errorf("completed task = result %q node %q attempt %d", got.Result, got.Node, got.Attempt)
	}
	if got.Isolation != sandbox.IsolationStrict {
		t.Errorf("isolation %q on the task, want %q", got.Isolation, sandbox.IsolationStrict)
	}
	if got.Usage.GetTotalTokens() == 0 || got.StepCount != 4 {
		t.Errorf("usage %v, step count %d; want tokens counted and 4 steps", got.Usage, got.StepCount)
	}

	events := e.history(task.Id)
	var kinds []string
	for _, ev := range events {
		if ev.Type == agentmeshv1.EventType_EVENT_TYPE_STEP {
			kinds = append(kinds, fmt.Sprintf("%d:%s", ev.Step.Index, strings.TrimPrefix(ev.Step.Kind.String(), "STEP_KIND_")))
		} else {
			kinds = append(kinds, taskstate.Name(ev.Status))
		}
	}
	want := "created queued assigned running 0:MODEL_TURN 1:TOOL_CALL 2:TOOL_RESULT 3:MODEL_TURN completed"
	if g := strings.Join(kinds, " "); g != want {
		t.Fatalf("history = %s\nwant      %s", g, want)
	}
	st := steps(events)
	if c := st[0].ToolCalls; len(c) != 1 || c[0].Name != "current_time" || st[0].Usage.GetTotalTokens() == 0 || st[0].Model != "scripted" {
		t.Errorf("model turn = %v", st[0])
	}
	if st[1].ToolName != "current_time" || st[1].Arguments != `{"timezone":"UTC"}` {
		t.Errorf("tool call = %v", st[1])
	}
	if _, err := time.Parse(time.RFC3339, st[2].Content); err != nil || st[2].IsError {
		t.Errorf("tool result %q is not an RFC 3339 time: %v", st[2].Content, err)
	}
	if got.Result != "It is "+st[2].Content+"." {
		t.Errorf("result %q does not use the tool result %q", got.Result, st[2].Content)
	}
	for _, s := range st {
		if s.Attempt != 1 {
			t.Errorf("step %d has attempt %d, want 1", s.Index, s.Attempt)
		}
	}
	if n := e.model.Requests(); n != 2 {
		t.Errorf("model calls = %d, want 2", n)
	}
}

func TestCrashedChildFailsOthersCarryOn(t *testing.T) {
	e := newEnv(t)
	e.startExecutor()
	crash := e.submit("please " + CrashMarker)
	ok := e.submit("echo: still here")
	failed := e.waitStatus(crash.Id, taskstate.Failed, 20*time.Second)
	if !strings.Contains(failed.Error, "agent process exited with status 2") || !strings.Contains(failed.Error, "simulated crash") {
		t.Errorf("reason = %q, want the exit status and the stderr tail", failed.Error)
	}
	done := e.waitStatus(ok.Id, taskstate.Completed, 20*time.Second)
	if done.Result != "the tool said echo: still here" {
		t.Errorf("result = %q", done.Result)
	}
	// The executor still takes new work after the crash.
	again := e.submit("hi")
	if r := e.waitStatus(again.Id, taskstate.Completed, 20*time.Second).Result; r != "hello" {
		t.Errorf("result = %q", r)
	}
}

func TestWallTimeExceeded(t *testing.T) {
	e := newEnv(t)
	e.cfg.WallTime = time.Second
	e.startExecutor()
	began := time.Now()
	task := e.submit("slow please")
	got := e.waitStatus(task.Id, taskstate.Failed, 25*time.Second)
	if got.Error != "wall time 1s exceeded" {
		t.Errorf("reason = %q, want %q", got.Error, "wall time 1s exceeded")
	}
	_ = began
	poll.Until(t, 5*time.Second, func() error {
		if c := children(t); len(c) > 0 {
			return fmt.Errorf("child processes still alive: %v", c)
		}
		return nil
	})
}

// A cancel stops the attempt at once: its child is killed when one runs
// beside the model call (releasing off), and the call itself is stopped
// when the attempt has no child yet (the first turn is asked before one
// starts, first.go).
func TestCancelKillsChild(t *testing.T) { childModes(t, testCancelKillsChild) }

// childModes runs test with a child beside a slow first model call
// (releasing off: one agent process) and with none yet (the default: the
// first turn is asked before the child starts).
func childModes(t *testing.T, test func(t *testing.T, releaseAfter time.Duration, children int)) {
	t.Run("child beside the call", func(t *testing.T) { test(t, -1, 1) })
	t.Run("no child yet", func(t *testing.T) { test(t, 0, 0) })
}

func testCancelKillsChild(t *testing.T, releaseAfter time.Duration, children0 int) {
	e := newEnv(t)
	e.cfg.ReleaseAfter = releaseAfter
	e.startExecutor()

	var mu sync.Mutex
	var last *busv1.ExecutorHeartbeat
	sub, err := e.nc.Subscribe(e.names.Heartbeat("node-1"), func(m *nats.Msg) {
		var hb busv1.ExecutorHeartbeat
		if proto.Unmarshal(m.Data, &hb) == nil {
			mu.Lock()
			last = &hb
			mu.Unlock()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()

	task := e.submit("slow please")
	e.waitStatus(task.Id, taskstate.Running, 10*time.Second)
	poll.Until(t, 10*time.Second, func() error {
		if e.model.Requests() == 0 {
			return errors.New("the model call has not started")
		}
		mu.Lock()
		defer mu.Unlock()
		if last == nil || last.Running != 1 || len(last.RunningTasks) != 1 || last.RunningTasks[0] != task.Id || last.Capacity != 4 {
			return fmt.Errorf("heartbeat = %v, want the task running", last)
		}
		// The child beside the call starts while the first turn, asked
		// ahead, is already with the model (a slow spawn under load).
		if n := len(children(t)); n != children0 {
			return fmt.Errorf("%d child processes, want %d", n, children0)
		}
		return nil
	})

	var tr busv1.TransitionResponse
	if err := bus.Request(context.Background(), e.nc, e.names.State(subjects.StateCancel), &busv1.TransitionRequest{
		TaskId: task.Id, Org: "acme", To: taskstate.Cancelled, Reason: "user changed their mind",
	}, &tr); err != nil {
		t.Fatalf("cancel: %v", err)
	}
	// The child dies, and the attempt ends, long before the scripted 20 s
	// delay ends.
	poll.Until(t, 5*time.Second, func() error {
		if c := children(t); len(c) > 0 {
			return fmt.Errorf("child processes still alive: %v", c)
		}
		mu.Lock()
		defer mu.Unlock()
		if last.Running != 0 {
			return fmt.Errorf("heartbeat still shows %d running", last.Running)
		}
		return nil
	})
	got := e.get(task.Id)
	if got.Status != taskstate.Cancelled || got.Error != "user changed their mind" {
		t.Errorf("task = %s %q, want cancelled with the user's reason", taskstate.Name(got.Status), got.Error)
	}
	evs := e.history(task.Id)
	if lastEv := evs[len(evs)-1]; lastEv.Status != taskstate.Cancelled || lastEv.Type != agentmeshv1.EventType_EVENT_TYPE_STATUS {
		t.Errorf("last event = %v, want the cancel", lastEv)
	}
}

func TestModelDownFailsAfterRetries(t *testing.T) {
	e := newEnv(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadURL := "http://" + ln.Addr().String() + "/v1"
	ln.Close()
	e.cfg.Model.BaseURL = deadURL
	e.startExecutor()
	var before dto.Metric
	if err := metrics.Spawn.Write(&before); err != nil {
		t.Fatal(err)
	}
	task := e.submit("hi")
	got := e.waitStatus(task.Id, taskstate.Failed, 20*time.Second)
	for _, want := range []string{"model call failed", deadURL, "connection refused", "(3 attempts)"} {
		if !strings.Contains(got.Error, want) {
			t.Errorf("reason %q does not contain %q", got.Error, want)
		}
	}
	if got.FailureKind != agentmeshv1.FailureKind_FAILURE_KIND_MODEL {
		t.Errorf("failure kind %s, want MODEL", got.FailureKind)
	}
	// The first model call is made before a child starts (first.go): its
	// failure ends the attempt without one.
	var after dto.Metric
	if err := metrics.Spawn.Write(&after); err != nil {
		t.Fatal(err)
	}
	if n := after.GetHistogram().GetSampleCount() - before.GetHistogram().GetSampleCount(); n != 0 {
		t.Errorf("%d agent processes spawned for an attempt whose model is down, want none", n)
	}
}

// An answer that does not parse is not asked again: the same server
// answers the same request the same way (issue 26 item 9). The task fails
// with a kind no retry policy retries.
func TestModelGarbageFailsFast(t *testing.T) {
	e := newEnv(t)
	e.startExecutor()
	task := e.submit("garbage please")
	got := e.waitStatus(task.Id, taskstate.Failed, 20*time.Second)
	if !strings.Contains(got.Error, "model call failed") || !strings.Contains(got.Error, "does not parse") || !strings.Contains(got.Error, "(1 attempts)") {
		t.Errorf("reason = %q", got.Error)
	}
	if got.FailureKind != agentmeshv1.FailureKind_FAILURE_KIND_MODEL_REJECTED {
		t.Errorf("failure kind = %v, want MODEL_REJECTED", got.FailureKind)
	}
	if n := e.model.Requests(); n != 1 {
		t.Errorf("model calls = %d, want 1 (no retry of an answer that does not parse)", n)
	}
}

// takenBySilent plays an executor of node that takes task's work, moves
// the task to running and is heard from no more (no ack, no in-progress
// signal); it returns the executors' consumer.
func (e *env) takenBySilent(task *agentmeshv1.Task, node string) jetstream.Consumer {
	e.t.Helper()
	cons, err := e.js.Consumer(context.Background(), e.names.WorkStream(), subjects.ConsumerExecutors)
	if err != nil {
		e.t.Fatal(err)
	}
	batch, err := cons.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		e.t.Fatal(err)
	}
	n := 0
	for range batch.Messages() {
		n++ // never acked
	}
	if n != 1 {
		e.t.Fatalf("fetched %d work items, want 1", n)
	}
	if err := bus.Request(context.Background(), e.nc, e.names.State(subjects.StateStart), &busv1.TransitionRequest{
		TaskId: task.Id, From: taskstate.Assigned, To: taskstate.Running, Attempt: 1, Node: node,
	}, &busv1.TransitionResponse{}); err != nil {
		e.t.Fatal(err)
	}
	return cons
}

// An executor took the work, moved the task to running and died without
// acking. The work comes back to the node's executor started again, which
// does not run that attempt: it re-queues the task for the scheduler to
// dispatch a new attempt. (An attempt of another node is left to that node
// and the scheduler: TestRedeliveredWorkOfAnotherNodeIsLeftToIt.)
func TestLostExecutorRequeues(t *testing.T) {
	e := newEnv(t)
	e.cfg.AckWait = time.Second
	// The consumer exists (New creates it) but nobody runs yet.
	if _, err := executor.New(context.Background(), e.cfg, executor.Deps{NC: natstest.ConnectAs(e.t, e.srv, subjects.ServiceExecutor), Log: e.log}); err != nil {
		t.Fatal(err)
	}
	task := e.submitTask(&agentmeshv1.Task{Input: "hi", RetryPolicy: &agentmeshv1.RetryPolicy{}}) // the default policy
	e.takenBySilent(task, e.cfg.Node)

	e.startExecutor()
	got := e.waitStatus(task.Id, taskstate.Queued, 15*time.Second)
	if got.Attempt != 1 || got.Node != "" {
		t.Errorf("re-queued task attempt %d node %q", got.Attempt, got.Node)
	}
	// A lost executor is a retried failure of kind EXECUTOR_LOST: the
	// history keeps it, the task shows the retry.
	if got.RetryCount != 1 || got.LastFailureKind != agentmeshv1.FailureKind_FAILURE_KIND_EXECUTOR_LOST || got.NextRetryAt == nil {
		t.Errorf("retry count %d, last failure %s, next retry %v; want 1, EXECUTOR_LOST, set", got.RetryCount, got.LastFailureKind, got.NextRetryAt)
	}
	evs := e.history(task.Id)
	if last := evs[len(evs)-1]; !strings.Contains(last.Reason, "executor lost") || last.FailureKind != agentmeshv1.FailureKind_FAILURE_KIND_EXECUTOR_LOST {
		t.Errorf("last event: %q kind %s", last.Reason, last.FailureKind)
	}
	if n := e.model.Requests(); n != 0 {
		t.Errorf("model calls = %d, want none", n)
	}

	// The scheduler's next attempt runs to completion here.
	next := e.assign(task.Id)
	e.publishWork(next)
	done := e.waitStatus(task.Id, taskstate.Completed, 20*time.Second)
	if done.Attempt != 2 || done.Result != "hello" {
		t.Errorf("attempt %d result %q", done.Attempt, done.Result)
	}
}

// Work redelivered while its attempt runs on another node — whose
// in-progress signals did not reach JetStream in time: a NATS restart
// longer than AckWait, a pause — is not failed by the executor it comes
// to: that would throw away a live attempt and the model answer it holds.
// It is handed back, and the attempt stays running until its node's
// heartbeats say it is lost (the scheduler's task.lost); then the next
// delivery finds the task moved on.
func TestRedeliveredWorkOfAnotherNodeIsLeftToIt(t *testing.T) {
	e := newEnv(t)
	e.cfg.AckWait = 500 * time.Millisecond
	if _, err := executor.New(context.Background(), e.cfg, executor.Deps{NC: natstest.ConnectAs(e.t, e.srv, subjects.ServiceExecutor), Log: e.log}); err != nil {
		t.Fatal(err)
	}
	task := e.submitTask(&agentmeshv1.Task{Input: "hi"})
	cons := e.takenBySilent(task, "other-node")
	e.startExecutor()
	// Redelivered every AckWait (here: to the executor), handed back each
	// time.
	poll.Until(t, 15*time.Second, func() error {
		if got := e.get(task.Id); got.Status != taskstate.Running || got.Attempt != 1 {
			t.Fatalf("task %s at attempt %d (%s), want still running at 1: a live attempt was failed", taskstate.Name(got.Status), got.Attempt, got.LastFailureKind)
		}
		info, err := cons.Info(context.Background())
		if err != nil {
			return err
		}
		if info.Delivered.Consumer < 3 {
			return fmt.Errorf("delivered %d times, want the first and two redeliveries", info.Delivered.Consumer)
		}
		return nil
	})
	if got := e.get(task.Id); got.Status != taskstate.Running || got.Attempt != 1 || got.Node != "other-node" {
		t.Fatalf("task %s at attempt %d on %q, want still running at 1 on other-node", taskstate.Name(got.Status), got.Attempt, got.Node)
	}
	// The scheduler finds the node lost: the next delivery is dropped.
	if err := bus.Request(context.Background(), e.nc, e.names.State(subjects.StateLost), &busv1.TransitionRequest{
		TaskId: task.Id, From: taskstate.Running, To: taskstate.Failed, Attempt: 1, Node: "other-node",
		Reason: "executor node other-node lost: no heartbeat", FailureKind: agentmeshv1.FailureKind_FAILURE_KIND_EXECUTOR_LOST,
	}, &busv1.TransitionResponse{}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 15*time.Second, func() error {
		info, err := cons.Info(context.Background())
		if err != nil {
			return err
		}
		if info.NumAckPending != 0 || info.NumPending != 0 {
			return fmt.Errorf("ack pending %d, pending %d", info.NumAckPending, info.NumPending)
		}
		return nil
	})
	if n := e.model.Requests(); n != 0 {
		t.Errorf("model calls = %d, want none", n)
	}
}

func TestNewValidates(t *testing.T) {
	if _, err := executor.New(context.Background(), executor.Config{}, executor.Deps{Log: testlog.New(t)}); err == nil || !strings.Contains(err.Error(), "NC") {
		t.Errorf("missing NC: err = %v", err)
	}
	e := newEnv(t)
	e.cfg.Node = "bad.node"
	if _, err := executor.New(context.Background(), e.cfg, executor.Deps{NC: natstest.ConnectAs(e.t, e.srv, subjects.ServiceExecutor), Log: e.log}); err == nil {
		t.Error("a node name with a dot was accepted")
	}
}

// At shutdown the executor kills its children and puts their tasks back in
// the queue for another executor.
// So does it with a task whose first model turn runs before its child.
func TestShutdownRequeues(t *testing.T) { childModes(t, testShutdownRequeues) }

func testShutdownRequeues(t *testing.T, releaseAfter time.Duration, children0 int) {
	e := newEnv(t)
	e.cfg.DrainGrace = 300 * time.Millisecond
	e.cfg.ReleaseAfter = releaseAfter
	stop := e.startExecutor()
	task := e.submit("slow please")
	e.waitStatus(task.Id, taskstate.Running, 10*time.Second)
	poll.Until(t, 10*time.Second, func() error {
		if e.model.Requests() == 0 {
			return errors.New("the model call has not started")
		}
		if n := len(children(t)); n != children0 {
			return fmt.Errorf("%d children, want %d", n, children0)
		}
		return nil
	})
	began := time.Now()
	stop()
	if d := time.Since(began); d > 20*time.Second { // a hang, not a speed check
		t.Errorf("Run took %v to return", d)
	}
	if c := children(t); len(c) != 0 {
		t.Errorf("children alive after Run returned: %v", c)
	}
	got := e.get(task.Id)
	if got.Status != taskstate.Queued || got.Attempt != 1 {
		t.Fatalf("task = %s attempt %d, want queued", taskstate.Name(got.Status), got.Attempt)
	}
	evs := e.history(task.Id)
	if r := evs[len(evs)-1].Reason; r != "executor draining: handed back to the queue" {
		t.Errorf("reason = %q", r)
	}
}

// A stopping executor drains: it says so in its heartbeats, takes no new
// work, and lets a running task finish within the grace period.
func TestDrainLetsRunningTaskFinish(t *testing.T) {
	e := newEnv(t)
	e.cfg.DrainGrace = 20 * time.Second
	e.cfg.HeartbeatInterval = 100 * time.Millisecond
	draining := make(chan struct{}, 1)
	sub, err := e.nc.Subscribe(e.names.Heartbeats(), func(m *nats.Msg) {
		var hb busv1.ExecutorHeartbeat
		if proto.Unmarshal(m.Data, &hb) == nil && hb.Draining {
			select {
			case draining <- struct{}{}:
			default:
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	stop := e.startExecutor()
	task := e.submit("brief please")
	e.waitStatus(task.Id, taskstate.Running, 10*time.Second)
	stopped := make(chan struct{})
	go func() { stop(); close(stopped) }()
	select {
	case <-draining:
	case <-time.After(10 * time.Second):
		t.Fatal("no draining heartbeat within 10s of the stop")
	}
	late := e.submit("hi") // work that arrives while draining
	<-stopped
	if got := e.get(task.Id); got.Status != taskstate.Completed || got.Result != "done in time" {
		t.Fatalf("running task = %s %q, want completed within the grace period", taskstate.Name(got.Status), got.Result)
	}
	if got := e.get(late.Id); got.Status != taskstate.Assigned {
		t.Fatalf("work sent while draining: task %s, want still assigned (not taken)", taskstate.Name(got.Status))
	}
}

// A child that breaks the protocol or ends without an answer fails its
// task with a reason that says so.
func TestMisbehavingChild(t *testing.T) {
	tests := []struct {
		name   string
		script string
		want   []string
	}{
		{"garbage frame", `printf '\000\000\000\003\377\377\377'; sleep 10`, []string{"agent process broke the protocol", "malformed frame"}},
		{"huge frame", `printf '\377\377\377\377'; sleep 10`, []string{"agent process broke the protocol", "frame too large"}},
		{"silent exit", `exit 0`, []string{"agent process exited with status 0 without a final answer"}},
		{"killed", `echo dying >&2; kill -9 $$`, []string{"agent process was killed by signal killed: dying"}},
		{"clean environment", `env | grep -v '^PWD=\|^SHLVL=\|^_=' | sort >&2; exit 3`, []string{"status 3: AGENTMESH_CHILD=1\nHOME=/", "\nLANG=", "\nPATH="}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			e.cfg.ChildCommand = []string{"/bin/sh", "-c", tt.script}
			if tt.name == "killed" {
				// PID 1 of the sandbox's PID namespace cannot be killed
				// from inside it; this case is about the executor's report.
				e.cfg.Sandbox.Level = sandbox.None
			}
			e.cfg.Model.APIKey = "sk-secret"
			e.startExecutor()
			task := e.submit("hi")
			got := e.waitStatus(task.Id, taskstate.Failed, 15*time.Second)
			for _, w := range tt.want {
				if !strings.Contains(got.Error, w) {
					t.Errorf("reason %q does not contain %q", got.Error, w)
				}
			}
			if strings.Contains(got.Error, "sk-secret") || strings.Count(got.Error, "=") > 4 && tt.name == "clean environment" {
				t.Errorf("the child saw more than its clean environment: %q", got.Error)
			}
		})
	}
}

func TestDefaultChildCommand(t *testing.T) {
	dir := t.TempDir()
	exe := filepath.Join(dir, "agentmesh")
	if err := os.WriteFile(exe, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if got := executor.DefaultChildCommand(exe); len(got) != 2 || got[0] != exe || got[1] != "child" {
		t.Fatalf("without %s: got %v, want [%s child]", executor.AgentBinary, got, exe)
	}
	agent := filepath.Join(dir, executor.AgentBinary)
	if err := os.WriteFile(agent, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := executor.DefaultChildCommand(exe); got[0] != exe {
		t.Fatalf("with a non-executable %s: got %v, want the re-exec", executor.AgentBinary, got)
	}
	if err := os.Chmod(agent, 0o755); err != nil {
		t.Fatal(err)
	}
	if got := executor.DefaultChildCommand(exe); len(got) != 1 || got[0] != agent {
		t.Fatalf("with %s: got %v, want [%s]", executor.AgentBinary, got, agent)
	}
}

// A child that under-reports its model usage does not lower the task's
// recorded usage: the executor records what it observed.
func TestChildCannotForgeUsage(t *testing.T) {
	e := newEnv(t)
	e.startExecutor()
	task := e.submit("please " + LieUsageMarker)
	got := e.waitStatus(task.Id, taskstate.Completed, 30*time.Second)
	if got.GetUsage().GetTotalTokens() == 0 {
		t.Fatalf("task usage = %v: the child's forged zero usage was recorded", got.GetUsage())
	}
	for _, ev := range e.history(task.Id) {
		if s := ev.GetStep(); s.GetKind() == agentmeshv1.StepKind_STEP_KIND_MODEL_TURN && (s.GetModel() == "free-model" || s.GetUsage().GetTotalTokens() == 0) {
			t.Fatalf("model turn step = %v: the child's report was trusted", s)
		}
	}
}

// A child that reports a tool result for a call the gate never judged
// breaks the protocol: the task fails and nothing of it is recorded.
func TestChildCannotForgeToolResult(t *testing.T) {
	e := newEnv(t)
	e.startExecutor()
	task := e.submit("please " + LieResultMarker)
	got := e.waitStatus(task.Id, taskstate.Failed, 30*time.Second)
	if !strings.Contains(got.Error, "never judged") {
		t.Errorf("reason = %q, want the forged result named", got.Error)
	}
	for _, ev := range e.history(task.Id) {
		if ev.GetStep().GetKind() == agentmeshv1.StepKind_STEP_KIND_TOOL_RESULT {
			t.Fatalf("a forged tool result was recorded: %v", ev.GetStep())
		}
	}
}
