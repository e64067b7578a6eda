package bus

import (
	"context"
	"strings"

	"github.com/agentmesh/agentmesh/pkg/telemetry"
	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Trace context on the bus. Every message agentmesh sends carries the W3C
// trace context of the span it was sent under in its NATS headers
// (traceparent, tracestate, baggage): requests and their replies, work
// messages, events. A request is a client span of the sender's service
// (named by its connection: agentmesh-router, …) and a server span of the
// service that answers it, both named by the operation ("state.task.create",
// "registry.match"); the reply carries the server span's context back.

// HeaderCarrier adapts NATS headers to OpenTelemetry propagation, so W3C
// trace context travels in message headers.
type HeaderCarrier nats.Header

func (c HeaderCarrier) Get(key string) string { return nats.Header(c).Get(key) }
func (c HeaderCarrier) Set(key, value string) { nats.Header(c).Set(key, value) }
func (c HeaderCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}

// Propagator is the propagator agentmesh uses everywhere (W3C trace
// context and baggage): telemetry.Propagator.
func Propagator() propagation.TextMapPropagator { return telemetry.Propagator() }

// Inject writes ctx's trace context into h.
func Inject(ctx context.Context, h nats.Header) {
	telemetry.Propagator().Inject(ctx, HeaderCarrier(h))
}

// Extract returns ctx carrying the trace context found in h.
func Extract(ctx context.Context, h nats.Header) context.Context {
	if len(h) == 0 {
		return ctx
	}
	return telemetry.Propagator().Extract(ctx, HeaderCarrier(h))
}

// Attributes of the bus's spans.
const (
	attrSystem      = attribute.Key("messaging.system")
	attrDestination = attribute.Key("messaging.destination.name")
	attrErrorType   = attribute.Key("error.type")
)

// startRequest starts the client span of a request on nc to subject.
func startRequest(ctx context.Context, nc *nats.Conn, subject string) (context.Context, trace.Span) {
	if !telemetry.Enabled() {
		return ctx, trace.SpanFromContext(context.Background())
	}
	ctx, span := telemetry.TracerOf(nc.Opts.Name).Start(ctx, opOf(subject), trace.SpanKindClient)
	if span.IsRecording() {
		span.SetAttributes(attrSystem.String("nats"), attrDestination.String(subject))
	}
	return ctx, span
}

// startServe starts the server span of a request received on subject.
func startServe(ctx context.Context, subject string) (context.Context, trace.Span) {
	if !telemetry.Enabled() {
		return ctx, trace.SpanFromContext(context.Background())
	}
	ctx, span := telemetry.TracerOf(serviceOf(subject)).Start(ctx, opOf(subject), trace.SpanKindServer)
	if span.IsRecording() {
		span.SetAttributes(attrSystem.String("nats"), attrDestination.String(subject))
	}
	return ctx, span
}

// serviceOf is the service that serves a request subject ("state" for
// <p>.state.task.create).
func serviceOf(subject string) string {
	op := opOf(subject)
	if i := strings.IndexByte(op, '.'); i > 0 {
		return op[:i]
	}
	return "bus"
}

// endSpan ends span with err's code as its status.
func endSpan(span trace.Span, err error) {
	if err != nil && span.IsRecording() {
		span.SetStatus(codes.Error, err.Error())
		span.SetAttributes(attrErrorType.String(CodeOf(err)))
	}
	span.End()
}

// traceHeaders are the headers of a reply sent under ctx's span (nil
// when ctx has none: the reply goes without headers, as before).
func traceHeaders(ctx context.Context) nats.Header {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return nil
	}
	h := nats.Header{}
	Inject(ctx, h)
	return h
}
