package llm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"

	childv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/child/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	openai "github.com/sashabaranov/go-openai"
)

// openAI is the Provider of the OpenAI-compatible Chat Completions format,
// with go-openai against the endpoint's base URL: a streamed completion
// (openai_stream.go) with the conversation's tools as native tool calls,
// or, for a ReAct endpoint, without tools in the JSON ReAct protocol with
// one repair turn (react.go).
type openAI struct {
	http  *http.Client
	retry retrier
	log   *slog.Logger

	mu      sync.Mutex
	clients map[[2]string]*openai.Client // (base URL, key) → client
}

func newOpenAI(hc *http.Client, retry retrier, log *slog.Logger) *openAI {
	return &openAI{http: hc, retry: retry, log: log, clients: map[[2]string]*openai.Client{}}
}

// maxClients bounds the cache of go-openai clients.
const maxClients = 256

func (o *openAI) client(baseURL, key string) *openai.Client {
	o.mu.Lock()
	defer o.mu.Unlock()
	k := [2]string{baseURL, key}
	if c, ok := o.clients[k]; ok {
		return c
	}
	if len(o.clients) >= maxClients {
		// Base URLs come from agent definitions: the cache must not grow
		// without bound. Clients are cheap; connections live in o.http.
		clear(o.clients)
	}
	cfg := openai.DefaultConfig(key)
	cfg.BaseURL = baseURL
	cfg.HTTPClient = o.http
	c := openai.NewClientWithConfig(cfg)
	o.clients[k] = c
	return c
}

// Complete makes the call (Provider).
func (o *openAI) Complete(ctx context.Context, ep Endpoint, req Request) (*childv1.ModelResponse, error) {
	creq, err := chatRequest(ep.Model, req.Settings, req.Turn)
	if err != nil {
		return nil, err
	}
	c := o.client(ep.BaseURL, ep.Key)
	if ep.ReAct {
		return o.completeReAct(ctx, c, ep, creq, req)
	}
	out, made, err := o.stream(ctx, c, ep, creq, req.OnToken)
	if err != nil {
		return nil, &callError{text: fmt.Sprintf("%s (%d attempts)", cutText(err.Error(), ErrorTextMax/2), made), cause: err}
	}
	return responseOf(out), nil
}

// completeReAct makes a ReAct endpoint's call: the conversation rendered
// for a model without tools, its answer parsed, and one bounded repair
// turn that tells the model what was wrong when it is not valid ReAct.
func (o *openAI) completeReAct(ctx context.Context, c *openai.Client, ep Endpoint, creq openai.ChatCompletionRequest, req Request) (*childv1.ModelResponse, error) {
	creq.Tools = nil
	creq.Messages = reactMessages(req.Turn.GetMessages(), req.Turn.GetTools())
	out, made, err := o.stream(ctx, c, ep, creq, req.OnToken)
	if err != nil {
		return nil, &callError{text: fmt.Sprintf("%s (%d attempts)", cutText(err.Error(), ErrorTextMax/2), made), cause: err}
	}
	usage := out.Usage
	text := out.Choices[0].Message.Content
	turn, perr := parseReAct(text)
	if perr != nil {
		o.log.Info("model output is not valid ReAct; one repair turn", "model", ep.Model, "err", perr)
		creq.Messages = append(creq.Messages,
			openai.ChatCompletionMessage{Role: openai.ChatMessageRoleAssistant, Content: text},
			openai.ChatCompletionMessage{Role: openai.ChatMessageRoleUser, Content: reactRepair(perr)})
		out, made, err = o.stream(ctx, c, ep, creq, req.OnToken)
		if err != nil {
			return nil, &callError{text: fmt.Sprintf("repair turn after invalid ReAct output (%s): %s (%d attempts)", cutText(perr.Error(), 512), cutText(err.Error(), ErrorTextMax/2), made), cause: err}
		}
		usage.PromptTokens += out.Usage.PromptTokens
		usage.CompletionTokens += out.Usage.CompletionTokens
		usage.TotalTokens += out.Usage.TotalTokens
		if turn, perr = parseReAct(out.Choices[0].Message.Content); perr != nil {
			return nil, &callError{text: fmt.Sprintf("output does not follow the JSON ReAct protocol after one repair turn: %v", perr), cause: perr}
		}
	}
	out.Usage = usage
	resp := responseOf(out)
	resp.Message, resp.FinishReason = reactResponse(turn)
	return resp, nil
}

// stream makes one streamed completion under the retry loop; it returns
// the answer, how many attempts were made and the last error.
func (o *openAI) stream(ctx context.Context, c *openai.Client, ep Endpoint, creq openai.ChatCompletionRequest, onToken func(string)) (openai.ChatCompletionResponse, int, error) {
	var out openai.ChatCompletionResponse
	made, err := o.retry.do(ctx, ep, func(ctx context.Context) error {
		var err error
		out, err = streamCompletion(ctx, c, creq, onToken)
		if err == nil && len(out.Choices) == 0 {
			err = errors.New("the answer has no choices")
		}
		return err
	}, retryable)
	return out, made, err
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

// responseOf is the ModelResponse of a completion.
func responseOf(out openai.ChatCompletionResponse) *childv1.ModelResponse {
	ch := out.Choices[0]
	msg := &childv1.Message{Role: "assistant", Content: ch.Message.Content}
	for _, tc := range ch.Message.ToolCalls {
		msg.ToolCalls = append(msg.ToolCalls, &agentmeshv1.ToolCall{Id: tc.ID, Name: tc.Function.Name, Arguments: tc.Function.Arguments})
	}
	resp := &childv1.ModelResponse{Message: msg, Model: out.Model, FinishReason: string(ch.FinishReason)}
	resp.Usage = &agentmeshv1.Usage{
		PromptTokens:     int64(out.Usage.PromptTokens),
		CompletionTokens: int64(out.Usage.CompletionTokens),
		TotalTokens:      int64(out.Usage.TotalTokens),
	}
	return resp
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
