package metrics

import "github.com/prometheus/client_golang/prometheus"

// Model calls (the executor's services/executor/llm, the registry's task
// analysis):
//
//	model_calls_total{provider,result}         calls made, by wire format and
//	                                           result: ok, transient, rejected,
//	                                           rate_limited
//	model_rate_limit_waits_total{scope,how}    calls that waited for a rate
//	                                           limit's budget: in_place (the
//	                                           call slept) or requeued (the
//	                                           task went back to the queue)
//	model_rate_limit_wait_seconds{how}         how long they waited
//	model_limiter_decision_seconds             one slot decision of the
//	                                           cluster-wide limiter
//	model_limiter_errors_total                 decisions the limiter could
//	                                           not make (the call went on
//	                                           without it)
//	model_fallbacks_total{from}                calls answered by a fallback
//	model_provider_429_total{provider}         429s the providers answered
//	model_quirks_total{quirk}                  quirks of servers handled
//	task_analysis_failures_total{reason}       task analyses whose model call
//	                                           failed (the fallback chose)

var (
	ModelCalls = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "agentmesh_model_calls_total", Help: "Model calls made, by provider (wire format) and result: ok, transient, rejected, rate_limited.",
	}, []string{"provider", "result"})
	ModelRateLimitWaits = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "agentmesh_model_rate_limit_waits_total",
		Help: "Model calls that waited for a rate limit's budget, by the kind of scope that was spent (key, org, agent, provider) and how: in_place (the call slept) or requeued (the task went back to the queue, not dispatched before its slot).",
	}, []string{"scope", "how"})
	ModelRateLimitWait = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "agentmesh_model_rate_limit_wait_seconds", Help: "How long model calls waited for a rate limit's budget, by how (in_place, requeued).",
		Buckets: durations,
	}, []string{"how"})
	ModelLimiterDecision = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "agentmesh_model_limiter_decision_seconds", Help: "Time of one slot decision of the cluster-wide model rate limiter.",
		Buckets: durations,
	})
	ModelLimiterErrors = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "agentmesh_model_limiter_errors_total", Help: "Slot decisions the model rate limiter could not make (its bucket unreachable): the call went on without it.",
	})
	ModelFallbacks = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "agentmesh_model_fallbacks_total", Help: "Model calls answered by a fallback model, by the model that did not answer.",
	}, []string{"from"})
	ModelProvider429 = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "agentmesh_model_provider_429_total", Help: "429 (rate limited) answers of model providers, by provider.",
	}, []string{"provider"})
	ModelQuirks = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "agentmesh_model_quirks_total", Help: "Quirks of model servers handled: refused_stream_options, refused_parallel_tool_calls, tool_calls_in_text, json_schema_unsupported.",
	}, []string{"quirk"})
	TaskAnalysisFailures = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "agentmesh_task_analysis_failures_total", Help: "Task analyses whose model call failed or answered unusably (the fallback chose), by reason: call, answer.",
	}, []string{"reason"})
)

func init() {
	Registry.MustRegister(ModelCalls, ModelRateLimitWaits, ModelRateLimitWait, ModelLimiterDecision, ModelLimiterErrors,
		ModelFallbacks, ModelProvider429, ModelQuirks, TaskAnalysisFailures)
}
