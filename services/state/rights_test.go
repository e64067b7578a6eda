package state_test

import (
	"slices"
	"testing"

	busv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/bus/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/subjects"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
)

const (
	allow     = agentmeshv1.ToolPolicy_TOOL_POLICY_ALLOW
	gated     = agentmeshv1.ToolPolicy_TOOL_POLICY_REQUIRE_APPROVAL
	denied    = agentmeshv1.ToolPolicy_TOOL_POLICY_DENY
	byDefault = agentmeshv1.ToolPolicy_TOOL_POLICY_UNSPECIFIED
)

// runningTaskWith starts a task of spec (a sub-task of parent when set) and moves
// it to running at attempt 1.
func runningTaskWith(t *testing.T, r *running, spec *agentmeshv1.Agent) *agentmeshv1.Task {
	t.Helper()
	created := mustCall(t, r.nc, subjects.StateCreateTask, &busv1.CreateTaskRequest{Task: &agentmeshv1.Task{
		Org: "acme", Agent: spec.Name, AgentSpec: spec, Input: "work"}}, &busv1.CreateTaskResponse{})
	start(t, r, created.Task.Id)
	return created.Task
}

func start(t *testing.T, r *running, id string) {
	t.Helper()
	mustCall(t, r.nc, subjects.StateDispatch, &busv1.TransitionRequest{TaskId: id, From: taskstate.Queued, To: taskstate.Assigned, NextAttempt: true}, &busv1.TransitionResponse{})
	mustCall(t, r.nc, subjects.StateStart, &busv1.TransitionRequest{TaskId: id, From: taskstate.Assigned, To: taskstate.Running, Attempt: 1, Node: "n1"}, &busv1.TransitionResponse{})
}

// A sub-task's agent_spec in the record holds the rights it runs with:
// the target's tools that its parent may use, each under the stricter
// policy of the two, and only the MCP servers both have — computed by state
// from the parent's record, whatever the spawn request asks (a stolen
// executor identity, a model's override). A grandchild is bounded by the
// whole chain.
func TestSpawnNarrowsToTheParentsRights(t *testing.T) {
	r := startKV(t)
	shared := &agentmeshv1.McpServer{Name: "docs", Url: "https://mcp.example/docs"}
	root := runningTaskWith(t, r, &agentmeshv1.Agent{
		Name: "planner", Tools: []string{"call_agent", "shell", "fs_read", "sql_query", "web_fetch"},
		ToolPolicies: map[string]agentmeshv1.ToolPolicy{"shell": gated, "fs_read": denied, "sql_query": allow, "docs__search": gated},
		McpServers:   []*agentmeshv1.McpServer{shared},
	})
	// What the request asks: more tools, laxer policies, another server.
	asked := &agentmeshv1.Agent{
		Name: "power", Tools: []string{"call_agent", "shell", "fs_read", "sql_query", "web_fetch", "code_run"},
		ToolPolicies: map[string]agentmeshv1.ToolPolicy{"shell": allow, "sql_query": allow, "web_fetch": denied, "docs__search": allow},
		McpServers: []*agentmeshv1.McpServer{
			{Name: "docs", Url: "https://mcp.example/docs", RequireApproval: false},
			{Name: "mail", Url: "https://mcp.example/mail"},
			{Name: "docs2", Url: "https://elsewhere.example/docs"},
		},
	}
	spawn := func(parent, call string, spec *agentmeshv1.Agent) *agentmeshv1.Task {
		t.Helper()
		resp := mustCall(t, r.nc, subjects.StateSpawn, &busv1.SpawnSubtaskRequest{
			ParentTaskId: parent, Attempt: 1, ToolCallId: call, AgentSpec: spec, Input: "sub",
		}, &busv1.SpawnSubtaskResponse{})
		return getTask(t, r, resp.Task.Id)
	}
	child := spawn(root.Id, "c1", asked)
	want := map[string]agentmeshv1.ToolPolicy{"call_agent": byDefault, "shell": gated, "sql_query": allow, "web_fetch": denied}
	checkRights(t, "child", child.AgentSpec, want, []string{"docs"})
	if srv := child.AgentSpec.McpServers[0]; srv.Url != shared.Url {
		t.Errorf("child's docs server %v, want the shared one", srv)
	}
	if got := child.AgentSpec.ToolPolicies["docs__search"]; got != gated {
		t.Errorf("child's docs__search policy %v, want %v (the parent's)", got, gated)
	}

	// Depth 2: the child asks for everything again for its own sub-task;
	// what its policy denies (web_fetch) it cannot pass on at all.
	start(t, r, child.Id)
	grand := spawn(child.Id, "g1", asked)
	delete(want, "web_fetch")
	checkRights(t, "grandchild", grand.AgentSpec, want, []string{"docs"})
}

// checkRights checks spec has exactly the tools of want, each under its
// policy there, and the MCP servers named.
func checkRights(t *testing.T, what string, spec *agentmeshv1.Agent, want map[string]agentmeshv1.ToolPolicy, servers []string) {
	t.Helper()
	var tools []string
	for name := range want {
		tools = append(tools, name)
	}
	got := slices.Clone(spec.GetTools())
	slices.Sort(got)
	slices.Sort(tools)
	if !slices.Equal(got, tools) {
		t.Errorf("%s: tools %v, want %v", what, got, tools)
	}
	for name, p := range want {
		if spec.GetToolPolicies()[name] != p {
			t.Errorf("%s: policy of %s is %v, want %v", what, name, spec.GetToolPolicies()[name], p)
		}
	}
	var names []string
	for _, s := range spec.GetMcpServers() {
		names = append(names, s.Name)
	}
	if !slices.Equal(names, servers) {
		t.Errorf("%s: MCP servers %v, want %v", what, names, servers)
	}
}
