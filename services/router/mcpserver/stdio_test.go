package mcpserver

import (
	"context"
	"io"
	"testing"

	"github.com/agentmesh/agentmesh/services/doortest"
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
