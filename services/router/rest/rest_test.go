package rest

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http/httptest"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/services/router/rest/resttest"
	"google.golang.org/genproto/googleapis/api/annotations"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/known/durationpb"
)

// binding is one HTTP binding of an RPC.
type binding struct{ method, path, rpc string }

// bindings lists every RPC of the public API (package agentmesh.v1) and
// its HTTP bindings (none when it has no google.api.http option).
func bindings(t *testing.T) (rpcs []string, out []binding) {
	t.Helper()
	protoregistry.GlobalFiles.RangeFilesByPackage("agentmesh.v1", func(fd protoreflect.FileDescriptor) bool {
		for i := 0; i < fd.Services().Len(); i++ {
			sd := fd.Services().Get(i)
			for j := 0; j < sd.Methods().Len(); j++ {
				md := sd.Methods().Get(j)
				name := string(md.FullName())
				rpcs = append(rpcs, name)
				rule, _ := proto.GetExtension(md.Options(), annotations.E_Http).(*annotations.HttpRule)
				for _, r := range append([]*annotations.HttpRule{rule}, rule.GetAdditionalBindings()...) {
					if m, p := ruleOf(r); m != "" {
						out = append(out, binding{m, p, name})
					}
				}
			}
		}
		return true
	})
	return rpcs, out
}

func ruleOf(r *annotations.HttpRule) (string, string) {
	switch {
	case r.GetGet() != "":
		return "get", r.GetGet()
	case r.GetPost() != "":
		return "post", r.GetPost()
	case r.GetPut() != "":
		return "put", r.GetPut()
	case r.GetPatch() != "":
		return "patch", r.GetPatch()
	case r.GetDelete() != "":
		return "delete", r.GetDelete()
	}
	return "", ""
}

// The REST API is the whole public API: every RPC has an HTTP binding, and
// no two bindings take the same method and path.
func TestEveryRPCHasHTTP(t *testing.T) {
	rpcs, bs := bindings(t)
	if len(rpcs) < 30 {
		t.Fatalf("only %d RPCs found in agentmesh.v1: is the package registered?", len(rpcs))
	}
	bound := map[string]bool{}
	seen := map[string]string{}
	for _, b := range bs {
		bound[b.rpc] = true
		key := b.method + " " + b.path
		if other, dup := seen[key]; dup {
			t.Errorf("%s is bound by both %s and %s", key, other, b.rpc)
		}
		seen[key] = b.rpc
	}
	for _, r := range rpcs {
		if !bound[r] {
			t.Errorf("%s has no google.api.http binding: add one (proto/agentmesh/v1) and `make generate`", r)
		}
	}
}

// Every binding is served: the handler registers every service's
// generated handlers (a call reaches the gRPC side, which here answers
// Unimplemented for all but the stub's TaskService, never the routing 404).
func TestEveryBindingIsServed(t *testing.T) {
	ts := serveStub(t, &stub{}, time.Minute)
	c := resttest.New(ts.URL, "k")
	_, bs := bindings(t)
	param := regexp.MustCompile(`\{[^}]+\}`)
	for _, b := range bs {
		path := param.ReplaceAllString(b.path, "x")
		body := any(nil)
		if b.method != "get" && b.method != "delete" {
			body = "{}"
		}
		if b.rpc == "agentmesh.v1.TaskService.WatchTask" || b.rpc == "agentmesh.v1.TaskService.WatchTasks" {
			continue // the event streams: their own tests
		}
		r := c.Do(t, strings.ToUpper(b.method), path, body)
		if st := r.Status(); r.Code == 404 && st != nil && strings.Contains(st.Message(), "no endpoint") {
			t.Errorf("%s %s (%s) is not served: register its service's handlers (rest.go)", b.method, b.path, b.rpc)
		}
	}
}

// The committed OpenAPI document describes exactly the proto's bindings
// (`make generate` writes it; this fails when it was not rerun).
func TestOpenAPIMatchesProto(t *testing.T) {
	var doc struct {
		Swagger string
		Paths   map[string]map[string]json.RawMessage
	}
	if err := json.Unmarshal(OpenAPI, &doc); err != nil {
		t.Fatalf("the OpenAPI document: %v", err)
	}
	if doc.Swagger != "2.0" {
		t.Fatalf("swagger %q, want 2.0", doc.Swagger)
	}
	var want, got []string
	_, bs := bindings(t)
	for _, b := range bs {
		want = append(want, b.method+" "+b.path)
	}
	for p, ops := range doc.Paths {
		for m := range ops {
			got = append(got, m+" "+p)
		}
	}
	sort.Strings(want)
	sort.Strings(got)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("the OpenAPI document's operations differ from the proto's bindings (run make generate):\n got: %v\nwant: %v", got, want)
	}
}

// stub is a TaskService of a test: it answers what the door sent it.
type stub struct {
	agentmeshv1.UnimplementedTaskServiceServer
	watch      func(*agentmeshv1.WatchTaskRequest, grpc.ServerStreamingServer[agentmeshv1.WatchTaskResponse]) error
	watchTasks func(*agentmeshv1.WatchTasksRequest, grpc.ServerStreamingServer[agentmeshv1.WatchTasksResponse]) error
}

func (s *stub) WatchTasks(req *agentmeshv1.WatchTasksRequest, stream grpc.ServerStreamingServer[agentmeshv1.WatchTasksResponse]) error {
	if s.watchTasks == nil {
		return status.Error(codes.Unimplemented, "stub: no WatchTasks")
	}
	return s.watchTasks(req, stream)
}

// GET /v1/tasks:watch through a gRPC connection (ConnTasksWatcher): the
// filters reach the RPC; the empty first response is "ready", a batch
// "changes", a reset "reset", and an error after the start an "error"
// event with the status.
func TestChangesEvents(t *testing.T) {
	s := &stub{watchTasks: func(req *agentmeshv1.WatchTasksRequest, stream grpc.ServerStreamingServer[agentmeshv1.WatchTasksResponse]) error {
		if len(req.Statuses) != 2 || req.Statuses[1] != agentmeshv1.TaskStatus_TASK_STATUS_FAILED || req.Agent != "writer" {
			return status.Errorf(codes.InvalidArgument, "filters not passed on: %v", req)
		}
		for _, r := range []*agentmeshv1.WatchTasksResponse{{}, {Changes: []*agentmeshv1.TaskChange{{TaskId: "T1", Seq: 3}}}, {Reset_: true}} {
			if err := stream.Send(r); err != nil {
				return err
			}
		}
		return status.Error(codes.Unavailable, "agentmesh router is shutting down")
	}}
	ts := serveStub(t, s, time.Minute)
	st, r, err := resttest.New(ts.URL, "k").Events(context.Background(), "/v1/tasks:watch?statuses=queued,TASK_STATUS_FAILED&agent=writer", "")
	if err != nil || st == nil {
		t.Fatalf("open: %v %d %s", err, r.Code, r.Body)
	}
	defer st.Close()
	for _, want := range []struct{ name, data string }{{"ready", "{}"}, {"changes", `"task_id":"T1"`}, {"reset", `"reset":true`}, {"error", `"code":14`}} {
		ev, err := st.Next()
		if err != nil || ev.Name != want.name || ev.ID != "" || !strings.Contains(ev.Data, want.data) {
			t.Fatalf("event %+v %v, want %s with %s", ev, err, want.name, want.data)
		}
	}
}

func (s *stub) SubmitTask(ctx context.Context, req *agentmeshv1.SubmitTaskRequest) (*agentmeshv1.SubmitTaskResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	if len(md.Get("authorization")) == 0 {
		return nil, status.Error(codes.Unauthenticated, "no key")
	}
	return &agentmeshv1.SubmitTaskResponse{Task: &agentmeshv1.Task{Id: "T1", Input: req.GetInput(), Title: req.GetTitle()}, Created: true}, nil
}

func (s *stub) WatchTask(req *agentmeshv1.WatchTaskRequest, stream grpc.ServerStreamingServer[agentmeshv1.WatchTaskResponse]) error {
	if s.watch == nil {
		return status.Error(codes.Unimplemented, "stub: no WatchTask")
	}
	return s.watch(req, stream)
}

// serveStub serves the REST handler over a stub TaskService.
func serveStub(t testing.TB, s *stub, keepAlive time.Duration) *httptest.Server {
	t.Helper()
	lis := bufconn.Listen(1 << 20)
	srv := grpc.NewServer()
	agentmeshv1.RegisterTaskServiceServer(srv, s)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient("passthrough:///stub", grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	h, err := New(Options{Conn: conn, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), KeepAlive: keepAlive})
	if err != nil {
		t.Fatal(err)
	}
	edge, err := Edge(h, EdgeOptions{MaxBodyBytes: 1 << 16})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(edge)
	t.Cleanup(ts.Close)
	return ts
}

// An idle event stream gets comment lines, and none while events flow.
func TestEventsKeepAlive(t *testing.T) {
	s := &stub{watch: func(_ *agentmeshv1.WatchTaskRequest, stream grpc.ServerStreamingServer[agentmeshv1.WatchTaskResponse]) error {
		if err := stream.SendHeader(nil); err != nil {
			return err
		}
		<-stream.Context().Done()
		return nil
	}}
	ts := serveStub(t, s, 30*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, r, err := resttest.New(ts.URL, "k").Events(ctx, "/v1/tasks/T1/events", "")
	if err != nil || st == nil {
		t.Fatalf("open: %v %d %s", err, r.Code, r.Body)
	}
	defer st.Close()
	for i := 0; i < 3; i++ {
		ev, err := st.Next()
		if err != nil || ev.Comment != "keep-alive" {
			t.Fatalf("comment %d: %+v %v", i, ev, err)
		}
	}
}

// A stream the router ends with an error ends with an "error" event that
// carries the status (the client reconnects with its cursor).
func TestEventsErrorEvent(t *testing.T) {
	s := &stub{watch: func(req *agentmeshv1.WatchTaskRequest, stream grpc.ServerStreamingServer[agentmeshv1.WatchTaskResponse]) error {
		if err := stream.Send(&agentmeshv1.WatchTaskResponse{Event: &agentmeshv1.TaskEvent{Seq: req.GetAfterSeq() + 1, Type: agentmeshv1.EventType_EVENT_TYPE_STATUS}}); err != nil {
			return err
		}
		return status.Error(codes.Unavailable, "agentmesh router is shutting down")
	}}
	ts := serveStub(t, s, time.Minute)
	st, r, err := resttest.New(ts.URL, "k").Events(context.Background(), "/v1/tasks/T1/events", "41")
	if err != nil || st == nil {
		t.Fatalf("open: %v %d %s", err, r.Code, r.Body)
	}
	defer st.Close()
	if ev, err := st.Next(); err != nil || ev.ID != "42" || ev.Name != "status" {
		t.Fatalf("first: %+v %v", ev, err)
	}
	ev, err := st.Next()
	if err != nil || ev.Name != "error" || !strings.Contains(ev.Data, `"code":14`) || !strings.Contains(ev.Data, "shutting down") {
		t.Fatalf("error event: %+v %v", ev, err)
	}
}

// WriteError: the status's HTTP code, Retry-After from RetryInfo, and an
// error that is no status is "internal error", its text not sent.
func TestWriteError(t *testing.T) {
	st, _ := status.New(codes.Unavailable, "state is down").WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(100 * time.Millisecond)})
	for _, tc := range []struct {
		err   error
		code  int
		after string
		body  string
	}{
		{st.Err(), 503, "1", "state is down"},
		{errors.New("dial tcp 10.0.0.7:5432: secret internals"), 500, "", `"message":"internal error"`},
		{status.Error(codes.FailedPrecondition, "already finished"), 400, "", "already finished"},
		{status.Error(codes.AlreadyExists, "exists"), 409, "", "exists"},
	} {
		w := httptest.NewRecorder()
		WriteError(w, httptest.NewRequest("GET", "/", nil), tc.err)
		if w.Code != tc.code || w.Header().Get("Retry-After") != tc.after || !strings.Contains(norm(w.Body.String()), tc.body) || strings.Contains(w.Body.String(), "10.0.0.7") {
			t.Errorf("%v: %d Retry-After %q %s", tc.err, w.Code, w.Header().Get("Retry-After"), w.Body)
		}
	}
}

func norm(s string) string { return strings.NewReplacer(`": "`, `":"`).Replace(s) }

func TestParseCORSOrigins(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		ok       bool
	}{
		{"", "", true},
		{"*", "*", true},
		{"https://App.Example.com, http://localhost:3000/", "https://app.example.com http://localhost:3000", true},
		{"app.example.com", "", false},
		{"ftp://x", "", false},
		{"https://x/path", "", false},
		{"https://user@x", "", false},
		{"https://x?q=1", "", false},
	} {
		got, err := ParseCORSOrigins(tc.in)
		if (err == nil) != tc.ok || strings.Join(got, " ") != tc.want {
			t.Errorf("ParseCORSOrigins(%q) = %q, %v; want %q ok=%v", tc.in, got, err, tc.want, tc.ok)
		}
	}
}

var digits = regexp.MustCompile(`^[0-9]{1,19}$`)

// FuzzParseCursor: a cursor is accepted exactly when it is 1-19 decimal
// digits within int64, and then it is that number.
func FuzzParseCursor(f *testing.F) {
	for _, s := range []string{"0", "1", "42", "9223372036854775807", "9223372036854775808", "-1", "+1", " 1", "1 ", "0x10", "١", "", "00012"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseCursor(s)
		want, perr := strconv.ParseInt(s, 10, 64)
		ok := digits.MatchString(s) && perr == nil
		if ok != (err == nil) {
			t.Fatalf("ParseCursor(%q) = %d, %v; accept=%v", s, n, err, ok)
		}
		if ok && (n != want || n < 0) {
			t.Fatalf("ParseCursor(%q) = %d, want %d", s, n, want)
		}
		if err != nil && !errors.Is(err, ErrBadCursor) {
			t.Fatalf("ParseCursor(%q): %v, want ErrBadCursor", s, err)
		}
	})
}

// FuzzSubmitBody: whatever the body of POST /v1/tasks, the door answers
// 200 with the decoded request or 400 with an InvalidArgument status —
// never a 5xx, never a panic.
func FuzzSubmitBody(f *testing.F) {
	for _, s := range []string{`{"input":"x"}`, `{"input":5}`, `{"inptu":"x"}`, `{"input":"x"`, ``, `null`, `[]`, `{"priority":"PRIORITY_HIGH","input":"x"}`,
		`{"metadata":{"a":1}}`, `{"budget":{"max_wall_time":"1x"}}`, "\xff", `{"input":"x"} {}`} {
		f.Add([]byte(s))
	}
	ts := serveStub(f, &stub{}, time.Minute)
	c := resttest.New(ts.URL, "k")
	f.Fuzz(func(t *testing.T, body []byte) {
		r := c.Do(t, "POST", "/v1/tasks", body)
		switch r.Code {
		case 200:
			var resp agentmeshv1.SubmitTaskResponse
			r.Decode(t, &resp)
		case 400:
			if st := r.Status(); st == nil || st.Code() != codes.InvalidArgument || st.Message() == "" {
				t.Fatalf("400 without an InvalidArgument status: %s", r.Body)
			}
		default:
			t.Fatalf("HTTP %d %s for body %q", r.Code, r.Body, body)
		}
	})
}

// FuzzParseWatchTasks: any query is parsed or refused with an
// InvalidArgument naming a parameter; what is parsed holds only known,
// specified enum values.
func FuzzParseWatchTasks(f *testing.F) {
	for _, s := range []string{"statuses=queued", "statuses=TASK_STATUS_RUNNING,7", "priorities=high&agent=a", "statuses=0", "x=1", "statuses=", "agent=a&agent=b", "priorities=-1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		q := map[string][]string{}
		for _, kv := range strings.Split(raw, "&") {
			k, v, _ := strings.Cut(kv, "=")
			q[k] = append(q[k], v)
		}
		req, err := ParseWatchTasks(q)
		if err != nil {
			if st := status.Convert(err); st.Code() != codes.InvalidArgument || st.Message() == "" {
				t.Fatalf("%q: %v, want InvalidArgument", raw, err)
			}
			return
		}
		for _, s := range req.Statuses {
			if _, ok := agentmeshv1.TaskStatus_name[int32(s)]; !ok || s == agentmeshv1.TaskStatus_TASK_STATUS_UNSPECIFIED {
				t.Fatalf("%q: status %d", raw, s)
			}
		}
		for _, p := range req.Priorities {
			if _, ok := agentmeshv1.Priority_name[int32(p)]; !ok || p == 0 {
				t.Fatalf("%q: priority %d", raw, p)
			}
		}
	})
}
