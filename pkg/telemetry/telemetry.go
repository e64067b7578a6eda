// Package telemetry sets up OpenTelemetry for an agentmesh process: the W3C
// trace-context propagator always (so trace context travels gRPC metadata →
// NATS headers → executor → child), and an OTLP trace exporter when
// OTEL_EXPORTER_OTLP_ENDPOINT is set.
package telemetry

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/agentmesh/agentmesh/pkg/bus"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
)

// Setup installs the propagator and, when an OTLP endpoint is configured,
// a tracer provider. The returned function flushes and stops it (bounded).
func Setup(ctx context.Context, service string) (shutdown func(), err error) {
	otel.SetTextMapPropagator(bus.Propagator())
	if os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" {
		return func() {}, nil
	}
	exp, err := otlptracegrpc.New(ctx)
	if err != nil {
		return nil, fmt.Errorf("telemetry: otlp exporter: %w", err)
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(semconv.ServiceName("agentmesh-"+service)))
	if err != nil {
		res = resource.Default()
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	otel.SetTracerProvider(tp)
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		_ = tp.Shutdown(ctx)
	}, nil
}
