package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/poll"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"github.com/agentmesh/agentmesh/services/router/rest/resttest"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
)

// The REST door against the whole stack: the same tasks, the same answers.

// restScript: "paced ..." takes two model turns of 300 ms each (so an
// event stream can be dropped while the task runs); "slow ..." one of
// 30 s; anything else echoes its input and answers.
const restScript = `{
  "scenarios": [
    {"match": "^slow", "turns": [{"delay_ms": 30000, "content": "too late"}]},
    {"match": "^paced", "turns": [
      {"delay_ms": 300, "content": "Let me echo that.", "tool_calls": [{"name": "echo", "arguments": {"text": "{{input}}"}}]},
      {"delay_ms": 300, "content": "final answer: {{last_tool_result}}"}
    ]},
    {"turns": [
      {"content": "Let me echo that.", "tool_calls": [{"name": "echo", "arguments": {"text": "{{input}}"}}]},
      {"content": "final answer: {{last_tool_result}}"}
    ]}
  ]
}`

// restGet polls GET /v1/tasks/{id} until the task has status want.
func restWait(t *testing.T, c *resttest.Client, id string, want agentmeshv1.TaskStatus) *agentmeshv1.Task {
	t.Helper()
	var task *agentmeshv1.Task
	poll.Until(t, 60*time.Second, func() error {
		var resp agentmeshv1.GetTaskResponse
		c.Do(t, "GET", "/v1/tasks/"+id, nil).Decode(t, &resp)
		task = resp.GetTask()
		if task.GetStatus() != want {
			if taskstate.Terminal(task.GetStatus()) {
				t.Fatalf("task %s ended %s (%s), want %s", id, taskstate.Name(task.GetStatus()), task.GetError(), taskstate.Name(want))
			}
			return errStatus{task.GetStatus(), want}
		}
		return nil
	})
	return task
}

func restSubmit(t *testing.T, c *resttest.Client, body string) *agentmeshv1.Task {
	t.Helper()
	var resp agentmeshv1.SubmitTaskResponse
	c.Do(t, "POST", "/v1/tasks", body).Decode(t, &resp)
	return resp.GetTask()
}

// Submit, get, list with filters and pages, update, batch, cancel,
// history and delete, over HTTP against a real stack.
func TestRESTTasks(t *testing.T) {
	e := start(t, opts{script: restScript})
	e.createAgent(t, "worker", "general")
	c := e.rest
	first := restSubmit(t, c, `{"input": "hello", "agent": "worker", "tags": ["rest"], "title": "one"}`)
	second := restSubmit(t, c, `{"input": "again", "agent": "worker", "tags": ["rest"]}`)
	done := restWait(t, c, first.GetId(), taskstate.Completed)
	if done.GetResult() != "final answer: hello" {
		t.Fatalf("result %q", done.GetResult())
	}
	restWait(t, c, second.GetId(), taskstate.Completed)

	// Pages of one, newest first, filtered by status and tag.
	var ids []string
	token := ""
	for page := 0; page < 3; page++ {
		var list agentmeshv1.ListTasksResponse
		c.Do(t, "GET", "/v1/tasks?statuses=TASK_STATUS_COMPLETED&tag=rest&page_size=1&page_token="+url.QueryEscape(token), nil).Decode(t, &list)
		for _, task := range list.GetTasks() {
			ids = append(ids, task.GetId())
		}
		if token = list.GetNextPageToken(); token == "" {
			break
		}
	}
	if fmt.Sprint(ids) != fmt.Sprint([]string{second.GetId(), first.GetId()}) {
		t.Fatalf("pages: %v, want [%s %s]", ids, second.GetId(), first.GetId())
	}

	var hist agentmeshv1.GetTaskHistoryResponse
	c.Do(t, "GET", "/v1/tasks/"+first.GetId()+"/history", nil).Decode(t, &hist)
	for i, ev := range hist.GetEvents() {
		if ev.GetSeq() != int64(i+1) {
			t.Fatalf("history event %d has seq %d", i, ev.GetSeq())
		}
	}
	if n := len(hist.GetEvents()); n < 6 || hist.GetEvents()[n-1].GetStatus() != taskstate.Completed {
		t.Fatalf("history: %d events, last %v", n, hist.GetEvents()[n-1])
	}

	// PATCH takes the fields the body names (the gateway's update_mask).
	var upd agentmeshv1.UpdateTaskResponse
	c.Do(t, "PATCH", "/v1/tasks/"+first.GetId(), `{"title": "renamed", "tags": ["rest", "kept"]}`).Decode(t, &upd)
	if upd.GetTask().GetTitle() != "renamed" || fmt.Sprint(upd.GetTask().GetTags()) != "[rest kept]" || upd.GetTask().GetInput() != "hello" {
		t.Fatalf("update: %v", upd.GetTask())
	}

	var batch agentmeshv1.SubmitTasksResponse
	c.Do(t, "POST", "/v1/tasks:batch", `{"tasks": [{"ref": "a", "task": {"input": "x", "agent": "worker"}},
		{"ref": "b", "task": {"input": "y", "agent": "worker", "depends_on": ["ref:a"]}}]}`).Decode(t, &batch)
	if len(batch.GetTasks()) != 2 || fmt.Sprint(batch.GetTasks()[1].GetDependsOn()) != "["+batch.GetTasks()[0].GetId()+"]" {
		t.Fatalf("batch: %v", batch.GetTasks())
	}
	restWait(t, c, batch.GetTasks()[1].GetId(), taskstate.Completed)

	slow := restSubmit(t, c, `{"input": "slow one", "agent": "worker"}`)
	restWait(t, c, slow.GetId(), taskstate.Running)
	var cancelled agentmeshv1.CancelTaskResponse
	c.Do(t, "POST", "/v1/tasks/"+slow.GetId()+"/cancel", `{"reason": "enough"}`).Decode(t, &cancelled)
	if cancelled.GetTask().GetStatus() != taskstate.Cancelled {
		t.Fatalf("cancel: %v", cancelled.GetTask())
	}

	// Actions on the collection: cancel by filter, match.
	restSubmit(t, c, `{"input": "slow a", "agent": "worker", "tags": ["bulk"]}`)
	restSubmit(t, c, `{"input": "slow b", "agent": "worker", "tags": ["bulk"]}`)
	var bulk agentmeshv1.CancelTasksResponse
	c.Do(t, "POST", "/v1/tasks:cancel", `{"tag": "bulk", "reason": "all of them"}`).Decode(t, &bulk)
	if bulk.GetCancelled() != 2 {
		t.Fatalf("cancel by tag: %d cancelled, want 2", bulk.GetCancelled())
	}
	var match agentmeshv1.MatchAgentsResponse
	c.Do(t, "POST", "/v1/agents:match", `{"required_skills": ["general"]}`).Decode(t, &match)
	if match.GetRouting().GetChosen() != "worker" {
		t.Fatalf("match: %v", match.GetRouting())
	}
	var metrics agentmeshv1.GetMetricsResponse
	c.Do(t, "GET", "/v1/metrics?agent=worker", nil).Decode(t, &metrics)
	if metrics.GetOverall().GetCompleted() < 2 {
		t.Fatalf("metrics: %v", metrics.GetOverall())
	}

	if r := c.Do(t, "DELETE", "/v1/tasks/"+second.GetId(), nil); r.Code != 200 {
		t.Fatalf("delete: %d %s", r.Code, r.Body)
	}
	r := c.Do(t, "GET", "/v1/tasks/"+second.GetId(), nil)
	if st := r.Status(); r.Code != 404 || st.Code() != codes.NotFound {
		t.Fatalf("after delete: %d %s", r.Code, r.Body)
	}
}

// rawHTTP sends one request as bytes on a fresh TCP connection (what curl
// sends) and returns the status line, the headers and the body as read
// until stop appears in it (or the connection closes).
func rawHTTP(t *testing.T, addr, request, stop string) (statusLine, head, body string) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(60 * time.Second))
	if _, err := io.WriteString(conn, request); err != nil {
		t.Fatal(err)
	}
	rd := bufio.NewReader(conn)
	statusLine, err = rd.ReadString('\n')
	if err != nil {
		t.Fatalf("status line: %v", err)
	}
	var h strings.Builder
	for {
		line, err := rd.ReadString('\n')
		if err != nil {
			t.Fatalf("headers: %v", err)
		}
		if line == "\r\n" {
			break
		}
		h.WriteString(line)
	}
	var b strings.Builder
	buf := make([]byte, 4096)
	for stop == "" || !strings.Contains(b.String(), stop) {
		n, err := rd.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			break
		}
	}
	return strings.TrimSpace(statusLine), h.String(), b.String()
}

// curl-level: raw HTTP/1.1 requests, no client library, submit a task and
// follow its events with a Last-Event-ID to the end.
// The stack runs without keys, so its requests name localhost: by another
// host name they are refused (TestHTTPBrowserRequestsOfOtherSites).
func TestRESTRaw(t *testing.T) {
	e := start(t, opts{script: restScript})
	e.createAgent(t, "worker", "general")
	addr := e.stack.HTTPAddr()
	body := `{"input": "raw", "agent": "worker"}`
	st, head, resp := rawHTTP(t, addr, "POST /v1/tasks HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"+
		"Content-Length: "+strconv.Itoa(len(body))+"\r\nConnection: close\r\n\r\n"+body, "")
	if st != "HTTP/1.1 200 OK" || !strings.Contains(head, "Content-Type: application/json") || !strings.Contains(resp, `"input":"raw"`) {
		t.Fatalf("submit: %s\n%s\n%s", st, head, resp)
	}
	id := between(resp, `"id":"`, `"`)
	st, head, stream := rawHTTP(t, addr, "GET /v1/tasks/"+id+"/events HTTP/1.1\r\nHost: localhost\r\nAccept: text/event-stream\r\nLast-Event-ID: 1\r\n\r\n", "event: end")
	if st != "HTTP/1.1 200 OK" || !strings.Contains(head, "Content-Type: text/event-stream") {
		t.Fatalf("events: %s\n%s", st, head)
	}
	if strings.Contains(stream, "id: 1\n") || !strings.Contains(stream, "id: 2\nevent: status\n") || !strings.Contains(stream, "TASK_STATUS_COMPLETED") {
		t.Fatalf("stream after Last-Event-ID 1:\n%s", stream)
	}
	st, head, _ = rawHTTP(t, addr, "GET /v1/tasks HTTP/1.1\r\nHost: localhost\r\nLast-Event-ID: x\r\nConnection: close\r\n\r\n", "")
	if st != "HTTP/1.1 200 OK" {
		t.Fatalf("list: %s %s", st, head)
	}
	st, _, bad := rawHTTP(t, addr, "GET /v1/tasks/"+id+"/events HTTP/1.1\r\nHost: localhost\r\nLast-Event-ID: x\r\nConnection: close\r\n\r\n", "")
	if st != "HTTP/1.1 400 Bad Request" || !strings.Contains(bad, "Last-Event-ID") {
		t.Fatalf("bad cursor: %s %s", st, bad)
	}
}

func between(s, from, to string) string {
	_, after, _ := strings.Cut(s, from)
	v, _, _ := strings.Cut(after, to)
	return v
}

// readUntil reads events until one named name (or the end), returning
// their ids in order.
func readStream(t *testing.T, s *resttest.Stream, n int) (ids []int64, names []string) {
	t.Helper()
	for n < 0 || len(names) < n {
		ev, err := s.Next()
		if err == io.EOF {
			return ids, names
		}
		if err != nil {
			t.Fatalf("stream: %v", err)
		}
		if ev.Comment != "" {
			continue
		}
		names = append(names, ev.Name)
		if ev.ID != "" {
			id, err := strconv.ParseInt(ev.ID, 10, 64)
			if err != nil {
				t.Fatalf("event id %q", ev.ID)
			}
			ids = append(ids, id)
		}
	}
	return ids, names
}

// An SSE stream follows a task to its end; one dropped while the task runs
// and resumed with Last-Event-ID loses no event and repeats none: the
// events seen are the task's history, each once, in order.
func TestRESTEventsFollowAndResume(t *testing.T) {
	e := start(t, opts{script: restScript})
	e.createAgent(t, "worker", "general")
	c := e.rest
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	whole := restSubmit(t, c, `{"input": "paced whole", "agent": "worker"}`)
	s, r, err := c.Events(ctx, "/v1/tasks/"+whole.GetId()+"/events", "")
	if err != nil || s == nil {
		t.Fatalf("open: %v %d %s", err, r.Code, r.Body)
	}
	ids, names := readStream(t, s, -1)
	s.Close()
	checkHistory(t, e, whole.GetId(), ids)
	if names[len(names)-1] != "end" {
		t.Fatalf("the stream ended with %v, want an end event", names[len(names)-1])
	}

	task := restSubmit(t, c, `{"input": "paced resumed", "agent": "worker"}`)
	s, r, err = c.Events(ctx, "/v1/tasks/"+task.GetId()+"/events", "")
	if err != nil || s == nil {
		t.Fatalf("open: %v %d %s", err, r.Code, r.Body)
	}
	before, _ := readStream(t, s, 2)
	s.Close() // dropped while the task runs
	var now agentmeshv1.GetTaskResponse
	c.Do(t, "GET", "/v1/tasks/"+task.GetId(), nil).Decode(t, &now)
	if taskstate.Terminal(now.GetTask().GetStatus()) {
		t.Fatalf("the task ended before the connection was dropped (%s): the test proves nothing", taskstate.Name(now.GetTask().GetStatus()))
	}
	s, r, err = c.Events(ctx, "/v1/tasks/"+task.GetId()+"/events", strconv.FormatInt(before[len(before)-1], 10))
	if err != nil || s == nil {
		t.Fatalf("resume: %v %d %s", err, r.Code, r.Body)
	}
	after, names := readStream(t, s, -1)
	s.Close()
	if names[len(names)-1] != "end" {
		t.Fatalf("the resumed stream ended with %v", names)
	}
	checkHistory(t, e, task.GetId(), append(before, after...))
}

// checkHistory: ids are exactly the task's recorded events, in order.
func checkHistory(t *testing.T, e *env, id string, ids []int64) {
	t.Helper()
	var want []int64
	for _, ev := range e.history(t, id) {
		want = append(want, ev.Seq)
	}
	if fmt.Sprint(ids) != fmt.Sprint(want) {
		t.Fatalf("events seen %v, want the history %v (each once, in order)", ids, want)
	}
}

// The run API over the stack: a run's steps as thought, action,
// observation and final answer; a run's tools narrow what the executor
// lets the agent call.
func TestRESTRuns(t *testing.T) {
	e := start(t, opts{script: restScript})
	e.createAgent(t, "worker", "general")
	c := e.rest
	run := func(body string) *agentmeshv1.RunSession {
		var start agentmeshv1.StartRunResponse
		c.Do(t, "POST", "/v1/runs", body).Decode(t, &start)
		var sess agentmeshv1.RunSession
		poll.Until(t, 60*time.Second, func() error {
			sess.Reset()
			c.Do(t, "GET", start.GetPollUrl(), nil).Decode(t, &sess)
			if sess.GetStatus() == "pending" || sess.GetStatus() == "running" {
				return fmt.Errorf("run %s", sess.GetStatus())
			}
			return nil
		})
		return &sess
	}
	sess := run(`{"messages": [{"role": "user", "content": "hello"}], "agent": "worker", "max_steps": 5}`)
	if sess.GetStatus() != "completed" || len(sess.GetSteps()) != 2 {
		t.Fatalf("run: %v", sess)
	}
	s1, s2 := sess.GetSteps()[0], sess.GetSteps()[1]
	if s1.GetThought() != "Let me echo that." || s1.GetAction().GetTool() != "echo" || s1.GetObservation() != "hello" || s1.GetObservationIsError() {
		t.Errorf("step 1: %v", s1)
	}
	if !s2.GetIsFinal() || s2.GetFinalAnswer() != "final answer: hello" {
		t.Errorf("step 2: %v", s2)
	}
	// Narrowed to current_time, the agent's echo call is refused.
	sess = run(`{"messages": [{"role": "user", "content": "hello"}], "agent": "worker", "tools": ["current_time"]}`)
	if obs := sess.GetSteps()[0]; obs.GetAction().GetTool() != "echo" || !obs.GetObservationIsError() || obs.GetObservation() == "hello" {
		t.Errorf("a narrowed run's echo call ran: %v", obs)
	}
	var task agentmeshv1.GetTaskResponse
	c.Do(t, "GET", "/v1/tasks/"+sess.GetSessionId(), nil).Decode(t, &task)
	if fmt.Sprint(task.GetTask().GetAgentSpec().GetTools()) != "[current_time]" {
		t.Errorf("the run's task has tools %v", task.GetTask().GetAgentSpec().GetTools())
	}
	var tools agentmeshv1.ListToolsResponse
	c.Do(t, "GET", "/v1/tools", nil).Decode(t, &tools)
	if len(tools.GetTools()) == 0 {
		t.Error("GET /v1/tools: no tools")
	}
}

// TestTenancy's matrix over HTTP: org B's admin, against org A's tasks,
// runs, events, approvals and agents, gets 404 with the words an unknown
// one gets (or 403 for the shared agents), sees nothing of A's in lists,
// and changes nothing; roles refuse with 403 naming the role.
func TestRESTTenancy(t *testing.T) {
	e := start(t, opts{keysFile: tenancyKeysFile(t)})
	a := setupOrgA(t, e)
	key := map[string]string{}
	for _, k := range tenancyKeys {
		key[k.name] = k.key
	}
	b := e.rest.As(key["b-admin"])
	if _, err := e.agents.CreateAgent(as(t, "b-admin"), &agentmeshv1.CreateAgentRequest{Agent: &agentmeshv1.Agent{Name: "thief", Tools: []string{"echo"}}}); err != nil {
		t.Fatal(err)
	}
	stolen := restSubmit(t, e.rest.As(key["b-op"]), `{"input": "mine", "agent": "thief"}`)

	for _, tc := range []struct {
		method, path, body string
		http               int
		code               codes.Code
		msg                string // the whole message, when set
	}{
		{"GET", "/v1/tasks/" + a.blocked.Id, "", 404, codes.NotFound, fmt.Sprintf("task %q not found", a.blocked.Id)},
		{"GET", "/v1/tasks/" + a.done.Id + "/history", "", 404, codes.NotFound, fmt.Sprintf("task %q not found", a.done.Id)},
		{"GET", "/v1/tasks/" + a.done.Id + "/events", "", 404, codes.NotFound, ""},
		{"POST", "/v1/tasks/" + a.blocked.Id + "/cancel", "{}", 404, codes.NotFound, ""},
		{"PATCH", "/v1/tasks/" + a.blocked.Id, `{"title": "B's"}`, 404, codes.NotFound, ""},
		{"DELETE", "/v1/tasks/" + a.done.Id, "", 404, codes.NotFound, ""},
		{"GET", "/v1/runs/" + a.done.Id, "", 404, codes.NotFound, fmt.Sprintf("task %q not found", a.done.Id)},
		{"POST", "/v1/runs/" + a.blocked.Id + "/cancel", "{}", 404, codes.NotFound, ""},
		{"GET", "/v1/approvals?task_id=" + a.blocked.Id, "", 404, codes.NotFound, ""},
		{"GET", "/v1/proposals/" + a.blocked.Id, "", 404, codes.NotFound, ""},
		{"POST", "/v1/proposals/" + a.blocked.Id + "-p/approve", "{}", 404, codes.NotFound, ""},
		{"POST", "/v1/approvals/" + a.approval.Id + "/approve", "{}", 404, codes.NotFound, fmt.Sprintf("approval %q not found", a.approval.Id)},
		{"POST", "/v1/approvals/" + a.approval.Id + "/reject", "{}", 404, codes.NotFound, ""},
		{"GET", "/v1/agents/plain", "", 404, codes.NotFound, `agent "plain" not found`},
		{"PUT", "/v1/agents/plain", `{"system_prompt": "B's prompt"}`, 404, codes.NotFound, ""},
		{"DELETE", "/v1/agents/plain", "", 404, codes.NotFound, ""},
		{"POST", "/v1/tasks", `{"input": "x", "agent": "plain"}`, 400, codes.FailedPrecondition, `agent: no agent named "plain"`},
		{"POST", "/v1/runs", `{"messages": [{"role": "user", "content": "x"}], "agent": "plain"}`, 400, codes.FailedPrecondition, `agent: no agent named "plain"`},
		{"PUT", "/v1/agents/shared-echo", `{"tools": ["shell"]}`, 403, codes.PermissionDenied, ""},
		{"DELETE", "/v1/agents/shared-echo", "", 403, codes.PermissionDenied, ""},
		{"POST", "/v1/taps", `{"org": "org-a"}`, 403, codes.PermissionDenied, ""},
	} {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			r := b.Do(t, tc.method, tc.path, tc.body)
			st := r.Status()
			if r.Code != tc.http || st == nil || st.Code() != tc.code {
				t.Fatalf("HTTP %d %s, want %d %v", r.Code, r.Body, tc.http, tc.code)
			}
			if tc.msg != "" && st.Message() != tc.msg {
				t.Fatalf("message %q, want %q (what an unknown one gets)", st.Message(), tc.msg)
			}
		})
	}
	t.Run("lists", func(t *testing.T) {
		var tasks agentmeshv1.ListTasksResponse
		b.Do(t, "GET", "/v1/tasks", nil).Decode(t, &tasks)
		if len(tasks.GetTasks()) != 1 || tasks.GetTasks()[0].GetId() != stolen.GetId() {
			t.Errorf("B lists tasks %v, want only its own", tasks.GetTasks())
		}
		var aps agentmeshv1.ListApprovalsResponse
		b.Do(t, "GET", "/v1/approvals", nil).Decode(t, &aps)
		if len(aps.GetApprovals()) != 0 {
			t.Errorf("B lists approvals %v", aps.GetApprovals())
		}
		var agents agentmeshv1.ListAgentsResponse
		b.Do(t, "GET", "/v1/agents", nil).Decode(t, &agents)
		var got []string
		for _, ag := range agents.GetAgents() {
			got = append(got, ag.GetOrg()+"/"+ag.GetName())
		}
		if fmt.Sprint(got) != "[/shared-echo org-b/thief]" {
			t.Errorf("B lists agents %v", got)
		}
		var usage agentmeshv1.GetUsageResponse
		b.Do(t, "GET", "/v1/usage", nil).Decode(t, &usage)
		if usage.GetTasks() != 1 {
			t.Errorf("B's usage counts %d tasks, want its 1", usage.GetTasks())
		}
	})
	t.Run("roles", func(t *testing.T) {
		for _, tc := range []struct{ who, method, path, body, role string }{
			{"a-reader", "POST", "/v1/tasks", `{"input": "x", "agent": "plain"}`, "operator"},
			{"a-reader", "POST", "/v1/runs", `{"messages": [{"role": "user", "content": "x"}]}`, "operator"},
			{"a-reader", "POST", "/v1/tasks/" + a.blocked.Id + "/cancel", `{}`, "operator"},
			{"a-op", "POST", "/v1/approvals/" + a.approval.Id + "/approve", `{}`, "approver"},
			{"a-op", "POST", "/v1/agents", `{"name": "mine", "tools": ["echo"]}`, "admin"},
			{"alice", "DELETE", "/v1/agents/plain", "", "admin"},
		} {
			r := e.rest.As(key[tc.who]).Do(t, tc.method, tc.path, tc.body)
			if st := r.Status(); r.Code != http.StatusForbidden || !strings.Contains(st.Message(), "needs role "+tc.role) {
				t.Errorf("%s %s %s: %d %s, want 403 naming role %s", tc.who, tc.method, tc.path, r.Code, r.Body, tc.role)
			}
		}
		if r := e.rest.As(key["ops"]).Do(t, "POST", "/v1/tasks", `{"input": "x", "agent": "shared-echo"}`); r.Code != http.StatusForbidden {
			t.Errorf("platform key submits: %d %s", r.Code, r.Body)
		}
	})
	t.Run("A unchanged", func(t *testing.T) {
		got := waitAs(t, e, "a-reader", a.blocked.Id, taskstate.Blocked)
		if !proto.Equal(got.GetPendingApproval(), a.approval) || got.GetTitle() != a.blocked.GetTitle() {
			t.Errorf("A's blocked task changed: %v", got)
		}
		ag, err := e.agents.GetAgent(as(t, "a-reader"), &agentmeshv1.GetAgentRequest{Name: "plain"})
		if err != nil || ag.GetAgent().GetVersion() != 1 {
			t.Errorf("A's plain: %v %v", ag.GetAgent(), err)
		}
		h, err := e.tasks.GetTaskHistory(as(t, "a-reader"), &agentmeshv1.GetTaskHistoryRequest{Id: a.done.Id})
		if err != nil || len(h.Events) != a.history {
			t.Errorf("A's history: %d events, %v; want %d", len(h.GetEvents()), err, a.history)
		}
	})
}

// Schedules, webhooks and keys over REST against the whole stack: the
// generated routes reach their services (create, read, act, delete) and
// the same validation answers (a bad cron is 400 naming spec.cron; a
// loopback webhook URL 400 naming url).
func TestRESTSchedulesWebhooksKeys(t *testing.T) {
	e := start(t, opts{script: restScript})
	e.createAgent(t, "worker", "general")
	c := e.rest

	var created agentmeshv1.CreateScheduleResponse
	c.Do(t, "POST", "/v1/schedules", `{"name": "nightly", "spec": {"cron": "0 2 * * *", "time_zone": "Europe/Paris"},
		"template": {"input": "report", "agent": "worker"}}`).Decode(t, &created)
	id := created.GetSchedule().GetId()
	if id == "" {
		t.Fatalf("no schedule id in %v", &created)
	}
	var got agentmeshv1.GetScheduleResponse
	c.Do(t, "GET", "/v1/schedules/"+id, nil).Decode(t, &got)
	if got.GetSchedule().GetName() != "nightly" {
		t.Fatalf("GET schedule: %v", &got)
	}
	var trig agentmeshv1.TriggerScheduleResponse
	c.Do(t, "POST", "/v1/schedules/"+id+"/trigger", `{}`).Decode(t, &trig)
	if trig.GetTask().GetId() == "" {
		t.Fatalf("trigger made no task: %v", &trig)
	}
	restWait(t, c, trig.GetTask().GetId(), taskstate.Completed)
	var paused agentmeshv1.PauseScheduleResponse
	c.Do(t, "POST", "/v1/schedules/"+id+"/pause", `{"reason": "freeze"}`).Decode(t, &paused)
	var list agentmeshv1.ListSchedulesResponse
	c.Do(t, "GET", "/v1/schedules", nil).Decode(t, &list)
	if len(list.GetSchedules()) != 1 || !list.GetSchedules()[0].GetPaused() {
		t.Fatalf("list after pause: %v", &list)
	}
	bad := c.Do(t, "POST", "/v1/schedules", `{"name": "x", "spec": {"cron": "0 25 * * *"}, "template": {"input": "x", "agent": "worker"}}`)
	if bad.Code != http.StatusBadRequest || !strings.Contains(string(bad.Body), "spec.cron") {
		t.Fatalf("bad cron: %d %s, want 400 naming spec.cron", bad.Code, bad.Body)
	}
	if r := c.Do(t, "DELETE", "/v1/schedules/"+id, nil); r.Code != http.StatusOK {
		t.Fatalf("DELETE schedule: %d %s", r.Code, r.Body)
	}
	if r := c.Do(t, "GET", "/v1/schedules/"+id, nil); r.Code != http.StatusNotFound {
		t.Fatalf("GET a deleted schedule: %d %s, want 404", r.Code, r.Body)
	}

	loop := c.Do(t, "POST", "/v1/webhooks", `{"url": "http://127.0.0.1:9/hook"}`)
	if loop.Code != http.StatusBadRequest || !strings.Contains(string(loop.Body), "url") {
		t.Fatalf("loopback webhook: %d %s, want 400 naming url", loop.Code, loop.Body)
	}
	var hooks agentmeshv1.ListWebhookEndpointsResponse
	c.Do(t, "GET", "/v1/webhooks", nil).Decode(t, &hooks)
	if len(hooks.GetEndpoints()) != 0 {
		t.Fatalf("webhooks: %v, want none", &hooks)
	}
	var key agentmeshv1.CreateKeyResponse
	c.Do(t, "POST", "/v1/keys", `{"name": "ci", "role": "operator"}`).Decode(t, &key)
	if key.GetSecret() == "" || key.GetKey().GetId() == "" {
		t.Fatalf("created key: %v, want an id and its secret", &key)
	}
	var keys agentmeshv1.ListKeysResponse
	c.Do(t, "GET", "/v1/keys", nil).Decode(t, &keys)
	if len(keys.GetKeys()) != 1 || keys.GetKeys()[0].GetName() != "ci" {
		t.Fatalf("keys: %v, want the one created", &keys)
	}
	var revoked agentmeshv1.RevokeKeyResponse
	c.Do(t, "POST", "/v1/keys/"+key.GetKey().GetId()+"/revoke", `{}`).Decode(t, &revoked)
}
