// Package llm is the executor's model client: it makes the model calls
// agent children ask for (the child has no network and no key), on their
// behalf and under the executor's policy.
//
// The executor's attempt sees one small interface, Client: Complete takes
// a Request — the agent's model settings, the key its api_key_secret
// resolved to, the conversation the child built (a childv1.ModelRequest)
// and a callback for the content as it streams in — and returns the
// model's answer as the ModelResponse the child is handed, or an error
// that names the model, the URL and the cause.
//
// Behind it, Models (the Client the executor uses) picks the endpoint —
// the agent's base_url and model, else the executor's defaults, with the
// executor's own key only for its own endpoint — and hands the call to
// the Provider of that endpoint's wire format. A Provider turns the
// conversation into its wire format, makes the call (streamed, bounded by
// Config.Timeout, retried by the shared retry loop on network errors,
// timeouts, 429, 5xx and garbage, honouring Retry-After) and turns the
// answer back; Models then prices its usage (prices.go). The
// OpenAI-compatible Chat Completions format (openai.go, with go-openai:
// OpenAI, Ollama, vLLM, llama.cpp, LM Studio …) is the only Provider now;
// models without native tool calling get the JSON ReAct fallback on top of
// it (react.go). Providers for other wire formats (Anthropic's Messages
// API), quirks of real OpenAI-compatible servers, rate limits and
// fallbacks belong here, each a Provider or a wrapper of one.
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
	"github.com/agentmesh/agentmesh/services/executor/webfetch"
)

// Config says how to reach the default model, and how every model call
// is bounded.
type Config struct {
	// BaseURL of an OpenAI-compatible API ("https://api.openai.com/v1").
	BaseURL string
	// APIKey for BaseURL. It is sent only to BaseURL, never to a base URL
	// an agent names, and never reaches the child.
	APIKey string
	// Model name used when the agent names none.
	Model string
	// Timeout of one model call (2m).
	Timeout time.Duration
	// Retries after a failed call: errors, 5xx, 429, garbage (3; negative
	// means none). A Retry-After header sets the wait (capped at
	// MaxRetryAfter).
	Retries int
	// Backoff is the wait before the first retry (250ms); it doubles each
	// time, up to 8s.
	Backoff time.Duration
	// Prices prices model usage (USD per 1M prompt/completion tokens, see
	// ParsePrices); a model it does not name costs 0.
	Prices Prices
	// LookupEnv resolves an agent's model.api_key_secret NAME, for a task
	// of org ORG, from the variable AGENTMESH_SECRET_<ORG>__<NAME> (both
	// upper-cased, '-' → '_'; os.LookupEnv when nil).
	LookupEnv func(string) (string, bool)
	// Allow names model endpoints an agent's base_url may reach although
	// they are loopback, private or link-local (a local Ollama:
	// "127.0.0.1:11434"): host, host:port, address or CIDR, as
	// webfetch.Config.Allow. Every other base_url goes through web_fetch's
	// address policy. BaseURL's own host:port is always allowed.
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
	DefaultTimeout = 2 * time.Minute
	DefaultRetries = 3
	DefaultBackoff = 250 * time.Millisecond
)

// Client makes model calls: the interface the executor's attempt calls,
// once per model turn.
type Client interface {
	// Complete answers req: the model's answer addressed to
	// req.Turn's id, its usage priced, its duration measured. A call that
	// failed (after its retries) returns an error whose text names the
	// model, the URL and the cause, at most ErrorTextMax bytes.
	Complete(ctx context.Context, req Request) (*childv1.ModelResponse, error)
}

// Request is one model call.
type Request struct {
	// Settings are the agent's model settings (nil: the executor's
	// defaults).
	Settings *agentmeshv1.ModelSettings
	// Key is the key resolved from Settings.api_key_secret (when HasKey,
	// see Models.Secret); it goes to whichever base URL the agent uses.
	Key    string
	HasKey bool
	// Turn is the conversation the child asks the model to continue: its
	// messages and the tools it offers.
	Turn *childv1.ModelRequest
	// OnToken receives the answer's content as it streams in (nil:
	// nowhere).
	OnToken func(string)
}

// Provider speaks one wire format of model APIs: it makes one call to ep
// (with its retries, through Models' retry loop) and returns the answer
// as a ModelResponse, usage included and not yet priced.
type Provider interface {
	Complete(ctx context.Context, ep Endpoint, req Request) (*childv1.ModelResponse, error)
}

// Endpoint is where one call goes.
type Endpoint struct {
	BaseURL string
	Key     string
	// Model is the model's name at BaseURL.
	Model string
	// ReAct: the model is called without tools, in the JSON ReAct protocol
	// (react.go).
	ReAct bool
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
// ask for, at the executor's default endpoint or the one an agent names.
type Models struct {
	cfg    Config
	log    *slog.Logger
	openai *openAI
}

var _ Client = (*Models)(nil)

// New returns the model client of cfg, its zero values defaulted.
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
	hc, err := httpClient(cfg)
	if err != nil {
		return nil, err
	}
	retry := retrier{timeout: cfg.Timeout, retries: cfg.Retries, backoff: cfg.Backoff, log: log}
	return &Models{cfg: cfg, log: log, openai: newOpenAI(hc, retry, log)}, nil
}

// Complete answers one model call (Client).
func (m *Models) Complete(ctx context.Context, req Request) (*childv1.ModelResponse, error) {
	began := time.Now()
	ep, err := m.endpoint(req)
	if err != nil {
		return nil, err
	}
	resp, err := m.provider(ep).Complete(ctx, ep, req)
	if err != nil {
		var ce *callError
		if !errors.As(err, &ce) {
			return nil, err // the request could not be built: no call was made
		}
		// The text may quote what the model server sent: cut it.
		ce.text = cutText(fmt.Sprintf("model %s at %s: %s", ep.Model, redactURL(ep.BaseURL), ce.text), ErrorTextMax)
		return nil, ce
	}
	resp.Id = req.Turn.GetId()
	if cost, ok := m.cfg.Prices.Cost(resp.Usage, ep.Model, resp.Model); ok {
		resp.Usage.CostUsd = cost
	}
	resp.DurationMs = time.Since(began).Milliseconds()
	return resp, nil
}

// endpoint is where req goes: the agent's base URL (without the
// executor's key, which goes to its own endpoint only) or the executor's,
// the agent's model or the executor's default, and its tool protocol.
func (m *Models) endpoint(req Request) (Endpoint, error) {
	settings := req.Settings
	ep := Endpoint{BaseURL: m.cfg.BaseURL, Key: m.cfg.APIKey, Model: settings.GetModel()}
	if u := settings.GetBaseUrl(); u != "" && u != m.cfg.BaseURL {
		ep.BaseURL, ep.Key = u, ""
	}
	if req.HasKey {
		ep.Key = req.Key
	}
	if ep.Model == "" {
		ep.Model = m.cfg.Model
	}
	switch p := strings.ToLower(strings.TrimSpace(settings.GetToolProtocol())); p {
	case "", ToolProtocolNative:
	case ToolProtocolReAct:
		ep.ReAct = true
	default:
		return ep, fmt.Errorf("unknown model tool_protocol %q (want %q or %q)", settings.GetToolProtocol(), ToolProtocolNative, ToolProtocolReAct)
	}
	switch {
	case ep.BaseURL == "":
		return ep, errors.New("no model base URL configured (set the agent's model.base_url or the executor's default)")
	case ep.Model == "":
		return ep, errors.New("no model configured (set the agent's model.model or the executor's default)")
	}
	return ep, nil
}

// provider is the Provider of ep's wire format: OpenAI-compatible, the
// only one now.
func (m *Models) provider(Endpoint) Provider { return m.openai }

// callError is a call that was made and failed: its text says how (the
// attempts included); it wraps the last try's error.
type callError struct {
	text  string
	cause error
}

func (e *callError) Error() string { return e.text }
func (e *callError) Unwrap() error { return e.cause }

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
