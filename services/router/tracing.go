package router

import (
	"context"
	"log/slog"
	"net/http"
	"strings"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/telemetry"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// The router's part of a task's trace (docs/architecture.md, "Traces").
// A task's trace begins at the API call that submits it — or continues
// the caller's, when the call carries W3C trace context:
//
//   - gRPC: a server span per RPC (otelgrpc), named by the method
//     ("agentmesh.v1.TaskService/SubmitTask");
//   - the HTTP doors: a server span per HTTP request ("POST /v1", "POST
//     /mcp", "POST /a2a": the door), and under it a server span per API
//     call the door makes in process, named as the gRPC one (inproc.go);
//   - the bus requests a call makes (registry.match, state.task.create)
//     are client spans under it (pkg/bus);
//   - SubmitTask and SubmitTasks record the call's span as each task's
//     traceparent, which every later hop of the task continues.
//
// With tracing off there is no span and no otelgrpc: an interceptor only
// takes the caller's trace context from the metadata (when it sent one),
// so the task still records it and the logs carry it.

var tracer = telemetry.NewTracer("router")

// traceOptions are the gRPC servers' tracing: otelgrpc's server spans
// while tracing is on, else the caller's trace context alone (first of
// the interceptors).
func traceOptions() []grpc.ServerOption {
	if tp := telemetry.Provider("router"); tp != nil {
		return []grpc.ServerOption{grpc.StatsHandler(otelgrpc.NewServerHandler(otelgrpc.WithPropagators(telemetry.Propagator()), otelgrpc.WithTracerProvider(tp)))}
	}
	return []grpc.ServerOption{grpc.ChainUnaryInterceptor(callerTraceUnary), grpc.ChainStreamInterceptor(callerTraceStream)}
}

// callerTrace is ctx with the trace context the RPC's metadata carries,
// if any (nothing is copied or allocated when there is none).
func callerTrace(ctx context.Context) (context.Context, bool) {
	tp := metadata.ValueFromIncomingContext(ctx, "traceparent")
	if len(tp) == 0 {
		return ctx, false
	}
	md, _ := metadata.FromIncomingContext(ctx)
	return telemetry.Propagator().Extract(ctx, mdCarrier(md)), true
}

func callerTraceUnary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	ctx, _ = callerTrace(ctx)
	return handler(ctx, req)
}

func callerTraceStream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if ctx, ok := callerTrace(ss.Context()); ok {
		ss = &tracedStream{ServerStream: ss, ctx: ctx}
	}
	return handler(srv, ss)
}

// tracedStream is a stream with the caller's trace context.
type tracedStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *tracedStream) Context() context.Context { return s.ctx }

// taskLog is log for a line about task, which a call of another trace
// (an approver's) decided: it carries the task's id and trace, and the
// call's span links to the task's trace.
func taskLog(ctx context.Context, log *slog.Logger, task *agentmeshv1.Task) *slog.Logger {
	return telemetry.TaskLogger(telemetry.UnderTask(ctx, task.GetTraceparent()), log, task.GetId())
}

// startCall starts the server span of an API call a door makes in
// process (Invoke), as otelgrpc names and describes a gRPC one (its
// rpc.* attributes).
func startCall(ctx context.Context, method string) (context.Context, trace.Span) {
	name := strings.TrimPrefix(method, "/")
	ctx, span := tracer.Start(ctx, name, trace.SpanKindServer)
	if span.IsRecording() {
		span.SetAttributes(attribute.String("rpc.system.name", "grpc"), attribute.String("rpc.method", name))
	}
	return ctx, span
}

// endCall ends an in-process call's span with its gRPC status.
func endCall(span trace.Span, err error) {
	if span.IsRecording() {
		st := status.Convert(err)
		span.SetAttributes(attribute.String("rpc.response.status_code", st.Code().String()))
		if err != nil {
			span.SetStatus(otelcodes.Error, st.Message())
		}
	}
	span.End()
}

// traceHTTP wraps the HTTP listener's handler with a server span per
// request, named by its method and its door (the first path segment), and
// hands the doors the span's trace context in the request's headers (the
// REST door forwards them as the API call's metadata). Without tracing it
// is h itself.
func traceHTTP(h http.Handler) http.Handler {
	if !telemetry.Enabled() {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := telemetry.Propagator().Extract(r.Context(), propagation.HeaderCarrier(r.Header))
		ctx, span := tracer.Start(ctx, r.Method+" "+door(r.URL.Path), trace.SpanKindServer)
		defer span.End()
		span.SetAttributes(attribute.String("http.request.method", r.Method), attribute.String("url.path", r.URL.Path))
		r = r.WithContext(ctx)
		r.Header = r.Header.Clone()
		telemetry.Propagator().Inject(ctx, propagation.HeaderCarrier(r.Header))
		sw := &statusWriter{ResponseWriter: w, code: http.StatusOK}
		h.ServeHTTP(sw, r)
		span.SetAttributes(attribute.Int("http.response.status_code", sw.code))
		if sw.code >= 500 {
			span.SetStatus(otelcodes.Error, http.StatusText(sw.code))
		}
	})
}

// door is the first segment of path ("/v1", "/mcp", "/a2a"): the span
// name's route, of few values whatever the ids in the path.
func door(path string) string {
	rest := strings.TrimPrefix(path, "/")
	if i := strings.IndexByte(rest, '/'); i >= 0 {
		rest = rest[:i]
	}
	return "/" + rest
}

// statusWriter notes the status code of a response; Unwrap keeps
// http.ResponseController (the event streams' flushes) working.
type statusWriter struct {
	http.ResponseWriter
	code  int
	wrote bool
}

func (s *statusWriter) WriteHeader(code int) {
	if !s.wrote {
		s.code, s.wrote = code, true
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Write(b []byte) (int, error) {
	s.wrote = true
	return s.ResponseWriter.Write(b)
}

func (s *statusWriter) Flush() {
	s.wrote = true
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }
