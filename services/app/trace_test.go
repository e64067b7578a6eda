package app

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/poll"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"github.com/agentmesh/agentmesh/pkg/telemetry"
	"github.com/agentmesh/agentmesh/pkg/telemetry/otlptest"
	tracev1 "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

var grpcLine = regexp.MustCompile(`gRPC API on (\S+),`)

// One task through agentmesh dev, exporting to an in-process OTLP
// receiver over each protocol, is one trace: the API call at its root, the
// registry match, the state intents (client and server), the queue wait
// and the dispatch, the executor's attempt with the spawn, each model call
// (GenAI attributes) and each tool call under it — every parent right. A
// task that waits for an approval keeps its trace over both attempts, with
// the wait recorded; a sub-task's trace links to its parent's; a task
// submitted over REST is rooted at the HTTP request.
func TestOneTracePerTask(t *testing.T) {
	r := otlptest.Start(t)
	for _, proto := range []string{telemetry.ProtocolGRPC, telemetry.ProtocolHTTP} {
		t.Run(proto, func(t *testing.T) {
			endpoint, source := r.HTTPURL, "http"
			if proto == telemetry.ProtocolGRPC {
				endpoint, source = "http://"+r.GRPCAddr, "grpc"
			}
			t.Setenv(telemetry.EnvEndpoint, endpoint)
			t.Setenv(telemetry.EnvProtocol, proto)
			t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "100")
			tasks := runTracedTasks(t)
			checkTaskTrace(t, r, tasks.plain, source)
			checkApprovalTrace(t, r, tasks.approved)
			checkSubtaskTraces(t, r, tasks.planned)
			checkRESTTrace(t, r, tasks.rest)
		})
	}
}

type tracedTasks struct {
	plain, approved, planned, rest *agentmeshv1.Task
}

// runTracedTasks runs agentmesh dev, the tasks of the test through it to
// their ends, and stops it (which flushes the spans).
func runTracedTasks(t *testing.T) tracedTasks {
	banner, stop := runDevOnce(t, t.TempDir(), freePort(t))
	stopped := false
	defer func() {
		if !stopped {
			stop()
		}
	}()
	conn, err := grpc.NewClient(grpcLine.FindStringSubmatch(banner)[1], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tc := agentmeshv1.NewTaskServiceClient(conn)
	var out tracedTasks

	// A planner that delegates (the scripted model's "plan:" demo), and an
	// agent whose current_time calls wait for a person.
	for _, a := range []*agentmeshv1.Agent{
		{Name: "planner", Tools: []string{"call_agent", "wait_tasks"}},
		{Name: "careful", Tools: []string{"current_time"},
			ToolPolicies: map[string]agentmeshv1.ToolPolicy{"current_time": agentmeshv1.ToolPolicy_TOOL_POLICY_REQUIRE_APPROVAL}},
	} {
		if _, err := agentmeshv1.NewAgentServiceClient(conn).CreateAgent(ctx, &agentmeshv1.CreateAgentRequest{Agent: a}); err != nil {
			t.Fatal(err)
		}
	}
	out.plain = submitAndWait(ctx, t, tc, &agentmeshv1.SubmitTaskRequest{Input: "what time is it?"}, nil)
	out.planned = submitAndWait(ctx, t, tc, &agentmeshv1.SubmitTaskRequest{Input: "plan: the two halves", Agent: "planner"}, nil)
	out.approved = submitAndWait(ctx, t, tc, &agentmeshv1.SubmitTaskRequest{Input: "careful now", Agent: "careful"}, func(task *agentmeshv1.Task) {
		if a := task.GetPendingApproval(); a != nil && a.Status == agentmeshv1.ApprovalStatus_APPROVAL_STATUS_PENDING {
			if _, err := agentmeshv1.NewApprovalServiceClient(conn).ApproveToolCall(ctx, &agentmeshv1.ApproveToolCallRequest{ApprovalId: a.Id}); err != nil {
				t.Errorf("approve: %v", err)
			}
		}
	})

	// The same over REST.
	rest := "http://" + restLine.FindStringSubmatch(banner)[1]
	resp, err := http.Post(rest+"/v1/tasks", "application/json", strings.NewReader(`{"input": "over REST"}`))
	if err != nil {
		t.Fatal(err)
	}
	var submitted struct {
		Task struct {
			ID string `json:"id"`
		} `json:"task"`
	}
	err = json.NewDecoder(resp.Body).Decode(&submitted)
	resp.Body.Close()
	if err != nil || submitted.Task.ID == "" {
		t.Fatalf("REST submit: %v (status %d)", err, resp.StatusCode)
	}
	out.rest = waitEnd(ctx, t, tc, submitted.Task.ID, nil)

	stopped = true
	stop()
	return out
}

func submitAndWait(ctx context.Context, t *testing.T, tc agentmeshv1.TaskServiceClient, req *agentmeshv1.SubmitTaskRequest, blocked func(*agentmeshv1.Task)) *agentmeshv1.Task {
	t.Helper()
	resp, err := tc.SubmitTask(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	return waitEnd(ctx, t, tc, resp.Task.Id, blocked)
}

// waitEnd waits for task id to complete; blocked is called while it is
// blocked.
func waitEnd(ctx context.Context, t *testing.T, tc agentmeshv1.TaskServiceClient, id string, blocked func(*agentmeshv1.Task)) *agentmeshv1.Task {
	t.Helper()
	var task *agentmeshv1.Task
	poll.Until(t, 90*time.Second, func() error {
		got, err := tc.GetTask(ctx, &agentmeshv1.GetTaskRequest{Id: id})
		if err != nil {
			return err
		}
		task = got.Task
		switch {
		case task.Status == taskstate.Completed:
			return nil
		case taskstate.Terminal(task.Status):
			t.Fatalf("task %s ended %s: %s", id, taskstate.Name(task.Status), task.Error)
		case task.Status == taskstate.Blocked && blocked != nil:
			blocked(task)
		}
		return fmt.Errorf("task %s is %s", id, taskstate.Name(task.Status))
	})
	return task
}

// spanTree is one trace's spans by id, for checking parents.
type spanTree struct {
	t     *testing.T
	spans []otlptest.Span
	byID  map[string]otlptest.Span
}

func traceOf(t *testing.T, r *otlptest.Receiver, task *agentmeshv1.Task) (spanTree, string) {
	t.Helper()
	sc := telemetry.SpanContextOf(task.GetTraceparent())
	if !sc.IsValid() {
		t.Fatalf("task %s records no trace (traceparent %q)", task.Id, task.GetTraceparent())
	}
	spans := r.Trace(sc.TraceID().String())
	tree := spanTree{t: t, spans: spans, byID: map[string]otlptest.Span{}}
	for _, s := range spans {
		tree.byID[s.SpanID] = s
	}
	return tree, sc.SpanID().String()
}

// one returns the only span named name (of kind, when set) in the tree.
func (tr spanTree) one(name string, kind tracev1.Span_SpanKind) otlptest.Span {
	tr.t.Helper()
	all := tr.all(name, kind)
	if len(all) != 1 {
		tr.t.Fatalf("%d spans %q (kind %v), want 1; the trace holds:\n%s", len(all), name, kind, tr.names())
	}
	return all[0]
}

func (tr spanTree) all(name string, kind tracev1.Span_SpanKind) []otlptest.Span {
	var out []otlptest.Span
	for _, s := range tr.spans {
		if s.Name == name && (kind == tracev1.Span_SPAN_KIND_UNSPECIFIED || s.Kind == kind) {
			out = append(out, s)
		}
	}
	return out
}

func (tr spanTree) names() string {
	var b bytes.Buffer
	for _, s := range tr.spans {
		fmt.Fprintf(&b, "  %s %s (%s) %s parent %s\n", s.Service, s.Name, s.Kind, s.SpanID, s.ParentID)
	}
	return b.String()
}

// childOf checks that span's parent is parent.
func (tr spanTree) childOf(span, parent otlptest.Span) {
	tr.t.Helper()
	if span.ParentID != parent.SpanID {
		tr.t.Errorf("%s (%s) has parent %s, want %s (%s); the trace:\n%s", span.Name, span.SpanID, span.ParentID, parent.Name, parent.SpanID, tr.names())
	}
}

const (
	server   = tracev1.Span_SPAN_KIND_SERVER
	client   = tracev1.Span_SPAN_KIND_CLIENT
	internal = tracev1.Span_SPAN_KIND_INTERNAL
	anyKind  = tracev1.Span_SPAN_KIND_UNSPECIFIED
)

// checkTaskTrace checks the trace of the plain task: every hop, with the
// right parents, services and attributes, all by the protocol configured.
func checkTaskTrace(t *testing.T, r *otlptest.Receiver, task *agentmeshv1.Task, source string) {
	tr, recorded := traceOf(t, r, task)
	submit := tr.one("agentmesh.v1.TaskService/SubmitTask", server)
	if submit.SpanID != recorded || submit.ParentID != "" || submit.Service != "agentmesh-router" {
		t.Errorf("the API call %+v is not the recorded root %s of the task's trace", submit, recorded)
	}
	for _, op := range []string{"registry.match", "state.task.create"} {
		c, s := tr.one(op, client), tr.one(op, server)
		tr.childOf(c, submit)
		tr.childOf(s, c)
	}
	if s := tr.one("state.task.create", server); s.Service != "agentmesh-state" {
		t.Errorf("state.task.create served by %q", s.Service)
	}
	wait, dispatch := tr.one("queue.wait", internal), tr.one("dispatch", anyKind)
	tr.childOf(wait, submit)
	tr.childOf(dispatch, submit)
	if wait.Service != "agentmesh-scheduler" || wait.End > dispatch.Start+uint64(time.Millisecond) {
		t.Errorf("queue wait %+v does not end at the dispatch %+v", wait, dispatch)
	}
	tr.childOf(tr.one("state.task.dispatch", client), dispatch)
	attempt := tr.one("invoke_agent assistant", anyKind)
	tr.childOf(attempt, dispatch)
	if attempt.Service != "agentmesh-executor" || attempt.Attrs["agentmesh.attempt.outcome"] != "completed" || attempt.Attrs["gen_ai.agent.name"] != "assistant" {
		t.Errorf("attempt span %+v", attempt)
	}
	for _, op := range []string{"state.task.start", "state.task.complete"} {
		tr.childOf(tr.one(op, client), attempt)
	}
	tr.childOf(tr.one("spawn", internal), attempt)
	calls := tr.all("chat scripted", client)
	if len(calls) != 2 {
		t.Fatalf("%d model calls, want 2:\n%s", len(calls), tr.names())
	}
	for _, c := range calls {
		tr.childOf(c, attempt)
		for k, want := range map[string]string{
			"gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai", "gen_ai.request.model": "scripted",
			"gen_ai.response.model": "scripted", "gen_ai.conversation.id": task.Id,
		} {
			if c.Attrs[k] != want {
				t.Errorf("model call %s = %q, want %q", k, c.Attrs[k], want)
			}
		}
		for _, k := range []string{"gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens", "gen_ai.response.finish_reasons"} {
			if c.Attrs[k] == "" || c.Attrs[k] == "0" {
				t.Errorf("model call lacks %s: %v", k, c.Attrs)
			}
		}
	}
	tool := tr.one("execute_tool current_time", internal)
	tr.childOf(tool, attempt)
	if tool.Attrs["gen_ai.tool.name"] != "current_time" || tool.Attrs["agentmesh.tool.outcome"] != "ok" || tool.Attrs["agentmesh.tool.decision"] != "allowed" {
		t.Errorf("tool span %v", tool.Attrs)
	}
	for _, s := range tr.spans {
		if s.Source != source {
			t.Errorf("span %s came by %s, want %s", s.Name, s.Source, source)
		}
		for k, v := range s.Attrs {
			if strings.Contains(v, `"timezone"`) {
				t.Errorf("span %s holds the tool's arguments in %s", s.Name, k)
			}
		}
	}
}

// checkApprovalTrace: the approved task's two attempts and the wait for the
// person are one trace.
func checkApprovalTrace(t *testing.T, r *otlptest.Receiver, task *agentmeshv1.Task) {
	tr, recorded := traceOf(t, r, task)
	attempts := tr.all("invoke_agent careful", anyKind)
	if len(attempts) != 2 {
		t.Fatalf("%d attempts in the task's trace, want 2:\n%s", len(attempts), tr.names())
	}
	wait := tr.one("approval current_time", internal)
	if wait.ParentID != recorded || wait.Attrs["agentmesh.approval.status"] != "approved" || wait.Service != "agentmesh-state" {
		t.Errorf("approval wait %+v, want a child of the task's root %s, approved", wait, recorded)
	}
	var outcomes []string
	for _, a := range attempts {
		outcomes = append(outcomes, a.Attrs["agentmesh.attempt.outcome"])
	}
	if outcomes[0] != "gone" || outcomes[1] != "completed" {
		t.Errorf("attempt outcomes %v, want [gone completed] (blocked, then done)", outcomes)
	}
	decisions := map[string]bool{}
	for _, s := range tr.all("execute_tool current_time", internal) {
		decisions[s.Attrs["agentmesh.tool.decision"]] = true
	}
	if !decisions["pending_approval"] || !decisions["approved"] {
		t.Errorf("tool decisions %v, want pending_approval and approved", decisions)
	}
}

// checkSubtaskTraces: each sub-task has a trace of its own, whose root
// links to the parent's trace.
func checkSubtaskTraces(t *testing.T, r *otlptest.Receiver, parent *agentmeshv1.Task) {
	ptr, _ := traceOf(t, r, parent)
	parentTrace := ptr.spans[0].TraceID
	calls := ptr.all("execute_tool call_agent", internal)
	if len(calls) != 2 {
		t.Errorf("%d call_agent tool spans in the parent's trace, want 2:\n%s", len(calls), ptr.names())
	}
	for _, c := range calls {
		if c.Attrs["agentmesh.tool.decision"] != "allowed" || c.Attrs["agentmesh.tool.runs_in"] != "executor" || c.Attrs["agentmesh.tool.outcome"] != "ok" {
			t.Errorf("call_agent span %v", c.Attrs)
		}
	}
	var subtasks []otlptest.Span
	for _, s := range r.Spans() {
		if s.Name == "subtask" && s.Attrs["agentmesh.task.parent_id"] == parent.Id {
			subtasks = append(subtasks, s)
		}
	}
	if len(subtasks) != 2 {
		t.Fatalf("%d sub-task traces of %s, want 2:\n%s", len(subtasks), parent.Id, ptr.names())
	}
	for _, root := range subtasks {
		if root.ParentID != "" || root.TraceID == parentTrace {
			t.Errorf("sub-task root %+v is not the root of a trace of its own", root)
		}
		if len(root.Links) != 1 || !strings.HasPrefix(root.Links[0], parentTrace+"/") {
			t.Errorf("sub-task root links to %v, want a span of the parent's trace %s", root.Links, parentTrace)
		} else if _, ok := ptr.byID[strings.TrimPrefix(root.Links[0], parentTrace+"/")]; !ok {
			t.Errorf("the sub-task links to span %s, which the parent's trace does not hold", root.Links[0])
		}
		sub := spanTree{t: t, spans: r.Trace(root.TraceID), byID: map[string]otlptest.Span{}}
		sub.childOf(sub.one("invoke_agent assistant", anyKind), sub.one("dispatch", anyKind))
		sub.childOf(sub.one("dispatch", anyKind), root)
	}
}

// checkRESTTrace: a REST submit is rooted at its HTTP request, with the
// API call in process under it.
func checkRESTTrace(t *testing.T, r *otlptest.Receiver, task *agentmeshv1.Task) {
	tr, recorded := traceOf(t, r, task)
	httpSpan := tr.one("POST /v1", server)
	call := tr.one("agentmesh.v1.TaskService/SubmitTask", server)
	if httpSpan.ParentID != "" || httpSpan.Attrs["http.response.status_code"] == "" {
		t.Errorf("HTTP span %+v", httpSpan)
	}
	tr.childOf(call, httpSpan)
	if call.SpanID != recorded {
		t.Errorf("the task records %s, want the API call %s", recorded, call.SpanID)
	}
	tr.childOf(tr.one("invoke_agent assistant", anyKind), tr.one("dispatch", anyKind))
}
