package router

import (
	"net/http"
	"strings"
	"testing"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/telemetry"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// The caller's W3C trace context, traced or not.
const callerTP = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

// A submitted task records the trace it belongs to. With tracing off it
// is the caller's own context, as sent (the interceptor takes it from the
// metadata); with tracing on it is the API call's server span, a child of
// the caller's.
func TestSubmitRecordsItsTrace(t *testing.T) {
	caller := telemetry.SpanContextOf(callerTP)
	for _, traced := range []bool{false, true} {
		name := map[bool]string{false: "off", true: "on"}[traced]
		t.Run(name, func(t *testing.T) {
			rec := tracetest.NewSpanRecorder()
			if traced {
				defer telemetry.Install(rec)()
			}
			e := start(t, Config{})
			if _, err := e.tasks.SubmitTask(withKey(testCtx(t), "traceparent", callerTP), &agentmeshv1.SubmitTaskRequest{Input: "x"}); err != nil {
				t.Fatal(err)
			}
			if _, err := e.tasks.SubmitTask(testCtx(t), &agentmeshv1.SubmitTaskRequest{Input: "untraced caller"}); err != nil {
				t.Fatal(err)
			}
			e.fake.mu.Lock()
			got, second := e.fake.creates[0].GetTraceparent(), e.fake.creates[1].GetTraceparent()
			e.fake.mu.Unlock()
			sc := telemetry.SpanContextOf(got)
			switch {
			case !traced && got != callerTP:
				t.Errorf("tracing off: the task records %q, want the caller's %q", got, callerTP)
			case !traced && second != "":
				t.Errorf("tracing off, no caller context: the task records %q, want none", second)
			case traced && (sc.TraceID() != caller.TraceID() || sc.SpanID() == caller.SpanID()):
				t.Errorf("tracing on: the task records %q, want a span of the caller's trace %s", got, caller.TraceID())
			case traced && !telemetry.SpanContextOf(second).IsValid():
				t.Errorf("tracing on, no caller context: the task records %q, want the call's own trace", second)
			}
			if !traced {
				return
			}
			var submit sdktrace.ReadOnlySpan
			for _, s := range rec.Ended() {
				if s.Name() == "agentmesh.v1.TaskService/SubmitTask" && s.SpanContext().SpanID() == sc.SpanID() {
					submit = s
				}
			}
			if submit == nil || submit.Parent().SpanID() != caller.SpanID() || submit.SpanKind() != trace.SpanKindServer {
				t.Fatalf("the recorded span is not the SubmitTask server span under the caller's: %v", submit)
			}
		})
	}
}

// Over REST the HTTP request is a server span ("POST /v1") under the
// caller's trace context, and the API call it makes in process is its
// child — the span the task records.
func TestRESTSubmitIsTraced(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	defer telemetry.Install(rec)()
	e, _ := startHTTP(t, Config{})
	req, err := http.NewRequest("POST", "http://"+e.svc.HTTPAddr()+"/v1/tasks", strings.NewReader(`{"input":"x"}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("traceparent", callerTP)
	req.Header.Set("Authorization", "Bearer k-admin")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("REST submit: %d", resp.StatusCode)
	}
	spans := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range rec.Ended() {
		spans[s.Name()] = s
	}
	httpSpan, call := spans["POST /v1"], spans["agentmesh.v1.TaskService/SubmitTask"]
	if httpSpan == nil || call == nil {
		t.Fatalf("spans %v, want POST /v1 and SubmitTask", spans)
	}
	if httpSpan.Parent().SpanID() != telemetry.SpanContextOf(callerTP).SpanID() || call.Parent().SpanID() != httpSpan.SpanContext().SpanID() {
		t.Errorf("HTTP span's parent %v (want the caller's), call's parent %v (want the HTTP span)", httpSpan.Parent().SpanID(), call.Parent().SpanID())
	}
	e.fake.mu.Lock()
	recorded := telemetry.SpanContextOf(e.fake.creates[0].GetTraceparent())
	e.fake.mu.Unlock()
	if recorded.SpanID() != call.SpanContext().SpanID() {
		t.Errorf("the task records %v, want the API call's span %v", recorded.SpanID(), call.SpanContext().SpanID())
	}
}
