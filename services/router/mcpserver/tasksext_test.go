package mcpserver

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/poll"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"github.com/agentmesh/agentmesh/services/doortest"
	"github.com/agentmesh/agentmesh/services/router/door"
)

// wireTask is the extension's Task as a client decodes it.
type wireTask struct {
	ResultType     string                     `json:"resultType"`
	TaskID         string                     `json:"taskId"`
	Status         string                     `json:"status"`
	StatusMessage  string                     `json:"statusMessage"`
	CreatedAt      string                     `json:"createdAt"`
	LastUpdatedAt  string                     `json:"lastUpdatedAt"`
	TTLMs          *int64                     `json:"ttlMs"`
	PollIntervalMs int64                      `json:"pollIntervalMs"`
	InputRequests  map[string]json.RawMessage `json:"inputRequests"`
	Result         *struct {
		Content []struct {
			Type, Text string
		} `json:"content"`
		StructuredContent json.RawMessage `json:"structuredContent"`
		IsError           bool            `json:"isError"`
	} `json:"result"`
}

func decodeTask(t *testing.T, r rpcReply) wireTask {
	t.Helper()
	if r.Error != nil {
		t.Fatalf("error %d %s", r.Error.Code, r.Error.Message)
	}
	var w wireTask
	if err := json.Unmarshal(r.Result, &w); err != nil {
		t.Fatalf("task %s: %v", r.Result, err)
	}
	return w
}

// pollTask polls tasks/get until the task's extension status is want.
func (e *env) pollTask(t *testing.T, who, id, want string) wireTask {
	t.Helper()
	var w wireTask
	poll.Until(t, 60*time.Second, func() error {
		w = decodeTask(t, e.raw(t, doortest.Secret(t, who), MethodTasksGet, map[string]any{"taskId": id}, true))
		if w.Status != want {
			return fmt.Errorf("task %s is %s (%s), want %s", id, w.Status, w.StatusMessage, want)
		}
		return nil
	})
	return w
}

// A client of the tasks extension: delegate answers with a task handle
// (created before the answer: GetTask finds it), tasks/get follows it, an
// approval the task waits on is input_required with the call's exact
// arguments, tasks/update answers it (the approver role is needed:
// others get the API's permission denied), and the result comes back;
// tasks/cancel cancels.
func TestTasksExtension(t *testing.T) {
	e := start(t)
	op, approver := doortest.Secret(t, "a-op"), doortest.Secret(t, "a-approver")

	r := e.raw(t, op, "tools/call", map[string]any{"name": ToolDelegate,
		"arguments": map[string]any{"task": "ship it", "agent": doortest.AgentCareful}}, true)
	created := decodeTask(t, r)
	if created.ResultType != "task" || created.TaskID == "" || created.Status != "working" || created.TTLMs != nil ||
		created.PollIntervalMs != 100 || created.CreatedAt == "" || created.Result != nil {
		t.Fatalf("delegate answered %s", r.Result)
	}
	if _, err := e.stack.Tasks.GetTask(doortest.As(t, "a-reader"), &agentmeshv1.GetTaskRequest{Id: created.TaskID}); err != nil {
		t.Fatalf("the task handle was answered before the task was committed: %v", err)
	}

	w := e.pollTask(t, "a-op", created.TaskID, "input_required")
	blocked := e.stack.WaitStatus(t, "a-reader", created.TaskID, taskstate.Blocked)
	approval := blocked.GetPendingApproval()
	var req struct {
		Method string `json:"method"`
		Params struct {
			Meta            map[string]approvalView `json:"_meta"`
			Mode, Message   string
			RequestedSchema struct {
				Required []string `json:"required"`
			} `json:"requestedSchema"`
		} `json:"params"`
	}
	if err := json.Unmarshal(w.InputRequests[approval.Id], &req); err != nil {
		t.Fatalf("input request %s: %v (all: %v)", w.InputRequests[approval.Id], err, w.InputRequests)
	}
	got := req.Params.Meta[MetaApproval]
	if req.Method != "elicitation/create" || req.Params.Mode != "form" || got.Tool != "echo" ||
		string(got.Arguments) != approval.Arguments || got.SHA256 != approval.ArgumentsSha256 ||
		!strings.Contains(req.Params.Message, approval.Arguments) || len(req.Params.RequestedSchema.Required) != 1 {
		t.Fatalf("input request %s, approval %+v", w.InputRequests[approval.Id], approval)
	}

	// Only the approver role decides: the operator gets the API's refusal.
	accept := map[string]any{"taskId": created.TaskID, "inputResponses": map[string]any{
		approval.Id: map[string]any{"action": "accept", "content": map[string]any{"decision": "approve", "comment": "ok by test"}}}}
	r = e.raw(t, op, MethodTasksUpdate, accept, true)
	if r.Error == nil || r.Error.Code != door.CodePermissionDenied || !strings.Contains(r.Error.Message, "approver") {
		t.Fatalf("the operator's tasks/update answered %+v", r)
	}
	if st := e.stack.WaitStatus(t, "a-reader", created.TaskID, taskstate.Blocked); st.GetPendingApproval().GetId() != approval.Id {
		t.Fatal("the refused update changed the approval")
	}
	r = e.raw(t, approver, MethodTasksUpdate, map[string]any{"taskId": created.TaskID, "inputResponses": map[string]any{
		approval.Id: map[string]any{"action": "accept", "content": map[string]any{"decision": "maybe"}}}}, true)
	if r.Error == nil || r.Error.Code != door.CodeInvalidParams || !strings.Contains(r.Error.Message, "decision") {
		t.Fatalf("a bad decision answered %+v", r)
	}
	if r = e.raw(t, approver, MethodTasksUpdate, accept, true); r.Error != nil || !strings.Contains(string(r.Result), `"resultType":"complete"`) {
		t.Fatalf("the approver's tasks/update answered %+v %s", r.Error, r.Result)
	}
	w = e.pollTask(t, "a-reader", created.TaskID, "completed")
	if w.Result == nil || w.Result.IsError || len(w.Result.Content) != 1 || w.Result.Content[0].Text != "final answer: ship it" {
		t.Fatalf("the completed task carries %+v", w.Result)
	}
	e.stack.WaitStatus(t, "a-reader", created.TaskID, taskstate.Completed)

	// decline rejects: the model is told and carries on to an answer.
	created = decodeTask(t, e.raw(t, op, "tools/call", map[string]any{"name": ToolDelegate,
		"arguments": map[string]any{"task": "maybe not", "agent": doortest.AgentCareful}}, true))
	w = e.pollTask(t, "a-op", created.TaskID, "input_required")
	for id := range w.InputRequests {
		r = e.raw(t, approver, MethodTasksUpdate, map[string]any{"taskId": created.TaskID,
			"inputResponses": map[string]any{id: map[string]any{"action": "decline"}}}, true)
		if r.Error != nil {
			t.Fatal(r.Error.Message)
		}
	}
	w = e.pollTask(t, "a-op", created.TaskID, "completed")
	if !strings.Contains(w.Result.Content[0].Text, "declined") {
		t.Errorf("after a decline the answer is %q, want the rejection quoted", w.Result.Content[0].Text)
	}

	// tasks/cancel cancels a running task.
	created = decodeTask(t, e.raw(t, op, "tools/call", map[string]any{"name": ToolDelegate,
		"arguments": map[string]any{"task": "slow three", "agent": doortest.AgentPlain}}, true))
	if r = e.raw(t, op, MethodTasksCancel, map[string]any{"taskId": created.TaskID}, true); r.Error != nil {
		t.Fatal(r.Error.Message)
	}
	w = e.pollTask(t, "a-op", created.TaskID, "cancelled")
	if w.Result != nil || !strings.Contains(w.StatusMessage, "tasks/cancel") {
		t.Errorf("cancelled task %+v", w)
	}
}

// The extension is for clients that declare it: others get delegate's
// standard result and -32021 from tasks/*; a task that does not exist is
// -32602; a failed task is a completed tool call with isError.
func TestTasksExtensionErrors(t *testing.T) {
	e := start(t)
	op := doortest.Secret(t, "a-op")
	r := e.raw(t, op, "tools/call", map[string]any{"name": ToolDelegate, "arguments": map[string]any{"task": "plain call", "agent": doortest.AgentPlain}}, false)
	var std struct {
		ResultType        string   `json:"resultType"`
		StructuredContent taskView `json:"structuredContent"`
	}
	if err := json.Unmarshal(r.Result, &std); err != nil || std.ResultType == "task" || std.StructuredContent.TaskID == "" {
		t.Fatalf("delegate without the extension answered %s (%v)", r.Result, err)
	}
	for _, m := range []string{MethodTasksGet, MethodTasksUpdate, MethodTasksCancel} {
		r = e.raw(t, op, m, map[string]any{"taskId": std.StructuredContent.TaskID}, false)
		if r.Error == nil || r.Error.Code != -32021 || !strings.Contains(string(r.Error.Data), TasksExtension) {
			t.Errorf("%s without the extension answered %+v", m, r)
		}
	}
	for _, tt := range []struct {
		name, method string
		params       map[string]any
		code         int64
		msg          string
	}{
		{"unknown task", MethodTasksGet, map[string]any{"taskId": "01JNOSUCHTASK0000000000000"}, door.CodeInvalidParams, `Failed to retrieve task: task "01JNOSUCHTASK0000000000000" not found`},
		{"no id", MethodTasksGet, map[string]any{}, door.CodeInvalidParams, "taskId: required"},
		{"cancel unknown", MethodTasksCancel, map[string]any{"taskId": "01JNOSUCHTASK0000000000000"}, door.CodeInvalidParams, "not found"},
		{"bad id", MethodTasksGet, map[string]any{"taskId": "../etc"}, door.CodeInvalidParams, "id"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := e.raw(t, op, tt.method, tt.params, true)
			if r.Error == nil || r.Error.Code != tt.code || !strings.Contains(r.Error.Message, tt.msg) {
				t.Errorf("got %+v, want code %d with %q", r.Error, tt.code, tt.msg)
			}
		})
	}
	// A task whose agent fails: a budget of one step.
	created := decodeTask(t, e.raw(t, op, "tools/call", map[string]any{"name": ToolDelegate,
		"arguments": map[string]any{"task": "too long", "agent": doortest.AgentPlain, "budget": map[string]any{"max_steps": 1}}}, true))
	w := e.pollTask(t, "a-op", created.TaskID, "completed")
	if w.Result == nil || !w.Result.IsError || !strings.Contains(w.StatusMessage, "budget") {
		t.Errorf("a failed task is %+v %+v", w, w.Result)
	}
}

// A client of the 2025-11-25 revision that declared the extension in its
// initialize capabilities (a session) gets delegate's task handle without
// a per-request declaration; a key sent as X-API-Key works as a bearer.
func TestTasksExtensionDeclaredAtInitialize(t *testing.T) {
	e := start(t)
	h := http.Header{}
	h.Set("X-API-Key", doortest.Secret(t, "a-op"))
	r := e.post(t, h, []byte(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25",
		"clientInfo":{"name":"raw","version":"1"},"capabilities":{"extensions":{"`+TasksExtension+`":{}}}}}`))
	sid := r.header.Get("Mcp-Session-Id")
	if r.status != http.StatusOK || r.Error != nil || sid == "" {
		t.Fatalf("initialize: %d %+v %s", r.status, r.Error, r.Result)
	}
	h.Set("Mcp-Session-Id", sid)
	h.Set("MCP-Protocol-Version", "2025-11-25")
	if r = e.post(t, h, []byte(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)); r.status != http.StatusAccepted {
		t.Fatalf("initialized: %d", r.status)
	}
	r = e.post(t, h, []byte(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"delegate","arguments":{"task":"declared once","agent":"plain"}}}`))
	w := decodeTask(t, r)
	if w.ResultType != "task" || w.TaskID == "" {
		t.Fatalf("delegate in a declaring session answered %s", r.Result)
	}
	r = e.post(t, h, []byte(`{"jsonrpc":"2.0","id":3,"method":"tasks/get","params":{"taskId":"`+w.TaskID+`"}}`))
	if got := decodeTask(t, r); got.TaskID != w.TaskID {
		t.Errorf("tasks/get in the session answered %s", r.Result)
	}
}
