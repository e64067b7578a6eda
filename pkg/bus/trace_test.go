package bus_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	busv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/bus/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/natstest"
	"github.com/agentmesh/agentmesh/pkg/poll"
	"github.com/agentmesh/agentmesh/pkg/telemetry"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// A request is a client span of the sender and a server span of the
// service under it, in the sender's trace; the handler runs in the server
// span; the reply (an error one too) carries the server span's trace
// context back; a failed request's spans say so.
func TestRequestSpansAndReplyHeaders(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	defer telemetry.Install(rec)()
	srv := natstest.Start(t)
	nc := natstest.Connect(t, srv)
	handled := make(chan trace.SpanContext, 2)
	serve(t, nc, func(ctx context.Context, req *busv1.GetTaskRequest) (*busv1.GetTaskResponse, error) {
		handled <- trace.SpanContextFromContext(ctx)
		if req.Id == "missing" {
			return nil, bus.Errorf(bus.CodeNotFound, "no %s", req.Id)
		}
		return &busv1.GetTaskResponse{}, nil
	})
	ctx, root := telemetry.NewTracer("router").Start(context.Background(), "SubmitTask", trace.SpanKindServer)
	for _, tc := range []struct {
		id      string
		wantErr error
	}{{"x", nil}, {"missing", bus.ErrNotFound}} {
		err := bus.Request(ctx, nc, "t.get", &busv1.GetTaskRequest{Id: tc.id}, &busv1.GetTaskResponse{})
		if (tc.wantErr == nil && err != nil) || (tc.wantErr != nil && !errors.Is(err, tc.wantErr)) {
			t.Fatalf("%s: got %v, want %v", tc.id, err, tc.wantErr)
		}
		in := <-handled
		if in.TraceID() != root.SpanContext().TraceID() {
			t.Errorf("%s: the handler runs in trace %v, want the caller's %v", tc.id, in.TraceID(), root.SpanContext().TraceID())
		}
	}
	root.End()

	// The server span ends once its reply is sent: maybe after the client
	// has it.
	var clients, servers []sdktrace.ReadOnlySpan
	poll.Until(t, 10*time.Second, func() error {
		clients, servers = nil, nil
		for _, s := range rec.Ended() {
			if s.Name() != "t.get" {
				continue
			}
			switch s.SpanKind() {
			case trace.SpanKindClient:
				clients = append(clients, s)
			case trace.SpanKindServer:
				servers = append(servers, s)
			}
		}
		if len(clients) != 2 || len(servers) != 2 {
			return fmt.Errorf("got %d client and %d server spans of t.get, want 2 and 2", len(clients), len(servers))
		}
		return nil
	})
	byID := map[trace.SpanID]sdktrace.ReadOnlySpan{}
	errs := 0
	for _, c := range clients {
		byID[c.SpanContext().SpanID()] = c
		if c.Parent().SpanID() != root.SpanContext().SpanID() {
			t.Errorf("client span: parent %v, want the caller's span", c.Parent().SpanID())
		}
		if c.Status().Code.String() == "Error" {
			errs++
		}
	}
	for _, sv := range servers {
		if byID[sv.Parent().SpanID()] == nil {
			t.Errorf("server span: parent %v, want one of the client spans", sv.Parent().SpanID())
		}
		if sv.Status().Code.String() == "Error" {
			errs++
		}
	}
	if errs != 2 {
		t.Errorf("%d spans say error, want 2 (the not_found request's client and server spans)", errs)
	}

	// The replies carry the server span's context.
	for _, id := range []string{"x", "missing"} {
		msg, err := bus.NewMsg(ctx, "t.get", &busv1.GetTaskRequest{Id: id})
		if err != nil {
			t.Fatal(err)
		}
		reply, err := nc.RequestMsg(msg, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		<-handled
		got := trace.SpanContextFromContext(bus.Extract(context.Background(), nats.Header(reply.Header)))
		if !got.IsValid() || got.TraceID() != root.SpanContext().TraceID() {
			t.Errorf("reply to %s carries trace %v, want the request's trace", id, got)
		}
		if id == "missing" && reply.Header.Get(micro.ErrorCodeHeader) != bus.CodeNotFound {
			t.Errorf("the error reply lost its code: %v", reply.Header)
		}
	}
}

// While tracing is off a request's spans cost nothing and replies carry
// no trace headers.
func TestRequestUntracedWhileOff(t *testing.T) {
	srv := natstest.Start(t)
	nc := natstest.Connect(t, srv)
	serve(t, nc, func(ctx context.Context, req *busv1.GetTaskRequest) (*busv1.GetTaskResponse, error) {
		return &busv1.GetTaskResponse{}, nil
	})
	msg, err := bus.NewMsg(context.Background(), "t.get", &busv1.GetTaskRequest{Id: "x"})
	if err != nil {
		t.Fatal(err)
	}
	reply, err := nc.RequestMsg(msg, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if reply.Header.Get("traceparent") != "" {
		t.Errorf("an untraced reply carries %q", reply.Header.Get("traceparent"))
	}
	if allocs := testing.AllocsPerRun(100, func() { bus.TraceRequestForTest(context.Background(), nc, "am.state.task.get") }); allocs != 0 {
		t.Errorf("a request's spans allocate %v times while tracing is off, want 0", allocs)
	}
}
