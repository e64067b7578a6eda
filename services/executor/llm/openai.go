package llm

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"strings"
	"sync"

	childv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/child/v1"
)

// openAI is the Provider of the OpenAI-compatible Chat Completions format
// (OpenAI, Azure OpenAI, Ollama, vLLM, llama.cpp's server, LM Studio,
// Groq, Together, OpenRouter, Gemini's compatible endpoint …): POST
// <base>/chat/completions, streamed (stream: true, stream_options.
// include_usage), with the conversation's tools as native tool calls and
// parallel_tool_calls. The stream is parsed here (openai_stream.go, with
// the bounded SSE reader), not by an SDK: real servers send what no SDK
// type holds (arguments as an object, a name in every chunk, an error
// object inside the stream).
//
// A server that refuses stream_options or parallel_tool_calls (400/422
// naming the field) is asked again at once without it, and the base URL
// is remembered as one that does not take it.
type openAI struct {
	http   *http.Client
	retry  retrier
	log    *slog.Logger
	quirks quirkMemory
}

func newOpenAI(hc *http.Client, retry retrier, log *slog.Logger) *openAI {
	return &openAI{http: hc, retry: retry, log: log}
}

// Complete makes the call (Provider).
func (o *openAI) Complete(ctx context.Context, ep Endpoint, req Request) (*childv1.ModelResponse, error) {
	var resp *childv1.ModelResponse
	made, err := o.retry.do(ctx, ep, callOrNew(ctx), func(ctx context.Context) error {
		var err error
		resp, err = o.try(ctx, ep, req)
		return err
	})
	if err != nil {
		return nil, failed(made, err)
	}
	return resp, nil
}

// try makes one request, and asks again at once without an optional field
// the server refused.
func (o *openAI) try(ctx context.Context, ep Endpoint, req Request) (*childv1.ModelResponse, error) {
	for range 3 {
		q := o.quirks.get(ep.BaseURL)
		body, sent, err := openAIBody(ep, req, q)
		if err != nil {
			return nil, err
		}
		resp, err := o.once(ctx, ep, body, req.OnToken)
		if field := refusedField(err, sent); field != "" {
			o.quirks.drop(ep.BaseURL, field)
			o.log.Warn("the model server refused an optional field; asking again without it, and never sending it to this server again",
				"url", redactURL(ep.BaseURL), "field", field)
			continue
		}
		return resp, err
	}
	return nil, unparsable("the server refused every optional field")
}

// once posts body and reads the answer: a stream, or a whole completion
// when the server answered JSON although a stream was asked for.
func (o *openAI) once(ctx context.Context, ep Endpoint, body []byte, onToken func(string)) (*childv1.ModelResponse, error) {
	h := http.Header{}
	if ep.Key != "" {
		h.Set("Authorization", "Bearer "+ep.Key)
	}
	return exchange(ctx, o.http, post{
		url:     strings.TrimRight(ep.BaseURL, "/") + "/chat/completions",
		header:  h,
		body:    body,
		onToken: onToken,
		read:    openAIReaders,
	})
}

// readers are a provider's two ways of reading an answer into an assembly.
type readers struct {
	whole  func(io.Reader, *assembly) error // the server answered JSON although a stream was asked for
	stream func(io.Reader, *assembly) error // the answer as a stream of events
}

// openAIReaders read a Chat Completions answer.
var openAIReaders = readers{whole: readOpenAIWhole, stream: readOpenAIStream}

// post is one request of either provider: body posted to url with header,
// each token of the answer passed to onToken, the answer read by read.
type post struct {
	url     string
	header  http.Header
	body    []byte
	onToken func(string)
	read    readers
}

// exchange is one request of either provider: p.body posted to p.url with
// p.header, the answer read as a stream (or whole, when the server answered
// JSON although a stream was asked for) and assembled; an error answer is
// an *httpError.
func exchange(ctx context.Context, hc *http.Client, p post) (*childv1.ModelResponse, error) {
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, p.url, bytes.NewReader(p.body))
	if err != nil {
		return nil, unparsable("request: %v", err)
	}
	hreq.Header = p.header
	hreq.Header.Set("Content-Type", "application/json")
	hreq.Header.Set("Accept", "text/event-stream")
	hresp, err := hc.Do(hreq)
	if err != nil {
		return nil, err
	}
	defer closeBody(hresp.Body)
	if hresp.StatusCode >= 300 {
		return nil, readHTTPError(hresp)
	}
	a := &assembly{onToken: p.onToken}
	read := p.read.stream
	if isJSON(hresp.Header.Get("Content-Type")) {
		read = p.read.whole
	}
	if err := read(hresp.Body, a); err != nil {
		return nil, err
	}
	return a.response()
}

// closeBody reads what is left of a body (the end of a stream after its
// last event; at most drainMax) and closes it, so its connection serves
// the next call instead of a new one being dialled.
func closeBody(b io.ReadCloser) {
	_, _ = io.Copy(io.Discard, io.LimitReader(b, drainMax))
	_ = b.Close()
}

// drainMax bounds what closeBody reads.
const drainMax = 64 << 10

// isJSON reports whether a Content-Type is JSON (not event-stream).
func isJSON(ct string) bool {
	mt, _, err := mime.ParseMediaType(ct)
	return err == nil && (mt == "application/json" || strings.HasSuffix(mt, "+json"))
}

// readHTTPError reads an error answer (its body already cut at
// ErrorBodyMax by the transport) into an *httpError.
func readHTTPError(resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, ErrorBodyMax+64))
	return &httpError{status: resp.StatusCode, msg: errorMessage(b)}
}

// errorMessage is the message of an error body: OpenAI's and Anthropic's
// {"error": {"message": …}}, vLLM's {"message": …}, FastAPI's
// {"detail": …}, or the text itself.
func errorMessage(b []byte) string {
	var body struct {
		Error json.RawMessage `json:"error"`
		// vLLM, llama.cpp: at the top level.
		Message string          `json:"message"`
		Detail  json.RawMessage `json:"detail"`
	}
	if json.Unmarshal(b, &body) == nil {
		var inner struct {
			Message string `json:"message"`
			Type    string `json:"type"`
		}
		var s string
		switch {
		case json.Unmarshal(body.Error, &inner) == nil && inner.Message != "":
			return cutBytes([]byte(strings.TrimSpace(inner.Type+": "+inner.Message)), ErrorTextMax/2)
		case json.Unmarshal(body.Error, &s) == nil && s != "":
			return cutBytes([]byte(s), ErrorTextMax/2)
		case body.Message != "":
			return cutBytes([]byte(body.Message), ErrorTextMax/2)
		case len(body.Detail) > 0:
			return cutBytes(body.Detail, ErrorTextMax/2)
		}
	}
	return cutBytes(b, ErrorTextMax/2)
}

// Optional fields of a request some servers refuse.
const (
	fieldStreamOptions     = "stream_options"
	fieldParallelToolCalls = "parallel_tool_calls"
)

// refusedField is the optional field the server's 400/422 names, among
// those sent ("" when it names none).
func refusedField(err error, sent []string) string {
	he, ok := err.(*httpError)
	if !ok || (he.status != http.StatusBadRequest && he.status != http.StatusUnprocessableEntity) {
		return ""
	}
	for _, f := range sent {
		if strings.Contains(he.msg, f) {
			return f
		}
	}
	return ""
}

// quirkMemory remembers, per base URL, the optional fields its server
// refused. Bounded: base URLs come from agent definitions.
type quirkMemory struct {
	mu      sync.Mutex
	refused map[string]map[string]bool
}

// maxQuirkURLs bounds quirkMemory.
const maxQuirkURLs = 1024

func (q *quirkMemory) get(baseURL string) map[string]bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.refused[baseURL]
}

func (q *quirkMemory) drop(baseURL, field string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.refused == nil || len(q.refused) >= maxQuirkURLs {
		q.refused = map[string]map[string]bool{}
	}
	m := map[string]bool{field: true}
	for f := range q.refused[baseURL] {
		m[f] = true
	}
	q.refused[baseURL] = m
}

// The Chat Completions request.
type oaRequest struct {
	Model             string           `json:"model"`
	Messages          []oaMessage      `json:"messages"`
	Tools             []oaTool         `json:"tools,omitempty"`
	ParallelToolCalls *bool            `json:"parallel_tool_calls,omitempty"`
	Temperature       *float32         `json:"temperature,omitempty"`
	MaxTokens         int32            `json:"max_tokens,omitempty"`
	Stream            bool             `json:"stream"`
	StreamOptions     *oaStreamOptions `json:"stream_options,omitempty"`
}

type oaStreamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

type oaMessage struct {
	Role       string       `json:"role"`
	Content    string       `json:"content,omitempty"`
	ToolCalls  []oaToolCall `json:"tool_calls,omitempty"`
	ToolCallID string       `json:"tool_call_id,omitempty"`
}

type oaToolCall struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

type oaTool struct {
	Type     string `json:"type"`
	Function struct {
		Name        string          `json:"name"`
		Description string          `json:"description,omitempty"`
		Parameters  json.RawMessage `json:"parameters"`
	} `json:"function"`
}

// openAIBody is the request body of req, without the fields the server
// refused; sent lists the optional fields it carries.
func openAIBody(ep Endpoint, req Request, refused map[string]bool) ([]byte, []string, error) {
	settings := req.Settings
	r := oaRequest{Model: ep.Model, Stream: true, MaxTokens: maxTokens(ep, req)}
	if settings != nil && settings.Temperature != nil {
		t := settings.GetTemperature()
		r.Temperature = &t
	}
	var sent []string
	if !refused[fieldStreamOptions] {
		r.StreamOptions = &oaStreamOptions{IncludeUsage: true}
		sent = append(sent, fieldStreamOptions)
	}
	for _, m := range req.Turn.GetMessages() {
		om := oaMessage{Role: m.Role, Content: m.Content, ToolCallID: m.ToolCallId}
		for _, tc := range m.ToolCalls {
			c := oaToolCall{ID: tc.Id, Type: "function"}
			c.Function.Name, c.Function.Arguments = tc.Name, tc.Arguments
			om.ToolCalls = append(om.ToolCalls, c)
		}
		r.Messages = append(r.Messages, om)
	}
	for _, t := range req.Turn.GetTools() {
		params := json.RawMessage(t.ParametersJson)
		if !json.Valid(params) {
			return nil, nil, fmt.Errorf("tool %s: parameters are not JSON", t.Name)
		}
		tool := oaTool{Type: "function"}
		tool.Function.Name, tool.Function.Description, tool.Function.Parameters = t.Name, t.Description, params
		r.Tools = append(r.Tools, tool)
	}
	if len(r.Tools) > 0 && !refused[fieldParallelToolCalls] {
		// The agent loop runs every call of a turn: several calls in one
		// turn save paid turns (some servers default to one).
		yes := true
		r.ParallelToolCalls = &yes
		sent = append(sent, fieldParallelToolCalls)
	}
	b, err := json.Marshal(r)
	return b, sent, err
}

// maxTokens is the completion token limit of one turn: the agent's, else
// the endpoint's (the model table's, or the provider's need).
func maxTokens(ep Endpoint, req Request) int32 {
	if n := req.Settings.GetMaxTokens(); n > 0 {
		return n
	}
	return int32(ep.MaxTokens)
}
