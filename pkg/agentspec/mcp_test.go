package agentspec

import (
	"errors"
	"strings"
	"testing"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
)

func TestValidateAgentMCPServers(t *testing.T) {
	ok := &agentmeshv1.Agent{Name: "a", McpServers: []*agentmeshv1.McpServer{
		{Name: "fs", Command: []string{"npx", "-y", "@modelcontextprotocol/server-filesystem", "${WORKSPACE}"}, Env: map[string]string{"DEBUG": "1"}},
		{Name: "web-tools", Url: "https://mcp.example.com/mcp", RequireApproval: true},
	}}
	if err := Agent(ok); err != nil {
		t.Fatalf("valid agent: %v", err)
	}
	many := &agentmeshv1.Agent{Name: "a"}
	for i := 0; i < 17; i++ {
		many.McpServers = append(many.McpServers, &agentmeshv1.McpServer{Name: "s" + strings.Repeat("x", i), Command: []string{"x"}})
	}
	cases := map[string]struct {
		agent *agentmeshv1.Agent
		code  error
		field string
		msg   string
	}{
		"bad name":  {&agentmeshv1.Agent{Name: "a", McpServers: []*agentmeshv1.McpServer{{Name: "F S", Command: []string{"x"}}}}, bus.ErrInvalidArgument, "agent.mcp_servers[0]", "name"},
		"both":      {&agentmeshv1.Agent{Name: "a", McpServers: []*agentmeshv1.McpServer{{Name: "fs", Command: []string{"x"}, Url: "http://h/"}}}, bus.ErrInvalidArgument, "agent.mcp_servers[0]", "not both"},
		"neither":   {&agentmeshv1.Agent{Name: "a", McpServers: []*agentmeshv1.McpServer{{Name: "fs"}}}, bus.ErrInvalidArgument, "agent.mcp_servers[0]", "command"},
		"file url":  {&agentmeshv1.Agent{Name: "a", McpServers: []*agentmeshv1.McpServer{{Name: "fs", Url: "file:///etc/passwd"}}}, bus.ErrInvalidArgument, "agent.mcp_servers[0]", "http or https"},
		"duplicate": {&agentmeshv1.Agent{Name: "a", McpServers: []*agentmeshv1.McpServer{{Name: "fs", Command: []string{"x"}}, {Name: "fs", Url: "http://h/"}}}, bus.ErrInvalidArgument, "agent.mcp_servers[1]", "duplicate"},
		"too many":  {many, bus.ErrResourceExhausted, "agent.mcp_servers", "more than 16"},
	}
	for name, c := range cases {
		err := Agent(c.agent)
		var be *bus.Error
		if !errors.Is(err, c.code) || !errors.As(err, &be) || be.Field != c.field || !strings.Contains(be.Message, c.msg) {
			t.Errorf("%s: ValidateAgent = %v, want %v on %s mentioning %q", name, err, c.code, c.field, c.msg)
		}
	}
}
