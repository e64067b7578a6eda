package scheduler

import (
	"context"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/telemetry"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// The scheduler's part of a task's trace (docs/architecture.md, "Traces").
// The leader's model keeps, with each queued task, the trace it belongs
// to — from the NATS headers of its events (state publishes every event
// of a task in the task's trace) or from its record (task.traceparent)
// after a rebuild. Dispatching it records two spans in that trace:
//
//   - "queue.wait", from when the task was last queued to the dispatch
//     (a span, not an event: its length is the wait);
//   - "dispatch", the move queued → assigned (state.task.dispatch under
//     it) and the work message's publish, whose headers carry the
//     dispatch span's context: the executor's attempt is its child.
//
// Work published again (a lost reply, a new leader, reconcile) carries
// the task's recorded trace (workMsg).

var tracer = telemetry.NewTracer("scheduler")

// eventTrace is the trace an event of the events stream was published in
// (none when its headers carry no trace context: nothing is allocated).
func eventTrace(m jetstream.Msg) trace.SpanContext {
	return trace.SpanContextFromContext(bus.Extract(context.Background(), nats.Header(m.Headers())))
}

// taskTrace is the trace a task's record keeps.
func taskTrace(t *agentmeshv1.Task) trace.SpanContext {
	return telemetry.SpanContextOf(t.GetTraceparent())
}

// traceDispatch records the queue wait of the job's task and starts its
// dispatch span, both in the task's trace. While tracing is off the work
// still carries the trace context the task came with, if any.
func traceDispatch(ctx context.Context, j job) (context.Context, trace.Span) {
	if j.trace.IsValid() {
		ctx = trace.ContextWithRemoteSpanContext(ctx, j.trace)
	}
	if !telemetry.Enabled() {
		return ctx, trace.SpanFromContext(context.Background())
	}
	task := attribute.String("agentmesh.task.id", j.task)
	if !j.queued.IsZero() {
		_, wait := tracer.StartSpan(ctx, "queue.wait", telemetry.Span{Kind: trace.SpanKindInternal, At: j.queued})
		wait.SetAttributes(task)
		wait.End()
	}
	ctx, span := tracer.Start(ctx, "dispatch", trace.SpanKindProducer)
	span.SetAttributes(task)
	return ctx, span
}

// endSpan ends span with err as its status.
func endSpan(span trace.Span, err error) {
	if err != nil && span.IsRecording() {
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}
