package executor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	childv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/child/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	openai "github.com/sashabaranov/go-openai"
)

// modelClient makes the model calls children ask for, with go-openai
// against any OpenAI-compatible base URL: native tool calling, one
// non-streamed completion per call, a timeout per call and bounded retries
// with backoff on network errors, timeouts, 429, 5xx and garbage answers.
type modelClient struct {
	cfg  ModelConfig
	log  *slog.Logger
	http *http.Client
	// backoff is the wait before the first retry; it doubles each time.
	backoff time.Duration

	mu      sync.Mutex
	clients map[[2]string]*openai.Client // (base URL, key) → client
}

func newModelClient(cfg ModelConfig, log *slog.Logger) *modelClient {
	return &modelClient{
		cfg:     cfg,
		log:     log,
		http:    &http.Client{Transport: http.DefaultTransport},
		backoff: 250 * time.Millisecond,
		clients: map[[2]string]*openai.Client{},
	}
}

func (m *modelClient) client(baseURL, key string) *openai.Client {
	m.mu.Lock()
	defer m.mu.Unlock()
	k := [2]string{baseURL, key}
	if c, ok := m.clients[k]; ok {
		return c
	}
	cfg := openai.DefaultConfig(key)
	cfg.BaseURL = baseURL
	cfg.HTTPClient = m.http
	c := openai.NewClientWithConfig(cfg)
	m.clients[k] = c
	return c
}

// complete answers one ModelRequest. Failures come back in the response's
// error field, after the retries, naming the model, the URL and the cause.
func (m *modelClient) complete(ctx context.Context, settings *agentmeshv1.ModelSettings, req *childv1.ModelRequest) *childv1.ModelResponse {
	began := time.Now()
	resp := &childv1.ModelResponse{Id: req.GetId()}
	baseURL, key := m.cfg.BaseURL, m.cfg.APIKey
	if u := settings.GetBaseUrl(); u != "" && u != m.cfg.BaseURL {
		baseURL, key = u, "" // the executor's key goes to its own endpoint only
	}
	model := settings.GetModel()
	if model == "" {
		model = m.cfg.Model
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
	c := m.client(baseURL, key)

	attempts, made := 1+m.cfg.Retries, 0
	var lastErr error
	for i := range attempts {
		if i > 0 {
			d := m.backoff << (i - 1)
			d = min(d, 8*time.Second)
			d += time.Duration(rand.Int64N(int64(d)/5 + 1))
			if !sleepCtx(ctx, d) {
				break
			}
		}
		made++
		cctx, cancel := context.WithTimeout(ctx, m.cfg.Timeout)
		out, err := c.CreateChatCompletion(cctx, creq)
		cancel()
		if err == nil && len(out.Choices) == 0 {
			err = errors.New("the answer has no choices")
		}
		if err == nil {
			fillResponse(resp, out)
			resp.DurationMs = time.Since(began).Milliseconds()
			return resp
		}
		if ctx.Err() != nil {
			lastErr = context.Cause(ctx)
			break
		}
		lastErr = err
		if !retryable(err) {
			break
		}
		m.log.Warn("model call failed; retrying", "model", model, "url", baseURL, "attempt", i+1, "of", attempts, "err", err)
	}
	resp.Error = fmt.Sprintf("model %s at %s: %v (%d attempts)", model, baseURL, lastErr, made)
	resp.DurationMs = time.Since(began).Milliseconds()
	return resp
}

func chatRequest(model string, settings *agentmeshv1.ModelSettings, req *childv1.ModelRequest) (openai.ChatCompletionRequest, error) {
	creq := openai.ChatCompletionRequest{Model: model}
	if settings != nil && settings.Temperature != nil {
		creq.Temperature = settings.GetTemperature()
	}
	if n := settings.GetMaxTokens(); n > 0 {
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
