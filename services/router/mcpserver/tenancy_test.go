package mcpserver

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"github.com/agentmesh/agentmesh/services/doortest"
	"github.com/agentmesh/agentmesh/services/router/door"
	"github.com/agentmesh/agentmesh/services/stack"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestTenancyOverMCP repeats TestTenancy's matrix (services/e2e) over the
// MCP door: org B's key, the strongest an org has, gets "not found" for
// every one of org A's tasks — the very words a task that never existed
// gets — through every tool, resource and method; a reader may not
// delegate, cancel or decide; and nothing of A's changes.
func TestTenancyOverMCP(t *testing.T) {
	e := start(t)
	blocked := e.stack.Submit(t, "a-op", &agentmeshv1.SubmitTaskRequest{Input: "ship it", Agent: doortest.AgentCareful})
	blocked = e.stack.WaitStatus(t, "a-reader", blocked.Id, taskstate.Blocked)
	approval := blocked.GetPendingApproval()
	done := e.stack.Submit(t, "a-op", &agentmeshv1.SubmitTaskRequest{Input: "hello", Agent: doortest.AgentPlain, Tags: []string{"a-only"}})
	done = e.stack.WaitStatus(t, "a-reader", done.Id, taskstate.Completed)
	const ghost = "01JNEVEREXISTED0000000000A"
	notFound := func(id string) string { return fmt.Sprintf(`not found: task %q not found`, id) }

	b, _ := e.connect(t, "b-admin", "2025-11-25")
	for _, tt := range []struct {
		tool string
		args func(id string) map[string]any
	}{
		{ToolCheckStatus, func(id string) map[string]any { return map[string]any{"task_id": id} }},
		{ToolGetResult, func(id string) map[string]any { return map[string]any{"task_id": id} }},
		{ToolCancelTask, func(id string) map[string]any { return map[string]any{"task_id": id} }},
		{ToolCheckStatus, func(id string) map[string]any { return map[string]any{"task_id": "subtask://" + id} }},
	} {
		for _, id := range []string{blocked.Id, done.Id} {
			res := call(t, b, tt.tool, tt.args(id))
			ghostRes := call(t, b, tt.tool, tt.args(ghost))
			if !res.IsError || textOf(res) != notFound(id) || textOf(ghostRes) != notFound(ghost) {
				t.Errorf("B's %s of A's task: %v %q (a task that never existed: %q)", tt.tool, res.IsError, textOf(res), textOf(ghostRes))
			}
		}
	}
	res := call(t, b, ToolDelegate, map[string]any{"task": "follow up", "continue_from": done.Id})
	if !res.IsError || !strings.Contains(textOf(res), fmt.Sprintf("not found: continue_from: task %q not found", done.Id)) {
		t.Errorf("B continuing A's task: %q", textOf(res))
	}
	var l listOut
	structured(t, call(t, b, ToolListTasks, map[string]any{"tag": "a-only"}), &l)
	if len(l.Tasks) != 0 {
		t.Errorf("B lists A's tasks: %+v", l.Tasks)
	}
	listed, err := b.ListResources(ctxT(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range listed.Resources {
		if r.URI == "subtask://"+done.Id || r.URI == "subtask://"+blocked.Id {
			t.Errorf("B's resources/list holds A's %s", r.URI)
		}
	}
	for _, uri := range []string{"subtask://" + done.Id, "subtask://" + ghost} {
		_, err := b.ReadResource(ctxT(t), &mcp.ReadResourceParams{URI: uri})
		if err == nil || !strings.Contains(err.Error(), "not found") {
			t.Errorf("B reads %s: %v", uri, err)
		}
		if err := b.Subscribe(ctxT(t), &mcp.SubscribeParams{URI: uri}); err == nil || !strings.Contains(err.Error(), "not found") {
			t.Errorf("B subscribes to %s: %v", uri, err)
		}
	}
	bKey := doortest.Secret(t, "b-admin")
	for _, m := range []string{MethodTasksGet, MethodTasksCancel, MethodTasksUpdate} {
		r := e.raw(t, bKey, m, map[string]any{"taskId": blocked.Id, "inputResponses": map[string]any{
			approval.Id: map[string]any{"action": "accept", "content": map[string]any{"decision": "approve"}}}}, true)
		if r.Error == nil || r.Error.Code != door.CodeInvalidParams || r.Error.Message != "Failed to retrieve task: task \""+blocked.Id+"\" not found" {
			t.Errorf("B's %s of A's task answered %+v", m, r.Error)
		}
	}

	// A reader of A reads but may not delegate, cancel or decide.
	reader, _ := e.connect(t, "a-reader", "2025-11-25")
	var v taskView
	structured(t, call(t, reader, ToolCheckStatus, map[string]any{"task_id": blocked.Id}), &v)
	if v.PendingApproval == nil || v.PendingApproval.ID != approval.Id {
		t.Errorf("the reader's check_status: %+v", v)
	}
	for _, tt := range []struct {
		tool string
		args map[string]any
		role string
	}{
		{ToolDelegate, map[string]any{"task": "x"}, "operator"},
		{ToolCancelTask, map[string]any{"task_id": blocked.Id}, "operator"},
	} {
		res := call(t, reader, tt.tool, tt.args)
		if !res.IsError || !strings.HasPrefix(textOf(res), "permission denied: ") || !strings.Contains(textOf(res), tt.role) {
			t.Errorf("the reader's %s: %q, want permission denied naming %s", tt.tool, textOf(res), tt.role)
		}
	}
	r := e.raw(t, doortest.Secret(t, "a-reader"), MethodTasksUpdate, map[string]any{"taskId": blocked.Id, "inputResponses": map[string]any{
		approval.Id: map[string]any{"action": "accept", "content": map[string]any{"decision": "approve"}}}}, true)
	if r.Error == nil || r.Error.Code != door.CodePermissionDenied || !strings.Contains(r.Error.Message, "approver") {
		t.Errorf("the reader's tasks/update answered %+v", r.Error)
	}

	// Nothing of A's changed.
	after := e.stack.WaitStatus(t, "a-reader", blocked.Id, taskstate.Blocked)
	if after.GetPendingApproval().GetId() != approval.Id || after.LastEventSeq != blocked.LastEventSeq {
		t.Errorf("A's blocked task changed: %+v", after)
	}
	if after := e.stack.WaitStatus(t, "a-reader", done.Id, taskstate.Completed); after.LastEventSeq != done.LastEventSeq {
		t.Errorf("A's finished task changed: seq %d, was %d", after.LastEventSeq, done.LastEventSeq)
	}
}

// No key or an unknown key: 401 with the challenge, before anything runs;
// a session belongs to the key that opened it; a body over the limit is
// 413.
func TestHTTPAuthentication(t *testing.T) {
	e := start(t)
	for _, tt := range []struct{ name, key string }{{"no key", ""}, {"unknown key", "key-nobody"}} {
		t.Run(tt.name, func(t *testing.T) {
			r := e.raw(t, tt.key, "tools/list", nil, false)
			if r.status != http.StatusUnauthorized || r.header.Get("WWW-Authenticate") != door.Challenge ||
				r.Error == nil || r.Error.Code != door.CodeUnauthenticated {
				t.Errorf("got %d %q %+v", r.status, r.header.Get("WWW-Authenticate"), r.Error)
			}
		})
	}
	cs, _ := e.connect(t, "a-op", "2025-11-25")
	for _, who := range []string{"b-op", "a-reader"} {
		req, _ := http.NewRequest(http.MethodPost, e.srv.URL, strings.NewReader(`{"jsonrpc":"2.0","id":9,"method":"tools/list"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Mcp-Session-Id", cs.ID())
		req.Header.Set("MCP-Protocol-Version", "2025-11-25")
		req.Header.Set("Authorization", "Bearer "+doortest.Secret(t, who))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("%s using a-op's session: %d, want 403", who, resp.StatusCode)
		}
	}
	big := bytes.Repeat([]byte("x"), DefaultMaxBodyBytes+1)
	req, _ := http.NewRequest(http.MethodPost, e.srv.URL, bytes.NewReader(append([]byte(`{"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":"`), append(big, []byte(`"}}`)...)...)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer "+doortest.Secret(t, "a-op"))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("a body over the limit: %d, want 413", resp.StatusCode)
	}
}

// A request on a loopback address for another host name is refused (DNS
// rebinding), unless AnyHost says a proxy forwards a public name.
func TestHostProtection(t *testing.T) {
	e := start(t)
	proxied, err := New(Config{AnyHost: true}, Deps{Conn: e.stack.Conn, Log: doortest.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	behind := httptest.NewServer(proxied)
	t.Cleanup(behind.Close)
	for _, tt := range []struct {
		url  string
		want int
	}{{e.srv.URL, http.StatusForbidden}, {behind.URL, http.StatusOK}} {
		req, _ := http.NewRequest(http.MethodPost, tt.url, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","clientInfo":{"name":"x","version":"1"},"capabilities":{}}}`))
		req.Host = "agents.example.com"
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Authorization", "Bearer "+doortest.Secret(t, "a-op"))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tt.want {
			t.Errorf("%s with Host agents.example.com: %d, want %d", tt.url, resp.StatusCode, tt.want)
		}
	}
}

// What belongs to an org — a task (resources/read), the org's tasks
// (resources/list) — is marked cacheScope "private": the SDK's default,
// "public", lets any intermediary serve one org's answer to anyone (and
// resources/list, answered by the middleware, said ""). The tools, the
// same for every key, stay public.
func TestOrgDataIsNotPubliclyCacheable(t *testing.T) {
	e := start(t)
	task := e.stack.Submit(t, "a-op", &agentmeshv1.SubmitTaskRequest{Input: "hello", Agent: doortest.AgentPlain})
	key := doortest.Secret(t, "a-op")
	scope := func(method string, params map[string]any) string {
		r := e.raw(t, key, method, params, false)
		var c struct {
			CacheScope *string `json:"cacheScope"`
		}
		if r.Error != nil || json.Unmarshal(r.Result, &c) != nil || c.CacheScope == nil {
			t.Fatalf("%s: %s %+v", method, r.Result, r.Error)
		}
		return *c.CacheScope
	}
	for _, tt := range []struct {
		method string
		params map[string]any
		want   string
	}{
		{"resources/read", map[string]any{"uri": "subtask://" + task.Id}, "private"},
		{"resources/list", nil, "private"},
		{"tools/list", nil, "public"},
	} {
		if got := scope(tt.method, tt.params); got != tt.want {
			t.Errorf("%s: cacheScope %q, want %q", tt.method, got, tt.want)
		}
	}
}

// When the org holds all the watches it may: a subscription the API
// refuses to follow is refused at resources/subscribe, naming why (it was
// answered with success and its watch failed behind it, so the client
// waited for updates that never came); delegate with wait_seconds answers
// with the task as it stands, as when the wait is over (it answered an
// error, though the task ran, and a retry ran it twice).
func TestWhenNoWatchIsLeft(t *testing.T) {
	st := doortest.StartWith(t, func(c *stack.Config) { c.Router.MaxWatchesPerOrg = 1 })
	e := serveOn(t, st, Config{})
	var blocked []string
	for i := 0; i < 2; i++ {
		task := st.Submit(t, "a-op", &agentmeshv1.SubmitTaskRequest{Input: fmt.Sprintf("ship it %d", i), Agent: doortest.AgentCareful})
		blocked = append(blocked, st.WaitStatus(t, "a-reader", task.Id, taskstate.Blocked).Id)
	}
	cs, _ := e.connect(t, "a-op", "2025-11-25")
	if err := cs.Subscribe(ctxT(t), &mcp.SubscribeParams{URI: "subtask://" + blocked[0]}); err != nil {
		t.Fatalf("the first subscription: %v", err)
	}
	err := cs.Subscribe(ctxT(t), &mcp.SubscribeParams{URI: "subtask://" + blocked[1]})
	if err == nil || !strings.Contains(err.Error(), "WatchTask streams open") {
		t.Errorf("a subscription past the org's watches: %v, want the API's resource-exhausted words", err)
	}
	if n := e.h.srv.subs.following(); n != 1 {
		t.Errorf("%d tasks followed, want 1", n)
	}
	var v taskView
	structured(t, call(t, cs, ToolDelegate, map[string]any{"task": "slow one", "agent": doortest.AgentPlain, "wait_seconds": 30}), &v)
	if v.TaskID == "" || v.Finished {
		t.Errorf("delegate that could not wait answered %+v, want the running task", v)
	}
}
