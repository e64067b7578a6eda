// Package doortest starts a whole agentmesh stack for the tests of the
// router's HTTP doors (services/router/mcpserver, services/router/a2a):
// embedded NATS JetStream, the embedded store, every service, the scripted
// model, agent processes as real child processes, and API keys of two
// orgs in every role. The doors are then served with httptest (real HTTP)
// over a gRPC connection to the stack's public API, as the router's HTTP
// listener serves them.
//
// A test binary that uses it must call child.RunIfChild() first thing in
// TestMain: the executor runs agents by re-executing the test binary.
package doortest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/poll"
	"github.com/agentmesh/agentmesh/pkg/scriptedmodel"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"github.com/agentmesh/agentmesh/services/stack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// Script drives the scripted model in the doors' tests:
//   - "slow ...": a model turn that takes 60 s (a task to cancel while it runs);
//   - anything else: one echo tool call of the input, then the final answer
//     "final answer: <the echo>".
const Script = `{
  "scenarios": [
    {"match": "^slow", "turns": [{"delay_ms": 60000, "content": "too late"}]},
    {"turns": [
      {"content": "Let me echo that.", "tool_calls": [{"name": "echo", "arguments": {"text": "{{input}}"}}]},
      {"content": "final answer: {{last_tool_result}}"}
    ]}
  ]
}`

// Key is an API key of the test stack.
type Key struct{ Name, Org, Role, Secret string }

// Keys: two orgs, each role of org A, an admin and an operator of org B.
var Keys = []Key{
	{"a-admin", "org-a", "admin", "key-a-admin"},
	{"a-op", "org-a", "operator", "key-a-op"},
	{"a-approver", "org-a", "approver", "key-a-approver"},
	{"a-reader", "org-a", "reader", "key-a-reader"},
	{"b-admin", "org-b", "admin", "key-b-admin"},
	{"b-op", "org-b", "operator", "key-b-op"},
}

// Secret returns the key named name.
func Secret(t testing.TB, name string) string {
	t.Helper()
	for _, k := range Keys {
		if k.Name == name {
			return k.Secret
		}
	}
	t.Fatalf("doortest: no key %q", name)
	return ""
}

// Agents every org of the stack has: "plain" runs echo freely; "careful"
// needs a person's approval for every echo (its task blocks on it).
const (
	AgentPlain   = "plain"
	AgentCareful = "careful"
)

// Stack is a running stack and a gRPC connection to its public API.
type Stack struct {
	Conn  *grpc.ClientConn
	Tasks agentmeshv1.TaskServiceClient
	stack *stack.Stack
}

// Start builds the stack in this process (stopped at cleanup), connects
// to its API and creates each org's agents.
func Start(t testing.TB) *Stack {
	t.Helper()
	return StartWith(t, nil)
}

// StartWith is Start with adjust (when not nil) applied to the stack's
// configuration before it starts.
func StartWith(t testing.TB, adjust func(*stack.Config)) *Stack {
	t.Helper()
	scriptPath := filepath.Join(t.TempDir(), "script.json")
	if err := os.WriteFile(scriptPath, []byte(Script), 0o644); err != nil {
		t.Fatal(err)
	}
	script, err := scriptedmodel.LoadScript(scriptPath)
	if err != nil {
		t.Fatalf("doortest: load script: %v", err)
	}
	cfg := stack.Config{DataDir: t.TempDir(), NATSHost: "127.0.0.1", NATSPort: -1, Script: script, Log: Logger()}
	cfg.Router.Listen = "127.0.0.1:0"
	cfg.Router.KeysFile = keysFile(t)
	cfg.Router.OrgRate = -1 // benchmarks call fast; the rate limit has tests of its own
	cfg.Executor.ChildCommand = []string{os.Args[0]}
	cfg.Executor.WallTime = 2 * time.Minute
	cfg.Executor.DrainGrace = time.Second
	// The machine is shared: a few agent processes, no warm pool.
	cfg.Executor.Capacity = 8
	cfg.Executor.WarmPool = -1
	if adjust != nil {
		adjust(&cfg)
	}
	ctx, cancel := context.WithCancel(context.Background())
	st, err := stack.New(ctx, cfg)
	if err != nil {
		cancel()
		t.Fatalf("doortest: stack: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- st.Run(ctx) }()
	conn, err := grpc.NewClient(st.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = conn.Close()
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("doortest: stack run: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("doortest: stack did not stop within 30s")
		}
	})
	s := &Stack{Conn: conn, Tasks: agentmeshv1.NewTaskServiceClient(conn), stack: st}
	for _, admin := range []string{"a-admin", "b-admin"} {
		s.createAgents(t, As(t, admin))
	}
	return s
}

func (s *Stack) createAgents(t testing.TB, ctx context.Context) {
	t.Helper()
	agents := agentmeshv1.NewAgentServiceClient(s.Conn)
	for _, a := range []*agentmeshv1.Agent{
		{Name: AgentPlain, Tools: []string{"echo"}, SystemPrompt: "You are a test agent."},
		{Name: AgentCareful, Tools: []string{"echo"}, SystemPrompt: "You are a careful test agent.",
			ToolPolicies: map[string]agentmeshv1.ToolPolicy{"echo": agentmeshv1.ToolPolicy_TOOL_POLICY_REQUIRE_APPROVAL}},
	} {
		if _, err := agents.CreateAgent(ctx, &agentmeshv1.CreateAgentRequest{Agent: a}); err != nil && status.Code(err) != codes.AlreadyExists {
			t.Fatalf("doortest: create agent %s: %v", a.Name, err)
		}
	}
}

// Logger is the stack's log: discarded unless AGENTMESH_TEST_LOG is set.
func Logger() *slog.Logger {
	if os.Getenv("AGENTMESH_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

func keysFile(t testing.TB) string {
	t.Helper()
	var entries []string
	for _, k := range Keys {
		sum := sha256.Sum256([]byte(k.Secret))
		entries = append(entries, fmt.Sprintf(`{"name": %q, "org": %q, "role": %q, "sha256": %q}`, k.Name, k.Org, k.Role, hex.EncodeToString(sum[:])))
	}
	p := filepath.Join(t.TempDir(), "keys.json")
	if err := os.WriteFile(p, []byte(`{"keys": [`+strings.Join(entries, ",\n")+`]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// As returns a context for gRPC calls with the key named name (60 s).
func As(t testing.TB, name string) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+Secret(t, name))
}

// WaitStatus polls GetTask (as who) until the task has status want.
func (s *Stack) WaitStatus(t testing.TB, who, id string, want agentmeshv1.TaskStatus) *agentmeshv1.Task {
	t.Helper()
	var task *agentmeshv1.Task
	poll.Until(t, 60*time.Second, func() error {
		resp, err := s.Tasks.GetTask(As(t, who), &agentmeshv1.GetTaskRequest{Id: id})
		if err != nil {
			return err
		}
		task = resp.Task
		if task.Status != want {
			if taskstate.Terminal(task.Status) {
				t.Fatalf("doortest: task %s ended %s (%s), want %s", id, taskstate.Name(task.Status), task.Error, taskstate.Name(want))
			}
			return fmt.Errorf("task %s is %s, want %s", id, taskstate.Name(task.Status), taskstate.Name(want))
		}
		return nil
	})
	return task
}

// Submit submits a task as who.
func (s *Stack) Submit(t testing.TB, who string, req *agentmeshv1.SubmitTaskRequest) *agentmeshv1.Task {
	t.Helper()
	resp, err := s.Tasks.SubmitTask(As(t, who), req)
	if err != nil {
		t.Fatalf("doortest: submit as %s: %v", who, err)
	}
	return resp.Task
}

// NodeExample makes sure node and the pinned packages of the example in
// dir are there (npm ci when node_modules lacks pkg) and returns node's
// path. Without node or npm the test is skipped, except under CI=true,
// where it fails (CI installs node and runs npm ci in the examples).
func NodeExample(t testing.TB, dir, pkg string) string {
	t.Helper()
	missing := func(what string, err error) {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s: %v (CI installs node 20 and runs npm ci in %s)", what, err, dir)
		}
		t.Skipf("%s: %v", what, err)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		missing("node", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", filepath.FromSlash(pkg))); err != nil {
		npm, err := exec.LookPath("npm")
		if err != nil {
			missing("npm", err)
		}
		cmd := exec.Command(npm, "ci", "--no-audit", "--no-fund")
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			missing("npm ci in "+dir, errors.New(string(out)))
		}
	}
	return node
}

// RunNode runs script of the example in dir with env and args, and returns
// the JSON lines it printed, by their "step".
func RunNode(t testing.TB, node, dir string, env []string, args ...string) map[string]map[string]any {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, append([]string{"client.mjs"}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node %s: %v\nstdout:\n%s\nstderr:\n%s", dir, err, out, stderr.String())
	}
	steps := map[string]map[string]any{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("node printed %q: %v", line, err)
		}
		steps[fmt.Sprint(m["step"])] = m
	}
	return steps
}

// KeyTransport adds an API key (Authorization: Bearer) to every request of
// an HTTP client ("" adds none).
type KeyTransport struct{ Key string }

// RoundTrip implements http.RoundTripper.
func (k KeyTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	if k.Key != "" {
		r.Header.Set("Authorization", "Bearer "+k.Key)
	}
	return http.DefaultTransport.RoundTrip(r)
}

// Ctx returns a context for a test's calls (90 s), cancelled at cleanup.
func Ctx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	t.Cleanup(cancel)
	return ctx
}
