package executor_test

import (
	"context"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	busv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/bus/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/mcp/mcptest"
	"github.com/agentmesh/agentmesh/pkg/subjects"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"github.com/agentmesh/agentmesh/services/executor/webfetch"
)

const mcpScript = `{"scenarios": [
  {"match": "^mcp-work", "turns": [
    {"content": "writing", "tool_calls": [
      {"name": "fs__write_file", "arguments": {"path": "notes.txt", "content": "hello from mcp"}},
      {"name": "fs__write_file", "arguments": {"path": "bad.txt", "content": 42}},
      {"name": "everything__get-sum", "arguments": {"a": 2, "b": 3}},
      {"name": "everything__get-sum", "arguments": {"a": "two", "b": 3}}
    ]},
    {"content": "listing", "tool_calls": [{"name": "fs__list_directory", "arguments": {"path": "."}}]},
    {"content": "The workspace holds: {{last_tool_result}}"}
  ]},
  {"match": "^mcp-approve", "turns": [
    {"tool_calls": [{"name": "fs__list_directory", "arguments": {"path": "."}}]},
    {"content": "listed: {{last_tool_result}}"}
  ]},
  {"match": "^mcp-escape", "turns": [
    {"tool_calls": [
      {"name": "fs__read_text_file", "arguments": {"path": "{{SECRET}}"}},
      {"name": "ev__get-env", "arguments": {}}
    ]},
    {"content": "tried"}
  ]},
  {"turns": [{"content": "hello"}]}
]}`

// newMCPEnv is newEnv with the MCP script and, when srv is set, the
// installed servers readable in the sandbox (stdio servers run in it).
// oldnew are replacements in the script.
func newMCPEnv(t *testing.T, srv *mcptest.Servers, oldnew ...string) *env {
	t.Helper()
	e := newEnv(t)
	if srv != nil {
		e.cfg.Sandbox.ReadOnlyPaths = append(e.cfg.Sandbox.ReadOnlyPaths, srv.Dir)
	}
	e.useScript(strings.NewReplacer(oldnew...).Replace(mcpScript))
	return e
}

// submitAgent is submit with the given agent.
func (e *env) submitAgent(a *agentmeshv1.Agent, input string) *agentmeshv1.Task {
	e.t.Helper()
	var created busv1.CreateTaskResponse
	if err := bus.Request(context.Background(), e.nc, e.names.State(subjects.StateCreateTask), &busv1.CreateTaskRequest{Task: &agentmeshv1.Task{
		Org: "acme", Title: input, Input: input, Agent: a.Name, AgentSpec: a, RetryPolicy: oneAttempt,
	}}, &created); err != nil {
		e.t.Fatalf("create task: %v", err)
	}
	task := e.assign(created.Task.Id)
	e.publishWork(task)
	return task
}

// toolSteps returns the TOOL_CALL and TOOL_RESULT steps of a call, by tool
// call id.
func toolSteps(all []*agentmeshv1.Step) (calls, results map[string]*agentmeshv1.Step) {
	calls, results = map[string]*agentmeshv1.Step{}, map[string]*agentmeshv1.Step{}
	for _, s := range all {
		switch s.Kind {
		case agentmeshv1.StepKind_STEP_KIND_TOOL_CALL:
			calls[s.ToolCallId] = s
		case agentmeshv1.StepKind_STEP_KIND_TOOL_RESULT:
			results[s.ToolCallId] = s
		}
	}
	return calls, results
}

// An agent with the filesystem server (stdio, started by the child) and
// server-everything (streamable HTTP, called by the executor) completes a
// scripted task; invalid arguments are refused at the gate and nothing
// runs; every call is audited.
func TestMCPServersCompleteTask(t *testing.T) {
	srv := mcptest.Install(t)
	httpURL := mcptest.StartEverythingHTTP(t, srv)
	// The test server listens on loopback, which the executor refuses for
	// MCP unless allowlisted (as web_fetch does).
	u, err := url.Parse(httpURL)
	if err != nil {
		t.Fatal(err)
	}
	f, err := webfetch.New(webfetch.Config{Allow: []string{u.Host}})
	if err != nil {
		t.Fatal(err)
	}
	e := newMCPEnv(t, &srv)
	e.cfg.MCPClient = f.ServiceClient()
	e.startExecutor()
	a := &agentmeshv1.Agent{
		Name: "mcp-helper", SystemPrompt: "Use your tools.", Tools: []string{"echo"},
		McpServers: []*agentmeshv1.McpServer{
			{Name: "fs", Command: srv.FilesystemCommand("${WORKSPACE}")},
			{Name: "everything", Url: httpURL},
		},
	}
	task := e.submitAgent(a, "mcp-work please")
	got := e.waitStatus(task.Id, taskstate.Completed, 60*time.Second)
	if !strings.Contains(got.Result, "[FILE] notes.txt") || strings.Contains(got.Result, "bad.txt") {
		t.Errorf("result = %q, want notes.txt listed and no bad.txt", got.Result)
	}
	calls, results := toolSteps(steps(e.history(task.Id)))
	want := []struct {
		id, tool string
		decision agentmeshv1.ToolDecision
		isErr    bool
		output   string
	}{
		{"call_0_0", "fs__write_file", agentmeshv1.ToolDecision_TOOL_DECISION_ALLOWED, false, "Successfully wrote"},
		{"call_0_1", "fs__write_file", agentmeshv1.ToolDecision_TOOL_DECISION_DENIED, true, "invalid arguments"},
		{"call_0_2", "everything__get-sum", agentmeshv1.ToolDecision_TOOL_DECISION_ALLOWED, false, "The sum of 2 and 3 is 5"},
		{"call_0_3", "everything__get-sum", agentmeshv1.ToolDecision_TOOL_DECISION_DENIED, true, "invalid arguments"},
		{"call_1_0", "fs__list_directory", agentmeshv1.ToolDecision_TOOL_DECISION_ALLOWED, false, "[FILE] notes.txt"},
	}
	for _, w := range want {
		c, r := calls[w.id], results[w.id]
		if c == nil || r == nil {
			t.Errorf("%s: no call or no result step (calls %v)", w.id, calls)
			continue
		}
		if c.ToolName != w.tool || c.Decision != w.decision || c.Risk != "external" || len(c.ArgumentsSha256) != 64 {
			t.Errorf("%s: call step tool %s decision %v risk %q hash %q", w.id, c.ToolName, c.Decision, c.Risk, c.ArgumentsSha256)
		}
		if r.IsError != w.isErr || !strings.Contains(r.Content, w.output) || r.ResultBytes == 0 || r.Duration == nil {
			t.Errorf("%s: result %q is_error %v bytes %d, want %q is_error %v", w.id, r.Content, r.IsError, r.ResultBytes, w.output, w.isErr)
		}
	}
}

// require_approval: a call of the server's tools blocks the task with a
// pending approval naming the namespaced tool.
func TestMCPRequireApprovalBlocks(t *testing.T) {
	srv := mcptest.Install(t)
	e := newMCPEnv(t, &srv)
	e.startExecutor()
	a := &agentmeshv1.Agent{
		Name: "mcp-careful",
		McpServers: []*agentmeshv1.McpServer{
			{Name: "fs", Command: srv.FilesystemCommand("${WORKSPACE}"), RequireApproval: true},
		},
	}
	task := e.submitAgent(a, "mcp-approve")
	got := e.waitStatus(task.Id, taskstate.Blocked, 30*time.Second)
	if p := got.PendingApproval; p == nil || p.Tool != "fs__list_directory" || p.Arguments != `{"path":"."}` || p.Risk != "external" {
		t.Errorf("pending approval = %v, want one for fs__list_directory", p)
	}
	calls, results := toolSteps(steps(e.history(task.Id)))
	c := calls["call_0_0"]
	if c == nil || c.ToolName != "fs__list_directory" || c.Decision != agentmeshv1.ToolDecision_TOOL_DECISION_PENDING_APPROVAL {
		t.Fatalf("call step = %v, want PENDING_APPROVAL of fs__list_directory", c)
	}
	if len(results) != 0 {
		t.Errorf("a call waiting for approval has results: %v", results)
	}

	// Approved, the task resumes on a new attempt: the child starts the
	// server again and the approved call runs once.
	var tr busv1.TransitionResponse
	if err := bus.Request(context.Background(), e.nc, e.names.State(subjects.StateDecide), &busv1.TransitionRequest{
		TaskId: task.Id, Org: "acme", From: taskstate.Blocked, To: taskstate.Queued, Reason: "approved",
		Approval: &agentmeshv1.Approval{Id: got.PendingApproval.GetId(), Status: agentmeshv1.ApprovalStatus_APPROVAL_STATUS_APPROVED, DecidedBy: "acme"},
	}, &tr); err != nil {
		t.Fatalf("approve: %v", err)
	}
	e.publishWork(e.assign(task.Id))
	done := e.waitStatus(task.Id, taskstate.Completed, 30*time.Second)
	if !strings.HasPrefix(done.Result, "listed: ") {
		t.Errorf("result = %q", done.Result)
	}
	calls, results = toolSteps(steps(e.history(task.Id)))
	if c, r := calls["call_0_0"], results["call_0_0"]; c.GetDecision() != agentmeshv1.ToolDecision_TOOL_DECISION_APPROVED || r == nil || r.IsError {
		t.Errorf("after approval: call %v, result %v", c, r)
	}
}

// A server that does not start fails the task with a reason naming it, on
// either side: stdio (the child) and HTTP (the executor).
func TestMCPServerThatDoesNotStartFailsTask(t *testing.T) {
	e := newMCPEnv(t, nil)
	e.startExecutor()
	stdio := e.submitAgent(&agentmeshv1.Agent{Name: "mcp-broken", McpServers: []*agentmeshv1.McpServer{
		{Name: "bad", Command: []string{"/nonexistent/mcp-server"}},
	}}, "anything")
	web := e.submitAgent(&agentmeshv1.Agent{Name: "mcp-broken-web", McpServers: []*agentmeshv1.McpServer{
		{Name: "web", Url: "http://127.0.0.1:1/mcp"},
	}}, "anything")
	if got := e.waitStatus(stdio.Id, taskstate.Failed, 30*time.Second); !strings.HasPrefix(got.Error, "mcp server bad: start: ") {
		t.Errorf("stdio: error = %q", got.Error)
	}
	if got := e.waitStatus(web.Id, taskstate.Failed, 60*time.Second); !strings.HasPrefix(got.Error, "mcp server web: start: ") {
		t.Errorf("http: error = %q", got.Error)
	}
}

// A stdio server runs inside the agent's sandbox: a filesystem server
// allowed "/" still cannot read a file outside the workspace, and a
// server's environment holds nothing of the executor's.
func TestMCPStdioServerIsSandboxed(t *testing.T) {
	srv := mcptest.Install(t)
	secret := filepath.Join(t.TempDir(), "secret.txt")
	if err := os.WriteFile(secret, []byte("TOP-SECRET"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("AGENTMESH_EXECUTOR_SECRET", "leaked")
	e := newMCPEnv(t, &srv, "{{SECRET}}", secret)
	e.startExecutor()
	task := e.submitAgent(&agentmeshv1.Agent{Name: "mcp-escape", McpServers: []*agentmeshv1.McpServer{
		{Name: "fs", Command: srv.FilesystemCommand("/")},
		{Name: "ev", Command: srv.EverythingCommand(), Env: map[string]string{"MCP_MODE": "test"}},
	}}, "mcp-escape")
	e.waitStatus(task.Id, taskstate.Completed, 60*time.Second)
	calls, results := toolSteps(steps(e.history(task.Id)))
	if c, r := calls["call_0_0"], results["call_0_0"]; c.GetDecision() != agentmeshv1.ToolDecision_TOOL_DECISION_ALLOWED || r == nil ||
		!r.IsError || strings.Contains(r.Content, "TOP-SECRET") {
		t.Errorf("read outside the workspace: call %v result %v, want an error and no secret", c, r)
	}
	t.Logf("read outside: %q", results["call_0_0"].GetContent())
	r := results["call_0_1"]
	if r == nil || r.IsError || !strings.Contains(r.Content, "MCP_MODE") || strings.Contains(r.Content, "AGENTMESH_EXECUTOR_SECRET") {
		t.Errorf("get-env = %v, want the server's own environment only", r)
	}
}

// An HTTP MCP server on a private or loopback address is refused unless
// allowlisted: agent definitions come from API callers, and the executor
// must not become their way into the internal network.
func TestMCPHTTPPrivateAddressRefused(t *testing.T) {
	srv := mcptest.Install(t)
	httpURL := mcptest.StartEverythingHTTP(t, srv)
	e := newMCPEnv(t, &srv)
	e.startExecutor() // the default client: web_fetch's policy, no allowlist
	a := &agentmeshv1.Agent{
		Name: "sneaky", Tools: []string{"echo"},
		McpServers: []*agentmeshv1.McpServer{{Name: "internal", Url: httpURL}},
	}
	task := e.submitAgent(a, "mcp-work please")
	got := e.waitStatus(task.Id, taskstate.Failed, 60*time.Second)
	if !strings.Contains(got.Error, "mcp server internal") || !strings.Contains(got.Error, "address not allowed") {
		t.Errorf("reason = %q, want the server named and the address refused", got.Error)
	}
}
