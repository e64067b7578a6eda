// Package llm is the executor's model client: it makes the model calls
// agent children ask for (the child has no network and no key), on their
// behalf and under the executor's policy.
//
// The executor's attempt sees one small interface, Client: Complete takes
// a Request — the agent's model settings, the key its api_key_secret
// resolved to, the task it is for (org, agent, id: its rate limits), the
// conversation the child built (a childv1.ModelRequest) and a callback for
// the content as it streams in — and returns the model's answer as the
// ModelResponse the child is handed, or an *Error whose Kind says what the
// failure means (transient, rejected, rate limited) and whose text names
// the model, the URL and the cause.
//
// Behind it, Models (the Client the executor uses) routes the call
// (route.go): the agent's model — a name of the operator's model table
// (AGENTMESH_MODELS, pkg/modeltable), a model at the agent's own base_url,
// or one at the executor's default endpoint — then its fallbacks, tried
// in order when a model is out or over its rate limit (the step records
// which answered, and why the others did not). Each call is admitted by
// the rate limiter (ratelimit.go, admit.go: the provider key's, the org's
// and the agent's limits, shared by every executor) and handed to the
// Provider of its wire format: the OpenAI-compatible Chat Completions
// (openai.go; OpenAI, Ollama, vLLM, llama.cpp, LM Studio …) or Anthropic's
// Messages API (anthropic.go). Both stream, parse their server-sent events
// with one bounded reader (sse.go) and assemble the answer in one place,
// where the quirks of real servers are handled (assembly.go); both go
// through one retry loop (retry.go: only what can change is retried,
// Retry-After and the rate-limit headers honoured). Models then reads tool
// calls written as text for models marked so (textcalls.go), runs the
// JSON ReAct protocol for models without tool calling (react.go), and
// prices the usage (prices.go).
//
// Every call goes through the outbound policy (limits.go): web_fetch's
// address policy with the model allowlist, no credentials across a
// redirect to another origin, each response capped as it is read.
package llm

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"time"

	childv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/child/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/metrics"
	"github.com/agentmesh/agentmesh/pkg/modeltable"
	"github.com/agentmesh/agentmesh/services/executor/webfetch"
)

// Config says how to reach the default model and the operator's model
// table, and how every model call is bounded.
type Config struct {
	// BaseURL of the default endpoint ("https://api.openai.com/v1").
	BaseURL string
	// Provider is the default endpoint's wire format (modeltable.
	// ProviderOpenAI when empty).
	Provider string
	// APIKey for BaseURL. It is sent only to BaseURL, never to a base URL
	// an agent names, and never reaches the child.
	APIKey string
	// Model name used when the agent names none.
	Model string
	// Table is the operator's model table (AGENTMESH_MODELS): models by
	// name, each with its provider, endpoint, key, prices and limits, and
	// the orgs' limits. Its keys are read from the environment by New
	// (LookupEnv); one that is unset refuses the start.
	Table *modeltable.Table
	// Timeout of one model call (2m).
	Timeout time.Duration
	// Retries after a failed try of what can change: a network error, a
	// timeout, 5xx, 529, a 429 with a short wait (3; negative means none).
	// A Retry-After header sets the wait (capped at MaxRetryAfter).
	Retries int
	// Backoff is the wait before the first retry (250ms); it doubles each
	// time, up to 8s.
	Backoff time.Duration
	// Prices prices model usage (USD per 1M prompt/completion tokens, see
	// ParsePrices); a model it does not name costs 0. The table's prices
	// join it.
	Prices Prices
	// Limiter gives calls their slots under the rate limits, across the
	// executors (nil: no limits).
	Limiter Limiter
	// WaitInPlace is the longest a call waits for a rate limit's budget
	// (or a 429's Retry-After) where it is; a longer wait ends it as
	// KindRateLimited and the task waits in the queue (5s).
	WaitInPlace time.Duration
	// LimitWindow is the limits' minute (time.Minute; tests shorten it):
	// a slot reserved for a task may be taken up to LimitMargin of it late.
	LimitWindow time.Duration
	// LookupEnv resolves an agent's model.api_key_secret NAME, for a task
	// of org ORG, from the variable AGENTMESH_SECRET_<ORG>__<NAME> (both
	// upper-cased, '-' → '_'), and the table's api_key_env (os.LookupEnv
	// when nil).
	LookupEnv func(string) (string, bool)
	// Allow names model endpoints an agent's base_url may reach although
	// they are loopback, private or link-local (a local Ollama:
	// "127.0.0.1:11434"): host, host:port, address or CIDR, as
	// webfetch.Config.Allow. Every other base_url goes through web_fetch's
	// address policy. BaseURL's own host:port and those of the table's
	// endpoints are always allowed.
	Allow []string
	// MaxResponseBytes caps one model response's body as it is read,
	// streamed or not (DefaultMaxResponseBytes, 16 MiB).
	MaxResponseBytes int64

	// Resolver and DialContext replace name resolution and connecting
	// (webfetch.Config.Resolver and DialContext; tests).
	Resolver    webfetch.Resolver
	DialContext func(ctx context.Context, network, address string) (net.Conn, error)
}

// Defaults of Config.
const (
	DefaultTimeout     = 2 * time.Minute
	DefaultRetries     = 3
	DefaultBackoff     = 250 * time.Millisecond
	DefaultWaitInPlace = 5 * time.Second
)

// Client makes model calls: the interface the executor's attempt calls,
// once per model turn.
type Client interface {
	// Complete answers req: the model's answer addressed to req.Turn's
	// id, its usage priced, its duration measured, the model that
	// answered (and why others did not) recorded. A call that failed
	// (after its retries and fallbacks) returns an *Error (or an error
	// KindOf calls rejected) whose text names the model, the URL and the
	// cause, at most ErrorTextMax bytes.
	Complete(ctx context.Context, req Request) (*childv1.ModelResponse, error)
}

// Request is one model call.
type Request struct {
	// Settings are the agent's model settings (nil: the executor's
	// defaults).
	Settings *agentmeshv1.ModelSettings
	// Key is the key resolved from Settings.api_key_secret (when HasKey,
	// see Models.Secret); it goes to whichever base URL the agent's own
	// model uses.
	Key    string
	HasKey bool
	// The task the call is for: its org and agent choose rate limits; its
	// id keeps a slot reserved for it across a wait in the queue, which a
	// later attempt (Attempt > 1) takes.
	Org, Agent, Task string
	Attempt          int32
	// Turn is the conversation the child asks the model to continue: its
	// messages and the tools it offers.
	Turn *childv1.ModelRequest
	// OnToken receives the answer's content as it streams in (nil:
	// nowhere).
	OnToken func(string)
}

// Provider speaks one wire format of model APIs: it makes one call to ep
// (its tries through the shared retry loop) and returns the answer as a
// ModelResponse, usage included and not yet priced.
type Provider interface {
	Complete(ctx context.Context, ep Endpoint, req Request) (*childv1.ModelResponse, error)
}

// Endpoint is where one call goes.
type Endpoint struct {
	// Name is what the agent called the model (a table name, or the model).
	Name     string
	Provider string
	BaseURL  string
	Key      string
	// Model is the model's name at BaseURL.
	Model string
	// ReAct: the model is called without tools, in the JSON ReAct protocol
	// (react.go).
	ReAct bool
	// ToolCallsInText: tool calls written as text are read out of the
	// answer (textcalls.go).
	ToolCallsInText bool
	// MaxTokens per turn when the agent sets none (0: the provider's).
	MaxTokens int
	// LimitKey names the provider key's budget; Limits are its limits.
	LimitKey string
	Limits   modeltable.Limits
}

// Tool protocols (ModelSettings.tool_protocol).
const (
	// ToolProtocolNative is the default: the provider's tool calls.
	ToolProtocolNative = "native"
	// ToolProtocolReAct is the JSON ReAct fallback for models without
	// native tool calling (react.go).
	ToolProtocolReAct = "react"
)

// Models is the Client of the executor: it makes the model calls children
// ask for, at the endpoints the agents' models route to.
type Models struct {
	cfg       Config
	log       *slog.Logger
	keys      map[string]string // the table's keys, by entry
	providers map[string]Provider
	learned   learnedMemory
}

var _ Client = (*Models)(nil)

// New returns the model client of cfg, its zero values defaulted. A table
// entry whose key variable is unset, or a default provider that does not
// exist, is an error.
func New(cfg Config, log *slog.Logger) (*Models, error) {
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	switch {
	case cfg.Retries == 0:
		cfg.Retries = DefaultRetries
	case cfg.Retries < 0:
		cfg.Retries = 0
	}
	if cfg.Backoff <= 0 {
		cfg.Backoff = DefaultBackoff
	}
	if cfg.WaitInPlace <= 0 {
		cfg.WaitInPlace = DefaultWaitInPlace
	}
	if cfg.LimitWindow <= 0 {
		cfg.LimitWindow = time.Minute
	}
	if cfg.Provider == "" {
		cfg.Provider = modeltable.ProviderOpenAI
	}
	if !modeltable.ValidProvider(cfg.Provider) {
		return nil, fmt.Errorf("model provider %q: want %s", cfg.Provider, strings.Join(modeltable.Providers, " or "))
	}
	if cfg.Table == nil {
		cfg.Table = &modeltable.Table{}
	}
	if cfg.LookupEnv == nil {
		cfg.LookupEnv = os.LookupEnv
	}
	keys, err := tableKeys(cfg.Table, cfg.LookupEnv)
	if err != nil {
		return nil, err
	}
	if cfg.Prices, err = tablePrices(cfg.Table, cfg.Prices); err != nil {
		return nil, err
	}
	hc, err := httpClient(cfg)
	if err != nil {
		return nil, err
	}
	retry := retrier{timeout: cfg.Timeout, retries: cfg.Retries, backoff: cfg.Backoff, inPlace: cfg.WaitInPlace, log: log}
	return &Models{cfg: cfg, log: log, keys: keys, providers: map[string]Provider{
		modeltable.ProviderOpenAI:    newOpenAI(hc, retry, log),
		modeltable.ProviderAnthropic: &anthropic{http: hc, retry: retry, log: log},
	}}, nil
}

// tableKeys reads the key of every table entry that names one.
func tableKeys(t *modeltable.Table, lookup func(string) (string, bool)) (map[string]string, error) {
	keys := map[string]string{}
	for _, name := range t.Names() {
		m := t.Models[name]
		if m.NoKey {
			continue
		}
		v, ok := lookup(m.APIKeyEnv)
		if !ok || v == "" {
			return nil, fmt.Errorf("model table: models.%s.api_key_env: %s is not set in the executor's environment", name, m.APIKeyEnv)
		}
		keys[name] = v
	}
	return keys, nil
}

// tablePrices joins the table's prices to p (by entry name); a model
// priced in both is an error.
func tablePrices(t *modeltable.Table, p Prices) (Prices, error) {
	out := Prices{}
	for m, pr := range p {
		out[m] = pr
	}
	for _, name := range t.Names() {
		tp := t.Models[name].Price
		if tp == nil {
			continue
		}
		if _, dup := out[name]; dup {
			return nil, fmt.Errorf("model %s is priced both in AGENTMESH_PRICES and in the model table", name)
		}
		out[name] = Price{PromptPerM: tp.Prompt, CompletionPerM: tp.Completion, CacheReadPerM: tp.CacheRead, CacheWritePerM: tp.CacheWrite}
	}
	return out, nil
}

// Complete answers one model call (Client): the route's models in order,
// each admitted by the rate limiter, until one answers.
func (m *Models) Complete(ctx context.Context, req Request) (*childv1.ModelResponse, error) {
	began := time.Now()
	route, err := m.route(req)
	if err != nil {
		return nil, &Error{Kind: KindRejected, text: cutText(err.Error(), ErrorTextMax), cause: err}
	}
	slot := m.keptSlot(ctx, req)
	var skipped []string
	var limited *admission // the first model that was over its limit
	var last error
	for i, ep := range route {
		ad := m.admission(ep, req, len(route) > 1, slot)
		resp, err := m.completeOn(ctx, ep, req, ad)
		if err == nil {
			ad.settle(ctx, resp.GetUsage())
			m.answered(resp, ep, req, began, skipped)
			return resp, nil
		}
		e := m.named(ep, err)
		metrics.ModelCalls.WithLabelValues(ep.Provider, e.Kind.String()).Inc()
		last = e
		if ad.overLimit && limited == nil {
			limited = ad
		}
		if i+1 == len(route) || (e.Kind != KindTransient && e.Kind != KindRateLimited) || e.Reserved {
			break
		}
		skipped = append(skipped, fmt.Sprintf("%s: %s", ep.Name, cutText(e.short(), 300)))
		metrics.ModelFallbacks.WithLabelValues(ep.Name).Inc()
		m.log.Warn("model out or over its limit; the next of the route answers", "model", ep.Name, "next", route[i+1].Name, "err", cutText(e.Error(), 512))
	}
	if limited != nil && KindOf(last) != KindRejected {
		// Every model was out or over its limit: the first one that was
		// over its limit is called at its first slot, reserved now — here
		// when it is near, else the task waits in the queue for it.
		if err := limited.reserve(ctx); err != nil {
			return nil, err
		}
		resp, err := m.completeOn(ctx, limited.ep, req, limited)
		if err != nil {
			e := m.named(limited.ep, err)
			metrics.ModelCalls.WithLabelValues(limited.ep.Provider, e.Kind.String()).Inc()
			return nil, e
		}
		limited.settle(ctx, resp.GetUsage())
		m.answered(resp, limited.ep, req, began, skipped)
		return resp, nil
	}
	return nil, last
}

// completeOn makes the call at ep: natively, or in the ReAct protocol;
// tool calls written as text are read out for a model marked so.
func (m *Models) completeOn(ctx context.Context, ep Endpoint, req Request, ad *admission) (*childv1.ModelResponse, error) {
	p := m.providers[ep.Provider]
	if p == nil {
		return nil, fmt.Errorf("unknown model provider %q", ep.Provider)
	}
	c := &call{admit: ad.admit, heard: ad.heard}
	ctx = context.WithValue(ctx, callKey{}, c)
	if ep.ReAct {
		return m.completeReAct(ctx, p, ep, req)
	}
	resp, err := p.Complete(ctx, ep, req)
	if err == nil && ep.ToolCallsInText {
		if n := textToolCalls(resp); n > 0 {
			metrics.ModelQuirks.WithLabelValues("tool_calls_in_text").Inc()
		}
	}
	return resp, err
}

// answered finishes a model's answer: addressed, priced, timed, its model
// and route recorded.
func (m *Models) answered(resp *childv1.ModelResponse, ep Endpoint, req Request, began time.Time, skipped []string) {
	metrics.ModelCalls.WithLabelValues(ep.Provider, "ok").Inc()
	resp.Id = req.Turn.GetId()
	if resp.Model == "" {
		resp.Model = ep.Model
	}
	if cost, ok := m.cfg.Prices.Cost(resp.Usage, ep.Name, ep.Model, resp.Model); ok {
		resp.Usage.CostUsd = cost
	}
	resp.Provider = ep.Provider
	resp.Fallback = strings.Join(skipped, "; ")
	resp.DurationMs = time.Since(began).Milliseconds()
}

// named is err as an *Error whose text names the model and its URL.
func (m *Models) named(ep Endpoint, err error) *Error {
	var e *Error
	if !errors.As(err, &e) {
		e = &Error{Kind: KindRejected, text: err.Error(), cause: err}
	}
	out := *e
	// The text may quote what the model server sent: cut it.
	out.text = cutText(fmt.Sprintf("model %s at %s: %s", ep.Name, redactURL(ep.BaseURL), e.text), ErrorTextMax)
	out.cause = e
	return &out
}

// short is the cause of e without the model's name (for a step's
// fallback note).
func (e *Error) short() string {
	if e.cause != nil {
		var inner *Error
		if errors.As(e.cause, &inner) && inner != e {
			return inner.text
		}
	}
	return e.text
}

// failed is the *Error of a provider's call that failed after made tries.
func failed(made int, err error) error {
	var e *Error
	if errors.As(err, &e) {
		return e // the rate limiter's, already an *Error
	}
	out := &Error{Kind: classify(err), cause: err, text: fmt.Sprintf("%s (%d attempts)", cutText(err.Error(), ErrorTextMax/2), made)}
	var he *httpError
	if errors.As(err, &he) {
		out.Status = he.status
	}
	if out.Kind == KindRateLimited {
		// The provider's 429 outlasted the call's retries: the task waits
		// in the queue for a while.
		out.Until, out.Scope = time.Now().Add(limitedWait), "provider"
		out.NotBefore = out.Until
	}
	return out
}

// limitedWait is how long a task waits in the queue after a provider's
// 429s that said nothing of when to come back.
const limitedWait = 30 * time.Second

// callOrNew is the call of ctx (Models.completeOn's), or a fresh one.
func callOrNew(ctx context.Context) *call {
	if c := callOf(ctx); c != nil {
		return c
	}
	return &call{}
}

// secretEnv is the environment variable that holds org's secret name:
// AGENTMESH_SECRET_<ORG>__<NAME>, each part upper-cased with '-' → '_'.
// Org names are lower-case letters, digits and single hyphens, so the
// first "__" ends the org and no two (org, name) pairs share a variable.
func secretEnv(org, name string) string {
	up := func(s string) string { return strings.ToUpper(strings.ReplaceAll(s, "-", "_")) }
	return "AGENTMESH_SECRET_" + up(org) + "__" + up(name)
}

// Secret returns the API key an agent's api_key_secret names, among
// the secrets of org — the org of the task, whichever agent it runs, so
// one org's secret never goes to a URL another org chose. The key is
// looked up in the executor's environment (Config.LookupEnv) and
// never leaves the executor except to the model's base URL.
func (m *Models) Secret(org, name string) (string, error) {
	if org == "" {
		return "", fmt.Errorf("model api_key_secret %q: the task has no org to resolve it in", name)
	}
	env := secretEnv(org, name)
	look := m.cfg.LookupEnv
	if look == nil {
		look = os.LookupEnv
	}
	v, ok := look(env)
	if !ok || v == "" {
		return "", fmt.Errorf("model api_key_secret %q is unknown to org %s: %s is not set in the executor's environment", name, org, env)
	}
	return v, nil
}
