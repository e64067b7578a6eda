package llm

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strings"

	childv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/child/v1"
)

// anthropic is the Provider of Anthropic's native Messages API: POST
// <base>/v1/messages with x-api-key and anthropic-version, streamed
// (anthropic_stream.go). The conversation is turned into its shape: the
// system messages become the top-level system prompt; assistant tool calls
// become tool_use blocks (their arguments the input object); tool results
// become tool_result blocks of a user turn; turns of one role in a row are
// merged, as the API wants them alternating. max_tokens is required: the
// agent's, else the model table's, else DefaultAnthropicMaxTokens.
//
// Prompt caching where it saves cost: a cache breakpoint (cache_control
// ephemeral) on the system prompt — it caches the tools and the system
// prompt, the prefix every turn of every task of the agent repeats — and,
// once the conversation has an assistant turn (an agent loop, whose next
// turn repeats it all), on the last block of the conversation, so the
// next turn reads it from the cache at a tenth of the price instead of
// paying for it again. A prefix shorter than the provider's minimum
// (about 1024 tokens) is not marked: it would not be cached, and a write
// costs more than a read.
type anthropic struct {
	http  *http.Client
	retry retrier
	log   *slog.Logger
}

// Anthropic's constants.
const (
	// AnthropicVersion is the API version header the requests carry.
	AnthropicVersion = "2023-06-01"
	// DefaultAnthropicMaxTokens is max_tokens when neither the agent nor
	// the model table sets one.
	DefaultAnthropicMaxTokens = 4096
	// cacheMinBytes: a prefix shorter than this (about 1024 tokens, the
	// smallest the provider caches) gets no cache breakpoint.
	cacheMinBytes = 4096
)

// Complete makes the call (Provider).
func (p *anthropic) Complete(ctx context.Context, ep Endpoint, req Request) (*childv1.ModelResponse, error) {
	body, err := anthropicBody(ep, req)
	if err != nil {
		return nil, err
	}
	var resp *childv1.ModelResponse
	made, err := p.retry.do(ctx, ep, callOrNew(ctx), func(ctx context.Context) error {
		var err error
		resp, err = p.once(ctx, ep, body, req.OnToken)
		return err
	})
	if err != nil {
		return nil, failed(made, err)
	}
	return resp, nil
}

// messagesURL is the Messages endpoint of a base URL given with or
// without its /v1.
func messagesURL(base string) string {
	base = strings.TrimRight(base, "/")
	if strings.HasSuffix(base, "/v1") {
		return base + "/messages"
	}
	return base + "/v1/messages"
}

func (p *anthropic) once(ctx context.Context, ep Endpoint, body []byte, onToken func(string)) (*childv1.ModelResponse, error) {
	h := http.Header{}
	h.Set("anthropic-version", AnthropicVersion)
	if ep.Key != "" {
		h.Set("x-api-key", ep.Key)
	}
	return exchange(ctx, p.http, post{
		url:     messagesURL(ep.BaseURL),
		header:  h,
		body:    body,
		onToken: onToken,
		read:    anthropicReaders,
	})
}

// anthropicReaders read a Messages answer.
var anthropicReaders = readers{whole: readAnthropicWhole, stream: readAnthropicStream}

// The Messages request.
type anRequest struct {
	Model       string      `json:"model"`
	MaxTokens   int32       `json:"max_tokens"`
	System      []anBlock   `json:"system,omitempty"`
	Messages    []anMessage `json:"messages"`
	Tools       []anTool    `json:"tools,omitempty"`
	Temperature *float32    `json:"temperature,omitempty"`
	Stream      bool        `json:"stream"`
}

type anMessage struct {
	Role    string    `json:"role"`
	Content []anBlock `json:"content"`
}

// anBlock is a content block of a request: text, tool_use or
// tool_result.
type anBlock struct {
	Type         string          `json:"type"`
	Text         string          `json:"text,omitempty"`
	ID           string          `json:"id,omitempty"`
	Name         string          `json:"name,omitempty"`
	Input        json.RawMessage `json:"input,omitempty"`
	ToolUseID    string          `json:"tool_use_id,omitempty"`
	Content      string          `json:"content,omitempty"`
	CacheControl *anCache        `json:"cache_control,omitempty"`
}

type anCache struct {
	Type string `json:"type"`
}

type anTool struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	InputSchema json.RawMessage `json:"input_schema"`
}

// anthropicBody is the request body of req.
func anthropicBody(ep Endpoint, req Request) ([]byte, error) {
	r := anRequest{Model: ep.Model, Stream: true, MaxTokens: maxTokens(ep, req)}
	if r.MaxTokens <= 0 {
		r.MaxTokens = DefaultAnthropicMaxTokens
	}
	if s := req.Settings; s != nil && s.Temperature != nil {
		t := min(s.GetTemperature(), 1) // Anthropic's range is 0-1
		r.Temperature = &t
	}
	size := 0
	for _, t := range req.Turn.GetTools() {
		if !json.Valid([]byte(t.ParametersJson)) {
			return nil, fmt.Errorf("tool %s: parameters are not JSON", t.Name)
		}
		r.Tools = append(r.Tools, anTool{Name: t.Name, Description: t.Description, InputSchema: json.RawMessage(t.ParametersJson)})
		size += len(t.Name) + len(t.Description) + len(t.ParametersJson)
	}
	assistant := false
	for _, m := range req.Turn.GetMessages() {
		size += len(m.Content)
		switch m.Role {
		case "system":
			if m.Content != "" {
				r.System = append(r.System, anBlock{Type: "text", Text: m.Content})
			}
		case "assistant":
			assistant = true
			r.Messages = appendTurn(r.Messages, "assistant", assistantBlocks(m)...)
		case "tool":
			r.Messages = appendTurn(r.Messages, "user", anBlock{Type: "tool_result", ToolUseID: m.ToolCallId, Content: m.Content})
		default:
			if m.Content != "" {
				r.Messages = appendTurn(r.Messages, "user", anBlock{Type: "text", Text: m.Content})
			}
		}
	}
	if n := len(r.System); n > 0 && size >= cacheMinBytes {
		r.System[n-1].CacheControl = &anCache{Type: "ephemeral"}
	}
	if n := len(r.Messages); n > 0 && assistant && size >= cacheMinBytes {
		last := r.Messages[n-1].Content
		last[len(last)-1].CacheControl = &anCache{Type: "ephemeral"}
	}
	return json.Marshal(r)
}

// assistantBlocks are an assistant message's blocks: its text, then its
// tool calls as tool_use blocks.
func assistantBlocks(m *childv1.Message) []anBlock {
	var out []anBlock
	if m.Content != "" {
		out = append(out, anBlock{Type: "text", Text: m.Content})
	}
	for _, c := range m.ToolCalls {
		out = append(out, anBlock{Type: "tool_use", ID: c.Id, Name: c.Name, Input: inputObject(c.Arguments)})
	}
	return out
}

// inputObject is a tool call's arguments as the input object the API
// wants: the arguments when they are a JSON object, else an object that
// holds them as text.
func inputObject(args string) json.RawMessage {
	trimmed := strings.TrimSpace(args)
	if trimmed == "" {
		return json.RawMessage(`{}`)
	}
	var obj map[string]json.RawMessage
	if json.Unmarshal([]byte(trimmed), &obj) == nil && obj != nil {
		return json.RawMessage(trimmed)
	}
	b, _ := json.Marshal(map[string]string{"arguments": args})
	return b
}

// appendTurn adds blocks as a turn of role, merged into the previous turn
// when it has the same role (the API wants them alternating).
func appendTurn(msgs []anMessage, role string, blocks ...anBlock) []anMessage {
	if len(blocks) == 0 {
		return msgs
	}
	if n := len(msgs); n > 0 && msgs[n-1].Role == role {
		msgs[n-1].Content = append(msgs[n-1].Content, blocks...)
		return msgs
	}
	return append(msgs, anMessage{Role: role, Content: blocks})
}
