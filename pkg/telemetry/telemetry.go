// Package telemetry is agentmesh's OpenTelemetry: the W3C trace-context
// propagator (always installed, so trace context travels gRPC metadata →
// NATS headers → executor → child whether or not spans are exported), the
// tracer provider and its OTLP exporter as the standard OTEL_* variables
// configure them (Setup), the span helpers every service starts its spans
// with (Tracer, tracer.go), the trace context kept on a task's record
// (Traceparent, WithTraceparent) and the log handler that puts the trace
// into every log line (log.go).
//
// With no export configured there is no exporter and no tracer provider:
// Tracer.Start returns its context and a no-op span, allocating nothing,
// and every span site costs one atomic load.
//
// One process may hold several services (agentmesh dev holds all five):
// each gets a tracer provider of its own, all sharing one exporter, so a
// collector sees each span under its service's name ("agentmesh-state",
// "agentmesh-executor", …) as it would from separate processes.
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"
)

// The standard variables Setup reads (the exporters themselves read the
// rest of OTEL_EXPORTER_OTLP_*: headers, insecure, timeout, compression,
// certificates; the SDK reads OTEL_TRACES_SAMPLER* and OTEL_BSP_*).
const (
	EnvEndpoint        = "OTEL_EXPORTER_OTLP_ENDPOINT"
	EnvTracesEndpoint  = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
	EnvProtocol        = "OTEL_EXPORTER_OTLP_PROTOCOL"
	EnvTracesProtocol  = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
	EnvTracesExporter  = "OTEL_TRACES_EXPORTER"
	EnvSDKDisabled     = "OTEL_SDK_DISABLED"
	EnvServiceName     = "OTEL_SERVICE_NAME"
	EnvResourceAttribs = "OTEL_RESOURCE_ATTRIBUTES"
)

// The OTLP protocols.
const (
	ProtocolGRPC = "grpc"
	ProtocolHTTP = "http/protobuf"
)

// ErrConfig is a bad value of one of the OTEL_* variables; the error
// names the variable.
var ErrConfig = errors.New("telemetry: bad configuration")

var propagator propagation.TextMapPropagator = propagation.NewCompositeTextMapPropagator(
	propagation.TraceContext{}, propagation.Baggage{})

// Propagator is the propagator agentmesh uses everywhere (W3C trace
// context and baggage); Setup also installs it globally.
func Propagator() propagation.TextMapPropagator { return propagator }

// Setup installs the propagator and, when the OTEL_* variables ask for an
// export, a tracer provider per service exporting over OTLP (grpc or
// http/protobuf). process names the command ("dev", "state", …, for the
// error); its services' spans are named "agentmesh-<service>" unless
// OTEL_SERVICE_NAME (or service.name in OTEL_RESOURCE_ATTRIBUTES) names
// them. The returned
// function flushes what is buffered and stops the export (bounded).
func Setup(ctx context.Context, process string) (shutdown func(), err error) {
	otel.SetTextMapPropagator(propagator)
	exp, err := exporterFromEnv(ctx, os.Getenv)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", process, err)
	}
	if exp == nil {
		return func() {}, nil
	}
	uninstall, err := install(ctx, sdktrace.NewBatchSpanProcessor(exp))
	if err != nil {
		_ = exp.Shutdown(ctx)
		return nil, err
	}
	return uninstall, nil
}

// exporterFromEnv is the span exporter the variables configure; nil when
// they configure none: no endpoint set, OTEL_TRACES_EXPORTER=none or
// OTEL_SDK_DISABLED=true. OTEL_TRACES_EXPORTER=otlp without an endpoint
// exports to the protocol's default (localhost:4317 or :4318).
func exporterFromEnv(ctx context.Context, get func(string) string) (sdktrace.SpanExporter, error) {
	if strings.EqualFold(strings.TrimSpace(get(EnvSDKDisabled)), "true") {
		return nil, nil
	}
	explicit := false
	switch v := strings.TrimSpace(get(EnvTracesExporter)); v {
	case "":
	case "otlp":
		explicit = true
	case "none":
		return nil, nil
	default:
		return nil, fmt.Errorf("%w: %s: %q is not supported (otlp or none)", ErrConfig, EnvTracesExporter, v)
	}
	if !explicit && strings.TrimSpace(get(EnvEndpoint)) == "" && strings.TrimSpace(get(EnvTracesEndpoint)) == "" {
		return nil, nil
	}
	proto, name := protocol(get)
	switch proto {
	case ProtocolGRPC:
		return otlptracegrpc.New(ctx)
	case ProtocolHTTP:
		return otlptracehttp.New(ctx)
	}
	return nil, fmt.Errorf("%w: %s: %q is not supported (grpc or http/protobuf)", ErrConfig, name, proto)
}

// protocol is the OTLP protocol of traces and the variable that chose it:
// OTEL_EXPORTER_OTLP_TRACES_PROTOCOL, else OTEL_EXPORTER_OTLP_PROTOCOL,
// else http/protobuf (the specification's default).
func protocol(get func(string) string) (proto, variable string) {
	for _, name := range []string{EnvTracesProtocol, EnvProtocol} {
		if v := strings.TrimSpace(get(name)); v != "" {
			return v, name
		}
	}
	return ProtocolHTTP, EnvProtocol
}

// Install makes proc receive the spans of every service from now on (a
// tracer provider per service, as Setup makes for its exporter) and
// returns the function that stops it: tests install a recorder or an
// exporter to their own receiver. One installation at a time.
func Install(proc sdktrace.SpanProcessor) (uninstall func()) {
	un, err := install(context.Background(), proc)
	if err != nil {
		panic(err) // the resource of no variables always builds
	}
	return un
}

// shutdownTimeout bounds the flush at stop.
const shutdownTimeout = 3 * time.Second

func install(ctx context.Context, proc sdktrace.SpanProcessor) (func(), error) {
	base, err := resource.New(ctx, resource.WithTelemetrySDK(), resource.WithHost(), resource.WithFromEnv())
	if err != nil && base == nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrConfig, EnvResourceAttribs, err)
	}
	in := &installation{proc: proc, base: base, providers: map[string]*sdktrace.TracerProvider{}}
	installed.Store(in)
	return func() {
		if installed.CompareAndSwap(in, nil) {
			ctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
			defer cancel()
			_ = proc.ForceFlush(ctx)
			_ = proc.Shutdown(ctx)
		}
	}, nil
}

// installed is the tracer providers' installation; nil: spans are off.
var installed atomic.Pointer[installation]

// Enabled reports whether spans are recorded and exported.
func Enabled() bool { return installed.Load() != nil }

// Flush exports the spans ended so far (tests, before they look).
func Flush(ctx context.Context) error {
	if in := installed.Load(); in != nil {
		return in.proc.ForceFlush(ctx)
	}
	return nil
}

// installation is one span processor and the tracer providers of the
// services that share it.
type installation struct {
	proc sdktrace.SpanProcessor
	base *resource.Resource

	mu        sync.Mutex
	providers map[string]*sdktrace.TracerProvider
}

// provider is service's tracer provider: its resource names it, unless
// the variables name the service.
func (in *installation) provider(service string) *sdktrace.TracerProvider {
	in.mu.Lock()
	defer in.mu.Unlock()
	if tp := in.providers[service]; tp != nil {
		return tp
	}
	res := in.base
	if _, named := in.base.Set().Value(semconv.ServiceNameKey); !named {
		if r, err := resource.Merge(in.base, resource.NewSchemaless(semconv.ServiceName(service))); err == nil {
			res = r
		}
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(in.proc), sdktrace.WithResource(res))
	in.providers[service] = tp
	return tp
}

// Provider is service's tracer provider while spans are on (for
// instrumentation libraries: otelgrpc), nil while they are off.
func Provider(service string) trace.TracerProvider {
	in := installed.Load()
	if in == nil {
		return nil
	}
	return in.provider(ServiceName(service))
}

// ServiceName is the service.name of spans of service: "agentmesh-<name>"
// for a bare name ("state"), or a NATS connection's name ("agentmesh-state",
// or a test's "TestX/state").
func ServiceName(service string) string {
	if i := strings.LastIndexByte(service, '/'); i >= 0 {
		service = service[i+1:]
	}
	if !strings.HasPrefix(service, "agentmesh-") {
		service = "agentmesh-" + service
	}
	return service
}
