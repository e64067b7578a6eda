package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/agentmesh/agentmesh/services/router/door"
	"github.com/agentmesh/agentmesh/services/router/mcpserver"
)

// mcpStdin and mcpStdout are what `amctl mcp` speaks MCP on (tests replace
// them).
var (
	mcpStdin  io.ReadCloser  = os.Stdin
	mcpStdout io.WriteCloser = os.Stdout
)

// mcpCmd is `amctl mcp`: agentmesh as a Model Context Protocol server on
// stdin and stdout, for desktop clients (Claude Desktop, IDEs) that start
// their servers as processes. It speaks the public gRPC API of the
// agentmesh at --server with --api-key, as every other command does; its
// log goes to stderr (stdout carries the protocol only).
func (c *cli) mcpCmd(ctx context.Context, args []string) error {
	fs := c.flags("mcp", "[--server ADDR] [--api-key KEY]",
		"Serve agentmesh as an MCP server on stdin and stdout (newline-delimited JSON-RPC),\n"+
			"for MCP clients that start their servers as processes (e.g. Claude Desktop).\n"+
			"Tools: delegate, check_status, list_tasks, cancel_task, get_result; resources\n"+
			"subtask://{id}; the io.modelcontextprotocol/tasks extension. Every call uses\n"+
			"--api-key (env "+envAPIKey+") against --server (env "+envServer+").")
	if _, err := c.parseConnect(fs, args, "mcp"); err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(c.stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	if c.apiKey != "" {
		// Say at once why nothing will work, rather than at the first call.
		switch err := door.NewChecker(c.conn, 0).Check(ctx, c.apiKey); {
		case errors.Is(err, door.ErrBadKey):
			return fmt.Errorf("agentmesh at %s does not know this API key", c.server)
		case err != nil:
			log.Warn("amctl mcp: could not check the API key; serving anyway", "server", c.server, "err", err)
		}
	}
	return mcpserver.ServeStdio(ctx, mcpserver.Config{}, mcpserver.Deps{Conn: c.conn, Log: log}, "", mcpStdin, mcpStdout)
}
