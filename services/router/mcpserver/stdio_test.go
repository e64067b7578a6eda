package mcpserver

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"

	"github.com/agentmesh/agentmesh/services/doortest"
	"github.com/agentmesh/agentmesh/services/router/door"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Over stdio every call carries the configured key: the client delegates
// and reads the answer; another org's key sees none of it.
func TestStdio(t *testing.T) {
	st := doortest.Start(t)
	serve := func(who string) *mcp.ClientSession {
		cIn, sOut := io.Pipe()
		sIn, cOut := io.Pipe()
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			done <- ServeStdio(ctx, Config{}, Deps{Conn: st.Conn, Log: doortest.Logger()}, doortest.Secret(t, who), sIn, sOut)
		}()
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "stdio-test", Version: "1"}, nil).
			Connect(ctxT(t), &mcp.IOTransport{Reader: cIn, Writer: cOut}, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = cs.Close()
			cancel()
			if err := <-done; err != nil {
				t.Errorf("ServeStdio: %v", err)
			}
		})
		return cs
	}
	a := serve("a-op")
	var v taskView
	structured(t, call(t, a, ToolDelegate, map[string]any{"task": "over stdio", "agent": doortest.AgentPlain, "wait_seconds": 60}), &v)
	if v.Status != "completed" || v.Result != "final answer: over stdio" {
		t.Fatalf("delegate over stdio answered %+v", v)
	}
	b := serve("b-op")
	res := call(t, b, ToolCheckStatus, map[string]any{"task_id": v.TaskID})
	if !res.IsError || textOf(res) != `not found: task "`+v.TaskID+`" not found` {
		t.Errorf("org B over stdio reads A's task: %q", textOf(res))
	}
}

// Over stdio a line that is not JSON-RPC 2.0 gets its JSON-RPC error and
// the session goes on: the SDK ended the session (and amctl mcp exited) at
// the first such line. A batch is refused where the revision has none, an
// id the answer could not repeat exactly is refused, and a line over
// MaxBodyBytes is refused without being buffered whole.
func TestStdioBadLines(t *testing.T) {
	st := doortest.Start(t)
	cIn, sOut := io.Pipe()
	sIn, cOut := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- ServeStdio(ctx, Config{MaxBodyBytes: 4096}, Deps{Conn: st.Conn, Log: doortest.Logger()}, doortest.Secret(t, "a-op"), sIn, sOut)
	}()
	t.Cleanup(func() {
		_ = cOut.Close()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("ServeStdio: %v", err)
		}
	})
	lines := bufio.NewScanner(cIn)
	lines.Buffer(make([]byte, 1<<20), 1<<20)
	send := func(line string) {
		if _, err := io.WriteString(cOut, line+"\n"); err != nil {
			t.Fatalf("write: %v", err)
		}
	}
	next := func() rpcReply {
		if !lines.Scan() {
			t.Fatalf("no answer: %v", lines.Err())
		}
		var r rpcReply
		if err := json.Unmarshal(lines.Bytes(), &r); err != nil {
			t.Fatalf("answer %q: %v", lines.Text(), err)
		}
		return r
	}
	send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`)
	if r := next(); r.Error != nil {
		t.Fatalf("initialize: %+v", r.Error)
	}
	send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	for _, tt := range []struct {
		name, line string
		code       int64
		words, id  string
	}{
		{"not JSON", `{bad`, door.CodeParseError, "not valid JSON", "null"},
		{"a number", `5`, door.CodeInvalidRequest, "JSON object", "null"},
		{"no jsonrpc", `{"id":3,"method":"ping"}`, door.CodeInvalidRequest, `jsonrpc: must be "2.0"`, "3"},
		{"boolean id", `{"jsonrpc":"2.0","id":true,"method":"ping"}`, door.CodeInvalidRequest, "id: must be a string or an integer", "null"},
		{"fractional id", `{"jsonrpc":"2.0","id":1.5,"method":"ping"}`, door.CodeInvalidRequest, "id: must be a string or an integer", "null"},
		{"id beyond 2^53", `{"jsonrpc":"2.0","id":99999999999999999999,"method":"ping"}`, door.CodeInvalidRequest, "id: must be a string or an integer", "null"},
		{"batch", `[{"jsonrpc":"2.0","id":5,"method":"ping"}]`, door.CodeInvalidRequest, "batch", "null"},
		{"over the limit", `{"jsonrpc":"2.0","id":6,"method":"ping","params":{"x":"` + strings.Repeat("a", 8192) + `"}}`, door.CodeInvalidRequest, "over the size limit", "null"},
		{"unknown method", `{"jsonrpc":"2.0","id":7,"method":"foo/bar"}`, door.CodeMethodNotFound, "foo/bar", "7"},
	} {
		send(tt.line)
		r := next()
		if r.Error == nil || r.Error.Code != tt.code || !strings.Contains(r.Error.Message, tt.words) || string(r.ID) != tt.id {
			t.Errorf("%s: id %s %+v, want code %d with %q and id %s", tt.name, r.ID, r.Error, tt.code, tt.words, tt.id)
		}
		send(`{"jsonrpc":"2.0","id":"after","method":"ping"}`) // the session goes on
		if r := next(); r.Error != nil || string(r.ID) != `"after"` {
			t.Fatalf("%s: the next ping answered id %s %+v", tt.name, r.ID, r.Error)
		}
	}
}
