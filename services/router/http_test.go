package router

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"github.com/agentmesh/agentmesh/pkg/tlstest"
	"github.com/agentmesh/agentmesh/services/router/rest"
	"github.com/agentmesh/agentmesh/services/router/rest/resttest"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// httpKeys are the keys of the HTTP tests: acme's roles and one of globex.
var httpKeys = map[string]string{
	"k-admin":    "acme",
	"k-op":       "acme:operator",
	"k-reader":   "acme:reader",
	"k-globex":   "globex",
	"k-platform": "*:platform",
}

// startHTTP runs a router with an HTTP listener over the test bus and
// returns it with a client of its HTTP API (acme's admin key).
func startHTTP(t *testing.T, cfg Config) (*env, *resttest.Client) {
	t.Helper()
	cfg.HTTPListen = "127.0.0.1:0"
	if cfg.APIKeys == nil {
		cfg.APIKeys = httpKeys
	}
	e := start(t, cfg)
	return e, resttest.New("http://"+e.svc.HTTPAddr(), "k-admin")
}

// wantStatus checks an error answer: the HTTP status, the google.rpc.Status
// code, words of its message and, when field is set, a BadRequest detail
// naming the field.
func wantStatus(t *testing.T, r resttest.Response, httpCode int, code codes.Code, words, field string) *status.Status {
	t.Helper()
	if r.Code != httpCode {
		t.Fatalf("HTTP %d %s, want %d", r.Code, r.Body, httpCode)
	}
	if ct := r.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q, want application/json", ct)
	}
	st := r.Status()
	if st == nil || st.Code() != code || !strings.Contains(st.Message(), words) {
		t.Fatalf("body %s, want a google.rpc.Status %v saying %q", r.Body, code, words)
	}
	if field != "" {
		var got []string
		for _, d := range st.Details() {
			if br, ok := d.(*errdetails.BadRequest); ok {
				for _, v := range br.GetFieldViolations() {
					got = append(got, v.GetField())
				}
			}
		}
		if len(got) != 1 || got[0] != field {
			t.Errorf("BadRequest fields %v, want [%s]", got, field)
		}
	}
	return st
}

// Bad input over HTTP gets the gRPC door's codes as HTTP statuses, with a
// google.rpc.Status body that names the field.
func TestHTTPBadInput(t *testing.T) {
	e, c := startHTTP(t, Config{MaxRequestBytes: 8 << 10})
	other := e.fake.AddTask(&agentmeshv1.Task{Org: "globex", Input: "theirs", Agent: "assistant"})
	big := `{"input": "` + strings.Repeat("x", 9<<10) + `"}`
	for _, tc := range []struct {
		name        string
		client      *resttest.Client
		method, url string
		body        any
		http        int
		code        codes.Code
		words       string
		field       string
	}{
		{"no key", c.As(""), "GET", "/v1/tasks", nil, 401, codes.Unauthenticated, "missing API key", ""},
		{"unknown key", c.As("nope"), "GET", "/v1/tasks", nil, 401, codes.Unauthenticated, "unknown API key", ""},
		{"wrong role", c.As("k-reader"), "POST", "/v1/tasks", `{"input": "x"}`, 403, codes.PermissionDenied, "needs role operator", ""},
		{"approver role", c.As("k-op"), "POST", "/v1/approvals/x/approve", `{}`, 403, codes.PermissionDenied, "needs role approver", ""},
		{"unknown path", c, "GET", "/v1/nope", nil, 404, codes.NotFound, "no endpoint GET /v1/nope", ""},
		{"unknown path outside /v1", c, "GET", "/admin", nil, 404, codes.NotFound, "no endpoint", ""},
		{"method not allowed", c, "DELETE", "/v1/tools", nil, 405, codes.Unimplemented, "method not allowed", ""},
		{"wrong type", c, "POST", "/v1/tasks", `{"input": 5}`, 400, codes.InvalidArgument, "input", "input"},
		{"unknown field", c, "POST", "/v1/tasks", `{"inptu": "x"}`, 400, codes.InvalidArgument, `unknown field "inptu"`, "inptu"},
		{"not JSON", c, "POST", "/v1/tasks", `{"input": "x"`, 400, codes.InvalidArgument, "not valid JSON", "body"},
		{"bad enum", c, "POST", "/v1/tasks", `{"input": "x", "priority": "URGENT"}`, 400, codes.InvalidArgument, "priority", "priority"},
		{"validation", c, "POST", "/v1/tasks", `{"input": " "}`, 400, codes.InvalidArgument, "input: required", "input"},
		{"bad parameter", c, "GET", "/v1/tasks?page_size=many", nil, 400, codes.InvalidArgument, "page_size", "page_size"},
		{"body over the limit", c, "POST", "/v1/tasks", big, 413, codes.ResourceExhausted, "over the limit of 8192 bytes", ""},
		{"another org's task", c, "GET", "/v1/tasks/" + other.Id, nil, 404, codes.NotFound, fmt.Sprintf("task %q not found", other.Id), ""},
		{"another org's history", c, "GET", "/v1/tasks/" + other.Id + "/history", nil, 404, codes.NotFound, "not found", ""},
		{"another org's cancel", c, "POST", "/v1/tasks/" + other.Id + "/cancel", `{}`, 404, codes.NotFound, "not found", ""},
		{"another org's run", c, "GET", "/v1/runs/" + other.Id, nil, 404, codes.NotFound, "not found", ""},
		{"another org's events", c, "GET", "/v1/tasks/" + other.Id + "/events", nil, 404, codes.NotFound, "not found", ""},
		{"events without a key", c.As(""), "GET", "/v1/tasks/" + other.Id + "/events", nil, 401, codes.Unauthenticated, "missing API key", ""},
		{"events with a platform key", c.As("k-platform"), "GET", "/v1/tasks/" + other.Id + "/events", nil, 403, codes.PermissionDenied, "platform key", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := tc.client.Do(t, tc.method, tc.url, tc.body)
			wantStatus(t, r, tc.http, tc.code, tc.words, tc.field)
			if tc.http == 401 && r.Header.Get("WWW-Authenticate") != rest.Challenge {
				t.Errorf("WWW-Authenticate %q, want %q", r.Header.Get("WWW-Authenticate"), rest.Challenge)
			}
		})
	}
	t.Run("chunked body over the limit", func(t *testing.T) {
		req, err := c.Request(context.Background(), "POST", "/v1/tasks", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Body = io.NopCloser(io.MultiReader(strings.NewReader(big))) // no length: chunked
		req.ContentLength = -1
		resp, err := c.HTTP.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		wantStatus(t, resttest.Response{Code: resp.StatusCode, Header: resp.Header, Body: b}, 413, codes.ResourceExhausted, "over the limit", "")
	})
	t.Run("x-api-key", func(t *testing.T) {
		req, _ := c.As("").Request(context.Background(), "GET", "/v1/tasks", nil)
		req.Header.Set("X-Api-Key", "k-reader")
		resp, err := c.HTTP.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("HTTP %d, want 200 with the key in X-Api-Key", resp.StatusCode)
		}
	})
	if n := e.fake.count("create"); n != 0 {
		t.Errorf("%d tasks created by refused requests, want 0", n)
	}
}

// The org's request rate applies to HTTP calls as to gRPC ones: 429 with
// Retry-After.
func TestHTTPRateLimit(t *testing.T) {
	e, c := startHTTP(t, Config{OrgRate: 1, OrgBurst: 1})
	if r := c.Do(t, "GET", "/v1/tasks", nil); r.Code != 200 {
		t.Fatalf("first call: HTTP %d %s", r.Code, r.Body)
	}
	r := c.Do(t, "GET", "/v1/tasks", nil)
	wantStatus(t, r, 429, codes.ResourceExhausted, `org "acme" is over its request rate`, "")
	if s, err := strconv.Atoi(r.Header.Get("Retry-After")); err != nil || s < 1 {
		t.Errorf("Retry-After %q, want whole seconds ≥ 1", r.Header.Get("Retry-After"))
	}
	// Event streams take a token too.
	task := e.fake.AddTask(&agentmeshv1.Task{Org: "acme", Input: "x", Agent: "helper"})
	_, r, err := c.Events(context.Background(), "/v1/tasks/"+task.Id+"/events", "")
	if err != nil {
		t.Fatal(err)
	}
	wantStatus(t, r, 429, codes.ResourceExhausted, "request rate", "")
	// Another org has its own budget.
	if r := c.As("k-globex").Do(t, "GET", "/v1/tasks", nil); r.Code != 200 {
		t.Fatalf("globex: HTTP %d %s", r.Code, r.Body)
	}
}

// REST calls reach the same handlers: submit, get, list, cancel, history.
func TestHTTPTasks(t *testing.T) {
	e, c := startHTTP(t, Config{})
	var sub agentmeshv1.SubmitTaskResponse
	c.As("k-op").Do(t, "POST", "/v1/tasks", `{"input": "hello", "agent": "helper", "tags": ["t1"], "priority": "PRIORITY_HIGH"}`).Decode(t, &sub)
	id := sub.GetTask().GetId()
	if id == "" || sub.GetTask().GetOrg() != "acme" || sub.GetTask().GetPriority() != agentmeshv1.Priority_PRIORITY_HIGH {
		t.Fatalf("submitted %v", sub.GetTask())
	}
	var got agentmeshv1.GetTaskResponse
	c.As("k-reader").Do(t, "GET", "/v1/tasks/"+id, nil).Decode(t, &got)
	if got.GetTask().GetInput() != "hello" {
		t.Fatalf("get: %v", got.GetTask())
	}
	var list agentmeshv1.ListTasksResponse
	c.Do(t, "GET", "/v1/tasks?agent=helper&page_size=10", nil).Decode(t, &list)
	if len(list.GetTasks()) != 1 || list.GetTasks()[0].GetId() != id {
		t.Fatalf("list: %v", list.GetTasks())
	}
	var hist agentmeshv1.GetTaskHistoryResponse
	c.Do(t, "GET", "/v1/tasks/"+id+"/history?after_seq=1", nil).Decode(t, &hist)
	if len(hist.GetEvents()) != 1 || hist.GetEvents()[0].GetSeq() != 2 {
		t.Fatalf("history after 1: %v", hist.GetEvents())
	}
	var cancelled agentmeshv1.CancelTaskResponse
	c.As("k-op").Do(t, "POST", "/v1/tasks/"+id+"/cancel", `{"reason": "enough"}`).Decode(t, &cancelled)
	if cancelled.GetTask().GetStatus() != taskstate.Cancelled {
		t.Fatalf("cancel: %v", cancelled.GetTask())
	}
	r := c.As("k-op").Do(t, "POST", "/v1/tasks/"+id+"/cancel", `{}`)
	wantStatus(t, r, 400, codes.FailedPrecondition, "already finished", "")
	if e.fake.count("create") != 1 {
		t.Errorf("creates: %d, want 1", e.fake.count("create"))
	}
}

// events is the path of a task's event stream.
func events(id string) string { return "/v1/tasks/" + id + "/events" }

// openEvents opens an event stream; it fails t unless it is 200.
func openEvents(t *testing.T, c *resttest.Client, path, lastID string) *resttest.Stream {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	s, r, err := c.Events(ctx, path, lastID)
	if err != nil {
		t.Fatal(err)
	}
	if s == nil {
		t.Fatalf("events: HTTP %d %s", r.Code, r.Body)
	}
	if ct := s.Resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("Content-Type %q", ct)
	}
	t.Cleanup(s.Close)
	return s
}

// nextEvent skips keep-alive comments.
func nextEvent(t *testing.T, s *resttest.Stream) resttest.Event {
	t.Helper()
	for {
		ev, err := s.Next()
		if err != nil {
			t.Fatalf("next event: %v", err)
		}
		if ev.Comment == "" {
			return ev
		}
	}
}

// The SSE stream carries every event once with its seq as the id; a
// client that drops the connection and comes back with Last-Event-ID
// misses none and sees none twice, up to the task's end.
func TestHTTPEventsResume(t *testing.T) {
	e, c := startHTTP(t, Config{})
	task := e.fake.AddTask(&agentmeshv1.Task{Org: "acme", Input: "x", Agent: "helper"}) // seq 1, 2
	seen := map[string]int{}
	s := openEvents(t, c, events(task.Id), "")
	for want := 1; want <= 2; want++ {
		ev := nextEvent(t, s)
		seen[ev.ID]++
		if ev.ID != strconv.Itoa(want) || !strings.Contains(ev.Data, `"seq":"`+ev.ID+`"`) {
			t.Fatalf("event %d: %+v", want, ev)
		}
	}
	e.fake.Record(task.Id, &agentmeshv1.TaskEvent{Type: agentmeshv1.EventType_EVENT_TYPE_STATUS, Status: taskstate.Assigned}, true) // 3, live
	ev := nextEvent(t, s)
	if ev.ID != "3" || ev.Name != "status" || !strings.Contains(ev.Data, "TASK_STATUS_ASSIGNED") {
		t.Fatalf("live event: %+v", ev)
	}
	seen[ev.ID]++
	s.Close() // dropped; events go on meanwhile
	e.fake.Record(task.Id, &agentmeshv1.TaskEvent{Type: agentmeshv1.EventType_EVENT_TYPE_STATUS, Status: taskstate.Running}, true)
	e.fake.Record(task.Id, &agentmeshv1.TaskEvent{Type: agentmeshv1.EventType_EVENT_TYPE_STEP, Step: &agentmeshv1.Step{Kind: agentmeshv1.StepKind_STEP_KIND_MODEL_TURN, Content: "thinking"}}, true)

	s = openEvents(t, c, events(task.Id), "3")
	for want := 4; want <= 5; want++ {
		ev := nextEvent(t, s)
		seen[ev.ID]++
		if ev.ID != strconv.Itoa(want) {
			t.Fatalf("after resume: %+v, want id %d", ev, want)
		}
	}
	e.fake.Record(task.Id, &agentmeshv1.TaskEvent{Type: agentmeshv1.EventType_EVENT_TYPE_STATUS, Status: taskstate.Completed, Result: "done"}, true)
	ev = nextEvent(t, s)
	seen[ev.ID]++
	if ev.ID != "6" || !strings.Contains(ev.Data, "TASK_STATUS_COMPLETED") {
		t.Fatalf("last event: %+v", ev)
	}
	if end := nextEvent(t, s); end.Name != "end" || end.ID != "" || !strings.Contains(end.Data, "TASK_STATUS_COMPLETED") {
		t.Fatalf("end: %+v", end)
	}
	if _, err := s.Next(); !errors.Is(err, io.EOF) {
		t.Fatalf("after the end: %v, want EOF", err)
	}
	for i := 1; i <= 6; i++ {
		if seen[strconv.Itoa(i)] != 1 {
			t.Errorf("event %d seen %d times, want once (%v)", i, seen[strconv.Itoa(i)], seen)
		}
	}
	// Read to its end: nothing more, and an EventSource stops (204).
	_, r, err := c.Events(context.Background(), "/v1/tasks/"+task.Id+"/events", "6")
	if err != nil || r.Code != http.StatusNoContent {
		t.Fatalf("at the end: %d %s %v, want 204", r.Code, r.Body, err)
	}
	// ?after= is the same cursor.
	s = openEvents(t, c, events(task.Id)+"?after=5", "")
	if ev := nextEvent(t, s); ev.ID != "6" {
		t.Fatalf("after=5: %+v, want event 6", ev)
	}
}

// Bad cursors and flags are refused before anything is watched.
func TestHTTPEventsBadInput(t *testing.T) {
	e, c := startHTTP(t, Config{})
	task := e.fake.AddTask(&agentmeshv1.Task{Org: "acme", Input: "x", Agent: "helper"})
	for _, tc := range []struct {
		name, query, lastID string
		words, field        string
	}{
		{"letters", "", "x3", "Last-Event-ID", "Last-Event-ID"},
		{"negative", "", "-1", "Last-Event-ID", "Last-Event-ID"},
		{"too big", "", "99999999999999999999", "Last-Event-ID", "Last-Event-ID"},
		{"spaces inside", "", "1 2", "Last-Event-ID", "Last-Event-ID"},
		{"bad after", "?after=1.5", "", "after", "after"},
		{"bad tokens", "?tokens=maybe", "", "tokens", "tokens"},
		{"past the end", "", "99", "Last-Event-ID: 99 is past the task's last event (2)", "Last-Event-ID"},
		{"past the end by after", "?after=99", "", "after: 99 is past the task's last event (2)", "after"},
		{"past the end by after_seq", "?after_seq=99", "", "after_seq: 99 is past the task's last event (2)", "after_seq"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, r, err := c.Events(context.Background(), "/v1/tasks/"+task.Id+"/events"+tc.query, tc.lastID)
			if err != nil {
				t.Fatal(err)
			}
			if s != nil {
				s.Close()
				t.Fatal("stream opened, want 400")
			}
			wantStatus(t, r, 400, codes.InvalidArgument, tc.words, tc.field)
		})
	}
}

// Tokens reach the stream only when asked for, without an id (they are
// not in the history: they never move the client's cursor).
func TestHTTPEventsTokens(t *testing.T) {
	e, c := startHTTP(t, Config{})
	task := e.fake.AddTask(&agentmeshv1.Task{Org: "acme", Input: "x", Agent: "helper"})
	plain := openEvents(t, c, events(task.Id), "2")
	withTokens := openEvents(t, c, events(task.Id)+"?tokens=true", "2")
	tok := &agentmeshv1.TaskEvent{TaskId: task.Id, Org: "acme", Type: agentmeshv1.EventType_EVENT_TYPE_TOKEN, Token: "Hel"}
	publishToken(t, e, tok)
	ev := nextEvent(t, withTokens)
	if ev.Name != "token" || ev.ID != "" || !strings.Contains(ev.Data, `"token":"Hel"`) {
		t.Fatalf("token event: %+v", ev)
	}
	e.fake.Record(task.Id, &agentmeshv1.TaskEvent{Type: agentmeshv1.EventType_EVENT_TYPE_STATUS, Status: taskstate.Cancelled}, true)
	if ev := nextEvent(t, plain); ev.ID != "3" {
		t.Fatalf("without tokens the next event is %+v, want the status event 3", ev)
	}
	if ev := nextEvent(t, withTokens); ev.ID != "3" {
		t.Fatalf("with tokens: %+v, want event 3", ev)
	}
}

// The other doors mount on the listener and call the API in process as
// their caller: same answers as any door.
func TestMount(t *testing.T) {
	e, c := startHTTP(t, Config{})
	mine := e.fake.AddTask(&agentmeshv1.Task{Org: "acme", Input: "x", Agent: "helper"})
	tasks := agentmeshv1.NewTaskServiceClient(e.svc.Conn())
	door := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		resp, err := tasks.GetTask(OutgoingContext(r.Context(), r), &agentmeshv1.GetTaskRequest{Id: r.URL.Query().Get("id")})
		if err != nil {
			WriteHTTPError(w, r, err)
			return
		}
		fmt.Fprint(w, resp.GetTask().GetInput())
	})
	if err := e.svc.Mount("/door", door); err != nil {
		t.Fatal(err)
	}
	if err := e.svc.Mount("/guarded/", e.svc.RequireKey(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		who, _ := CallerFrom(r.Context())
		fmt.Fprint(w, who.Org+"/"+string(who.Role))
	}))); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/door", "/v1/tasks", "/", "GET /v1/x"} {
		if err := e.svc.Mount(p, door); err == nil {
			t.Errorf("Mount(%q): nil error, want refused", p)
		}
	}
	if r := c.Do(t, "GET", "/door?id="+mine.Id, nil); r.Code != 200 || string(r.Body) != "x" {
		t.Fatalf("door: %d %s", r.Code, r.Body)
	}
	wantStatus(t, c.As("k-globex").Do(t, "GET", "/door?id="+mine.Id, nil), 404, codes.NotFound, "not found", "")
	wantStatus(t, c.As("").Do(t, "GET", "/door?id="+mine.Id, nil), 401, codes.Unauthenticated, "missing API key", "")
	wantStatus(t, c.As("").Do(t, "GET", "/guarded/x", nil), 401, codes.Unauthenticated, "missing API key", "")
	if r := c.As("k-reader").Do(t, "GET", "/guarded/x", nil); string(r.Body) != "acme/reader" {
		t.Fatalf("guarded: %d %s", r.Code, r.Body)
	}
	// A stream through Conn (the in-memory server): the same answers.
	ws, err := tasks.WatchTask(withKey(testCtx(t), "authorization", "Bearer k-reader"), &agentmeshv1.WatchTaskRequest{Id: mine.Id})
	if err != nil {
		t.Fatal(err)
	}
	if first, err := ws.Recv(); err != nil || first.GetEvent().GetSeq() != 1 {
		t.Fatalf("WatchTask through Conn: %v %v", first, err)
	}
	ws, _ = tasks.WatchTask(withKey(testCtx(t), "authorization", "Bearer k-globex"), &agentmeshv1.WatchTaskRequest{Id: mine.Id})
	if _, err := ws.Recv(); status.Code(err) != codes.NotFound {
		t.Fatalf("another org's WatchTask through Conn: %v, want NotFound", err)
	}
	caller, err := e.svc.Authenticate(mustRequest(t, "k-op"))
	if err != nil || caller.Org != "acme" || caller.Role != RoleOperator {
		t.Fatalf("Authenticate: %+v %v", caller, err)
	}

	// Without a listener: no mounts, but the in-process API is there.
	plain := start(t, Config{APIKeys: httpKeys})
	if err := plain.svc.Mount("/door", door); !errors.Is(err, ErrNoHTTP) {
		t.Errorf("Mount without a listener: %v, want ErrNoHTTP", err)
	}
	if _, err := agentmeshv1.NewTaskServiceClient(plain.svc.Conn()).ListTasks(context.Background(), &agentmeshv1.ListTasksRequest{}); status.Code(err) != codes.Unauthenticated {
		t.Errorf("in-process call without a key: %v, want Unauthenticated", err)
	}
}

// publishToken publishes a live token event, as state relays an
// executor's (the router follows the public live subjects).
func publishToken(t *testing.T, e *env, ev *agentmeshv1.TaskEvent) {
	t.Helper()
	msg, err := bus.NewEventMsg(context.Background(), names.LiveTokens(ev.GetOrg(), ev.GetTaskId()), ev)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.fake.nc.PublishMsg(msg); err != nil {
		t.Fatal(err)
	}
	if err := e.fake.nc.Flush(); err != nil {
		t.Fatal(err)
	}
}

func mustRequest(t *testing.T, key string) *http.Request {
	r, err := http.NewRequest("GET", "http://x/", nil)
	if err != nil {
		t.Fatal(err)
	}
	r.Header.Set("Authorization", "Bearer "+key)
	return r
}

// CORS is off unless origins are configured; then only they get the
// headers, and a preflight from another origin is refused.
func TestHTTPCORS(t *testing.T) {
	preflight := func(c *resttest.Client, origin string) *http.Response {
		req, _ := c.Request(context.Background(), "OPTIONS", "/v1/tasks", nil)
		req.Header.Set("Origin", origin)
		req.Header.Set("Access-Control-Request-Method", "POST")
		req.Header.Set("Access-Control-Request-Headers", "authorization, content-type")
		resp, err := c.HTTP.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	_, off := startHTTP(t, Config{})
	if resp := preflight(off, "https://app.example"); resp.Header.Get("Access-Control-Allow-Origin") != "" {
		t.Errorf("no origins configured, yet CORS headers: %v", resp.Header)
	}
	_, on := startHTTP(t, Config{HTTPCORSOrigins: []string{"https://app.example"}})
	resp := preflight(on, "https://app.example")
	if resp.StatusCode != 204 || resp.Header.Get("Access-Control-Allow-Origin") != "https://app.example" ||
		!strings.Contains(resp.Header.Get("Access-Control-Allow-Methods"), "POST") || resp.Header.Get("Access-Control-Allow-Headers") != "authorization, content-type" {
		t.Errorf("preflight from an allowed origin: %d %v", resp.StatusCode, resp.Header)
	}
	if resp := preflight(on, "https://evil.example"); resp.StatusCode != 403 || resp.Header.Get("Access-Control-Allow-Origin") != "" {
		t.Errorf("preflight from another origin: %d %v, want 403 without CORS headers", resp.StatusCode, resp.Header)
	}
	req, _ := on.Request(context.Background(), "GET", "/v1/tasks", nil)
	req.Header.Set("Origin", "https://app.example")
	got, err := on.HTTP.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	got.Body.Close()
	if got.StatusCode != 200 || got.Header.Get("Access-Control-Allow-Origin") != "https://app.example" {
		t.Errorf("GET from an allowed origin: %d %v", got.StatusCode, got.Header)
	}
}

// Cleartext HTTP/2 (prior knowledge) is served too: several event streams
// share one connection.
func TestHTTP2Cleartext(t *testing.T) {
	e, c := startHTTP(t, Config{})
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	c.HTTP.Transport = &http.Transport{Protocols: &p}
	task := e.fake.AddTask(&agentmeshv1.Task{Org: "acme", Input: "x", Agent: "helper"})
	a := openEvents(t, c, events(task.Id), "")
	b := openEvents(t, c, events(task.Id), "1")
	if a.Resp.Proto != "HTTP/2.0" || b.Resp.Proto != "HTTP/2.0" {
		t.Fatalf("protocols %s %s, want HTTP/2.0", a.Resp.Proto, b.Resp.Proto)
	}
	if ev := nextEvent(t, a); ev.ID != "1" {
		t.Fatalf("first stream: %+v", ev)
	}
	if ev := nextEvent(t, b); ev.ID != "2" {
		t.Fatalf("second stream: %+v", ev)
	}
	if open := e.svc.doors.conns.open(); open != 1 {
		t.Errorf("%d connections held, want the one both streams share", open)
	}
}

// The HTTP listener takes the gRPC listener's TLS settings: HTTPS only,
// and with a client CA, only clients with a certificate it signed.
func TestHTTPTLS(t *testing.T) {
	pki := tlstest.New(t)
	pool := x509.NewCertPool()
	pem, err := os.ReadFile(pki.CA)
	if err != nil {
		t.Fatal(err)
	}
	pool.AppendCertsFromPEM(pem)
	e, _ := startHTTP(t, Config{TLSCert: pki.ServerCert, TLSKey: pki.ServerKey, TLSClientCA: pki.CA, Version: "v1.2.3"})
	cert, err := tls.LoadX509KeyPair(pki.ClientCert, pki.ClientKey)
	if err != nil {
		t.Fatal(err)
	}
	client := func(certs ...tls.Certificate) *resttest.Client {
		c := resttest.New("https://"+e.svc.HTTPAddr(), "k-reader")
		c.HTTP.Transport = &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: certs, MinVersion: tls.VersionTLS12}}
		return c
	}
	var v agentmeshv1.GetVersionResponse
	client(cert).Do(t, "GET", "/v1/version", nil).Decode(t, &v)
	if v.GetVersion() != "v1.2.3" {
		t.Fatalf("version %q, want v1.2.3", v.GetVersion())
	}
	if _, err := client().Try(context.Background(), "GET", "/v1/version", nil); err == nil {
		t.Error("without a client certificate: answered, want the handshake refused")
	}
	plain := resttest.New("http://"+e.svc.HTTPAddr(), "k-reader")
	if r, err := plain.Try(context.Background(), "GET", "/v1/version", nil); err == nil && r.Code == 200 {
		t.Error("plain HTTP on the TLS listener: answered 200")
	}
}

// A browser page of another site cannot make the API do anything: a
// no-cors POST (plain-text body, no preflight) is refused unless its
// origin is configured, and with authentication off a request by a host
// name — a page that rebound its own name to this address — is refused
// too. Clients that are not browsers (no Origin, no Sec-Fetch-Site) and
// reads are served as before.
func TestHTTPBrowserRequestsOfOtherSites(t *testing.T) {
	send := func(c *resttest.Client, method, host string, hdr map[string]string) int {
		t.Helper()
		var body any
		if method == "POST" {
			body = `{"agent":"helper","input":"from a page"}`
		}
		req, err := c.Request(context.Background(), method, "/v1/tasks", body)
		if err != nil {
			t.Fatal(err)
		}
		if host != "" {
			req.Host = host
		}
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := c.HTTP.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	noCors := map[string]string{"Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site", "Content-Type": "text/plain;charset=UTF-8"}
	oldBrowser := map[string]string{"Origin": "https://evil.example", "Content-Type": "text/plain;charset=UTF-8"}

	e, open := startHTTP(t, Config{APIKeys: map[string]string{}}) // authentication off
	_, port, _ := strings.Cut(e.svc.HTTPAddr(), ":")
	own := map[string]string{"Origin": "http://127.0.0.1:" + port, "Sec-Fetch-Site": "same-origin"}
	for _, tc := range []struct {
		name, method, host string
		hdr                map[string]string
		want               int
	}{
		{"a page of another site", "POST", "", noCors, 403},
		{"a browser without Sec-Fetch-Site", "POST", "", oldBrowser, 403},
		{"a page rebound to this address", "POST", "evil.example:" + port, own, 403},
		{"a read by a rebound name", "GET", "evil.example:" + port, nil, 403},
		{"the dashboard's own page", "POST", "", own, 200},
		{"by localhost", "POST", "localhost:" + port, nil, 200},
		{"a client that is not a browser", "POST", "", nil, 200},
		{"a read from another site", "GET", "", noCors, 200},
	} {
		if got := send(open, tc.method, tc.host, tc.hdr); got != tc.want {
			t.Errorf("authentication off, %s: %d, want %d", tc.name, got, tc.want)
		}
	}
	e.fake.mu.Lock()
	created := len(e.fake.creates)
	e.fake.mu.Unlock()
	if created != 3 {
		t.Errorf("%d tasks created, want the 3 served POSTs", created)
	}

	_, keyed := startHTTP(t, Config{HTTPCORSOrigins: []string{"https://app.example"}})
	app := map[string]string{"Origin": "https://app.example", "Sec-Fetch-Site": "cross-site"}
	if got := send(keyed, "POST", "", noCors); got != 403 {
		t.Errorf("with keys, a page of another site: %d, want 403", got)
	}
	if got := send(keyed, "POST", "", app); got != 200 {
		t.Errorf("with keys, a configured origin: %d, want 200", got)
	}
	if got := send(keyed, "POST", "agentmesh.example.com", nil); got != 200 {
		t.Errorf("with keys, by host name: %d, want 200", got)
	}
}
