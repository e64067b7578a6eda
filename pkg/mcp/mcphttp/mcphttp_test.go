package mcphttp_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/mcp"
	"github.com/agentmesh/agentmesh/pkg/mcp/mcphttp"
	"github.com/agentmesh/agentmesh/pkg/mcp/mcptest"
	"github.com/agentmesh/agentmesh/pkg/tools"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

func result(t *testing.T, res *sdk.CallToolResult) *mcp.Result {
	t.Helper()
	r, err := mcphttp.Result(res)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// The SDK's results, encoded as the protocol says, flatten as before.
func TestFlattenSDKResult(t *testing.T) {
	out, isErr := mcp.Flatten(result(t, &sdk.CallToolResult{Content: []sdk.Content{
		&sdk.TextContent{Text: "one"},
		&sdk.ImageContent{MIMEType: "image/png", Data: []byte("12345")},
		&sdk.ResourceLink{URI: "file:///a", Name: "a"},
		&sdk.EmbeddedResource{Resource: &sdk.ResourceContents{URI: "file:///b", Text: "bee"}},
		&sdk.TextContent{Text: "two"},
	}, IsError: true}))
	want := "one\n[image image/png, 5 bytes]\n[resource link file:///a (a)]\n[resource file:///b]\nbee\ntwo"
	if out != want || !isErr {
		t.Errorf("Flatten = %q %v, want %q true", out, isErr, want)
	}
	out, _ = mcp.Flatten(result(t, &sdk.CallToolResult{StructuredContent: map[string]any{"x": 1}}))
	if out != `{"x":1}` {
		t.Errorf("structured only: %q", out)
	}
}

func TestHTTPEverything(t *testing.T) {
	srv := mcptest.Install(t)
	url := mcptest.StartEverythingHTTP(t, srv)
	ctx := context.Background()
	s, err := mcphttp.Connect(ctx, &agentmeshv1.McpServer{Name: "everything", Url: url}, mcphttp.Options{Options: mcp.Options{Runs: tools.InExecutor}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	echo, ok := find(s.Tools(tools.InExecutor), "everything__echo")
	if !ok || echo.Runs != tools.InExecutor {
		t.Fatalf("everything__echo: %v %+v", ok, echo.Spec)
	}
	out, isErr, err := s.Call(ctx, "everything__echo", json.RawMessage(`{"message":"over http"}`))
	if err != nil || isErr || !strings.Contains(out, "over http") {
		t.Errorf("echo = %q %v %v", out, isErr, err)
	}
	if err := echo.Check(`{"message": 1}`); !errors.Is(err, tools.ErrInvalidArguments) {
		t.Errorf("Check with a number: %v", err)
	}
}

func find(ts []tools.Tool, name string) (tools.Tool, bool) {
	for _, t := range ts {
		if t.Name == name {
			return t, true
		}
	}
	return tools.Tool{}, false
}

func TestServerThatDoesNotAnswer(t *testing.T) {
	ctx := context.Background()
	// Nothing listens at the URL.
	_, err := mcphttp.Connect(ctx, &agentmeshv1.McpServer{Name: "web", Url: "http://127.0.0.1:1/mcp"}, mcphttp.Options{Options: mcp.Options{Timeout: 5 * time.Second}})
	if err == nil || !strings.HasPrefix(err.Error(), "mcp server web: start: ") {
		t.Errorf("closed port: %v", err)
	}
	// A stdio configuration is pkg/mcp's.
	_, err = mcphttp.Connect(ctx, &agentmeshv1.McpServer{Name: "cmd", Command: []string{"true"}}, mcphttp.Options{})
	if !errors.Is(err, mcphttp.ErrNotHTTP) {
		t.Errorf("stdio config: %v, want ErrNotHTTP", err)
	}
}
