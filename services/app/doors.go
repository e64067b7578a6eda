package app

import (
	"fmt"
	"log/slog"
	"net/http"

	"github.com/agentmesh/agentmesh/services/router/a2a"
	"github.com/agentmesh/agentmesh/services/router/door"
	"github.com/agentmesh/agentmesh/services/router/mcpserver"
	"github.com/agentmesh/agentmesh/services/stack"
)

// mountDoors mounts the JSON-RPC doors on the router's HTTP listener, when
// st has a router with one: the MCP server at /mcp, A2A at /a2a and its
// agent card at /.well-known/agent-card.json. Each calls the router's own
// API in process (Conn) as its caller. The returned func stops the MCP
// server's watches. (The binary mounts them, not services/stack: the
// doors' tests build stacks.)
func mountDoors(st *stack.Stack, log *slog.Logger) (func(), error) {
	svc := st.Router()
	if svc == nil || st.HTTPAddr() == "" {
		return func() {}, nil
	}
	deps := door.Deps{Conn: svc.Conn(), Log: log}
	mcp, err := mcpserver.New(mcpserver.Config{}, deps)
	if err != nil {
		return nil, err
	}
	agents, err := a2a.New(a2a.Config{}, deps)
	if err != nil {
		mcp.Close()
		return nil, err
	}
	for _, m := range []struct {
		pattern string
		h       http.Handler
	}{{"/mcp", mcp}, {"/a2a", agents}, {"/.well-known/agent-card.json", agents}} {
		if err := svc.Mount(m.pattern, m.h); err != nil {
			mcp.Close()
			return nil, fmt.Errorf("mount %s: %w", m.pattern, err)
		}
	}
	return mcp.Close, nil
}
