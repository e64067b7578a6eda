package telemetry

import (
	"context"
	"log/slog"

	"go.opentelemetry.io/otel/trace"
)

// Log keys of the trace and the task in every log line about a task.
const (
	LogTaskID  = "task_id"
	LogTraceID = "trace_id"
	LogSpanID  = "span_id"
)

// LogHandler wraps h so that a line logged with a context holding a span
// (log.InfoContext(ctx, …)) carries trace_id and span_id — unless the
// logger already carries a trace_id (TaskLogger's). A line logged without
// a context is unchanged: use a TaskLogger for those about a task.
func LogHandler(h slog.Handler) slog.Handler {
	if _, ok := h.(logHandler); ok {
		return h
	}
	return logHandler{h: h}
}

type logHandler struct {
	h slog.Handler
	// traced: the logger's own attributes hold a trace_id.
	traced bool
}

func (l logHandler) Enabled(ctx context.Context, level slog.Level) bool {
	return l.h.Enabled(ctx, level)
}

func (l logHandler) Handle(ctx context.Context, r slog.Record) error {
	if !l.traced {
		if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
			r = r.Clone()
			r.AddAttrs(slog.String(LogTraceID, sc.TraceID().String()), slog.String(LogSpanID, sc.SpanID().String()))
		}
	}
	return l.h.Handle(ctx, r)
}

func (l logHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	traced := l.traced
	for _, a := range attrs {
		if a.Key == LogTraceID {
			traced = true
		}
	}
	return logHandler{h: l.h.WithAttrs(attrs), traced: traced}
}

func (l logHandler) WithGroup(name string) slog.Handler {
	return logHandler{h: l.h.WithGroup(name), traced: l.traced}
}

// TaskLogger is log for the lines about task id: each carries task_id and,
// when ctx is in a trace (the task's), its trace_id.
func TaskLogger(ctx context.Context, log *slog.Logger, id string) *slog.Logger {
	if tid := TraceID(ctx); tid != "" {
		return log.With(LogTaskID, id, LogTraceID, tid)
	}
	return log.With(LogTaskID, id)
}
