package mcpserver

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/agentmesh/agentmesh/services/doortest"
)

// exampleDir is the Node MCP example (examples/mcp-node).
var exampleDir = filepath.Join("..", "..", "..", "examples", "mcp-node")

// The official TypeScript MCP SDK client (examples/mcp-node, pinned
// @modelcontextprotocol/sdk) lists the tools, delegates a task, polls it
// and reads its answer, cancels one, and answers an approval through the
// tasks extension (its wire shapes checked by @modelcontextprotocol/ext-tasks'
// schemas) — the approval by the approver's key.
func TestNodeMCPClient(t *testing.T) {
	node := doortest.NodeExample(t, exampleDir, "@modelcontextprotocol/sdk")
	e := start(t)
	steps := doortest.RunNode(t, node, exampleDir, []string{
		"AGENTMESH_MCP_URL=" + e.srv.URL,
		"AGENTMESH_API_KEY=" + doortest.Secret(t, "a-op"),
		"AGENTMESH_AGENT=" + doortest.AgentPlain,
		"AGENTMESH_CANCEL_TASK=slow from node",
		"AGENTMESH_APPROVAL_AGENT=" + doortest.AgentCareful,
		"AGENTMESH_APPROVER_KEY=" + doortest.Secret(t, "a-approver"),
	}, "hello from node")
	for _, tt := range []struct{ step, field, want string }{
		{"tools", "names", "[cancel_task check_status delegate get_result list_tasks]"},
		{"result", "status", "completed"},
		{"result", "result", "final answer: hello from node"},
		{"cancelled", "status", "cancelled"},
		{"task-created", "resultType", "task"},
		{"task-created", "status", "working"},
		{"input-required", "method", "elicitation/create"},
		{"input-required", "tool", "echo"},
		{"input-required", "arguments", "map[text:hello from node]"},
		{"task-completed", "isError", "false"},
		{"task-completed", "result", "final answer: hello from node"},
	} {
		if got := fmt.Sprint(steps[tt.step][tt.field]); got != tt.want {
			t.Errorf("%s.%s = %q, want %q (all: %v)", tt.step, tt.field, got, tt.want, steps[tt.step])
		}
	}
}
