package executor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"

	childv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/child/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/mcp"
	"github.com/agentmesh/agentmesh/pkg/mcp/mcphttp"
	"github.com/agentmesh/agentmesh/pkg/tools"
	"github.com/agentmesh/agentmesh/services/executor/llm"
)

// ErrMCPResponseTooLarge is returned (wrapped) when an HTTP MCP server's
// response goes past MCPMaxResponseBytes.
var ErrMCPResponseTooLarge = errors.New("MCP server response too large")

// MCPMaxResponseBytes caps one response of an HTTP MCP server as it is
// read (a tool's output reaches the model cut at tools.MaxOutput anyway).
const MCPMaxResponseBytes = 16 << 20

// limitMCPClient returns a copy of c whose responses are capped like the
// model's: error bodies at 4 KiB, others at MCPMaxResponseBytes.
func limitMCPClient(c *http.Client) *http.Client {
	return llm.Capped(c, MCPMaxResponseBytes, ErrMCPResponseTooLarge)
}

// taskMCP is the MCP side of one attempt: the HTTP servers the executor
// connected (it calls them on the child's behalf: the child has no
// network) and the stdio servers the child is to start in its sandbox.
type taskMCP struct {
	servers []*mcp.Server
	// tools of the HTTP servers, for the gate (Runs = InExecutor).
	tools []tools.Tool
	// specs of the HTTP servers' tools, for Start.executor_tools.
	specs []*childv1.ToolSpec
	// exec calls them, by tool name.
	exec map[string]ExecFunc
	// stdio servers, for Start.mcp_servers.
	stdio []*agentmeshv1.McpServer
}

// connectMCP checks the agent's MCP servers, connects its HTTP ones (each
// bounded by mcp.DefaultConnectTimeout) and lists their tools. Its error
// ("mcp server web: …") fails the task. Close the result when the run ends.
func (s *Service) connectMCP(ctx context.Context, log *slog.Logger, task *agentmeshv1.Task) (*taskMCP, error) {
	m := &taskMCP{exec: map[string]ExecFunc{}}
	cfgs := task.GetAgentSpec().GetMcpServers()
	if len(cfgs) > mcp.MaxServers {
		return m, fmt.Errorf("agent configuration: more than %d MCP servers", mcp.MaxServers)
	}
	seen := map[string]bool{}
	for _, cfg := range cfgs {
		if err := mcp.Validate(cfg); err != nil {
			return m, fmt.Errorf("mcp server %s: %w", cfg.GetName(), err)
		}
		if seen[cfg.GetName()] {
			return m, fmt.Errorf("mcp server %s: named twice", cfg.GetName())
		}
		seen[cfg.GetName()] = true
		if len(cfg.GetCommand()) > 0 {
			m.stdio = append(m.stdio, cfg)
			continue
		}
		srv, err := mcphttp.Connect(ctx, cfg, mcphttp.Options{Options: mcp.Options{Runs: tools.InExecutor}, HTTPClient: s.cfg.MCPClient})
		if err != nil {
			return m, err
		}
		m.servers = append(m.servers, srv)
		for _, t := range srv.Tools(tools.InExecutor) {
			m.tools = append(m.tools, t)
			m.specs = append(m.specs, &childv1.ToolSpec{Name: t.Name, Description: t.Description, ParametersJson: string(t.Parameters)})
			name := t.Name
			m.exec[name] = func(ctx context.Context, env tools.Env, args json.RawMessage, _ bool) (ExecResult, error) {
				out, isErr, err := srv.CallKeyed(ctx, name, args, env.IdempotencyKey)
				if err != nil {
					return ExecResult{}, err
				}
				return ExecResult{Output: out, IsError: isErr}, nil
			}
		}
		log.Info("mcp server connected", "server", cfg.GetName(), "url", cfg.GetUrl(), "tools", len(srv.Tools(tools.InExecutor)))
	}
	return m, nil
}

// execTools returns base plus the functions that call the HTTP servers.
func (m *taskMCP) execTools(base map[string]ExecFunc) map[string]ExecFunc {
	if len(m.exec) == 0 {
		return base
	}
	out := maps.Clone(base)
	if out == nil {
		out = map[string]ExecFunc{}
	}
	maps.Copy(out, m.exec)
	return out
}

// close ends the sessions with the HTTP servers.
func (m *taskMCP) close() {
	for _, s := range m.servers {
		_ = s.Close()
	}
}

// mcpDiscovered lets the tools of the stdio MCP servers the child started
// through the gate: each must be named for one of the agent's stdio
// servers and be new; its arguments are checked against the schema the
// server published (a full JSON Schema check), its approval rule is the
// server's require_approval (from the agent's configuration, not the
// child's word), and it runs in the child.
func mcpDiscovered(task *agentmeshv1.Task, g *gate, d *childv1.ToolsDiscovered) error {
	stdio := map[string]*agentmeshv1.McpServer{}
	for _, cfg := range task.GetAgentSpec().GetMcpServers() {
		if len(cfg.GetCommand()) > 0 {
			stdio[cfg.GetName()] = cfg
		}
	}
	var add []tools.Tool
	seen := map[string]bool{}
	for _, spec := range d.GetTools() {
		server, ok := mcp.ServerOf(spec.GetName())
		cfg := stdio[server]
		if !ok || cfg == nil {
			return fmt.Errorf("the agent reported tool %q of no stdio MCP server of its configuration", spec.GetName())
		}
		if _, dup := g.allowed[spec.GetName()]; dup || seen[spec.GetName()] {
			return fmt.Errorf("the agent reported tool %q twice or over another tool", spec.GetName())
		}
		t, err := mcp.NewTool(cfg, spec.GetName(), spec.GetDescription(), json.RawMessage(spec.GetParametersJson()), tools.InChild, nil)
		if err != nil {
			return fmt.Errorf("mcp server %s: %w", server, err)
		}
		seen[t.Name] = true
		add = append(add, t)
	}
	g.addTools(add...)
	return nil
}
