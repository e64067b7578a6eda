package mcpserver

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/services/doortest"
	"github.com/agentmesh/agentmesh/services/executor/child"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func TestMain(m *testing.M) {
	child.RunIfChild()
	os.Exit(m.Run())
}

// env is a running stack with the MCP handler served over real HTTP.
type env struct {
	stack *doortest.Stack
	h     *Handler
	srv   *httptest.Server
}

func start(t testing.TB) *env {
	t.Helper()
	return startWith(t, Config{PollInterval: 100 * time.Millisecond})
}

// startWith is start with cfg.
func startWith(t testing.TB, cfg Config) *env {
	t.Helper()
	return serveOn(t, doortest.Start(t), cfg)
}

// serveOn serves the MCP handler with cfg on st over real HTTP.
func serveOn(t testing.TB, st *doortest.Stack, cfg Config) *env {
	t.Helper()
	h, err := New(cfg, Deps{Conn: st.Conn, Log: doortest.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(func() {
		srv.Close()
		h.Close()
	})
	return &env{stack: st, h: h, srv: srv}
}

func ctxT(t testing.TB) context.Context { return doortest.Ctx(t) }

// notes collects what the server told a client.
type notes struct {
	mu       sync.Mutex
	progress []*mcp.ProgressNotificationParams
	updated  []string
}

func (n *notes) progressOf(token any) []*mcp.ProgressNotificationParams {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []*mcp.ProgressNotificationParams
	for _, p := range n.progress {
		if fmt.Sprint(p.ProgressToken) == fmt.Sprint(token) {
			out = append(out, p)
		}
	}
	return out
}

func (n *notes) updates(uri string) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	c := 0
	for _, u := range n.updated {
		if u == uri {
			c++
		}
	}
	return c
}

// connect opens a Go SDK client session as who; revision "" is the SDK's
// newest (2026-07-28).
func (e *env) connect(t testing.TB, who, revision string) (*mcp.ClientSession, *notes) {
	t.Helper()
	n := &notes{}
	client := mcp.NewClient(&mcp.Implementation{Name: "agentmesh-test", Version: "1"}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
			n.mu.Lock()
			n.progress = append(n.progress, r.Params)
			n.mu.Unlock()
		},
		ResourceUpdatedHandler: func(_ context.Context, r *mcp.ResourceUpdatedNotificationRequest) {
			n.mu.Lock()
			n.updated = append(n.updated, r.Params.URI)
			n.mu.Unlock()
		},
	})
	transport := &mcp.StreamableClientTransport{Endpoint: e.srv.URL,
		HTTPClient: &http.Client{Transport: doortest.KeyTransport{Key: doortest.Secret(t, who)}}}
	cs, err := client.Connect(ctxT(t), transport, &mcp.ClientSessionOptions{ProtocolVersion: revision})
	if err != nil {
		t.Fatalf("connect as %s: %v", who, err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs, n
}

// call calls a tool and returns its result (failing the test on a
// protocol error).
func call(t testing.TB, cs *mcp.ClientSession, name string, args map[string]any) *mcp.CallToolResult {
	t.Helper()
	res, err := cs.CallTool(ctxT(t), &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s %v: %v", name, args, err)
	}
	return res
}

// structured decodes a result's structured content into v.
func structured(t testing.TB, res *mcp.CallToolResult, v any) {
	t.Helper()
	if res.IsError {
		t.Fatalf("tool error: %s", textOf(res))
	}
	b, err := json.Marshal(res.StructuredContent)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("structured content %s: %v", b, err)
	}
}

func textOf(res *mcp.CallToolResult) string {
	var parts []string
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			parts = append(parts, tc.Text)
		}
	}
	return strings.Join(parts, "\n")
}

// rpcReply is a JSON-RPC response as a raw client sees it.
type rpcReply struct {
	status int
	header http.Header
	body   []byte
	ID     json.RawMessage `json:"id"`
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code    int64           `json:"code"`
		Message string          `json:"message"`
		Data    json.RawMessage `json:"data"`
	} `json:"error"`
}

// raw sends one JSON-RPC request of the 2026-07-28 revision (no session:
// each request carries its _meta), declaring the tasks extension when ext
// is set, as key (none when ""), and reads the reply (JSON or SSE).
func (e *env) raw(t testing.TB, key, method string, params map[string]any, ext bool) rpcReply {
	t.Helper()
	if params == nil {
		params = map[string]any{}
	}
	caps := map[string]any{}
	if ext {
		caps["extensions"] = map[string]any{TasksExtension: map[string]any{}}
	}
	params["_meta"] = map[string]any{
		"io.modelcontextprotocol/protocolVersion":    modernRevision,
		"io.modelcontextprotocol/clientInfo":         map[string]any{"name": "raw-test", "version": "1"},
		"io.modelcontextprotocol/clientCapabilities": caps,
	}
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
	h := http.Header{}
	h.Set("MCP-Protocol-Version", modernRevision)
	h.Set("Mcp-Method", method)
	switch name := fmt.Sprint(params["name"]); {
	case method == "tools/call":
		h.Set("Mcp-Name", name)
	case method == "resources/read":
		h.Set("Mcp-Name", fmt.Sprint(params["uri"]))
	case strings.HasPrefix(method, "tasks/") && params["taskId"] != nil:
		h.Set("Mcp-Name", fmt.Sprint(params["taskId"])) // the extension's routing header
	}
	if key != "" {
		h.Set("Authorization", "Bearer "+key)
	}
	return e.post(t, h, body)
}

// post sends one JSON-RPC message with the headers and reads the reply
// (JSON or SSE).
func (e *env) post(t testing.TB, h http.Header, body []byte) rpcReply {
	t.Helper()
	req, err := http.NewRequestWithContext(ctxT(t), http.MethodPost, e.srv.URL, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header = h.Clone()
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("post: %v", err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	r := rpcReply{status: resp.StatusCode, header: resp.Header, body: data}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		data = lastSSEData(data)
	}
	if len(data) > 0 && data[0] == '{' {
		if err := json.Unmarshal(data, &r); err != nil {
			t.Fatalf("reply %q: %v", data, err)
		}
	}
	return r
}

// lastSSEData returns the data of the last event of an SSE body that holds
// a JSON-RPC response.
func lastSSEData(body []byte) []byte {
	var last []byte
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		if d, ok := strings.CutPrefix(sc.Text(), "data:"); ok {
			d = strings.TrimSpace(d)
			if strings.Contains(d, `"id"`) {
				last = []byte(d)
			}
		}
	}
	return last
}
