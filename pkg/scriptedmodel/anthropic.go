package scriptedmodel

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/agentmesh/agentmesh/pkg/backoff"
)

// The Anthropic wire format: POST /v1/messages, as Anthropic's Messages
// API answers it, so the native Anthropic client runs against a real HTTP
// server in tests. The same script answers: turn k answers a conversation
// that holds k assistant turns; tool results are the tool_result blocks.
// It checks what the API checks and a client can get wrong — the
// anthropic-version header, max_tokens, roles that alternate and start
// with the user, every tool_result answering a tool_use of the turn
// before it, the key (WithAnthropicKey) — answering 400 or 401 with the
// API's error shape. Errors are the API's: invalid_request_error (400),
// authentication_error (401), permission_error (403), not_found_error
// (404), request_too_large (413), rate_limit_error (429), api_error
// (500), overloaded_error (529). Streams are the API's events:
// message_start, content_block_start/delta/stop (text, tool_use with
// input_json_delta), message_delta, message_stop. A request whose system
// prompt carries cache_control is counted as the API counts a cached
// prefix: written to the cache the first time (cache_creation_input_tokens),
// read from it after (cache_read_input_tokens).

// WithAnthropicKey makes /v1/messages refuse a request whose x-api-key is
// not key (401 authentication_error).
func WithAnthropicKey(key string) Option { return func(s *Server) { s.anthropicKey = key } }

type anRequest struct {
	Model     string          `json:"model"`
	MaxTokens int             `json:"max_tokens"`
	Stream    bool            `json:"stream"`
	System    json.RawMessage `json:"system"`
	Messages  []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	} `json:"messages"`
}

// anBlock is a content block of a request.
type anBlock struct {
	Type      string          `json:"type"`
	Text      string          `json:"text"`
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Input     json.RawMessage `json:"input"`
	ToolUseID string          `json:"tool_use_id"`
	Content   json.RawMessage `json:"content"`
	Cache     json.RawMessage `json:"cache_control"`
}

// blocks reads a content: a string (one text block) or a list of blocks.
func blocks(raw json.RawMessage) ([]anBlock, error) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return []anBlock{{Type: "text", Text: s}}, nil
	}
	var out []anBlock
	err := json.Unmarshal(raw, &out)
	return out, err
}

// blockText is a block's text, or a tool_result's content as text.
func blockText(b anBlock) string {
	if b.Type != "tool_result" {
		return b.Text
	}
	inner, err := blocks(b.Content)
	if err != nil {
		return ""
	}
	var t strings.Builder
	for _, x := range inner {
		t.WriteString(x.Text)
	}
	return t.String()
}

func (s *Server) messages(w http.ResponseWriter, r *http.Request) {
	s.requests.Add(1)
	wr := anthropicWire{s: s}
	if r.Header.Get("anthropic-version") == "" {
		wr.error(w, http.StatusBadRequest, "anthropic-version: header is required")
		return
	}
	if s.anthropicKey != "" && r.Header.Get("x-api-key") != s.anthropicKey {
		wr.error(w, http.StatusUnauthorized, "invalid x-api-key")
		return
	}
	body, err := readBody(w, r)
	var req anRequest
	if err == nil {
		err = json.Unmarshal(body, &req)
	}
	if err != nil {
		wr.error(w, http.StatusBadRequest, "request body is not a Messages request: "+err.Error())
		return
	}
	c, err := s.anthropicConversation(req)
	if err != nil {
		wr.error(w, http.StatusBadRequest, err.Error())
		return
	}
	s.answerTurn(w, r, c, wr)
}

// anthropicConversation reads req as the API would, refusing what it
// refuses.
func (s *Server) anthropicConversation(req anRequest) (conversation, error) {
	c := conversation{model: req.Model, stream: req.Stream, includeUsage: true}
	if req.MaxTokens <= 0 {
		return c, fmt.Errorf("max_tokens: Field required")
	}
	if len(req.Messages) == 0 || req.Messages[0].Role != "user" {
		return c, fmt.Errorf("messages: the first message must use the \"user\" role")
	}
	sys, err := s.systemPrompt(req.System, &c)
	if err != nil {
		return c, err
	}
	conv := []ReceivedMessage{{Role: "system", Text: sys}}
	c.promptWords = words(sys)
	var pending map[string]bool // the tool_use ids of the last assistant turn
	var turnTools []string
	prev := ""
	for i, m := range req.Messages {
		if m.Role == prev || (m.Role != "user" && m.Role != "assistant") {
			return c, fmt.Errorf("messages.%d: roles must alternate between \"user\" and \"assistant\"", i)
		}
		prev = m.Role
		bs, err := blocks(m.Content)
		if err != nil {
			return c, fmt.Errorf("messages.%d.content: %v", i, err)
		}
		if m.Role == "assistant" {
			c.assistants++
			turnTools, pending = nil, map[string]bool{}
		}
		for j, b := range bs {
			c.promptWords += words(blockText(b)) + words(string(b.Input))
			switch b.Type {
			case "tool_use":
				if m.Role != "assistant" || b.ID == "" || b.Name == "" || !json.Valid(b.Input) {
					return c, fmt.Errorf("messages.%d.content.%d: a tool_use needs an id, a name and an input object in an assistant turn", i, j)
				}
				pending[b.ID] = true
				conv = append(conv, ReceivedMessage{Role: "assistant", Tools: []string{b.Name}})
			case "tool_result":
				if m.Role != "user" || !pending[b.ToolUseID] {
					return c, fmt.Errorf("messages.%d.content.%d: tool_result block(s) provided when previous message does not have a matching tool_use %q", i, j, b.ToolUseID)
				}
				c.lastTool = blockText(b)
				turnTools = append(turnTools, c.lastTool)
				conv = append(conv, ReceivedMessage{Role: "tool", Text: c.lastTool})
			case "text":
				if b.Text == "" {
					return c, fmt.Errorf("messages.%d.content.%d: text content blocks must be non-empty", i, j)
				}
				if m.Role == "user" && c.input == "" {
					c.input = b.Text
				}
				conv = append(conv, ReceivedMessage{Role: m.Role, Text: b.Text})
			}
		}
	}
	c.turnTools = strings.Join(turnTools, "\n")
	s.rememberReceived(conv)
	return c, nil
}

// systemPrompt reads the system prompt (a string or text blocks) and
// notes a cache breakpoint on it.
func (s *Server) systemPrompt(raw json.RawMessage, c *conversation) (string, error) {
	if len(raw) == 0 {
		return "", nil
	}
	bs, err := blocks(raw)
	if err != nil {
		return "", fmt.Errorf("system: %v", err)
	}
	var b strings.Builder
	for _, x := range bs {
		b.WriteString(x.Text)
		if len(x.Cache) > 0 {
			c.cacheKey, c.cacheTokens = b.String(), words(b.String())
		}
	}
	return b.String(), nil
}

// anthropicWire answers in the Messages format.
type anthropicWire struct{ s *Server }

// anErrorTypes are the API's error types by status.
var anErrorTypes = map[int]string{
	400: "invalid_request_error", 401: "authentication_error", 403: "permission_error", 404: "not_found_error",
	413: "request_too_large", 429: "rate_limit_error", 500: "api_error", 529: "overloaded_error",
}

func (a anthropicWire) error(w http.ResponseWriter, status int, msg string) {
	typ := anErrorTypes[status]
	if typ == "" {
		typ = "api_error"
	}
	writeJSON(w, status, map[string]any{"type": "error", "error": map[string]any{"type": typ, "message": msg}})
}

// anUsage counts the prompt as the API does: the cached prefix apart.
func (a anthropicWire) usage(c conversation, ans answer) map[string]int {
	u := map[string]int{"input_tokens": ans.usage.PromptTokens, "output_tokens": ans.usage.CompletionTokens,
		"cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
	if c.cacheKey == "" {
		return u
	}
	s := a.s
	s.mu.Lock()
	seen := s.cached[c.cacheKey]
	if s.cached == nil || len(s.cached) > 1000 {
		s.cached = map[string]bool{}
	}
	s.cached[c.cacheKey] = true
	s.mu.Unlock()
	n := min(c.cacheTokens, u["input_tokens"])
	u["input_tokens"] -= n
	if seen {
		u["cache_read_input_tokens"] = n
	} else {
		u["cache_creation_input_tokens"] = n
	}
	return u
}

func anStopReason(finish string) string {
	switch finish {
	case "tool_calls":
		return "tool_use"
	case "length":
		return "max_tokens"
	case "content_filter":
		return "refusal"
	}
	return "end_turn"
}

func (a anthropicWire) answer(w http.ResponseWriter, ctx context.Context, c conversation, ans answer, chunkDelay time.Duration) {
	id := fmt.Sprintf("msg_scripted_%d", a.s.ids.Add(1))
	model := a.s.modelName(c.model)
	usage := a.usage(c, ans)
	var content []map[string]any
	if ans.content != "" {
		content = append(content, map[string]any{"type": "text", "text": ans.content})
	}
	for _, call := range ans.calls {
		content = append(content, map[string]any{"type": "tool_use", "id": toolUseID(call.ID), "name": call.Function.Name, "input": inputOf(call.Function.Arguments)})
	}
	if !c.stream {
		writeJSON(w, http.StatusOK, map[string]any{"id": id, "type": "message", "role": "assistant", "model": model,
			"content": content, "stop_reason": anStopReason(ans.finishReason), "stop_sequence": nil, "usage": usage})
		return
	}
	ev := newEventWriter(w)
	out := usage["output_tokens"]
	usage["output_tokens"] = 1
	ok := ev.send(ctx, "message_start", map[string]any{"type": "message_start", "message": map[string]any{
		"id": id, "type": "message", "role": "assistant", "model": model, "content": []any{}, "stop_reason": nil, "usage": usage}})
	ok = ok && ev.send(ctx, "ping", map[string]any{"type": "ping"})
	for i, blk := range content {
		ok = ok && a.block(ctx, ev, i, blk, chunkDelay)
	}
	ok = ok && ev.send(ctx, "message_delta", map[string]any{"type": "message_delta",
		"delta": map[string]any{"stop_reason": anStopReason(ans.finishReason), "stop_sequence": nil}, "usage": map[string]int{"output_tokens": out}})
	_ = ok && ev.send(ctx, "message_stop", map[string]any{"type": "message_stop"})
}

// block streams content block i: its start, its deltas, its stop.
func (a anthropicWire) block(ctx context.Context, ev *eventWriter, i int, blk map[string]any, chunkDelay time.Duration) bool {
	var pieces []string
	start := map[string]any{"type": blk["type"]}
	deltaType, field := "text_delta", "text"
	if blk["type"] == "text" {
		start["text"] = ""
		pieces = chunks(blk["text"].(string))
	} else {
		start["id"], start["name"], start["input"] = blk["id"], blk["name"], map[string]any{}
		deltaType, field = "input_json_delta", "partial_json"
		in, _ := json.Marshal(blk["input"])
		if string(in) != "{}" {
			pieces = chunks(string(in))
		}
	}
	if !ev.send(ctx, "content_block_start", map[string]any{"type": "content_block_start", "index": i, "content_block": start}) {
		return false
	}
	for _, p := range pieces {
		if chunkDelay > 0 && !backoff.Sleep(ctx, chunkDelay) {
			return false
		}
		if !ev.send(ctx, "content_block_delta", map[string]any{"type": "content_block_delta", "index": i, "delta": map[string]any{"type": deltaType, field: p}}) {
			return false
		}
	}
	return ev.send(ctx, "content_block_stop", map[string]any{"type": "content_block_stop", "index": i})
}

// toolUseID is a tool call's id in the API's form.
func toolUseID(id string) string {
	if strings.HasPrefix(id, "toolu_") {
		return id
	}
	return "toolu_" + id
}

// inputOf is a call's arguments as the input object ({} when they are not
// one: a script's malformed arguments).
func inputOf(args string) json.RawMessage {
	var obj map[string]json.RawMessage
	if json.Unmarshal([]byte(args), &obj) != nil || obj == nil {
		return json.RawMessage(`{}`)
	}
	return json.RawMessage(args)
}

// eventWriter writes named server-sent events.
type eventWriter struct {
	w       http.ResponseWriter
	flusher http.Flusher
}

func newEventWriter(w http.ResponseWriter) *eventWriter {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	f, _ := w.(http.Flusher)
	return &eventWriter{w: w, flusher: f}
}

func (e *eventWriter) send(ctx context.Context, name string, v any) bool {
	if ctx.Err() != nil {
		return false
	}
	data, _ := json.Marshal(v)
	if _, err := fmt.Fprintf(e.w, "event: %s\ndata: %s\n\n", name, data); err != nil {
		return false
	}
	if e.flusher != nil {
		e.flusher.Flush()
	}
	return true
}
