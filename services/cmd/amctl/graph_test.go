package main

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/poll"
	"github.com/agentmesh/agentmesh/pkg/scriptedmodel"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"github.com/agentmesh/agentmesh/services/executor/child"
	"github.com/agentmesh/agentmesh/services/stack"
)

func TestMain(m *testing.M) {
	child.RunIfChild()
	// No user's profiles in the tests: a config file that is not there
	// (tests of profiles point AGENTMESH_CONFIG at their own).
	dir, err := os.MkdirTemp("", "amctl-test")
	if err != nil {
		panic(err)
	}
	os.Setenv(envConfig, filepath.Join(dir, "none.yaml"))
	os.Unsetenv(envContext)
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// realStack runs the whole agentmesh stack in this process (embedded NATS
// and store, real child processes, the scripted model: "slow ..." inputs
// take 30 s, others echo and answer) and returns its gRPC address.
func realStack(t *testing.T) string {
	t.Helper()
	script, err := scriptedmodel.ParseScript([]byte(`{"scenarios": [
	  {"match": "^slow", "turns": [{"delay_ms": 30000, "content": "too late"}]},
	  {"turns": [
	    {"content": "echo", "tool_calls": [{"name": "echo", "arguments": {"text": "{{input}}"}}]},
	    {"content": "final answer: {{last_tool_result}}"}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	return realStackWith(t, stack.Config{Script: script})
}

// realStackWith runs the stack of cfg (its script, seeds and settings; nil
// script: the quickstart's default script) in this process, as realStack
// does, and returns its gRPC address.
func realStackWith(t *testing.T, cfg stack.Config) string {
	t.Helper()
	cfg.DataDir, cfg.NATSHost, cfg.NATSPort = t.TempDir(), "127.0.0.1", -1
	cfg.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg.Router.Listen = "127.0.0.1:0"
	cfg.Executor.ChildCommand = []string{os.Args[0]}
	ctx, cancel := context.WithCancel(context.Background())
	st, err := stack.New(ctx, cfg)
	if err != nil {
		cancel()
		t.Fatalf("stack: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- st.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return st.Addr()
}

var idRe = regexp.MustCompile(`task ([0-9A-Z]{26}) submitted`)

func submitID(t *testing.T, addr string, args ...string) string {
	t.Helper()
	code, out, errOut := amctl(t, addr, append([]string{"submit", "--agent", "helper"}, args...)...)
	m := idRe.FindStringSubmatch(out)
	if code != 0 || m == nil {
		t.Fatalf("submit %v: exit %d, %q %q", args, code, out, errOut)
	}
	return m[1]
}

func mustRun(t *testing.T, addr string, want []string, args ...string) string {
	t.Helper()
	code, out, errOut := amctl(t, addr, args...)
	if code != 0 {
		t.Fatalf("amctl %v: exit %d, stderr %q", args, code, errOut)
	}
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Errorf("amctl %v: stdout lacks %q:\n%s", args, w, out)
		}
	}
	return out
}

func TestGraphCommandsOnARealStack(t *testing.T) {
	addr := realStack(t)
	mustRun(t, addr, []string{"agent helper created"}, "agents", "create", "helper", "--tool", "echo")
	parent := submitID(t, addr, "slow parent")
	inFile := filepath.Join(t.TempDir(), "input.txt")
	if err := os.WriteFile(inFile, []byte("from a file\nsecond line"), 0o644); err != nil {
		t.Fatal(err)
	}
	childID := submitID(t, addr, "--depends-on", parent, "--tag", "etl,nightly", "--input-file", inFile)

	// A blocked task's line says what it waits for.
	mustRun(t, addr, []string{childID, "blocked (waits for " + parent + ")"}, "list", "--tag", "etl")
	mustRun(t, addr, []string{"waits for:", parent, "depends on:", "tags:", "etl, nightly", "created by:", "default", "from a file\n  second line"}, "get", childID)
	if out := mustRun(t, addr, nil, "list", "--tag", "nope"); !strings.Contains(out, "no tasks") {
		t.Errorf("list --tag nope: %s", out)
	}
	mustRun(t, addr, []string{"task " + childID + " updated (priority, title); now blocked (waits for " + parent + ")"},
		"update", childID, "--priority", "critical", "--title", "renamed")
	mustRun(t, addr, []string{childID, "critical"}, "list", "--priority", "critical")

	// Input from standard input.
	stdin = strings.NewReader("piped input")
	t.Cleanup(func() { stdin = os.Stdin })
	piped := submitID(t, addr, "--input-file", "-", "--tag", "piped")
	mustRun(t, addr, []string{"piped input"}, "get", piped)

	// Cancel by filter, then delete.
	mustRun(t, addr, []string{"1 task(s) cancelled"}, "cancel-tasks", "--tag", "nightly")
	if code, _, errOut := amctl(t, addr, "delete", parent); code != 1 || !strings.Contains(errOut, "only finished tasks can be deleted") {
		t.Errorf("delete of an unfinished task: exit %d %q", code, errOut)
	}
	mustRun(t, addr, nil, "cancel", parent)
	mustRun(t, addr, []string{"task " + parent + " deleted"}, "delete", parent)
	if code, _, errOut := amctl(t, addr, "get", parent); code != 1 || !strings.Contains(errOut, "not found") {
		t.Errorf("get of a deleted task: exit %d %q", code, errOut)
	}

	// A graph from a file.
	graph := filepath.Join(t.TempDir(), "graph.json")
	if err := os.WriteFile(graph, []byte(`{"tasks": [
	  {"ref": "fetch", "task": {"input": "fetch it", "agent": "helper"}},
	  {"ref": "sum", "task": {"input": "sum it", "agent": "helper", "dependsOn": ["ref:fetch"]}}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	out := mustRun(t, addr, []string{"REF", "fetch", "sum", "blocked (waits for "}, "submit-graph", graph)
	sumID := regexp.MustCompile(`sum\s+([0-9A-Z]{26})`).FindStringSubmatch(out)
	if sumID == nil {
		t.Fatalf("no id for sum in:\n%s", out)
	}
	poll.Until(t, 30*time.Second, func() error {
		_, got, _ := amctl(t, addr, "get", sumID[1], "-o", "json")
		if !strings.Contains(got, `"TASK_STATUS_COMPLETED"`) {
			return errStatus("sum not completed yet")
		}
		return nil
	})
	if code, _, errOut := amctl(t, addr, "submit-graph", filepath.Join(t.TempDir(), "missing.json")); code != 2 || !strings.Contains(errOut, "--input-file") {
		t.Errorf("submit-graph of a missing file: exit %d %q", code, errOut)
	}

	// A sub-task (submitted with --parent) counts in the delegations table.
	boss := submitID(t, addr, "slow boss")
	submitID(t, addr, "--parent", boss, "part of it")
	out = mustRun(t, addr, []string{"AGENT", "(all)", "helper", "DONE", "WAIT p50/p90/p99", "delegations (sub-tasks", "PARENT"}, "metrics", "--since", "1h")
	if !regexp.MustCompile(`(?m)^helper\s+helper\s+1\s`).MatchString(out) {
		t.Errorf("metrics: no delegation row helper → helper with 1 submitted:\n%s", out)
	}
	mustRun(t, addr, []string{`"overall"`}, "metrics", "-o", "json")
}

type errStatus string

func (e errStatus) Error() string { return string(e) }

func TestGraphUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"update", "01X"}, "give at least one of"},
		{[]string{"update", "01X", "--tag", "a", "--no-tags"}, "not both"},
		{[]string{"submit", "--input-file", "x", "text"}, "give TEXT or --input-file"},
		{[]string{"submit", "--dependency-policy", "sometimes", "x"}, "--dependency-policy"},
		{[]string{"delete"}, "at least one ID"},
		{[]string{"metrics", "--since", "forever"}, "--since"},
	} {
		code, _, errOut := amctl(t, "127.0.0.1:1", tc.args...)
		if code != 2 || !strings.Contains(errOut, tc.want) {
			t.Errorf("amctl %v: exit %d %q, want 2 mentioning %q", tc.args, code, errOut, tc.want)
		}
	}
}

func TestGraphEventsAndStatusLines(t *testing.T) {
	for _, tc := range []struct {
		ev         *agentmeshv1.TaskEvent
		kind, text string
	}{
		{&agentmeshv1.TaskEvent{Type: agentmeshv1.EventType_EVENT_TYPE_DEPENDENCY, Status: taskstate.Blocked, Reason: "dependency 01A completed; waiting for dependencies: 01B"}, "dependency", "dependency 01A completed; waiting for dependencies: 01B"},
		{&agentmeshv1.TaskEvent{Type: agentmeshv1.EventType_EVENT_TYPE_UPDATED, Status: taskstate.Queued, Reason: "updated: priority, title"}, "updated", "priority, title"},
	} {
		kind, text := describeEvent(tc.ev)
		if kind != tc.kind || text != tc.text {
			t.Errorf("describeEvent(%v) = %q %q, want %q %q", tc.ev, kind, text, tc.kind, tc.text)
		}
	}
	for _, tc := range []struct {
		task *agentmeshv1.Task
		want string
	}{
		{&agentmeshv1.Task{Status: taskstate.Blocked, WaitingOn: []string{"A", "B"}}, "blocked (waits for A, B)"},
		{&agentmeshv1.Task{Status: taskstate.Blocked, WaitingOn: []string{"A", "B", "C", "D", "E"}}, "blocked (waits for A, B, C and 2 more)"},
		{&agentmeshv1.Task{Status: taskstate.Blocked, PendingApproval: &agentmeshv1.Approval{Id: "T-a4", Tool: "shell"}}, "blocked (approval shell: amctl approvals approve|reject T-a4)"},
		{&agentmeshv1.Task{Status: taskstate.Queued, WaitingOn: []string{"stale"}}, "queued"},
	} {
		if got := statusLine(tc.task); got != tc.want {
			t.Errorf("statusLine = %q, want %q", got, tc.want)
		}
	}
}
