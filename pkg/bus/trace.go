package bus

import (
	"context"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/propagation"
)

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

var propagator propagation.TextMapPropagator = propagation.NewCompositeTextMapPropagator(
	propagation.TraceContext{}, propagation.Baggage{})

// Propagator is the propagator agentmesh uses everywhere (W3C trace
// context and baggage). It is also installed globally by telemetry setup.
func Propagator() propagation.TextMapPropagator { return propagator }

// Inject writes ctx's trace context into h.
func Inject(ctx context.Context, h nats.Header) {
	propagator.Inject(ctx, HeaderCarrier(h))
}

// Extract returns ctx carrying the trace context found in h.
func Extract(ctx context.Context, h nats.Header) context.Context {
	if len(h) == 0 {
		return ctx
	}
	return propagator.Extract(ctx, HeaderCarrier(h))
}
