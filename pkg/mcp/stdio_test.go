package mcp_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/mcp"
	"github.com/agentmesh/agentmesh/pkg/tools"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// envServer makes the test binary an MCP server over stdio (the SDK's), so
// the client is tested against another implementation than its own.
const envServer = "AGENTMESH_MCP_TEST_SERVER"

func TestMain(m *testing.M) {
	switch os.Getenv(envServer) {
	case "sdk":
		serveSDK()
		os.Exit(0)
	case "garbage":
		// Answers initialize with a line that is no JSON-RPC message.
		_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
		fmt.Println("hello, I am not JSON")
		time.Sleep(10 * time.Second)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// serveSDK serves, two tools a page: charge (answers with the idempotency
// key of its call's _meta), ping-first (pings the client before it
// answers) and t1…t3.
func serveSDK() {
	server := sdk.NewServer(&sdk.Implementation{Name: "sdk-test", Version: "1"}, &sdk.ServerOptions{PageSize: 2})
	obj := json.RawMessage(`{"type":"object"}`)
	server.AddTool(&sdk.Tool{Name: "charge", InputSchema: obj}, func(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
		key, ok := req.Params.GetMeta()[mcp.MetaIdempotencyKey]
		if !ok {
			key = "none"
		}
		return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: fmt.Sprintf("key=%v", key)}}}, nil
	})
	server.AddTool(&sdk.Tool{Name: "ping-first", InputSchema: obj}, func(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
		if err := req.Session.Ping(ctx, nil); err != nil {
			return nil, err
		}
		return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "pong answered"}}}, nil
	})
	for _, n := range []string{"t1", "t2", "t3"} {
		server.AddTool(&sdk.Tool{Name: n, Description: "tool " + n, InputSchema: obj}, func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			return &sdk.CallToolResult{IsError: true, Content: []sdk.Content{&sdk.TextContent{Text: n + " failed"}}}, nil
		})
	}
	_ = server.Run(context.Background(), &sdk.StdioTransport{})
}

// selfServer is the configuration of the test binary serving as kind.
func selfServer(t *testing.T, name, kind string) *agentmeshv1.McpServer {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return &agentmeshv1.McpServer{Name: name, Command: []string{exe}, Env: map[string]string{envServer: kind}}
}

// The stdio client against the SDK's server: every page of tools listed,
// the idempotency key in _meta (none without a key), the server's ping
// answered during a call, isError kept.
func TestStdioClientAgainstSDKServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := mcp.Connect(ctx, selfServer(t, "pay", "sdk"), mcp.Options{Workspace: t.TempDir(), Runs: tools.InChild})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	}()
	var names []string
	for _, tl := range s.Tools(tools.InChild) {
		names = append(names, tl.Name)
	}
	if got := strings.Join(names, " "); got != "pay__charge pay__ping-first pay__t1 pay__t2 pay__t3" {
		t.Errorf("tools over three pages: %s", got)
	}
	if out, isErr, err := s.CallKeyed(ctx, "pay__charge", nil, "01TASK:call_1"); err != nil || isErr || out != "key=01TASK:call_1" {
		t.Errorf("keyed call = %q %v %v", out, isErr, err)
	}
	if out, _, err := s.Call(ctx, "pay__charge", json.RawMessage(`{}`)); err != nil || out != "key=none" {
		t.Errorf("call without a key = %q %v", out, err)
	}
	if out, _, err := s.Call(ctx, "pay__ping-first", json.RawMessage(`{}`)); err != nil || out != "pong answered" {
		t.Errorf("call during which the server pings = %q %v", out, err)
	}
	if out, isErr, err := s.Call(ctx, "pay__t2", json.RawMessage(`{}`)); err != nil || !isErr || out != "t2 failed" {
		t.Errorf("failing tool = %q %v %v", out, isErr, err)
	}
	if _, _, err := s.Call(ctx, "pay__nope", json.RawMessage(`{}`)); err == nil || !strings.HasPrefix(err.Error(), "mcp server pay: tools/call: ") {
		t.Errorf("unknown tool: %v", err)
	}
}

func TestStdioServerThatBreaksTheProtocol(t *testing.T) {
	_, err := mcp.Connect(context.Background(), selfServer(t, "junk", "garbage"), mcp.Options{Workspace: t.TempDir(), Timeout: 20 * time.Second})
	if !errors.Is(err, mcp.ErrProtocol) || !strings.HasPrefix(err.Error(), "mcp server junk: start: ") {
		t.Errorf("garbage on stdout: %v, want ErrProtocol at start", err)
	}
}

func TestConnectRefusesHTTP(t *testing.T) {
	_, err := mcp.Connect(context.Background(), &agentmeshv1.McpServer{Name: "web", Url: "http://127.0.0.1:1/mcp"}, mcp.Options{})
	if !errors.Is(err, mcp.ErrHTTPElsewhere) {
		t.Errorf("Connect(url) = %v, want ErrHTTPElsewhere", err)
	}
}

func TestFlatten(t *testing.T) {
	res := func(s string) *mcp.Result {
		var r mcp.Result
		if err := json.Unmarshal([]byte(s), &r); err != nil {
			t.Fatal(err)
		}
		return &r
	}
	out, isErr := mcp.Flatten(res(`{"isError":true,"content":[
	  {"type":"text","text":"one"},
	  {"type":"image","mimeType":"image/png","data":"MTIzNDU="},
	  {"type":"audio","data":"AAE="},
	  {"type":"resource_link","uri":"file:///a","name":"a","description":"the a"},
	  {"type":"resource","resource":{"uri":"file:///b","text":"bee"}},
	  {"type":"resource","resource":{"uri":"file:///c","mimeType":"application/zip","blob":"AAAA"}},
	  {"type":"resource"},
	  {"type":"hologram", "x": 1}]}`))
	want := "one\n[image image/png, 5 bytes]\n[audio of unknown type, 2 bytes]\n[resource link file:///a (a): the a]\n" +
		"[resource file:///b]\nbee\n[resource file:///c, application/zip, 3 bytes]\n[resource]\n[content {\"type\":\"hologram\",\"x\":1}]"
	if out != want || !isErr {
		t.Errorf("Flatten = %q %v, want %q true", out, isErr, want)
	}
	if out, _ := mcp.Flatten(res(`{"content":[],"structuredContent":{"x": 1}}`)); out != `{"x":1}` {
		t.Errorf("structured only: %q", out)
	}
	if out, isErr := mcp.Flatten(nil); out != "" || isErr {
		t.Errorf("nil: %q %v", out, isErr)
	}
}

// A server's result is outside input: whatever a content block holds,
// Flatten returns one part for it, without panicking: a text block's text,
// a block that is no JSON object as [content …].
func FuzzFlatten(f *testing.F) {
	f.Add(`{"type":"text","text":"x"}`)
	f.Add(`{"type":"image","data":"!!"}`)
	f.Add(`{"type":"resource","resource":null}`)
	f.Add(`[1,2]`)
	f.Fuzz(func(t *testing.T, block string) {
		out, _ := mcp.Flatten(&mcp.Result{Content: []json.RawMessage{json.RawMessage(block)}})
		var c struct {
			Type string `json:"type"`
			Text string `json:"text"`
		}
		switch err := json.Unmarshal([]byte(block), &c); {
		case err != nil && !strings.HasPrefix(out, "[content "):
			t.Errorf("block %q that is no object: %q", block, out)
		case err == nil && c.Type == "text" && out != c.Text:
			t.Errorf("text block %q: %q", block, out)
		}
	})
}
