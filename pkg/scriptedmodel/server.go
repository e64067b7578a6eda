package scriptedmodel

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentmesh/agentmesh/pkg/backoff"
)

// MaxRequestBytes bounds a request body.
const MaxRequestBytes = 32 << 20

// Server is the scripted model server. It is an http.Handler; Start also
// serves it on a listener of its own.
type Server struct {
	script *Script
	log    *slog.Logger
	mux    *http.ServeMux

	requests atomic.Int64
	// embedRequests counts embeddings requests (embed.go).
	embedRequests atomic.Int64
	// abandoned counts requests whose client went away while the turn's
	// delay ran, before any answer was written.
	abandoned atomic.Int64
	ids       atomic.Int64

	mu         sync.Mutex
	misbehaved map[[2]int]int   // (scenario, turn) → error answers given
	byTurn     map[int]int64    // conversation position (assistant messages so far) → requests
	byScenario map[[2]int]int64 // (scenario, position) → requests

	// rec remembers what the latest requests carried (record.go).
	rec received
	// times: when requests came; admitted: those the rate limit let
	// through, in its window; limited: those it refused (quirks.go).
	times    []time.Time
	admitted []time.Time
	limited  int64
	// cached: the prompt prefixes an Anthropic request marked for caching
	// (anthropic.go); anthropicKey, when set, is the x-api-key it wants.
	cached       map[string]bool
	anthropicKey string

	srvMu sync.Mutex
	srv   *http.Server
	url   string
}

// Option configures a Server.
type Option func(*Server)

// WithLogger sets the logger (slog.Default() otherwise).
func WithLogger(l *slog.Logger) Option { return func(s *Server) { s.log = l } }

// New returns a server driven by script (DefaultScript when nil). The
// script must come from ParseScript, LoadScript or DefaultScript.
func New(script *Script, opts ...Option) *Server {
	if script == nil {
		script = DefaultScript()
	}
	s := &Server{script: script, log: slog.Default(), misbehaved: map[[2]int]int{}}
	for _, o := range opts {
		o(s)
	}
	s.mux = http.NewServeMux()
	s.mux.HandleFunc("POST /v1/chat/completions", s.chat)
	s.mux.HandleFunc("POST /v1/messages", s.messages)
	s.mux.HandleFunc("GET /v1/models", s.models)
	s.mux.HandleFunc("POST /v1/embeddings", s.embeddings)
	return s
}

// ServeHTTP serves the OpenAI-compatible endpoints.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// Start listens on addr ("127.0.0.1:0" picks a port) and serves in the
// background. It returns the base URL for OpenAI clients ("http://host:port/v1").
func (s *Server) Start(addr string) (string, error) {
	s.srvMu.Lock()
	defer s.srvMu.Unlock()
	if s.srv != nil {
		return "", errors.New("scriptedmodel: already started")
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", fmt.Errorf("scriptedmodel: listen: %w", err)
	}
	srv := &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	s.srv = srv
	s.url = "http://" + ln.Addr().String() + "/v1"
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("scripted model server stopped", "err", err)
		}
	}()
	s.log.Info("scripted model server listening — a testing and demo aid, not a real model; configure a real OpenAI-compatible model for real answers",
		"url", s.url, "model", s.modelName(""), "scenarios", len(s.script.Scenarios))
	return s.url, nil
}

// URL returns the base URL Start listens on ("" before Start).
func (s *Server) URL() string {
	s.srvMu.Lock()
	defer s.srvMu.Unlock()
	return s.url
}

// Close stops the server started by Start, ending open requests.
func (s *Server) Close() error {
	s.srvMu.Lock()
	defer s.srvMu.Unlock()
	if s.srv == nil {
		return nil
	}
	err := s.srv.Close()
	s.srv = nil
	return err
}

// Requests returns how many chat completion requests the server received
// (errors and injected failures included).
func (s *Server) Requests() int64 { return s.requests.Load() }

// Abandoned returns how many requests the client gave up (its connection
// closed, its context ended) while the model was still thinking — during a
// turn's delay_ms, before any answer was written: answers nobody received.
func (s *Server) Abandoned() int64 { return s.abandoned.Load() }

// RequestsAt returns how many requests asked for turn k: conversations that
// already held k assistant messages. A turn asked for twice was paid twice.
func (s *Server) RequestsAt(k int) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.byTurn[k]
}

// RequestsOf returns how many requests scenario (its index in the script)
// answered at turn k: per-scenario RequestsAt, for scripts whose agents
// each have their own scenario.
func (s *Server) RequestsOf(scenario, k int) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.byScenario[[2]int{scenario, k}]
}

func (s *Server) modelName(requested string) string {
	if requested != "" {
		return requested
	}
	if s.script.Model != "" {
		return s.script.Model
	}
	return "scripted"
}

// ---- wire types ----

type chatRequest struct {
	Model         string        `json:"model"`
	Messages      []chatMessage `json:"messages"`
	Stream        bool          `json:"stream"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	ResponseFormat *struct {
		Type       string `json:"type"`
		JSONSchema *struct {
			Name string `json:"name"`
		} `json:"json_schema"`
	} `json:"response_format"`
}

// format is the name of the JSON schema the request asks the answer to
// follow ("" when it asks for none).
func (r *chatRequest) format() string {
	if r.ResponseFormat == nil || r.ResponseFormat.Type != "json_schema" || r.ResponseFormat.JSONSchema == nil {
		return ""
	}
	return r.ResponseFormat.JSONSchema.Name
}

type chatMessage struct {
	Role       string          `json:"role"`
	Content    json.RawMessage `json:"content"`
	ToolCalls  []wireToolCall  `json:"tool_calls,omitempty"`
	ToolCallID string          `json:"tool_call_id,omitempty"`
}

// text returns the message's content: a string, or the text parts of a
// list of content parts.
func (m chatMessage) text() string {
	var s string
	if err := json.Unmarshal(m.Content, &s); err == nil {
		return s
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(m.Content, &parts); err == nil {
		var b strings.Builder
		for _, p := range parts {
			b.WriteString(p.Text)
		}
		return b.String()
	}
	return ""
}

type wireToolCall struct {
	Index    *int   `json:"index,omitempty"`
	ID       string `json:"id,omitempty"`
	Type     string `json:"type,omitempty"`
	Function struct {
		Name      string `json:"name,omitempty"`
		Arguments string `json:"arguments"`
		// ArgumentsObject, when set, is sent as "arguments" instead
		// (QuirkArgumentsObject).
		ArgumentsObject json.RawMessage `json:"-"`
	} `json:"function"`
}

// MarshalJSON sends the arguments as an object when ArgumentsObject is set.
func (c wireToolCall) MarshalJSON() ([]byte, error) {
	type fn struct {
		Name      string          `json:"name,omitempty"`
		Arguments json.RawMessage `json:"arguments"`
	}
	args := c.Function.ArgumentsObject
	if args == nil {
		args, _ = json.Marshal(c.Function.Arguments)
	}
	return json.Marshal(struct {
		Index    *int   `json:"index,omitempty"`
		ID       string `json:"id,omitempty"`
		Type     string `json:"type,omitempty"`
		Function fn     `json:"function"`
	}{c.Index, c.ID, c.Type, fn{c.Function.Name, args}})
}

type wireUsage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

type wireMessage struct {
	Role             string         `json:"role,omitempty"`
	Content          *string        `json:"content,omitempty"`
	ReasoningContent *string        `json:"reasoning_content,omitempty"`
	ToolCalls        []wireToolCall `json:"tool_calls,omitempty"`
}

type wireChoice struct {
	Index        int          `json:"index"`
	Message      *wireMessage `json:"message,omitempty"`
	Delta        *wireMessage `json:"delta,omitempty"`
	FinishReason *string      `json:"finish_reason"`
}

type wireResponse struct {
	ID      string       `json:"id"`
	Object  string       `json:"object"`
	Created int64        `json:"created"`
	Model   string       `json:"model"`
	Choices []wireChoice `json:"choices"`
	Usage   *wireUsage   `json:"usage,omitempty"`
}

// answer is a turn rendered for one request.
type answer struct {
	content      string
	calls        []wireToolCall
	usage        wireUsage
	finishReason string
}

// ---- handlers ----

func (s *Server) models(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{
		"object": "list",
		"data": []map[string]any{{
			"id": s.modelName(""), "object": "model", "created": 0, "owned_by": "agentmesh-scripted",
		}},
	})
}

func (s *Server) chat(w http.ResponseWriter, r *http.Request) {
	s.requests.Add(1)
	var raw map[string]json.RawMessage
	body, err := readBody(w, r)
	if err == nil {
		err = json.Unmarshal(body, &raw)
	}
	var req chatRequest
	if err == nil {
		err = json.Unmarshal(body, &req)
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "request body is not a chat completion request: "+err.Error())
		return
	}
	if len(req.Messages) == 0 {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "messages must not be empty")
		return
	}
	if field := s.refusedField(raw, req); field != "" {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "Unrecognized request argument supplied: "+field)
		return
	}
	s.remember(req.Messages)
	c := conversation{model: req.Model, format: req.format(), stream: req.Stream}
	c.includeUsage = req.StreamOptions != nil && req.StreamOptions.IncludeUsage
	var turnTools []string // the tool results since the last assistant message
	for _, m := range req.Messages {
		c.promptWords += words(m.text())
		for _, tc := range m.ToolCalls {
			c.promptWords += words(tc.Function.Arguments)
		}
		switch m.Role {
		case "user":
			if c.input == "" {
				c.input = m.text()
			}
		case "assistant":
			c.assistants++
			turnTools = nil
		case "tool":
			c.lastTool = m.text()
			turnTools = append(turnTools, m.text())
		}
	}
	c.turnTools = strings.Join(turnTools, "\n")
	s.answerTurn(w, r, c, openAIWire{s: s})
}

// conversation is what a request asks, whichever wire format it came in.
type conversation struct {
	model, format string
	input         string
	lastTool      string
	turnTools     string // the tool results that answered the last turn
	assistants    int    // the assistant turns so far: the turn asked for
	promptWords   int
	stream        bool
	includeUsage  bool
	// cache (Anthropic): the request marked a prefix for caching; key
	// names it.
	cacheKey    string
	cacheTokens int
}

// wire writes answers in one wire format.
type wire interface {
	error(w http.ResponseWriter, status int, msg string)
	answer(w http.ResponseWriter, ctx context.Context, c conversation, a answer, chunkDelay time.Duration)
}

// answerTurn answers c: the rate limit, the scenario and its turn, the
// turn's delay and injected failures, then the answer in the wire's
// format.
func (s *Server) answerTurn(w http.ResponseWriter, r *http.Request, c conversation, wr wire) {
	if wait, limited := s.rateLimited(); limited {
		w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(wait.Seconds()))))
		wr.error(w, http.StatusTooManyRequests, "scripted rate limit: too many requests in the window")
		return
	}
	si := s.scenarioFor(c)
	if si < 0 {
		wr.error(w, http.StatusNotFound, "no scenario of the script matches the first user message")
		return
	}
	sc := s.script.Scenarios[si]
	s.count(si, c.assistants)
	k := c.assistants
	past := k >= len(sc.Turns)
	if past {
		k = len(sc.Turns) - 1
	}
	turn := sc.Turns[k]
	if past {
		turn = Turn{Content: turn.Content, DelayMS: turn.DelayMS}
	}
	if turn.DelayMS > 0 {
		t := time.NewTimer(time.Duration(turn.DelayMS) * time.Millisecond)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			s.abandoned.Add(1)
			return
		}
	}
	if (turn.Status != 0 || turn.Garbage) && s.misbehave(si, k, turn.Times) {
		if turn.Status != 0 {
			if turn.RetryAfter != "" {
				w.Header().Set("Retry-After", turn.RetryAfter)
			}
			wr.error(w, turn.Status, fmt.Sprintf("scripted HTTP %d (scenario %d, turn %d)", turn.Status, si, k))
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte("<html>this is not JSON, on purpose (scripted garbage)"))
		return
	}
	a := render(turn, k, c)
	wr.answer(w, r.Context(), c, a, time.Duration(turn.ChunkDelayMS)*time.Millisecond)
}

// scenarioFor is the index of the scenario that answers c (-1: none).
func (s *Server) scenarioFor(c conversation) int {
	for i, sc := range s.script.Scenarios {
		if sc.Format != "" && sc.Format != c.format {
			continue
		}
		if (sc.re == nil || sc.re.MatchString(c.input)) && (sc.Model == "" || sc.Model == c.model) {
			return i
		}
	}
	return -1
}

// count counts a request for turn k of scenario si.
func (s *Server) count(si, k int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.byTurn == nil {
		s.byTurn = map[int]int64{}
	}
	s.byTurn[k]++
	if s.byScenario == nil {
		s.byScenario = map[[2]int]int64{}
	}
	s.byScenario[[2]int{si, k}]++
}

// readBody reads a request body, at most MaxRequestBytes.
func readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	return io.ReadAll(http.MaxBytesReader(w, r.Body, MaxRequestBytes))
}

// openAIWire answers in the Chat Completions format.
type openAIWire struct{ s *Server }

func (o openAIWire) error(w http.ResponseWriter, status int, msg string) {
	writeError(w, status, "scripted_error", msg)
}

func (o openAIWire) answer(w http.ResponseWriter, ctx context.Context, c conversation, a answer, chunkDelay time.Duration) {
	id := fmt.Sprintf("chatcmpl-scripted-%d", o.s.ids.Add(1))
	model := o.s.modelName(c.model)
	if o.s.has(QuirkToolCallsAsText) {
		a = callsAsText(a)
	}
	if c.stream {
		o.s.stream(w, ctx, id, model, a, c.includeUsage, chunkDelay)
		return
	}
	content := a.content
	fr := a.finishReason
	writeJSON(w, http.StatusOK, wireResponse{
		ID: id, Object: "chat.completion", Created: time.Now().Unix(), Model: model,
		Choices: []wireChoice{{Message: &wireMessage{Role: "assistant", Content: &content, ToolCalls: a.calls}, FinishReason: &fr}},
		Usage:   &a.usage,
	})
}

// misbehave reports whether this request gets the turn's injected failure.
func (s *Server) misbehave(scenario, turn, times int) bool {
	if times == 0 {
		return true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	key := [2]int{scenario, turn}
	if s.misbehaved[key] >= times {
		return false
	}
	s.misbehaved[key]++
	return true
}

func render(t Turn, k int, c conversation) answer {
	fill := strings.NewReplacer("{{input}}", c.input, "{{last_tool_result}}", c.lastTool, "{{tool_results}}", c.turnTools)
	a := answer{content: fill.Replace(t.Content), finishReason: t.FinishReason}
	for i, tc := range t.ToolCalls {
		wc := wireToolCall{ID: tc.ID, Type: "function"}
		if wc.ID == "" {
			wc.ID = fmt.Sprintf("call_%d_%d", k, i)
		}
		wc.Function.Name = tc.Name
		wc.Function.Arguments = renderArguments(tc.Arguments, fill)
		a.calls = append(a.calls, wc)
	}
	if a.finishReason == "" {
		a.finishReason = "stop"
		if len(a.calls) > 0 {
			a.finishReason = "tool_calls"
		}
	}
	if t.Usage != nil {
		a.usage = wireUsage{PromptTokens: t.Usage.PromptTokens, CompletionTokens: t.Usage.CompletionTokens}
	} else {
		a.usage.PromptTokens = c.promptWords
		a.usage.CompletionTokens = words(a.content)
		for _, call := range a.calls {
			a.usage.CompletionTokens += 1 + words(call.Function.Arguments)
		}
		a.usage.PromptTokens = max(a.usage.PromptTokens, 1)
		a.usage.CompletionTokens = max(a.usage.CompletionTokens, 1)
	}
	a.usage.TotalTokens = a.usage.PromptTokens + a.usage.CompletionTokens
	return a
}

// words approximates tokens: one per word (and per punctuation-joined run).
func words(s string) int {
	return len(strings.FieldsFunc(s, func(r rune) bool {
		return r == ' ' || r == '\n' || r == '\t' || r == '"' || r == ',' || r == ':' || r == '{' || r == '}'
	}))
}

// renderArguments fills placeholders inside the strings of a JSON value
// and encodes it; a JSON string is sent as is (after filling).
func renderArguments(raw json.RawMessage, fill *strings.Replacer) string {
	if len(raw) == 0 {
		return "{}"
	}
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return string(raw)
	}
	if s, ok := v.(string); ok {
		return fill.Replace(s)
	}
	out, err := json.Marshal(fillValue(v, fill))
	if err != nil {
		return string(raw)
	}
	return string(out)
}

func fillValue(v any, fill *strings.Replacer) any {
	switch x := v.(type) {
	case string:
		return fill.Replace(x)
	case []any:
		for i := range x {
			x[i] = fillValue(x[i], fill)
		}
	case map[string]any:
		for k := range x {
			x[k] = fillValue(x[k], fill)
		}
	}
	return v
}

// stream answers as server-sent events: a role chunk, content chunks,
// one chunk per tool call (id and name, then arguments), the finish
// chunk, a usage chunk when asked for, then [DONE] — as OpenAI does, or
// as the script's quirks say (quirks.go).
func (s *Server) stream(w http.ResponseWriter, ctx context.Context, id, model string, a answer, includeUsage bool, chunkDelay time.Duration) {
	flusher, _ := w.(http.Flusher)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	created := time.Now().Unix()
	send := func(choices []wireChoice, usage *wireUsage) bool {
		if ctx.Err() != nil {
			return false
		}
		if choices == nil {
			choices = []wireChoice{}
		}
		data, _ := json.Marshal(wireResponse{ID: id, Object: "chat.completion.chunk", Created: created, Model: model, Choices: choices, Usage: usage})
		if _, err := fmt.Fprintf(w, "data: %s\n\n", data); err != nil {
			return false
		}
		if flusher != nil {
			flusher.Flush()
		}
		return true
	}
	delta := func(m wireMessage) []wireChoice { return []wireChoice{{Delta: &m}} }
	empty := ""
	if !send(delta(wireMessage{Role: "assistant", Content: &empty}), nil) {
		return
	}
	if s.has(QuirkReasoning) {
		thought := "Let me think about it."
		if !send(delta(wireMessage{ReasoningContent: &thought}), nil) {
			return
		}
	}
	for _, piece := range chunks(a.content) {
		if chunkDelay > 0 && !backoff.Sleep(ctx, chunkDelay) {
			return
		}
		if !send(delta(wireMessage{Content: &piece}), nil) {
			return
		}
	}
	for i, c := range a.calls {
		for _, tc := range s.callChunks(i, c) {
			if !send(delta(wireMessage{ToolCalls: []wireToolCall{tc}}), nil) {
				return
			}
		}
	}
	fr := a.finishReason
	if !send([]wireChoice{{Delta: &wireMessage{}, FinishReason: &fr}}, nil) {
		return
	}
	if includeUsage && !s.has(QuirkNoUsage) && !send(nil, &a.usage) {
		return
	}
	if !s.has(QuirkNoDone) {
		_, _ = fmt.Fprint(w, "data: [DONE]\n\n")
	}
	if flusher != nil {
		flusher.Flush()
	}
}

// chunks cuts s into pieces of about 16 bytes on rune boundaries.
func chunks(s string) []string {
	var out []string
	for len(s) > 0 {
		n := min(16, len(s))
		for n < len(s) && !utf8RuneStart(s[n]) {
			n++
		}
		out = append(out, s[:n])
		s = s[n:]
	}
	return out
}

func utf8RuneStart(b byte) bool { return b&0xC0 != 0x80 }

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, typ, msg string) {
	writeJSON(w, status, map[string]any{"error": map[string]any{
		"message": msg, "type": typ, "param": nil, "code": nil,
	}})
}
