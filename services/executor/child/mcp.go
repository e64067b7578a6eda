package child

import (
	"context"
	"fmt"
	"os"

	childwirev1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/childwire/v1"
	"github.com/agentmesh/agentmesh/pkg/mcp"
	"github.com/agentmesh/agentmesh/pkg/tools"
)

// mcpServers are the stdio MCP servers this child started; they run in its
// sandbox (its namespaces, Landlock rules and cgroup) and are stopped when
// it exits.
type mcpServers struct {
	servers []*mcp.Server
}

// startMCP starts the agent's stdio MCP servers (Start.mcp_servers), adds
// their tools ("<server>__<tool>") to the tools this child runs and offers,
// and reports them to the executor in a ToolsDiscovered frame, so that its
// gate can check and audit their calls. A server that does not start or
// list its tools fails the task for good.
func (l *loop) startMCP() error {
	cfgs := l.start.GetMcpServers()
	if len(cfgs) == 0 {
		return nil
	}
	ws := l.start.GetWorkspace()
	if ws == "" {
		ws, _ = os.Getwd()
	}
	taken := map[string]bool{}
	for _, s := range l.start.GetExecutorTools() {
		taken[s.Name] = true
	}
	var found []*childwirev1.ToolSpec
	for _, cfg := range cfgs {
		if len(cfg.GetCommand()) == 0 {
			return l.fail(fmt.Sprintf("mcp server %s: the agent process starts only stdio servers (a command)", cfg.GetName()), true)
		}
		s, err := mcp.Connect(context.Background(), cfg, mcp.Options{Workspace: ws, Runs: tools.InChild})
		if err != nil {
			return l.fail(err.Error(), true)
		}
		l.mcp.servers = append(l.mcp.servers, s)
		for _, t := range s.Tools(tools.InChild) {
			if _, dup := l.tools[t.Name]; dup || taken[t.Name] {
				return l.fail(fmt.Sprintf("mcp server %s: tool %s collides with another tool of the agent", cfg.GetName(), t.Name), true)
			}
			l.tools[t.Name] = t
			spec := &childwirev1.ToolSpec{Name: t.Name, Description: t.Description, ParametersJson: string(t.Parameters)}
			l.specs = append(l.specs, spec)
			found = append(found, spec)
		}
	}
	return l.send(&childwirev1.Frame{Kind: &childwirev1.Frame_ToolsDiscovered{ToolsDiscovered: &childwirev1.ToolsDiscovered{Tools: found}}})
}

// stopMCP stops the servers startMCP started.
func (l *loop) stopMCP() {
	for _, s := range l.mcp.servers {
		_ = s.Close()
	}
	l.mcp.servers = nil
}
