package executor

import (
	"context"
	"net/url"
	"strings"

	busv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/bus/v1"
	childv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/child/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/telemetry"
	"github.com/agentmesh/agentmesh/services/executor/llm"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"
)

// The executor's part of a task's trace (docs/architecture.md, "Traces").
// The work message's headers carry the dispatch span of the task's trace;
// the attempt continues it, on whichever executor and however late:
//
//	invoke_agent <agent>      the attempt (handle → finish), its outcome
//	├─ state.task.start, state.task.step, …   (pkg/bus client spans)
//	├─ spawn                  a child for the attempt: reused, warm or new
//	├─ chat <model>           each model call (GenAI conventions: model,
//	│                         tokens, finish reasons), at the attempt's call
//	│                         of llm.Client — not inside the providers
//	└─ execute_tool <tool>    each tool call, from the gate's decision to
//	                          its result: name, decision, outcome, sizes —
//	                          never its arguments or output
//
// The child gets the attempt's traceparent in its Start, and the tool
// call's in the StepAck that lets it run a tool, which it hands to the
// programs it runs (TRACEPARENT). A tool the executor runs for the child
// (web_fetch, sql_query, MCP over HTTP, delegation) runs under its tool
// span, so its requests are that span's children.

var tracer = telemetry.NewTracer("executor")

// GenAI attributes not in semconv/v1.40.0's helpers.
const attrCostUSD = attribute.Key("agentmesh.cost_usd")

// startAttempt starts the span of one delivery of the work item.
func startAttempt(ctx context.Context, item *busv1.WorkItem, node string) (context.Context, trace.Span) {
	agent := item.GetTask().GetAgent()
	ctx, span := tracer.Start(ctx, "invoke_agent "+agent, trace.SpanKindConsumer)
	if span.IsRecording() {
		span.SetAttributes(
			semconv.GenAIOperationNameInvokeAgent,
			semconv.GenAIAgentName(agent),
			semconv.GenAIConversationID(item.GetTask().GetId()),
			attribute.String("agentmesh.task.id", item.GetTask().GetId()),
			attribute.Int("agentmesh.task.attempt", int(item.GetAttempt())),
			attribute.String("agentmesh.node", node),
		)
	}
	return ctx, span
}

// noteOutcome records on ctx's span (the attempt's) how the attempt
// ended.
func noteOutcome(ctx context.Context, out outcome) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	name := [...]string{outCompleted: "completed", outFailed: "failed", outGone: "gone", outRequeue: "requeued"}[out.kind]
	span.SetAttributes(attribute.String("agentmesh.attempt.outcome", name))
	if out.kind == outFailed {
		span.SetAttributes(semconv.ErrorTypeKey.String(out.failKind.String()))
		span.SetStatus(codes.Error, out.reason)
	}
}

// startModelCall starts the span of one model call (GenAI inference).
func (a *attempt) startModelCall(ctx context.Context, call llm.Request) (context.Context, trace.Span) {
	if !telemetry.Enabled() {
		return ctx, trace.SpanFromContext(context.Background())
	}
	model, base := call.Settings.GetModel(), call.Settings.GetBaseUrl()
	if model == "" {
		model = a.s.cfg.Model.Model
	}
	if base == "" {
		base = a.s.cfg.Model.BaseURL
	}
	ctx, span := tracer.Start(ctx, "chat "+model, trace.SpanKindClient)
	span.SetAttributes(
		semconv.GenAIOperationNameChat,
		// The wire format's provider: every endpoint speaks OpenAI's
		// Chat Completions today (llm's one Provider).
		semconv.GenAIProviderNameOpenAI,
		semconv.GenAIRequestModel(model),
		semconv.GenAIConversationID(a.task.GetId()),
		attribute.Int("agentmesh.task.attempt", int(a.num)),
	)
	if u, err := url.Parse(base); err == nil && u.Hostname() != "" {
		span.SetAttributes(semconv.ServerAddress(u.Hostname()))
	}
	if n := call.Settings.GetMaxTokens(); n > 0 {
		span.SetAttributes(semconv.GenAIRequestMaxTokens(int(n)))
	}
	if call.Settings != nil && call.Settings.Temperature != nil {
		span.SetAttributes(semconv.GenAIRequestTemperature(float64(call.Settings.GetTemperature())))
	}
	return ctx, span
}

// endModelCall ends a model call's span with what the answer says.
func endModelCall(span trace.Span, resp *childv1.ModelResponse, err error) {
	if span.IsRecording() {
		if err != nil {
			span.SetAttributes(semconv.ErrorTypeKey.String("model_error"))
			span.SetStatus(codes.Error, err.Error())
		} else {
			span.SetAttributes(
				semconv.GenAIResponseModel(resp.GetModel()),
				semconv.GenAIUsageInputTokens(int(resp.GetUsage().GetPromptTokens())),
				semconv.GenAIUsageOutputTokens(int(resp.GetUsage().GetCompletionTokens())),
				attrCostUSD.Float64(resp.GetUsage().GetCostUsd()),
			)
			if f := resp.GetFinishReason(); f != "" {
				span.SetAttributes(semconv.GenAIResponseFinishReasons(f))
			}
		}
	}
	span.End()
}

// toolSpans are the spans of the tool calls of an attempt, by tool call
// id, from the gate's decision to the result.
type toolSpans struct {
	open map[string]toolSpan
}

type toolSpan struct {
	ctx  context.Context
	span trace.Span
}

// decided starts the span of the tool call step judged as v; one that
// does not run ends at once. A call the child runs gets the span's
// traceparent in its ack.
func (t *toolSpans) decided(ctx context.Context, step *agentmeshv1.Step, v verdict, ack *childv1.StepAck) {
	if !telemetry.Enabled() {
		return
	}
	ctx, span := tracer.Start(ctx, "execute_tool "+step.GetToolName(), trace.SpanKindInternal)
	decision := decisionName(v.decision)
	runsIn := "child"
	if v.inExecutor {
		runsIn = "executor"
	}
	span.SetAttributes(
		semconv.GenAIOperationNameExecuteTool,
		semconv.GenAIToolName(step.GetToolName()),
		semconv.GenAIToolCallID(step.GetToolCallId()),
		semconv.GenAIToolType("function"),
		attribute.String("agentmesh.tool.decision", decision),
		attribute.String("agentmesh.tool.runs_in", runsIn),
		attribute.String("agentmesh.tool.risk", step.GetRisk()),
	)
	switch v.decision {
	case agentmeshv1.ToolDecision_TOOL_DECISION_ALLOWED, agentmeshv1.ToolDecision_TOOL_DECISION_APPROVED:
	default: // denied, rejected, waiting for a person: nothing runs
		span.SetAttributes(attribute.String("agentmesh.tool.outcome", decision))
		span.End()
		return
	}
	if !v.inExecutor {
		ack.Traceparent = telemetry.Traceparent(ctx)
	}
	if t.open == nil {
		t.open = map[string]toolSpan{}
	}
	if old, ok := t.open[step.GetToolCallId()]; ok {
		old.span.End()
	}
	t.open[step.GetToolCallId()] = toolSpan{ctx: ctx, span: span}
}

// step notes a step the child reported, judged: a tool call's decision
// starts its span, a tool result ends it.
func (t *toolSpans) step(ctx context.Context, rp *report) {
	switch rp.step.GetKind() {
	case agentmeshv1.StepKind_STEP_KIND_TOOL_CALL:
		t.decided(ctx, rp.step, rp.v, rp.ack)
	case agentmeshv1.StepKind_STEP_KIND_TOOL_RESULT:
		t.result(rp.step)
	}
}

// context is ctx under the span of tool call id (ctx when there is none):
// a tool the executor runs for the child runs in it.
func (t *toolSpans) context(ctx context.Context, id string) context.Context {
	if ts, ok := t.open[id]; ok {
		return trace.ContextWithSpan(ctx, ts.span)
	}
	return ctx
}

// result ends the span of the tool call a TOOL_RESULT step reports.
func (t *toolSpans) result(step *agentmeshv1.Step) {
	ts, ok := t.open[step.GetToolCallId()]
	if !ok {
		return
	}
	delete(t.open, step.GetToolCallId())
	outcome := "ok"
	if step.GetIsError() {
		outcome = "error"
		ts.span.SetAttributes(semconv.ErrorTypeKey.String("tool_error"))
		ts.span.SetStatus(codes.Error, "the tool reported an error")
	}
	ts.span.SetAttributes(
		attribute.String("agentmesh.tool.outcome", outcome),
		attribute.Int64("agentmesh.tool.result_bytes", step.GetResultBytes()),
		attribute.Bool("agentmesh.tool.truncated", step.GetTruncated()),
	)
	ts.span.End()
}

// endAll ends the spans of calls that got no result (the attempt ended).
func (t *toolSpans) endAll() {
	for id, ts := range t.open {
		ts.span.SetAttributes(attribute.String("agentmesh.tool.outcome", "unfinished"))
		ts.span.End()
		delete(t.open, id)
	}
}

// decisionName is a decision as the spans say it ("allowed", …).
func decisionName(d agentmeshv1.ToolDecision) string {
	return strings.ToLower(strings.TrimPrefix(d.String(), "TOOL_DECISION_"))
}

// startSpawn starts the span of giving a task its child.
func startSpawn(ctx context.Context) (context.Context, trace.Span) {
	return tracer.Start(ctx, "spawn", trace.SpanKindInternal)
}

// tracedReadyChild is readyChild in a spawn span, when it has a child.
func (s *Service) tracedReadyChild(ctx context.Context, task *agentmeshv1.Task) *process {
	ctx, span := startSpawn(ctx)
	p := s.readyChild(ctx, task)
	if p == nil {
		return nil // no span: the child comes later, from startChildFor
	}
	endSpawn(span, p, !p.warm, nil)
	return p
}

// endSpawn ends the spawn's span with where the child came from.
func endSpawn(span trace.Span, p *process, reused bool, err error) {
	if span.IsRecording() {
		from := "spawned"
		switch {
		case err != nil:
			span.SetStatus(codes.Error, err.Error())
			from = "none"
		case reused:
			from = "reused"
		case p.warm:
			from = "warm"
		}
		span.SetAttributes(attribute.String("agentmesh.child.from", from))
	}
	span.End()
}
