// Package llm is the executor's model client: it makes the model calls
// agent children ask for, with go-openai against any OpenAI-compatible
// base URL — streamed completions, native tool calling or the JSON ReAct
// fallback (react.go), a timeout per call, bounded retries honouring
// Retry-After (stream.go), the outbound address policy and response caps
// (limits.go), and the price table that turns usage into cost (prices.go).
package llm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	childv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/child/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/services/executor/webfetch"
	openai "github.com/sashabaranov/go-openai"
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

// Models makes the model calls children ask for, with go-openai
// against any OpenAI-compatible base URL: streamed completions (content
// deltas go out as TOKEN events), native tool calling or the JSON ReAct
// fallback (model_react.go), a timeout per call and bounded retries with
// backoff on network errors, timeouts, 429, 5xx and garbage answers,
// honouring Retry-After (capped at MaxRetryAfter). Usage is priced from
// Config.Prices.
type Models struct {
	cfg  Config
	log  *slog.Logger
	http *http.Client
	// backoff is the wait before the first retry; it doubles each time.
	backoff time.Duration

	mu      sync.Mutex
	clients map[[2]string]*openai.Client // (base URL, key) → client
}

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
	return &Models{
		cfg:     cfg,
		log:     log,
		http:    hc,
		backoff: cfg.Backoff,
		clients: map[[2]string]*openai.Client{},
	}, nil
}

func (m *Models) client(baseURL, key string) *openai.Client {
	m.mu.Lock()
	defer m.mu.Unlock()
	k := [2]string{baseURL, key}
	if c, ok := m.clients[k]; ok {
		return c
	}
	if len(m.clients) >= maxModelClients {
		// Base URLs come from agent definitions: the cache must not grow
		// without bound. Clients are cheap; connections live in m.http.
		clear(m.clients)
	}
	cfg := openai.DefaultConfig(key)
	cfg.BaseURL = baseURL
	cfg.HTTPClient = m.http
	c := openai.NewClientWithConfig(cfg)
	m.clients[k] = c
	return c
}

// maxModelClients bounds the cache of go-openai clients.
const maxModelClients = 256

// Call is one agent's way to the model.
type Call struct {
	Settings *agentmeshv1.ModelSettings
	// Key is the key resolved from Settings.api_key_secret (when HasKey);
	// it goes to whichever base URL the agent uses.
	Key    string
	HasKey bool
	// OnToken receives streamed content (nil: nowhere).
	OnToken func(string)
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

// Complete answers one ModelRequest. Failures come back in the response's
// error field, after the retries, naming the model, the URL and the cause.
func (m *Models) Complete(ctx context.Context, call Call, req *childv1.ModelRequest) *childv1.ModelResponse {
	settings := call.Settings
	began := time.Now()
	resp := &childv1.ModelResponse{Id: req.GetId()}
	baseURL, key := m.cfg.BaseURL, m.cfg.APIKey
	if u := settings.GetBaseUrl(); u != "" && u != m.cfg.BaseURL {
		baseURL, key = u, "" // the executor's key goes to its own endpoint only
	}
	if call.HasKey {
		key = call.Key
	}
	model := settings.GetModel()
	if model == "" {
		model = m.cfg.Model
	}
	react := false
	switch p := strings.ToLower(strings.TrimSpace(settings.GetToolProtocol())); p {
	case "", ToolProtocolNative:
	case ToolProtocolReAct:
		react = true
	default:
		resp.Error = fmt.Sprintf("unknown model tool_protocol %q (want %q or %q)", settings.GetToolProtocol(), ToolProtocolNative, ToolProtocolReAct)
		return resp
	}
	switch {
	case baseURL == "":
		resp.Error = "no model base URL configured (set the agent's model.base_url or the executor's default)"
		return resp
	case model == "":
		resp.Error = "no model configured (set the agent's model.model or the executor's default)"
		return resp
	}
	creq, err := chatRequest(model, settings, req)
	if err != nil {
		resp.Error = err.Error()
		return resp
	}
	if react {
		creq.Tools = nil
		creq.Messages = reactMessages(req.GetMessages(), req.GetTools())
	}
	c := m.client(baseURL, key)
	fail := func(format string, args ...any) *childv1.ModelResponse {
		// The text may quote what the model server sent: cut it.
		resp.Error = cutText(fmt.Sprintf("model %s at %s: ", model, redactURL(baseURL))+fmt.Sprintf(format, args...), ErrorTextMax)
		resp.DurationMs = time.Since(began).Milliseconds()
		return resp
	}

	out, made, err := m.retrying(ctx, c, creq, model, baseURL, call.OnToken)
	if err != nil {
		return fail("%s (%d attempts)", cutText(err.Error(), ErrorTextMax/2), made)
	}
	if !react {
		fillResponse(resp, out)
	} else {
		usage := out.Usage
		text := out.Choices[0].Message.Content
		turn, perr := parseReAct(text)
		if perr != nil {
			// One bounded repair turn: tell the model what was wrong.
			m.log.Info("model output is not valid ReAct; one repair turn", "model", model, "err", perr)
			creq.Messages = append(creq.Messages,
				openai.ChatCompletionMessage{Role: openai.ChatMessageRoleAssistant, Content: text},
				openai.ChatCompletionMessage{Role: openai.ChatMessageRoleUser, Content: reactRepair(perr)})
			out, made, err = m.retrying(ctx, c, creq, model, baseURL, call.OnToken)
			if err != nil {
				return fail("repair turn after invalid ReAct output (%s): %s (%d attempts)", cutText(perr.Error(), 512), cutText(err.Error(), ErrorTextMax/2), made)
			}
			usage.PromptTokens += out.Usage.PromptTokens
			usage.CompletionTokens += out.Usage.CompletionTokens
			usage.TotalTokens += out.Usage.TotalTokens
			if turn, perr = parseReAct(out.Choices[0].Message.Content); perr != nil {
				return fail("output does not follow the JSON ReAct protocol after one repair turn: %v", perr)
			}
		}
		out.Usage = usage
		fillResponse(resp, out)
		resp.Message, resp.FinishReason = reactResponse(turn)
	}
	if cost, ok := m.cfg.Prices.Cost(resp.Usage, model, resp.Model); ok {
		resp.Usage.CostUsd = cost
	}
	resp.DurationMs = time.Since(began).Milliseconds()
	return resp
}

// retrying makes one streamed completion with bounded retries; it returns
// the answer, how many attempts were made and the last error.
func (m *Models) retrying(ctx context.Context, c *openai.Client, creq openai.ChatCompletionRequest, model, baseURL string, onToken func(string)) (openai.ChatCompletionResponse, int, error) {
	box := &retryAfterBox{}
	attempts, made := 1+m.cfg.Retries, 0
	var lastErr error
	for i := range attempts {
		if i > 0 {
			d := m.backoff << (i - 1)
			d = min(d, 8*time.Second)
			d += time.Duration(rand.Int64N(int64(d)/5 + 1))
			if ra, ok := box.take(); ok {
				d = ra // the server said when
			}
			if !sleepCtx(ctx, d) {
				break
			}
		}
		box.take()
		made++
		cctx, cancel := context.WithTimeout(context.WithValue(ctx, retryAfterKey{}, box), m.cfg.Timeout)
		out, err := streamCompletion(cctx, c, creq, onToken)
		cancel()
		if err == nil && len(out.Choices) == 0 {
			err = errors.New("the answer has no choices")
		}
		if err == nil {
			return out, made, nil
		}
		if ctx.Err() != nil {
			lastErr = context.Cause(ctx)
			break
		}
		lastErr = err
		if !retryable(err) || notRetryable(err) {
			break
		}
		m.log.Warn("model call failed; retrying", "model", model, "url", redactURL(baseURL), "attempt", i+1, "of", attempts, "err", cutText(err.Error(), ErrorTextMax))
	}
	return openai.ChatCompletionResponse{}, made, lastErr
}

func chatRequest(model string, settings *agentmeshv1.ModelSettings, req *childv1.ModelRequest) (openai.ChatCompletionRequest, error) {
	creq := openai.ChatCompletionRequest{Model: model}
	if settings != nil && settings.Temperature != nil {
		creq.Temperature = settings.GetTemperature()
	}
	if n := settings.GetMaxTokens(); n > 0 {
		// max_tokens, not max_completion_tokens: every OpenAI-compatible
		// server (Ollama, vLLM, llama.cpp) reads it; OpenAI's o-series
		// models want the other.
		//lint:ignore SA1019 the field the compatible servers understand
		creq.MaxTokens = int(n)
	}
	for _, msg := range req.GetMessages() {
		om := openai.ChatCompletionMessage{Role: msg.Role, Content: msg.Content, ToolCallID: msg.ToolCallId}
		for _, tc := range msg.ToolCalls {
			om.ToolCalls = append(om.ToolCalls, openai.ToolCall{
				ID: tc.Id, Type: openai.ToolTypeFunction,
				Function: openai.FunctionCall{Name: tc.Name, Arguments: tc.Arguments},
			})
		}
		creq.Messages = append(creq.Messages, om)
	}
	for _, t := range req.GetTools() {
		params := json.RawMessage(t.ParametersJson)
		if !json.Valid(params) {
			return creq, fmt.Errorf("tool %s: parameters are not JSON", t.Name)
		}
		creq.Tools = append(creq.Tools, openai.Tool{Type: openai.ToolTypeFunction, Function: &openai.FunctionDefinition{
			Name: t.Name, Description: t.Description, Parameters: params,
		}})
	}
	return creq, nil
}

func fillResponse(resp *childv1.ModelResponse, out openai.ChatCompletionResponse) {
	ch := out.Choices[0]
	msg := &childv1.Message{Role: "assistant", Content: ch.Message.Content}
	for _, tc := range ch.Message.ToolCalls {
		msg.ToolCalls = append(msg.ToolCalls, &agentmeshv1.ToolCall{Id: tc.ID, Name: tc.Function.Name, Arguments: tc.Function.Arguments})
	}
	resp.Message = msg
	resp.Model = out.Model
	resp.FinishReason = string(ch.FinishReason)
	resp.Usage = &agentmeshv1.Usage{
		PromptTokens:     int64(out.Usage.PromptTokens),
		CompletionTokens: int64(out.Usage.CompletionTokens),
		TotalTokens:      int64(out.Usage.TotalTokens),
	}
}

// retryable reports whether another try may help: not for a request the
// server refused as such (400, 401, 403, 404, 422 ...).
func retryable(err error) bool {
	status := 0
	var apiErr *openai.APIError
	var reqErr *openai.RequestError
	switch {
	case errors.As(err, &apiErr):
		status = apiErr.HTTPStatusCode
	case errors.As(err, &reqErr):
		status = reqErr.HTTPStatusCode
	}
	return status == 0 || status == http.StatusRequestTimeout || status == http.StatusTooManyRequests || status >= 500
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
