package telemetry_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/pkg/telemetry"
	"github.com/agentmesh/agentmesh/pkg/telemetry/otlptest"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// The OTEL_* variables choose the transport: the same span reaches the
// receiver over gRPC or over HTTP, as OTEL_EXPORTER_OTLP_PROTOCOL (or its
// _TRACES_ form, which wins) says, and is named by its service.
func TestSetupExportsOverEitherProtocol(t *testing.T) {
	r := otlptest.Start(t)
	for _, tc := range []struct {
		name string
		env  map[string]string
		want string // the transport the span came by
	}{
		{"grpc", map[string]string{telemetry.EnvEndpoint: "http://" + r.GRPCAddr, telemetry.EnvProtocol: "grpc"}, "grpc"},
		{"http/protobuf", map[string]string{telemetry.EnvEndpoint: r.HTTPURL, telemetry.EnvProtocol: "http/protobuf"}, "http"},
		{"http by default", map[string]string{telemetry.EnvEndpoint: r.HTTPURL}, "http"},
		{"traces protocol wins", map[string]string{telemetry.EnvEndpoint: "http://" + r.GRPCAddr, telemetry.EnvProtocol: "http/protobuf", telemetry.EnvTracesProtocol: "grpc"}, "grpc"},
		{"traces endpoint as given", map[string]string{telemetry.EnvTracesEndpoint: r.HTTPURL + "/v1/traces"}, "http"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			t.Setenv(telemetry.EnvServiceName, "")
			shutdown, err := telemetry.Setup(context.Background(), "test")
			if err != nil {
				t.Fatal(err)
			}
			if !telemetry.Enabled() {
				t.Fatal("an endpoint is set and tracing is off")
			}
			_, span := telemetry.NewTracer("state").Start(context.Background(), "probe "+tc.name, trace.SpanKindInternal)
			id := span.SpanContext().TraceID().String()
			span.End()
			shutdown() // flushes
			got := r.Trace(id)
			if len(got) != 1 {
				t.Fatalf("got %d spans of the trace, want 1", len(got))
			}
			if got[0].Source != tc.want || got[0].Service != "agentmesh-state" || got[0].Name != "probe "+tc.name {
				t.Errorf("got %+v, want the span by %s from agentmesh-state", got[0], tc.want)
			}
			if telemetry.Enabled() {
				t.Error("tracing still on after shutdown")
			}
		})
	}
}

// No endpoint (or the export turned off) is no exporter and no spans; a
// bad value refuses the start naming the variable.
func TestSetupOffAndRefusals(t *testing.T) {
	for _, tc := range []struct {
		name    string
		env     map[string]string
		wantErr string // the variable named; "" = off, no error
	}{
		{"nothing set", nil, ""},
		{"exporter none", map[string]string{telemetry.EnvEndpoint: "http://127.0.0.1:1", telemetry.EnvTracesExporter: "none"}, ""},
		{"sdk disabled", map[string]string{telemetry.EnvEndpoint: "http://127.0.0.1:1", telemetry.EnvSDKDisabled: "true"}, ""},
		{"bad protocol", map[string]string{telemetry.EnvEndpoint: "http://127.0.0.1:1", telemetry.EnvProtocol: "http/json"}, telemetry.EnvProtocol},
		{"bad traces protocol", map[string]string{telemetry.EnvEndpoint: "http://127.0.0.1:1", telemetry.EnvTracesProtocol: "udp"}, telemetry.EnvTracesProtocol},
		{"bad exporter", map[string]string{telemetry.EnvEndpoint: "http://127.0.0.1:1", telemetry.EnvTracesExporter: "zipkin"}, telemetry.EnvTracesExporter},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, k := range []string{telemetry.EnvEndpoint, telemetry.EnvTracesEndpoint, telemetry.EnvProtocol, telemetry.EnvTracesProtocol, telemetry.EnvTracesExporter, telemetry.EnvSDKDisabled} {
				t.Setenv(k, tc.env[k])
			}
			shutdown, err := telemetry.Setup(context.Background(), "test")
			if tc.wantErr != "" {
				if !errors.Is(err, telemetry.ErrConfig) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("got %v, want an error naming %s", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer shutdown()
			if telemetry.Enabled() {
				t.Error("tracing is on")
			}
		})
	}
}

// While tracing is off a span costs nothing: Start returns its context,
// a no-op span, and allocates nothing.
func TestSpansOffAllocateNothing(t *testing.T) {
	tr := telemetry.NewTracer("executor")
	ctx := context.Background()
	allocs := testing.AllocsPerRun(1000, func() {
		c, span := tr.Start(ctx, "chat", trace.SpanKindClient)
		if span.IsRecording() {
			t.Fatal("a recording span while tracing is off")
		}
		c, span2 := tr.StartSpan(c, "queue.wait", telemetry.Span{At: time.Now(), NewRoot: true})
		span2.End()
		span.End()
		_ = telemetry.Traceparent(c)
	})
	if allocs != 0 {
		t.Errorf("%v allocations per span while tracing is off, want 0", allocs)
	}
}

func BenchmarkSpan(b *testing.B) {
	tr := telemetry.NewTracer("executor")
	ctx := context.Background()
	run := func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, span := tr.Start(ctx, "chat", trace.SpanKindClient)
			span.End()
		}
	}
	b.Run("off", run)
	un := telemetry.Install(sdktrace.NewSimpleSpanProcessor(tracetest.NewNoopExporter()))
	b.Run("on", run)
	un()
}

// Each service's spans carry its own service.name; OTEL_SERVICE_NAME
// names them all.
func TestServiceNames(t *testing.T) {
	for _, tc := range []struct{ env, service, want string }{
		{"", "state", "agentmesh-state"},
		{"", "agentmesh-router", "agentmesh-router"},
		{"", "TestX/scheduler", "agentmesh-scheduler"},
		{"mesh", "state", "mesh"},
	} {
		t.Setenv(telemetry.EnvServiceName, tc.env)
		rec := tracetest.NewSpanRecorder()
		un := telemetry.Install(rec)
		_, span := telemetry.NewTracer(tc.service).Start(context.Background(), "x", trace.SpanKindInternal)
		span.End()
		un()
		ended := rec.Ended()
		if len(ended) != 1 {
			t.Fatalf("%d spans", len(ended))
		}
		got, _ := ended[0].Resource().Set().Value("service.name")
		if got.AsString() != tc.want {
			t.Errorf("service %q with OTEL_SERVICE_NAME=%q: service.name %q, want %q", tc.service, tc.env, got.AsString(), tc.want)
		}
	}
}

// A task's traceparent round-trips; InTrace continues the task's trace
// from another (linking the span there), and leaves ctx alone when it is
// already in it.
func TestTraceparentAndInTrace(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	un := telemetry.Install(rec)
	defer un()
	tr := telemetry.NewTracer("state")
	taskCtx, task := tr.Start(context.Background(), "SubmitTask", trace.SpanKindServer)
	tp := telemetry.Traceparent(taskCtx)
	if sc := telemetry.SpanContextOf(tp); sc.TraceID() != task.SpanContext().TraceID() || sc.SpanID() != task.SpanContext().SpanID() || !sc.IsSampled() {
		t.Fatalf("traceparent %q does not name the span %v", tp, task.SpanContext())
	}
	if telemetry.SpanContextOf("garbage").IsValid() || telemetry.SpanContextOf("").IsValid() {
		t.Error("a malformed traceparent names a span")
	}

	// Already in the trace: unchanged.
	if got := telemetry.InTrace(taskCtx, tp); got != taskCtx {
		t.Error("InTrace changed a context already in the task's trace")
	}
	// From another trace (an approver's call): the task's trace goes on,
	// and the approver's span links to it.
	otherCtx, other := tr.Start(context.Background(), "ApproveToolCall", trace.SpanKindServer)
	in := telemetry.InTrace(otherCtx, tp)
	_, child := tr.Start(in, "state.task.decide", trace.SpanKindServer)
	child.End()
	other.End()
	task.End()
	spans := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range rec.Ended() {
		spans[s.Name()] = s
	}
	if got := spans["state.task.decide"]; got.Parent().SpanID() != task.SpanContext().SpanID() || got.SpanContext().TraceID() != task.SpanContext().TraceID() {
		t.Errorf("the span after InTrace has parent %v, want the task's span %v", got.Parent(), task.SpanContext())
	}
	if links := spans["ApproveToolCall"].Links(); len(links) != 1 || links[0].SpanContext.SpanID() != task.SpanContext().SpanID() {
		t.Errorf("the other trace's span links to %v, want the task's span", links)
	}
	if telemetry.InTrace(otherCtx, "") != otherCtx {
		t.Error("InTrace of no traceparent changed the context")
	}
}

// Lines logged in a trace carry its trace_id and span_id; a task's logger
// carries task_id and trace_id once, however it logs.
func TestLogsCarryTheTrace(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	un := telemetry.Install(rec)
	defer un()
	var buf bytes.Buffer
	log := slog.New(telemetry.LogHandler(slog.NewTextHandler(&buf, nil)))
	ctx, span := telemetry.NewTracer("executor").Start(context.Background(), "invoke_agent", trace.SpanKindInternal)
	defer span.End()
	tid, sid := span.SpanContext().TraceID().String(), span.SpanContext().SpanID().String()

	log.InfoContext(ctx, "in a trace")
	log.Info("no context")
	task := telemetry.TaskLogger(ctx, log, "t-1")
	task.Info("about the task")
	task.InfoContext(ctx, "about the task, with its context")
	telemetry.TaskLogger(context.Background(), log, "t-2").Info("untraced task")

	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	want := []struct{ has, hasNot []string }{
		{[]string{"trace_id=" + tid, "span_id=" + sid}, nil},
		{nil, []string{"trace_id"}},
		{[]string{"task_id=t-1", "trace_id=" + tid}, nil},
		{[]string{"task_id=t-1", "trace_id=" + tid}, nil},
		{[]string{"task_id=t-2"}, []string{"trace_id"}},
	}
	if len(lines) != len(want) {
		t.Fatalf("%d lines:\n%s", len(lines), buf.String())
	}
	for i, w := range want {
		for _, h := range w.has {
			if !strings.Contains(lines[i], h) {
				t.Errorf("line %q lacks %s", lines[i], h)
			}
		}
		for _, h := range w.hasNot {
			if strings.Contains(lines[i], h) {
				t.Errorf("line %q has %s", lines[i], h)
			}
		}
		if n := strings.Count(lines[i], "trace_id="); n > 1 {
			t.Errorf("line %q has trace_id %d times", lines[i], n)
		}
	}
}
