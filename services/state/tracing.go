package state

import (
	"context"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/telemetry"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// The state service's part of a task's trace (docs/architecture.md,
// "Traces"). Its requests are server spans (pkg/bus); here:
//
//   - the trace a task keeps: a task is created with the traceparent of
//     the call that submitted it (the router sets it; state takes its own
//     request's when none is set), and a sub-task with the root span of a
//     trace of its own, linked to the span of the spawn in its parent's
//     trace (subtaskTrace);
//   - every event of a task carries, in its NATS headers, the task's
//     traceparent (its root), whoever caused it (the executor's attempt,
//     an approver's call, the scheduler's resolver): the scheduler's queue
//     wait and dispatch continue it as children of the task's root, on
//     every attempt (publishTaskEvents);
//   - a person's decision on an approval (or its expiry) records the wait,
//     from the request to the decision, as a span of the task's trace
//     (traceApproval).

var tracer = telemetry.NewTracer("state")

// publishTaskEvents publishes events of task t under t's recorded trace
// context (its root span).
func (s *Service) publishTaskEvents(ctx context.Context, t *agentmeshv1.Task, events ...*agentmeshv1.TaskEvent) {
	s.publishEvents(telemetry.UnderTask(ctx, t.GetTraceparent()), events...)
}

// subtaskTrace starts the root span of the trace of a sub-task about to
// be spawned, linked to ctx's span (the spawn's, in the parent's trace),
// and stamps it on child; the span is ended by the caller once the
// sub-task is created (an idempotent replay's span is never ended, so
// never exported). ctx is returned in the sub-task's trace.
func subtaskTrace(ctx context.Context, parent, child *agentmeshv1.Task) (context.Context, trace.Span) {
	sctx, span := tracer.StartSpan(ctx, "subtask", telemetry.Span{
		Kind: trace.SpanKindInternal, NewRoot: true, Link: trace.SpanContextFromContext(ctx),
	})
	if span.IsRecording() {
		span.SetAttributes(
			attribute.String("agentmesh.task.parent_id", parent.GetId()),
			attribute.String("agentmesh.task.root_id", rootOf(parent)),
			attribute.String("gen_ai.agent.name", child.GetAgent()),
		)
		child.Traceparent = telemetry.Traceparent(sctx)
	}
	return sctx, span
}

// traceApproval records, in task t's trace, the wait for the decision ev
// carries on an approval: from the request to the decision or expiry.
func traceApproval(ctx context.Context, t *agentmeshv1.Task, ev *agentmeshv1.TaskEvent) {
	a := ev.GetApproval()
	if a == nil || a.Status == agentmeshv1.ApprovalStatus_APPROVAL_STATUS_PENDING || a.CreatedAt == nil || !telemetry.Enabled() {
		return
	}
	ctx = telemetry.InTrace(ctx, t.GetTraceparent())
	_, span := tracer.StartSpan(ctx, "approval "+a.Tool, telemetry.Span{Kind: trace.SpanKindInternal, At: a.CreatedAt.AsTime()})
	span.SetAttributes(
		attribute.String("agentmesh.task.id", t.GetId()),
		attribute.String("agentmesh.approval.id", a.Id),
		attribute.String("gen_ai.tool.name", a.Tool),
		attribute.String("gen_ai.tool.call.id", a.ToolCallId),
		attribute.String("agentmesh.approval.risk", a.Risk),
		attribute.String("agentmesh.approval.status", approvalStatus(a.Status)),
		attribute.String("agentmesh.approval.decided_by", a.DecidedBy),
	)
	if a.DecidedAt != nil {
		span.End(trace.WithTimestamp(a.DecidedAt.AsTime()))
		return
	}
	span.End()
}

func approvalStatus(st agentmeshv1.ApprovalStatus) string {
	switch st {
	case agentmeshv1.ApprovalStatus_APPROVAL_STATUS_APPROVED:
		return "approved"
	case agentmeshv1.ApprovalStatus_APPROVAL_STATUS_REJECTED:
		return "rejected"
	case agentmeshv1.ApprovalStatus_APPROVAL_STATUS_EXPIRED:
		return "expired"
	}
	return "pending"
}
