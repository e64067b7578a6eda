package executor

import (
	"fmt"
	"math"
	"strconv"
	"time"

	childv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/child/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/services/executor/llm"
)

// Budgets. A task's Budget (the submit request's merged over the agent's)
// bounds its model turns (max_steps), its tokens (max_tokens, total
// tokens), its cost (max_cost_usd, from the price table) and its wall time
// since it first started (max_wall_time, from Task.started_at, across
// attempts). The executor checks them before each model call (a budget
// already used up: no call) and after each model response (the response
// is still checkpointed, so what was paid for is counted, then the task
// stops). max_steps is also enforced by the child, whose max_steps is the
// smaller of the agent's and the budget's; when the budget's is the one
// that runs out the failure is reported as a budget. An attempt's
// wall-time limit is the smaller of Config.WallTime and what max_wall_time
// leaves. A budget that runs out fails the task with FailureKind BUDGET and
// a reason naming the budget and the figures:
//
//	budget exhausted: 10234 tokens used, max_tokens 10000

// modelRun is one attempt's model use: the agent's model settings with the
// resolved key, the task's budget and what the task has used so far,
// earlier attempts included.
type modelRun struct {
	call    llm.Request
	budget  *agentmeshv1.Budget
	started time.Time
	now     func() time.Time

	turns  int32
	tokens int64
	cost   float64
	// pending: a budget ran out with the last model response, or the
	// response is not one the task may go on with (cut at its token limit,
	// withheld by a content filter); the task stops, failing with
	// pendingKind, once that response's step is checkpointed.
	pending     string
	pendingKind agentmeshv1.FailureKind
	// modelErr: the last model call failed for good; modelKind is its
	// failure kind (MODEL, or MODEL_REJECTED when no retry can change it).
	modelErr  string
	modelKind agentmeshv1.FailureKind
	// thread: the conversation the task continues (conversation.go).
	thread []*childv1.Message
}

// newModelRun prepares the model use of one attempt of task, whose earlier
// steps are steps. It returns an outcome instead when the task cannot run:
// an unknown api_key_secret, or a budget already used up.
func (s *Service) newModelRun(task *agentmeshv1.Task, steps []*agentmeshv1.Step) (*modelRun, *outcome) {
	settings := task.GetAgentSpec().GetModel()
	r := &modelRun{
		call:   llm.Request{Settings: settings, Org: task.GetOrg(), Agent: task.GetAgent(), Task: task.GetId(), Attempt: task.GetAttempt()},
		budget: task.GetBudget(),
		now:    time.Now,
	}
	r.started = r.now()
	if ts := task.GetStartedAt(); ts != nil && ts.IsValid() {
		r.started = ts.AsTime()
	}
	if name := settings.GetApiKeySecret(); name != "" {
		key, err := s.model.Secret(task.GetOrg(), name)
		if err != nil {
			return nil, &outcome{kind: outFailed, reason: err.Error(), failKind: agentmeshv1.FailureKind_FAILURE_KIND_AGENT}
		}
		r.call.Key, r.call.HasKey = key, true
	}
	for _, st := range steps {
		if st.GetKind() == agentmeshv1.StepKind_STEP_KIND_MODEL_TURN {
			r.turns++
		}
	}
	if u := task.GetUsage(); u != nil {
		r.tokens, r.cost = totalTokens(u), u.GetCostUsd()
	}
	if why := r.check(false); why != "" {
		return nil, &outcome{kind: outFailed, reason: why, failKind: agentmeshv1.FailureKind_FAILURE_KIND_BUDGET}
	}
	return r, nil
}

func totalTokens(u *agentmeshv1.Usage) int64 {
	if t := u.GetTotalTokens(); t > 0 {
		return t
	}
	return u.GetPromptTokens() + u.GetCompletionTokens()
}

// maxSteps is the child's max_steps: the smaller of the agent's (or the
// executor's default) and the budget's.
func (r *modelRun) maxSteps(agent int32) int32 {
	if b := r.budget.GetMaxSteps(); b > 0 && b < agent {
		return b
	}
	return agent
}

// errBudgetWall ends an attempt when the task's max_wall_time runs out.
type errBudgetWall struct{ max time.Duration }

func (e errBudgetWall) Error() string {
	return fmt.Sprintf("budget exhausted: %s wall time used, max_wall_time %s", e.max, e.max)
}

// attemptLimit returns the wall-time limit of this attempt and the cause
// its end will carry: the executor's WallTime, or what max_wall_time
// leaves when that is less.
func (r *modelRun) attemptLimit(wall time.Duration) (time.Duration, error) {
	if mw := r.budget.GetMaxWallTime(); mw != nil && mw.AsDuration() > 0 {
		if left := mw.AsDuration() - r.now().Sub(r.started); left < wall {
			return max(left, 0), errBudgetWall{mw.AsDuration()}
		}
	}
	return wall, errWallTime{wall}
}

// check returns why a budget ran out, or "". Before a model call (after
// false) a budget that is used up exactly stops the task; after a response
// only one that was overrun does (a final answer landing exactly on the
// budget completes).
func (r *modelRun) check(after bool) string {
	b := r.budget
	if b == nil {
		return ""
	}
	over := func(used, limit float64) bool {
		if after {
			return used > limit
		}
		return used >= limit
	}
	if n := b.GetMaxSteps(); n > 0 && !after && r.turns >= n {
		return fmt.Sprintf("budget exhausted: %d steps used, max_steps %d", r.turns, n)
	}
	if n := b.GetMaxTokens(); n > 0 && over(float64(r.tokens), float64(n)) {
		return fmt.Sprintf("budget exhausted: %d tokens used, max_tokens %d", r.tokens, n)
	}
	if c := b.GetMaxCostUsd(); c > 0 && over(r.cost, c) {
		return fmt.Sprintf("budget exhausted: $%s spent, max_cost_usd %s", usd(r.cost), usd(c))
	}
	if mw := b.GetMaxWallTime(); mw != nil && mw.AsDuration() > 0 && !after {
		if used := r.now().Sub(r.started); used >= mw.AsDuration() {
			return fmt.Sprintf("budget exhausted: %s wall time used, max_wall_time %s", used.Round(time.Millisecond), mw.AsDuration())
		}
	}
	return ""
}

// usd formats dollars with up to 6 decimals.
func usd(v float64) string {
	return strconv.FormatFloat(math.Round(v*1e6)/1e6, 'f', -1, 64)
}

// stepDone is called for a step the child reports: a budget that ran out
// with the model response this step records stops the task once it is
// checkpointed (nil: it goes on).
func (r *modelRun) stepDone(step *agentmeshv1.Step) *serveResult {
	if r.pending == "" || step.GetKind() != agentmeshv1.StepKind_STEP_KIND_MODEL_TURN {
		return nil
	}
	kind := r.pendingKind
	if kind == agentmeshv1.FailureKind_FAILURE_KIND_UNSPECIFIED {
		kind = agentmeshv1.FailureKind_FAILURE_KIND_BUDGET
	}
	return &serveResult{
		failure: &childv1.Failure{Reason: r.pending, Permanent: true},
		kind:    kind,
		last:    true,
	}
}

// answered judges a model response the task got: a budget it overran, or
// an answer the task must not go on with — one cut at its token limit (a
// truncated answer is never a success, and asking again cuts it again) or
// withheld by the provider's content filter — stops the task once the
// response's turn is checkpointed (stepDone).
func (r *modelRun) answered(resp *childv1.ModelResponse) {
	switch {
	case llm.Truncated(resp):
		r.pending = fmt.Sprintf("the model's answer was cut at its token limit (finish_reason %s, %d completion tokens): raise the agent's model.max_tokens, or ask for less",
			resp.GetFinishReason(), resp.GetUsage().GetCompletionTokens())
		r.pendingKind = agentmeshv1.FailureKind_FAILURE_KIND_MODEL_TRUNCATED
	case llm.Filtered(resp):
		r.pending = "the model provider's content filter withheld the answer (finish_reason content_filter)"
		r.pendingKind = agentmeshv1.FailureKind_FAILURE_KIND_MODEL_REJECTED
	default:
		r.pending = r.check(true)
		r.pendingKind = agentmeshv1.FailureKind_FAILURE_KIND_BUDGET
	}
}

// failed classifies the child's Failure: the model stayed down (MODEL), the
// budget's max_steps ran out (BUDGET, reworded to name it), or the agent
// gave up (AGENT).
func (r *modelRun) failed(f *childv1.Failure) serveResult {
	res := serveResult{failure: f, last: true, kind: agentmeshv1.FailureKind_FAILURE_KIND_AGENT}
	switch n := r.budget.GetMaxSteps(); {
	case r.modelErr != "":
		res.kind = r.modelKind
		if res.kind == agentmeshv1.FailureKind_FAILURE_KIND_UNSPECIFIED {
			res.kind = agentmeshv1.FailureKind_FAILURE_KIND_MODEL
		}
	case n > 0 && r.turns >= n && f.GetPermanent():
		res.kind = agentmeshv1.FailureKind_FAILURE_KIND_BUDGET
		res.failure = &childv1.Failure{Reason: fmt.Sprintf("budget exhausted: %d steps used, max_steps %d", r.turns, n), Permanent: true}
	}
	return res
}
