package app

import (
	"context"

	"github.com/agentmesh/agentmesh/services/executor"
	"github.com/agentmesh/agentmesh/services/executor/webfetch"
)

// privileged builds the executor-side tools from the settings, and sets
// them (and the HTTP client for MCP servers, under web_fetch's address
// policy and allowlist) on cfg.
func (s *settings) privileged(ctx context.Context, cfg *executor.Config) (func(), error) {
	tc := cfg.ToolSettings
	fns, closeFn, err := executor.PrivilegedTools(ctx, tc)
	if err != nil {
		return nil, usageError{err}
	}
	f, err := webfetch.New(tc.WebFetch)
	if err != nil {
		closeFn()
		return nil, usageError{err}
	}
	cfg.Tools, cfg.MCPClient = fns, f.ServiceClient()
	return closeFn, nil
}
