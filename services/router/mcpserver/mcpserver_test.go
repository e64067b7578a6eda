package mcpserver

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/poll"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"github.com/agentmesh/agentmesh/services/doortest"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The MCP Go SDK's client, in a session of the 2025-11-25 revision,
// delegates a task and follows it to its answer with progress
// notifications, lists and reads tasks, subscribes to a running task and
// is told when it is cancelled; every answer is the API's.
func TestGoClientDelegatesAndFollows(t *testing.T) {
	e := start(t)
	cs, n := e.connect(t, "a-op", "2025-11-25")
	if got := cs.InitializeResult().ProtocolVersion; got != "2025-11-25" {
		t.Fatalf("negotiated %s, want 2025-11-25", got)
	}
	if _, ok := cs.InitializeResult().Capabilities.Extensions[TasksExtension]; !ok {
		t.Errorf("the server does not declare %s: %+v", TasksExtension, cs.InitializeResult().Capabilities)
	}
	tools, err := cs.ListTools(ctxT(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range tools.Tools {
		names = append(names, tool.Name)
	}
	slices.Sort(names)
	if want := []string{ToolCancelTask, ToolCheckStatus, ToolDelegate, ToolGetResult, ToolListTasks}; !slices.Equal(names, want) {
		t.Fatalf("tools %v, want %v", names, want)
	}

	// delegate answers at once with the task, committed: GetTask finds it.
	var v taskView
	structured(t, call(t, cs, ToolDelegate, map[string]any{"task": "hello mcp", "context": "from the test", "agent": doortest.AgentPlain,
		"priority": "high", "tags": []string{"mcp-test"}}), &v)
	if v.TaskID == "" || v.URI != "subtask://"+v.TaskID || v.Finished {
		t.Fatalf("delegate answered %+v", v)
	}
	got, err := e.stack.Tasks.GetTask(doortest.As(t, "a-reader"), &agentmeshv1.GetTaskRequest{Id: v.TaskID})
	if err != nil {
		t.Fatalf("the delegated task is not in the record: %v", err)
	}
	if got.Task.Input != "hello mcp\n\nContext:\nfrom the test" || got.Task.Priority != agentmeshv1.Priority_PRIORITY_HIGH ||
		got.Task.Agent != doortest.AgentPlain || got.Task.Metadata["door"] != "mcp" {
		t.Errorf("the task is %+v", got.Task)
	}

	// get_result waits for the answer; the progress token gets every event.
	params := &mcp.CallToolParams{Name: ToolGetResult, Arguments: map[string]any{"task_id": v.URI, "wait_seconds": 60}}
	params.SetProgressToken("p1")
	res, err := cs.CallTool(ctxT(t), params)
	if err != nil {
		t.Fatal(err)
	}
	var r resultOut
	structured(t, res, &r)
	if !r.Finished || r.Status != "completed" || r.Result != "final answer: hello mcp\n\nContext:\nfrom the test" {
		t.Fatalf("get_result answered %+v", r)
	}
	if textOf(res) != r.Result {
		t.Errorf("get_result's text %q, want the result", textOf(res))
	}
	prog := n.progressOf("p1")
	if len(prog) < 3 {
		t.Fatalf("%d progress notifications, want one per event (queued, running, steps, completed): %+v", len(prog), prog)
	}
	for i := 1; i < len(prog); i++ {
		if prog[i].Progress <= prog[i-1].Progress {
			t.Errorf("progress went from %v to %v", prog[i-1].Progress, prog[i].Progress)
		}
	}
	if last := prog[len(prog)-1].Message; !strings.HasPrefix(last, "completed") {
		t.Errorf("the last progress message is %q, want the completion", last)
	}

	// check_status and list_tasks see it; the resource is the whole task.
	structured(t, call(t, cs, ToolCheckStatus, map[string]any{"task_id": v.TaskID}), &v)
	if v.Status != "completed" || !v.Finished || v.Steps == 0 || v.Usage == nil || v.Result == "" {
		t.Errorf("check_status answered %+v", v)
	}
	var l listOut
	structured(t, call(t, cs, ToolListTasks, map[string]any{"tag": "mcp-test", "status": []string{"completed"}}), &l)
	if len(l.Tasks) != 1 || l.Tasks[0].TaskID != v.TaskID {
		t.Errorf("list_tasks answered %+v", l)
	}
	rr, err := cs.ReadResource(ctxT(t), &mcp.ReadResourceParams{URI: v.URI})
	if err != nil {
		t.Fatal(err)
	}
	var full taskView
	if err := json.Unmarshal([]byte(rr.Contents[0].Text), &full); err != nil || full.Input != got.Task.Input || rr.Contents[0].MIMEType != "application/json" {
		t.Errorf("resource %+v (%v)", rr.Contents[0], err)
	}
	listed, err := cs.ListResources(ctxT(t), nil)
	if err != nil || !slices.ContainsFunc(listed.Resources, func(r *mcp.Resource) bool { return r.URI == v.URI }) {
		t.Errorf("resources/list does not hold %s: %v", v.URI, err)
	}

	// A subscription to a running task is told when it is cancelled.
	structured(t, call(t, cs, ToolDelegate, map[string]any{"task": "slow one", "agent": doortest.AgentPlain}), &v)
	e.stack.WaitStatus(t, "a-reader", v.TaskID, taskstate.Running)
	if err := cs.Subscribe(ctxT(t), &mcp.SubscribeParams{URI: v.URI}); err != nil {
		t.Fatal(err)
	}
	structured(t, call(t, cs, ToolCancelTask, map[string]any{"task_id": v.TaskID, "reason": "test over"}), &v)
	if v.Status != "cancelled" || v.Error != "test over" {
		t.Errorf("cancel_task answered %+v", v)
	}
	poll.Until(t, 30*time.Second, func() error {
		if n.updates(v.URI) == 0 {
			return fmt.Errorf("no resources/updated for %s", v.URI)
		}
		return nil
	})
	poll.Until(t, 30*time.Second, func() error {
		if f := e.h.srv.subs.following(); f != 0 {
			return fmt.Errorf("%d tasks still followed after the task ended", f)
		}
		return nil
	})
	// Cancelling it again is the API's refusal, as a tool error.
	res = call(t, cs, ToolCancelTask, map[string]any{"task_id": v.TaskID})
	if !res.IsError || !strings.HasPrefix(textOf(res), "failed precondition: ") {
		t.Errorf("a second cancel answered %v %q", res.IsError, textOf(res))
	}
}

// delegate with wait_seconds waits for the answer with progress; a client
// of the newest revision (2026-07-28, no session) is served statelessly.
func TestGoClientNewestRevisionWaits(t *testing.T) {
	e := start(t)
	cs, n := e.connect(t, "a-op", "")
	if got := cs.InitializeResult().ProtocolVersion; got != modernRevision {
		t.Fatalf("negotiated %s, want %s", got, modernRevision)
	}
	if cs.ID() != "" {
		t.Errorf("session id %q: the newest revision has none", cs.ID())
	}
	params := &mcp.CallToolParams{Name: ToolDelegate, Arguments: map[string]any{"task": "wait for me", "agent": doortest.AgentPlain, "wait_seconds": 60}}
	params.SetProgressToken(7)
	res, err := cs.CallTool(ctxT(t), params)
	if err != nil {
		t.Fatal(err)
	}
	var v taskView
	structured(t, res, &v)
	if v.Status != "completed" || v.Result != "final answer: wait for me" {
		t.Fatalf("delegate with wait answered %+v", v)
	}
	if len(n.progressOf(7)) == 0 {
		t.Error("no progress notification while delegate waited")
	}
	// A subscription (subscriptions/listen) is told when the task changes.
	structured(t, call(t, cs, ToolDelegate, map[string]any{"task": "slow two", "agent": doortest.AgentPlain}), &v)
	if err := cs.Subscribe(ctxT(t), &mcp.SubscribeParams{URI: v.URI}); err != nil {
		t.Fatal(err)
	}
	call(t, cs, ToolCancelTask, map[string]any{"task_id": v.TaskID})
	poll.Until(t, 30*time.Second, func() error {
		if n.updates(v.URI) == 0 {
			return fmt.Errorf("no resources/updated for %s", v.URI)
		}
		return nil
	})
}

// Bad arguments are tool errors that say what is wrong; an unknown task is
// the API's not found; a missing resource is MCP's resource not found.
func TestToolErrors(t *testing.T) {
	e := start(t)
	cs, _ := e.connect(t, "a-op", "2025-11-25")
	for _, tt := range []struct {
		name string
		tool string
		args map[string]any
		want string
	}{
		{"no task", ToolDelegate, map[string]any{"agent": "plain"}, `missing properties: ["task"]`},
		{"bad priority", ToolDelegate, map[string]any{"task": "x", "priority": "urgent"}, "/properties/priority: enum: urgent"},
		{"unknown agent", ToolDelegate, map[string]any{"task": "x", "agent": "ghost"}, `failed precondition: agent: no agent named "ghost"`},
		{"unknown task", ToolCheckStatus, map[string]any{"task_id": "01JUNKNOWN00000000000000000"}, `not found: task "01JUNKNOWN00000000000000000" not found`},
		{"bad status", ToolListTasks, map[string]any{"status": []string{"sleeping"}}, "enum: sleeping"},
		{"negative wait", ToolDelegate, map[string]any{"task": "x", "agent": "plain", "wait_seconds": -5}, "/properties/wait_seconds: minimum: -5"},
		{"negative result wait", ToolGetResult, map[string]any{"task_id": "x", "wait_seconds": -1}, "/properties/wait_seconds: minimum: -1"},
		{"negative page size", ToolListTasks, map[string]any{"page_size": -1}, "/properties/page_size: minimum: -1"},
		{"extra argument", ToolCheckStatus, map[string]any{"task_id": "x", "sql": "drop"}, `unexpected additional properties ["sql"]`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			res := call(t, cs, tt.tool, tt.args)
			if !res.IsError || !strings.Contains(textOf(res), tt.want) {
				t.Errorf("got isError %v %q, want an error naming %q", res.IsError, textOf(res), tt.want)
			}
		})
	}
	_, err := cs.ReadResource(ctxT(t), &mcp.ReadResourceParams{URI: "subtask://01JUNKNOWN00000000000000000"})
	if err == nil || !strings.Contains(err.Error(), "not found") {
		t.Errorf("reading an unknown task: %v", err)
	}
}
