package mcphttp_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/mcp"
	"github.com/agentmesh/agentmesh/pkg/mcp/mcphttp"
	"github.com/agentmesh/agentmesh/pkg/tools"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// A tools/call carries the call's idempotency key in _meta, over a real
// streamable-HTTP MCP server; a call without a key carries none.
func TestCallCarriesIdempotencyKey(t *testing.T) {
	var (
		mu   sync.Mutex
		seen []any
	)
	server := sdk.NewServer(&sdk.Implementation{Name: "recorder", Version: "1"}, nil)
	server.AddTool(&sdk.Tool{Name: "charge", Description: "charges a card", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			mu.Lock()
			seen = append(seen, req.Params.GetMeta()[mcp.MetaIdempotencyKey])
			mu.Unlock()
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "charged"}}}, nil
		})
	hs := httptest.NewServer(sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return server }, nil))
	t.Cleanup(hs.Close)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv, err := mcphttp.Connect(ctx, &agentmeshv1.McpServer{Name: "pay", Url: hs.URL}, mcphttp.Options{Options: mcp.Options{Runs: tools.InExecutor}, HTTPClient: hs.Client()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	name := srv.Tools(tools.InExecutor)[0].Name
	if _, _, err := srv.CallKeyed(ctx, name, json.RawMessage(`{}`), "01TASK:call_1"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := srv.Call(ctx, name, json.RawMessage(`{}`)); err != nil {
		t.Fatal(err)
	}
	// Through the tool's own function, as the child calls a stdio server's.
	if _, err := srv.Tools(tools.InExecutor)[0].Run(ctx, tools.Env{IdempotencyKey: "01TASK:call_2"}, json.RawMessage(`{}`)); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	want := []any{"01TASK:call_1", nil, "01TASK:call_2"}
	if len(seen) != len(want) {
		t.Fatalf("server saw keys %v, want %v", seen, want)
	}
	for i := range want {
		if seen[i] != want[i] {
			t.Errorf("call %d: server saw key %v, want %v", i, seen[i], want[i])
		}
	}
}
