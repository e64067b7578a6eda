package rest

import (
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
)

// A query parameter that names no field of the call is refused naming
// it, as an unknown field of a body is; a field's own parameters (by proto
// or JSON name, a path parameter given again) pass. (A call whose request
// is all in its path — GET /v1/tasks/{id} — reads no query at all.)
func TestQueryParameters(t *testing.T) {
	ts := serveStub(t, &stub{}, time.Minute)
	for _, tc := range []struct {
		path  string
		code  int
		field string
		words string
	}{
		{"/v1/tasks?statsues=TASK_STATUS_QUEUED", 400, "statsues", `unknown parameter of ListTasksRequest (it takes statuses, agent`},
		{"/v1/tasks?agent=a&foo=1", 400, "foo", "unknown parameter of ListTasksRequest"},
		{"/v1/tasks?agent.name=1", 400, "agent.name", "unknown parameter"},
		{"/v1/tasks?page_size=1&page_size=2", 400, "page_size", "too many values"},
		{"/v1/tasks/T1?id=T1", 200, "", ""},
		{"/v1/tasks?pageSize=5&statuses=TASK_STATUS_QUEUED", 501, "", ""}, // parsed; the stub has no ListTasks
	} {
		r := send(t, "GET", ts.URL+tc.path, nil, nil)
		if r.Code != tc.code {
			t.Errorf("%s: HTTP %d %s, want %d", tc.path, r.Code, r.Body, tc.code)
			continue
		}
		if tc.code != 400 {
			continue
		}
		if st := r.Status(); st == nil || st.Code() != codes.InvalidArgument || fieldOf(st) != tc.field || !strings.Contains(st.Message(), tc.words) {
			t.Errorf("%s: %s, want InvalidArgument naming %s saying %q", tc.path, r.Body, tc.field, tc.words)
		}
	}
}

// Handlers are made while others serve (router replicas in one process):
// making one writes nothing a serving one reads (go test -race).
func TestNewWhileServing(t *testing.T) {
	ts := serveStub(t, &stub{}, time.Minute)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 20 {
			send(t, "GET", ts.URL+"/v1/tasks?page_size=1", nil, nil)
		}
	}()
	for range 20 {
		if _, err := New(Options{Conn: noConn{}, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}); err != nil {
			t.Error(err)
		}
	}
	<-done
}

// noConn is a connection no call is made through.
type noConn struct{ grpc.ClientConnInterface }
