package mcpserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/pkg/poll"
	"github.com/agentmesh/agentmesh/services/doortest"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// extClient speaks the tasks extension over the MCP Go SDK's own
// streamable HTTP transport (the SDK's client has no methods for it): each
// request of the 2026-07-28 revision carries its _meta, the transport sets
// the headers.
type extClient struct {
	conn mcp.Connection
	next int
}

func (e *env) extClient(t *testing.T, who string) *extClient {
	t.Helper()
	tr := &mcp.StreamableClientTransport{Endpoint: e.srv.URL,
		HTTPClient: &http.Client{Transport: doortest.KeyTransport{Key: doortest.Secret(t, who)}}}
	conn, err := tr.Connect(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return &extClient{conn: conn}
}

// call sends one request declaring the extension and waits for its answer.
func (c *extClient) call(t *testing.T, method string, params map[string]any) (json.RawMessage, *jsonrpc.Error) {
	t.Helper()
	params["_meta"] = map[string]any{
		"io.modelcontextprotocol/protocolVersion":    modernRevision,
		"io.modelcontextprotocol/clientInfo":         map[string]any{"name": "sdk-ext", "version": "1"},
		"io.modelcontextprotocol/clientCapabilities": map[string]any{"extensions": map[string]any{TasksExtension: map[string]any{}}},
	}
	raw, _ := json.Marshal(params)
	c.next++
	id, _ := jsonrpc.MakeID(float64(c.next))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.conn.Write(ctx, &jsonrpc.Request{ID: id, Method: method, Params: raw}); err != nil {
		t.Fatalf("%s: %v", method, err)
	}
	for {
		msg, err := c.conn.Read(ctx)
		if err != nil {
			t.Fatalf("%s: %v", method, err)
		}
		if resp, ok := msg.(*jsonrpc.Response); ok && resp.ID == id {
			if resp.Error != nil {
				var we *jsonrpc.Error
				if !errors.As(resp.Error, &we) {
					t.Fatalf("%s: %v is not a wire error", method, resp.Error)
				}
				return nil, we
			}
			return resp.Result, nil
		}
	}
}

func (c *extClient) task(t *testing.T, method string, params map[string]any) wireTask {
	t.Helper()
	res, rerr := c.call(t, method, params)
	if rerr != nil {
		t.Fatalf("%s: %d %s", method, rerr.Code, rerr.Message)
	}
	var w wireTask
	if err := json.Unmarshal(res, &w); err != nil {
		t.Fatalf("%s: %s: %v", method, res, err)
	}
	return w
}

// Through the MCP Go SDK's transport: delegate answered with a task,
// polled to input_required, the approval answered by the approver (the
// operator refused), polled to the answer; a second task cancelled.
func TestGoSDKTransportAnswersAnApproval(t *testing.T) {
	e := start(t)
	op, approver := e.extClient(t, "a-op"), e.extClient(t, "a-approver")
	created := op.task(t, "tools/call", map[string]any{"name": ToolDelegate, "arguments": map[string]any{"task": "sdk approval", "agent": doortest.AgentCareful}})
	if created.ResultType != "task" {
		t.Fatalf("delegate answered %+v", created)
	}
	until := func(c *extClient, want string) wireTask {
		var w wireTask
		poll.Until(t, 60*time.Second, func() error {
			if w = c.task(t, MethodTasksGet, map[string]any{"taskId": created.TaskID}); w.Status != want {
				return fmt.Errorf("status %s, want %s", w.Status, want)
			}
			return nil
		})
		return w
	}
	w := until(op, "input_required")
	var key string
	for k := range w.InputRequests {
		key = k
	}
	answer := map[string]any{"taskId": created.TaskID, "inputResponses": map[string]any{
		key: map[string]any{"action": "accept", "content": map[string]any{"decision": "approve"}}}}
	if _, rerr := op.call(t, MethodTasksUpdate, answer); rerr == nil || rerr.Code != -32050 {
		t.Fatalf("the operator's approval answered %+v", rerr)
	}
	if _, rerr := approver.call(t, MethodTasksUpdate, answer); rerr != nil {
		t.Fatalf("the approver's approval: %d %s", rerr.Code, rerr.Message)
	}
	if w = until(op, "completed"); w.Result == nil || w.Result.Content[0].Text != "final answer: sdk approval" {
		t.Fatalf("completed with %+v", w.Result)
	}
	slow := op.task(t, "tools/call", map[string]any{"name": ToolDelegate, "arguments": map[string]any{"task": "slow sdk", "agent": doortest.AgentPlain}})
	if _, rerr := op.call(t, MethodTasksCancel, map[string]any{"taskId": slow.TaskID}); rerr != nil {
		t.Fatal(rerr.Message)
	}
	created = slow
	until(op, "cancelled")
}
