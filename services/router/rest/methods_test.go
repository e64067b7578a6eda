package rest

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/services/router/rest/resttest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func (s *stub) GetTask(ctx context.Context, req *agentmeshv1.GetTaskRequest) (*agentmeshv1.GetTaskResponse, error) {
	if _, ok := ctx.Deadline(); ok {
		return nil, status.Error(codes.FailedPrecondition, "stub: the call has a deadline")
	}
	return &agentmeshv1.GetTaskResponse{Task: &agentmeshv1.Task{Id: req.GetId()}}, nil
}

// send makes one request with headers and returns the answer.
func send(t *testing.T, method, url string, body io.Reader, hdr map[string]string) resttest.Response {
	t.Helper()
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer k")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resttest.Response{Code: resp.StatusCode, Header: resp.Header, Body: b}
}

// HTTP's method semantics: a 405 says in Allow what the path takes (the
// gateway's paths and the door's own), OPTIONS answers Allow, HEAD is
// served wherever GET is, with no body.
func TestMethods(t *testing.T) {
	ts := serveStub(t, &stub{}, time.Minute)
	for _, tc := range []struct {
		method, path string
		code         int
		allow        string
	}{
		{"PUT", "/v1/tasks", 405, "GET, HEAD, OPTIONS, POST"},
		{"DELETE", "/v1/openapi.json", 405, "GET, HEAD, OPTIONS"},
		{"POST", "/v1/tasks/T1/events", 405, "GET, HEAD, OPTIONS"},
		{"PUT", "/v1/tasks:watch", 405, "GET, HEAD, OPTIONS"},
		{"OPTIONS", "/v1/tasks/T1", 204, "DELETE, GET, HEAD, OPTIONS, PATCH"},
		{"OPTIONS", "/v1/openapi.json", 204, "GET, HEAD, OPTIONS"},
		{"HEAD", "/v1/tasks/T1", 200, ""},
		{"HEAD", "/v1/openapi.json", 200, ""},
		{"GET", "/v1/nope", 404, ""},
		{"OPTIONS", "/v1/nope", 404, ""},
	} {
		r := send(t, tc.method, ts.URL+tc.path, nil, nil)
		if r.Code != tc.code || r.Header.Get("Allow") != tc.allow {
			t.Errorf("%s %s: HTTP %d Allow %q %s, want %d Allow %q", tc.method, tc.path, r.Code, r.Header.Get("Allow"), r.Body, tc.code, tc.allow)
		}
		if tc.code == 405 {
			if st := r.Status(); st == nil || st.Code() != codes.Unimplemented || !strings.Contains(st.Message(), "this path takes "+tc.allow) {
				t.Errorf("%s %s: body %s, want the status saying what the path takes", tc.method, tc.path, r.Body)
			}
		}
		if tc.method == "HEAD" && (len(r.Body) != 0 || r.Header.Get("Content-Type") != "application/json") {
			t.Errorf("HEAD %s: Content-Type %q body %q, want JSON's headers and no body", tc.path, r.Header.Get("Content-Type"), r.Body)
		}
	}
}

// HEAD of an event stream answers the stream's headers and ends the
// watch at once: it holds no watch open while the connection lives.
func TestEventsHead(t *testing.T) {
	ended := make(chan struct{})
	s := &stub{watch: func(_ *agentmeshv1.WatchTaskRequest, stream grpc.ServerStreamingServer[agentmeshv1.WatchTaskResponse]) error {
		defer close(ended)
		if err := stream.SendHeader(nil); err != nil {
			return err
		}
		<-stream.Context().Done()
		return nil
	}}
	ts := serveStub(t, s, time.Minute)
	r := send(t, "HEAD", ts.URL+"/v1/tasks/T1/events", nil, nil)
	if r.Code != 200 || r.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("HTTP %d %v, want 200 text/event-stream", r.Code, r.Header)
	}
	select {
	case <-ended:
	case <-time.After(10 * time.Second):
		t.Fatal("the watch of a HEAD request is still open while its connection idles")
	}
}

// The API's answers are the caller's own: not to be stored by any cache,
// nor sniffed as anything but their type.
func TestAnswersNotStored(t *testing.T) {
	ts := serveStub(t, &stub{}, time.Minute)
	for _, p := range []string{"/v1/tasks/T1", "/v1/nope"} {
		r := send(t, "GET", ts.URL+p, nil, map[string]string{"X-Api-Key": "k"})
		if r.Header.Get("Cache-Control") != "no-store" || r.Header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("GET %s: HTTP %d Cache-Control %q X-Content-Type-Options %q, want no-store and nosniff", p, r.Code, r.Header.Get("Cache-Control"), r.Header.Get("X-Content-Type-Options"))
		}
	}
}

// A REST call takes no deadline from a gRPC transport header: the client
// times its own calls (the gateway obeyed Grpc-Timeout, and its expiry
// was answered 503 with Retry-After).
func TestNoGRPCTimeoutHeader(t *testing.T) {
	ts := serveStub(t, &stub{}, time.Minute)
	if r := send(t, "GET", ts.URL+"/v1/tasks/T1", nil, map[string]string{"Grpc-Timeout": "1S"}); r.Code != 200 {
		t.Fatalf("HTTP %d %s, want 200 with no deadline on the call", r.Code, r.Body)
	}
}
