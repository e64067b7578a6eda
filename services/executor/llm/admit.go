package llm

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/backoff"
	"github.com/agentmesh/agentmesh/pkg/metrics"
)

// A call's admission under the rate limits (ratelimit.go). Before each
// try the limiter gives the call a slot in every scope it spends (its
// provider key's, its org's, its agent's):
//
//   - a slot now, or within Config.WaitInPlace: the call waits for it
//     where it is and goes;
//   - a later slot: the call ends as KindRateLimited with Until. With
//     other models on its route, the budget is not spent (the next model
//     may have budget now); the last one's, or when every model of the
//     route was over its limit the first such one's, is reserved for the
//     task (Error.Reserved), which waits in the queue, not dispatched
//     before the slot, and whose next attempt takes the slot without
//     asking again (Limiter.Keep, Kept);
//   - the limiter unreachable (its bucket down): the call goes on without
//     it, logged and counted (agentmesh_model_limiter_errors_total) — the
//     provider's own 429s still hold it back.
//
// What the provider says of its limits in its headers is learned into the
// key's scope for every executor (headers.go); a 429 pauses the key until
// its Retry-After.

// A slot reserved for a task is taken by its next attempt without asking
// again, at most LimitMargin late (later, it asks for a new one: the
// limits are kept over a window that much longer, so a call that leaves
// that late still fits the provider's window). The task is dispatched a
// little before its slot (dispatchLead) and waits the rest where it is,
// so it leaves on time.

// dispatchLead is how long before its reserved slot a task waiting in
// the queue is dispatched again.
func (m *Models) dispatchLead() time.Duration { return min(m.cfg.WaitInPlace/2, time.Second) }

// kept is a slot reserved for a task's call in an earlier attempt.
type kept struct {
	key string
	at  time.Time
}

// keptSlot takes the slot an earlier attempt of req's task reserved (none
// for a first attempt, or without a limiter).
func (m *Models) keptSlot(ctx context.Context, req Request) *kept {
	if m.cfg.Limiter == nil || req.Task == "" || req.Attempt <= 1 {
		return nil
	}
	key, at, ok, err := m.cfg.Limiter.Kept(ctx, req.Task)
	if err != nil {
		m.log.Warn("model rate limiter: the task's reserved slot not read", "task", req.Task, "err", err)
	}
	if err != nil || !ok {
		return nil
	}
	return &kept{key: key, at: at}
}

// admission is one model's admission for one call.
type admission struct {
	m      *Models
	ep     Endpoint
	req    Request
	scopes []Scope
	tokens int64
	// conditional: other models follow on the route; a later slot is not
	// reserved.
	conditional bool
	slot        *kept
	grant       *Grant
	// overLimit: a conditional admission found no budget now and spent
	// none (Complete may reserve this model's first slot later).
	overLimit bool
}

func (m *Models) admission(ep Endpoint, req Request, conditional bool, slot *kept) *admission {
	ad := &admission{m: m, ep: ep, req: req, conditional: conditional, scopes: m.scopes(ep, req)}
	if slot != nil && slot.key == scopeKey(ep) {
		ad.slot = slot
	}
	ad.tokens = estimateTokens(ep, req)
	return ad
}

// scopeKey is the limiter key of ep's provider key.
func scopeKey(ep Endpoint) string { return "key." + ep.LimitKey }

// scopes are the budgets a call to ep for req spends.
func (m *Models) scopes(ep Endpoint, req Request) []Scope {
	out := []Scope{{Key: scopeKey(ep), Limits: ep.Limits, Learn: true}}
	if req.Org != "" {
		if l := m.cfg.Table.OrgLimits(req.Org); !l.Zero() {
			out = append(out, Scope{Key: "org." + req.Org, Limits: l})
		}
		if s := req.Settings; req.Agent != "" && (s.GetRequestsPerMinute() > 0 || s.GetTokensPerMinute() > 0) {
			l := Scope{Key: "agent." + req.Org + "." + req.Agent}
			l.Limits.RequestsPerMinute, l.Limits.TokensPerMinute = int(s.GetRequestsPerMinute()), s.GetTokensPerMinute()
			out = append(out, l)
		}
	}
	return out
}

// estimateTokens is what a call is expected to spend before it is made:
// its prompt at 4 bytes a token, plus its completion limit (providers
// count max_tokens against the minute's tokens when the call starts).
func estimateTokens(ep Endpoint, req Request) int64 {
	n := 0
	for _, msg := range req.Turn.GetMessages() {
		n += len(msg.Content)
		for _, c := range msg.ToolCalls {
			n += len(c.Name) + len(c.Arguments)
		}
	}
	for _, t := range req.Turn.GetTools() {
		n += len(t.Name) + len(t.Description) + len(t.ParametersJson)
	}
	out := int64(n/4 + 1)
	if mt := maxTokens(ep, req); mt > 0 {
		return out + int64(mt)
	}
	return out + defaultCompletionEstimate
}

// defaultCompletionEstimate is the completion a call without max_tokens
// is expected to spend.
const defaultCompletionEstimate = 1024

// admit is asked before each try (call.admit).
func (ad *admission) admit(ctx context.Context) error {
	lim := ad.m.cfg.Limiter
	if lim == nil {
		return nil
	}
	if s := ad.slot; s != nil {
		ad.slot = nil
		if err, done := ad.useSlot(ctx, s); done {
			return err
		}
	}
	tokens := int64(0) // the tokens are spent once, by the first try
	if ad.grant == nil {
		tokens = ad.tokens
	}
	began := time.Now()
	g, err := lim.Reserve(ctx, Ask{Scopes: ad.scopes, Tokens: tokens, Within: ad.m.cfg.WaitInPlace, Always: !ad.conditional})
	metrics.ModelLimiterDecision.Observe(time.Since(began).Seconds())
	if err != nil {
		metrics.ModelLimiterErrors.Inc()
		ad.m.log.Warn("the model rate limiter did not answer; calling without it", "model", ad.ep.Name, "err", err)
		return nil
	}
	if !g.Charged {
		ad.overLimit = true
		return ad.limited(g.At, g.Scope, false)
	}
	if ad.grant == nil {
		ad.grant = &g
	}
	return ad.await(ctx, g.At, g.Scope)
}

// useSlot takes the slot an earlier attempt reserved: at once when it is
// due (its budget was spent when it was reserved), after a short wait, or
// (still far) by waiting in the queue again. done is false when the slot
// is too old: a new one is asked for.
func (ad *admission) useSlot(ctx context.Context, s *kept) (error, bool) {
	now := time.Now()
	if now.After(s.at.Add(LimitMargin(ad.m.cfg.LimitWindow))) {
		return nil, false
	}
	ad.grant = &Grant{At: s.at, Charged: true, Tokens: ad.tokens, Scopes: ad.scopes}
	return ad.await(ctx, s.at, scopeKey(ad.ep)), true
}

// await waits for a slot reserved at at: here when it is near, else the
// call ends and the task waits in the queue for it (the slot kept for
// it).
func (ad *admission) await(ctx context.Context, at time.Time, scope string) error {
	wait := time.Until(at)
	if wait <= 0 {
		return nil
	}
	if wait <= ad.m.cfg.WaitInPlace {
		metrics.ModelRateLimitWaits.WithLabelValues(scopeKind(scope), "in_place").Inc()
		metrics.ModelRateLimitWait.WithLabelValues("in_place").Observe(wait.Seconds())
		if !backoff.Sleep(ctx, wait) {
			return context.Cause(ctx)
		}
		return nil
	}
	reserved := false
	if ad.req.Task != "" {
		if err := ad.m.cfg.Limiter.Keep(ctx, ad.req.Task, scopeKey(ad.ep), at); err == nil {
			reserved = true
		}
	}
	return ad.limited(at, scope, reserved)
}

// limited is the error of a call that has no budget before until.
func (ad *admission) limited(until time.Time, scope string, reserved bool) *Error {
	text := fmt.Sprintf("rate limit %s: no budget before %s (in %s)", scope, until.UTC().Format(time.RFC3339Nano), time.Until(until).Round(time.Millisecond))
	notBefore := until
	if reserved {
		text += "; the slot is reserved for the task"
		notBefore = until.Add(-ad.m.dispatchLead())
	}
	return &Error{Kind: KindRateLimited, Until: until, Reserved: reserved, NotBefore: notBefore, Scope: scope, text: text}
}

// reserve reserves the first slot of this model for the call, whatever
// its wait (every model of the route was over its limit): the admission
// then takes it (useSlot) — waiting here when it is near, else the task
// waits in the queue for it.
func (ad *admission) reserve(ctx context.Context) error {
	g, err := ad.m.cfg.Limiter.Reserve(ctx, Ask{Scopes: ad.scopes, Tokens: ad.tokens, Always: true})
	if err != nil {
		metrics.ModelLimiterErrors.Inc()
		ad.m.log.Warn("the model rate limiter did not answer; calling without it", "model", ad.ep.Name, "err", err)
	}
	ad.conditional, ad.overLimit = false, false
	if err == nil {
		ad.grant = &g
		ad.slot = &kept{key: scopeKey(ad.ep), at: g.At}
	}
	return nil
}

// settle corrects the tokens the call spent to what it used.
func (ad *admission) settle(ctx context.Context, u *agentmeshv1.Usage) {
	if ad.grant == nil || ad.m.cfg.Limiter == nil {
		return
	}
	used := u.GetTotalTokens()
	if used <= 0 {
		used = u.GetPromptTokens() + u.GetCompletionTokens()
	}
	if used <= 0 || used == ad.grant.Tokens {
		return // no usage reported: the estimate stands
	}
	if err := ad.m.cfg.Limiter.Settle(ctx, *ad.grant, used); err != nil {
		ad.m.log.Warn("model rate limiter: tokens not settled", "model", ad.ep.Name, "err", err)
	}
}

// heard learns from one response's headers (call.heard): the provider's
// limits, and a pause of the key when it says its budget is spent.
func (ad *admission) heard(status int, h http.Header) {
	if status == http.StatusTooManyRequests {
		metrics.ModelProvider429.WithLabelValues(ad.ep.Provider).Inc()
	}
	lim := ad.m.cfg.Limiter
	if lim == nil {
		return
	}
	now := time.Now()
	lh := parseLimitHeaders(h, now)
	if status == http.StatusTooManyRequests {
		if d, ok := parseRetryAfter(h.Get("Retry-After"), now); ok && now.Add(d).After(lh.resetAt) {
			lh.resetAt = now.Add(d)
		}
	}
	if !lh.any() {
		return
	}
	key := scopeKey(ad.ep)
	if lh.resetAt.IsZero() && !ad.m.learned.changed(key, lh.rpm, lh.tpm) {
		return // nothing new: no write
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := lim.Learn(ctx, key, Learned{RPM: lh.rpm, TPM: lh.tpm, PausedUntil: lh.resetAt}); err != nil {
		ad.m.log.Warn("model rate limiter: the provider's limits not learned", "model", ad.ep.Name, "err", err)
	}
}

// ScopeKind is the kind of the scope that made the call wait: key, org,
// agent or provider (the server's own 429).
func (e *Error) ScopeKind() string { return scopeKind(e.Scope) }

// scopeKind is the kind of a scope key (key, org, agent, provider).
func scopeKind(scope string) string {
	kind, _, _ := strings.Cut(scope, ".")
	switch kind {
	case "key", "org", "agent":
		return kind
	}
	return "provider"
}

// learnedMemory remembers the limits this process last taught each key,
// so an unchanged header costs no write.
type learnedMemory struct {
	mu sync.Mutex
	m  map[string][2]int64
}

// changed records (rpm, tpm) for key and reports whether they differ
// from the last ones.
func (l *learnedMemory) changed(key string, rpm int, tpm int64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.m == nil || len(l.m) > 4096 {
		l.m = map[string][2]int64{}
	}
	v := [2]int64{int64(rpm), tpm}
	if l.m[key] == v {
		return false
	}
	l.m[key] = v
	return true
}
