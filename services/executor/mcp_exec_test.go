package executor

import (
	"strings"
	"testing"

	childv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/child/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
)

// The executor takes the tools the child reports only for the agent's
// stdio servers, checks their calls against the full schema and applies
// the server's require_approval from the agent's configuration.
func TestMCPDiscoveredAtTheGate(t *testing.T) {
	task := &agentmeshv1.Task{Id: "t1", AgentSpec: &agentmeshv1.Agent{Name: "a", Tools: []string{"echo"}, McpServers: []*agentmeshv1.McpServer{
		{Name: "fs", Command: []string{"node", "fs.js"}, RequireApproval: true},
		{Name: "notes", Command: []string{"node", "notes.js"}},
		{Name: "web", Url: "http://127.0.0.1:1/mcp"},
	}}}
	g := newGate(task, nil, nil, nil)
	schema := `{"type":"object","properties":{"id":{"type":"string","pattern":"^[a-z]+$"}},"required":["id"]}`
	if err := mcpDiscovered(task, g, &childv1.ToolsDiscovered{Tools: []*childv1.ToolSpec{
		{Name: "fs__read", ParametersJson: schema}, {Name: "notes__get", ParametersJson: schema},
	}}); err != nil {
		t.Fatal(err)
	}
	decide := func(tool, args string) verdict {
		return g.decide(&agentmeshv1.Step{Kind: agentmeshv1.StepKind_STEP_KIND_TOOL_CALL, ToolCallId: "c", ToolName: tool, Arguments: args})
	}
	if v := decide("notes__get", `{"id":"abc"}`); v.decision != agentmeshv1.ToolDecision_TOOL_DECISION_ALLOWED || v.inExecutor {
		t.Errorf("valid call: %+v, want ALLOWED in the child", v)
	}
	// pattern is a keyword the built-in checker ignores.
	if v := decide("notes__get", `{"id":"ABC"}`); v.decision != agentmeshv1.ToolDecision_TOOL_DECISION_DENIED || !strings.Contains(v.message, "invalid arguments") {
		t.Errorf("call against the pattern: %+v, want DENIED", v)
	}
	if v := decide("fs__read", `{"id":"abc"}`); v.decision != agentmeshv1.ToolDecision_TOOL_DECISION_PENDING_APPROVAL || v.approval.GetTool() != "fs__read" {
		t.Errorf("require_approval: %+v, want PENDING_APPROVAL", v)
	}
	for name, tools := range map[string][]*childv1.ToolSpec{
		"of an HTTP server":  {{Name: "web__get", ParametersJson: schema}},
		"of no server":       {{Name: "other__get", ParametersJson: schema}},
		"not namespaced":     {{Name: "echo", ParametersJson: schema}},
		"again":              {{Name: "notes__get", ParametersJson: schema}},
		"twice in one frame": {{Name: "notes__x", ParametersJson: schema}, {Name: "notes__x", ParametersJson: schema}},
		"broken schema":      {{Name: "notes__y", ParametersJson: `{"type": 7}`}},
	} {
		if err := mcpDiscovered(task, g, &childv1.ToolsDiscovered{Tools: tools}); err == nil {
			t.Errorf("tools %s accepted", name)
		}
	}
}
