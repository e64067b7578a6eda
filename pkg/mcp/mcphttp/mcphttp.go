// Package mcphttp reaches streamable HTTP MCP servers with the MCP SDK
// (github.com/modelcontextprotocol/go-sdk), for the executor, which calls
// them on the agent child's behalf. Everything else of MCP — naming, the
// checks, flattening results, stdio servers — is pkg/mcp's, which links no
// SDK so that the agent child does not either.
package mcphttp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/agentmesh/agentmesh/pkg/mcp"
	"github.com/agentmesh/agentmesh/pkg/tail"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// Options say how to reach a server.
type Options struct {
	mcp.Options
	// HTTPClient for the server (a client with sane timeouts by default).
	HTTPClient *http.Client
}

// ErrNotHTTP: the configuration names no URL.
var ErrNotHTTP = errors.New("not a streamable HTTP server (no url)")

// Connect reaches the HTTP server cfg.url names and lists its tools. Its
// errors begin "mcp server <name>: ".
func Connect(ctx context.Context, cfg mcp.Config, opts Options) (*mcp.Server, error) {
	if cfg.GetUrl() == "" {
		return nil, fmt.Errorf("mcp server %s: %w", cfg.GetName(), ErrNotHTTP)
	}
	return mcp.Open(ctx, cfg, opts.Options, func(ctx context.Context) (mcp.Session, *tail.Buffer, error) {
		hc := opts.HTTPClient
		if hc == nil {
			hc = defaultHTTPClient
		}
		transport := &sdk.StreamableClientTransport{Endpoint: cfg.GetUrl(), HTTPClient: hc, MaxRetries: 1, DisableStandaloneSSE: true}
		client := sdk.NewClient(&sdk.Implementation{Name: "agentmesh", Version: "1"}, &sdk.ClientOptions{
			Capabilities: &sdk.ClientCapabilities{},
		})
		cs, err := client.Connect(ctx, transport, nil)
		if err != nil {
			return nil, nil, err
		}
		return session{cs}, nil, nil
	})
}

// session is an SDK client session as pkg/mcp uses one.
type session struct{ cs *sdk.ClientSession }

func (s session) ListTools(ctx context.Context, cursor string) ([]mcp.ToolInfo, string, error) {
	res, err := s.cs.ListTools(ctx, &sdk.ListToolsParams{Cursor: cursor})
	if err != nil {
		return nil, "", err
	}
	out := make([]mcp.ToolInfo, 0, len(res.Tools))
	for _, t := range res.Tools {
		info := mcp.ToolInfo{Name: t.Name, Title: t.Title, Description: t.Description}
		if t.InputSchema != nil {
			b, err := json.Marshal(t.InputSchema)
			if err != nil {
				return nil, "", fmt.Errorf("tool %s: schema: %w", t.Name, err)
			}
			info.InputSchema = b
		}
		out = append(out, info)
	}
	return out, res.NextCursor, nil
}

func (s session) CallTool(ctx context.Context, name string, args json.RawMessage, meta map[string]any) (*mcp.Result, error) {
	params := &sdk.CallToolParams{Name: name, Arguments: args}
	if meta != nil {
		params.Meta = sdk.Meta(meta)
	}
	res, err := s.cs.CallTool(ctx, params)
	if err != nil {
		return nil, err
	}
	return Result(res)
}

func (s session) Close() error { return s.cs.Close() }

// Result is res as the server sent it (the SDK's types encode to the
// protocol's JSON), for mcp.Flatten.
func Result(res *sdk.CallToolResult) (*mcp.Result, error) {
	b, err := json.Marshal(res)
	if err != nil {
		return nil, fmt.Errorf("tool result: %w", err)
	}
	var out mcp.Result
	if err := json.Unmarshal(b, &out); err != nil {
		return nil, fmt.Errorf("tool result: %w", err)
	}
	return &out, nil
}

var defaultHTTPClient = &http.Client{Transport: &http.Transport{
	Proxy:                 http.ProxyFromEnvironment,
	TLSHandshakeTimeout:   10 * time.Second,
	ResponseHeaderTimeout: 90 * time.Second,
	IdleConnTimeout:       90 * time.Second,
	MaxIdleConnsPerHost:   4,
}}
