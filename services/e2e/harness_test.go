package e2e

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/natstest"
	"github.com/agentmesh/agentmesh/pkg/pgtest"
	"github.com/agentmesh/agentmesh/pkg/poll"
	"github.com/agentmesh/agentmesh/pkg/scriptedmodel"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"github.com/agentmesh/agentmesh/pkg/telemetry"
	"github.com/agentmesh/agentmesh/services/executor"
	"github.com/agentmesh/agentmesh/services/executor/child"
	"github.com/agentmesh/agentmesh/services/registry"
	"github.com/agentmesh/agentmesh/services/router/rest/resttest"
	"github.com/agentmesh/agentmesh/services/scheduler"
	"github.com/agentmesh/agentmesh/services/stack"
	"github.com/agentmesh/agentmesh/services/state"
	"github.com/nats-io/nats.go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

func TestMain(m *testing.M) {
	child.RunIfChild()
	pgtest.Main(m)
}

// testScript drives the scripted model in these tests:
//   - "slow ...": a model turn that takes 30 s (to cancel a running task);
//   - anything else: one echo tool call, then a final answer quoting it.
const testScript = `{
  "scenarios": [
    {"match": "^slow", "turns": [{"delay_ms": 30000, "content": "too late"}]},
    {"match": "^flaky", "turns": [
      {"content": "Let me echo that.", "tool_calls": [{"name": "echo", "arguments": {"text": "{{input}}"}}]},
      {"status": 503, "times": 5, "content": "recovered: {{last_tool_result}}"}
    ]},
    {"turns": [
      {"content": "Let me echo that.", "tool_calls": [{"name": "echo", "arguments": {"text": "{{input}}"}}]},
      {"content": "final answer: {{last_tool_result}}"}
    ]}
  ]
}`

type env struct {
	conn   *grpc.ClientConn
	stack  *stack.Stack
	tasks  agentmeshv1.TaskServiceClient
	agents agentmeshv1.AgentServiceClient
	skills agentmeshv1.SkillServiceClient
	stop   func()
	// rest is a client of the HTTP listener (no key; As(key) for one).
	rest *resttest.Client
	// model is the scripted model (the stack's, or the one beside it).
	model *scriptedmodel.Server
	// cfg is the stack's configuration (another executor joins with it),
	// node its NATS server when opts.node set one.
	cfg  stack.Config
	node *natstest.Node
}

type opts struct {
	dataDir  string
	postgres string
	// keysFile turns authentication on with this keys file.
	keysFile string
	// apiKeys turns authentication on (key → org).
	apiKeys map[string]string
	// log, when set, receives the stack's log.
	log io.Writer
	// state: the state service's settings (retention).
	state state.Config
	// script replaces testScript; capacity, when > 0, the executor's.
	script   string
	capacity int
	// scheduler: the scheduler's settings (ReconcileInterval).
	scheduler scheduler.Config
	// noWarmPool turns the executor's warm pool off, so that every agent
	// process runs a task (tests that count processes).
	noWarmPool bool
	// childBesideCall keeps an agent process beside every model call
	// (releasing off: AGENTMESH_RELEASE_AFTER=0): a slow first turn runs
	// with its child instead of before it (tests that count processes).
	childBesideCall bool
	// quickAnswers turns off the executor's early checkpoint of slow
	// model answers (AGENTMESH_KEEP_ANSWERS_AFTER=off): tests that count
	// writes, where a call slowed past 100 ms on a loaded machine would
	// add one.
	quickAnswers bool
	// registry: the registry's settings.
	registry registry.Config
	// node, when set, is the NATS server the services dial over TCP
	// (each as its own identity, reconnecting), so a test can restart it;
	// the scripted model then runs beside the stack (env.model).
	node *natstest.Node
	// ackWait, when set, is the executors' AckWait.
	ackWait time.Duration
	// executor, when set, changes the executor's settings last.
	executor func(*executor.Config)
}

func logger() *slog.Logger {
	if os.Getenv("AGENTMESH_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// start builds the whole stack in this process and connects a gRPC client
// to its public API. stop() shuts it down and waits (also at cleanup).
func start(t testing.TB, o opts) *env {
	t.Helper()
	if o.dataDir == "" {
		o.dataDir = t.TempDir()
	}
	scriptPath := filepath.Join(t.TempDir(), "script.json")
	text := testScript
	if o.script != "" {
		text = o.script
	}
	if err := os.WriteFile(scriptPath, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	script, err := scriptedmodel.LoadScript(scriptPath)
	if err != nil {
		t.Fatalf("load script: %v", err)
	}
	cfg := stack.Config{
		DataDir:     o.dataDir,
		NATSHost:    "127.0.0.1",
		NATSPort:    -1,
		PostgresURL: o.postgres,
		Script:      script,
		Log:         logger(),
	}
	if o.log != nil {
		cfg.Log = slog.New(telemetry.LogHandler(slog.NewTextHandler(o.log, nil))) // as the binary's (services/app)
	}
	var model *scriptedmodel.Server
	if o.node != nil {
		model = onNode(t, o.node, &cfg)
	}
	cfg.Router.APIKeys = o.apiKeys
	cfg.Router.Listen = "127.0.0.1:0"
	cfg.Router.HTTPListen = "127.0.0.1:0"
	cfg.Router.KeysFile = o.keysFile
	cfg.State = o.state
	cfg.Scheduler = o.scheduler
	cfg.Registry = o.registry
	cfg.Executor.ChildCommand = []string{os.Args[0]}
	cfg.Executor.WallTime = 2 * time.Minute
	cfg.Executor.DrainGrace = time.Second
	cfg.Executor.Capacity = o.capacity
	cfg.Executor.AckWait = o.ackWait
	if o.noWarmPool {
		cfg.Executor.WarmPool = -1
	}
	if o.childBesideCall {
		cfg.Executor.ReleaseAfter = -1
	}
	if o.quickAnswers {
		cfg.Executor.KeepAnswersAfter = -1
	}
	if o.executor != nil {
		o.executor(&cfg.Executor)
	}
	ctx, cancel := context.WithCancel(context.Background())
	st, err := stack.New(ctx, cfg)
	if err != nil {
		cancel()
		t.Fatalf("stack: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- st.Run(ctx) }()
	conn, err := grpc.NewClient(st.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		_ = conn.Close()
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("stack run: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("stack did not stop within 30s")
		}
	}
	t.Cleanup(stop)
	if model == nil {
		model = st.ScriptedModel()
	}
	return &env{conn: conn, stack: st, tasks: agentmeshv1.NewTaskServiceClient(conn), agents: agentmeshv1.NewAgentServiceClient(conn), skills: agentmeshv1.NewSkillServiceClient(conn), stop: stop,
		rest: resttest.New("http://"+st.HTTPAddr(), ""), model: model, cfg: cfg, node: o.node}
}

// addExecutor starts another executor, named node, on the bus of a stack
// started with opts.node — through via when set (stopped at cleanup).
func (e *env) addExecutor(t testing.TB, node string, via *natstest.Proxy) {
	t.Helper()
	cfg := e.cfg
	cfg.Executor.Node = node
	if via != nil {
		bus := e.node
		cfg.Dial = func(_ context.Context, service string) (*nats.Conn, error) {
			return bus.ConnectVia(t, via, service), nil
		}
	}
	st, err := stack.NewService(context.Background(), "executor", cfg)
	if err != nil {
		t.Fatalf("executor %s: %v", node, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- st.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("executor %s: %v", node, err)
		}
	})
}

// onNode makes the stack of cfg dial node over TCP, each service as its
// own identity, and starts its scripted model beside it (the stack starts
// one only on its embedded bus).
func onNode(t testing.TB, node *natstest.Node, cfg *stack.Config) *scriptedmodel.Server {
	t.Helper()
	cfg.Auth = node.Auth()
	cfg.Dial = func(_ context.Context, service string) (*nats.Conn, error) {
		return node.ConnectAs(t, service), nil
	}
	model := scriptedmodel.New(cfg.Script)
	url, err := model.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { model.Close() })
	cfg.Executor.Model.BaseURL, cfg.Executor.Model.Model = url, "scripted"
	return model
}

// ctxShort bounds one call made inside a poll loop, so a call lost during a
// restart is retried rather than waited on.
func ctxShort(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// ensureSkills creates the caller's org's skills of these names that do
// not exist yet (an agent may offer only skills of the catalogue).
func (e *env) ensureSkills(t *testing.T, names ...string) {
	t.Helper()
	mkSkills(t, ctxT(t), e.skills, names...)
}

// mkSkills creates the skills of these names that do not exist yet, as the
// caller of ctx (a platform key: shared ones).
func mkSkills(t testing.TB, ctx context.Context, c agentmeshv1.SkillServiceClient, names ...string) {
	t.Helper()
	for _, n := range names {
		_, err := c.CreateSkill(ctx, &agentmeshv1.CreateSkillRequest{Skill: &agentmeshv1.Skill{Name: strings.ToLower(strings.TrimSpace(n)), Description: "The skill " + n + " (a test's)."}})
		if err != nil && status.Code(err) != codes.AlreadyExists {
			t.Fatalf("create skill %s: %v", n, err)
		}
	}
}

func (e *env) createAgent(t *testing.T, name string, skills ...string) *agentmeshv1.Agent {
	t.Helper()
	e.ensureSkills(t, skills...)
	resp, err := e.agents.CreateAgent(ctxT(t), &agentmeshv1.CreateAgentRequest{Agent: &agentmeshv1.Agent{
		Name: name, SystemPrompt: "You are a test agent.", Tools: []string{"echo", "current_time"}, Skills: skills,
	}})
	if err != nil {
		t.Fatalf("create agent %s: %v", name, err)
	}
	return resp.Agent
}

func (e *env) submit(t *testing.T, req *agentmeshv1.SubmitTaskRequest) *agentmeshv1.Task {
	t.Helper()
	resp, err := e.tasks.SubmitTask(ctxT(t), req)
	if err != nil {
		t.Fatalf("submit: %v", err)
	}
	return resp.Task
}

// waitStatus polls GetTask until the task has status want.
func (e *env) waitStatus(t *testing.T, id string, want agentmeshv1.TaskStatus, timeout time.Duration) *agentmeshv1.Task {
	t.Helper()
	var task *agentmeshv1.Task
	poll.Until(t, timeout, func() error {
		resp, err := e.tasks.GetTask(ctxShort(t), &agentmeshv1.GetTaskRequest{Id: id})
		if err != nil {
			return err
		}
		task = resp.Task
		if task.Status != want {
			if taskstate.Terminal(task.Status) {
				t.Fatalf("task %s ended %s (%s), want %s", id, taskstate.Name(task.Status), task.Error, taskstate.Name(want))
			}
			return errStatus{task.Status, want}
		}
		return nil
	})
	return task
}

type errStatus struct{ got, want agentmeshv1.TaskStatus }

func (e errStatus) Error() string {
	return "status " + taskstate.Name(e.got) + ", want " + taskstate.Name(e.want)
}

func (e *env) history(t *testing.T, id string) []*agentmeshv1.TaskEvent {
	t.Helper()
	resp, err := e.tasks.GetTaskHistory(ctxT(t), &agentmeshv1.GetTaskHistoryRequest{Id: id})
	if err != nil {
		t.Fatalf("history: %v", err)
	}
	return resp.Events
}
