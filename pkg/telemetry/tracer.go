package telemetry

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Scope is the instrumentation scope of agentmesh's own spans.
const Scope = "github.com/agentmesh/agentmesh"

// Tracer starts the spans of one service. It is cheap to keep in a
// package variable: it binds to the installed tracer provider when spans
// are on, and costs one atomic load per span while they are off.
type Tracer struct {
	service string
	cur     atomic.Pointer[bound]
}

type bound struct {
	in *installation
	t  trace.Tracer
}

// NewTracer is the tracer of service ("state", or a NATS connection's
// name: see ServiceName).
func NewTracer(service string) *Tracer { return &Tracer{service: ServiceName(service)} }

var tracers sync.Map // service → *Tracer

// TracerOf is the shared tracer of service (the bus's spans, named by the
// connection that sends or serves them).
func TracerOf(service string) *Tracer {
	if t, ok := tracers.Load(service); ok {
		return t.(*Tracer)
	}
	t, _ := tracers.LoadOrStore(service, NewTracer(service))
	return t.(*Tracer)
}

// tracer is the installed provider's tracer of t's service; nil while
// spans are off.
func (t *Tracer) tracer() trace.Tracer {
	in := installed.Load()
	if in == nil {
		return nil
	}
	if b := t.cur.Load(); b != nil && b.in == in {
		return b.t
	}
	b := &bound{in: in, t: in.provider(t.service).Tracer(Scope)}
	t.cur.Store(b)
	return b.t
}

// noopSpan is what Start returns while spans are off.
var noopSpan = trace.SpanFromContext(context.Background())

// Start starts the span name of kind as a child of ctx's span. While
// spans are off it returns ctx itself and a no-op span, and allocates
// nothing: callers set attributes under span.IsRecording().
func (t *Tracer) Start(ctx context.Context, name string, kind trace.SpanKind) (context.Context, trace.Span) {
	tr := t.tracer()
	if tr == nil {
		return ctx, noopSpan
	}
	return tr.Start(ctx, name, trace.WithSpanKind(kind))
}

// Span is a span to start with more than a name and a kind (StartSpan).
type Span struct {
	Kind trace.SpanKind
	// At backdates the span's start (a queue wait, an approval's wait).
	At time.Time
	// NewRoot starts a new trace instead of a child of ctx's span.
	NewRoot bool
	// Link, when valid, is a span the new one links to (a sub-task's
	// trace to its parent's).
	Link trace.SpanContext
}

// StartSpan starts the span name as s says, as a child of ctx's span
// unless s.NewRoot. Nothing is allocated while spans are off.
func (t *Tracer) StartSpan(ctx context.Context, name string, s Span) (context.Context, trace.Span) {
	tr := t.tracer()
	if tr == nil {
		return ctx, noopSpan
	}
	opts := make([]trace.SpanStartOption, 0, 4)
	opts = append(opts, trace.WithSpanKind(s.Kind))
	if !s.At.IsZero() {
		opts = append(opts, trace.WithTimestamp(s.At))
	}
	if s.NewRoot {
		opts = append(opts, trace.WithNewRoot())
	}
	if s.Link.IsValid() {
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: s.Link}))
	}
	return tr.Start(ctx, name, opts...)
}

// Traceparent is the W3C traceparent of ctx's span ("" when ctx has
// none): what a task's record keeps of its trace.
func Traceparent(ctx context.Context) string {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return ""
	}
	return "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-" + sc.TraceFlags().String()
}

// SpanContextOf is the span a W3C traceparent names (invalid when tp is
// empty or malformed).
func SpanContextOf(tp string) trace.SpanContext {
	if tp == "" {
		return trace.SpanContext{}
	}
	ctx := propagation.TraceContext{}.Extract(context.Background(), traceparentCarrier(tp))
	return trace.SpanContextFromContext(ctx)
}

// traceparentCarrier is a carrier holding one traceparent.
type traceparentCarrier string

func (c traceparentCarrier) Get(key string) string {
	if key == "traceparent" {
		return string(c)
	}
	return ""
}
func (traceparentCarrier) Set(string, string) {}
func (traceparentCarrier) Keys() []string     { return []string{"traceparent"} }

// InTrace is ctx, continuing the trace that tp names: ctx itself when its
// span is already in that trace (or tp names none), else ctx with tp's
// span as its remote parent — so what follows is recorded in the task's
// trace whoever asked (an approver's API call, a scheduler's timer). The
// span in ctx, when it records and is of another trace, gets a link to
// tp's.
func InTrace(ctx context.Context, tp string) context.Context {
	if tp == "" {
		return ctx
	}
	cur := trace.SpanFromContext(ctx)
	want := SpanContextOf(tp)
	if !want.IsValid() || cur.SpanContext().TraceID() == want.TraceID() {
		return ctx
	}
	if cur.IsRecording() {
		cur.AddLink(trace.Link{SpanContext: want})
	}
	return trace.ContextWithRemoteSpanContext(ctx, want)
}

// UnderTask is ctx with the span tp names (a task's recorded root) as its
// remote parent, so what is sent under it — a task's events — names the
// task's trace and its root whoever caused it; the span in ctx, when it
// records and is of another trace (an approver's call), gets a link to
// tp's. ctx itself when tp names no span.
func UnderTask(ctx context.Context, tp string) context.Context {
	want := SpanContextOf(tp)
	if !want.IsValid() {
		return ctx
	}
	if cur := trace.SpanFromContext(ctx); cur.IsRecording() && cur.SpanContext().TraceID() != want.TraceID() {
		cur.AddLink(trace.Link{SpanContext: want})
	}
	return trace.ContextWithRemoteSpanContext(ctx, want)
}

// TraceID is the trace id of ctx's span ("" when ctx has none).
func TraceID(ctx context.Context) string {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.TraceID().IsValid() {
		return ""
	}
	return sc.TraceID().String()
}
