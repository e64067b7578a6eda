// Package scriptedmodel is a scripted model server: a TESTING AND DEMO
// AID, not a model. It speaks the Chat Completions wire format, and
// Anthropic's Messages API (anthropic.go), over real HTTP so that
// agentmesh's tests and its offline quickstart run the same code path as
// a real provider (OpenAI, Ollama, vLLM, Anthropic ...), but every answer
// comes from a script. Quirks of real servers and a provider's rate limit
// can be scripted too (quirks.go).
//
// Endpoints:
//
//	POST /v1/messages           Anthropic's Messages API (anthropic.go)
//	POST /v1/chat/completions   with and without "stream": true (SSE
//	                            chunks, tool-call deltas, a usage chunk
//	                            when stream_options.include_usage, then
//	                            "data: [DONE]"); answers carry tool_calls
//	                            and usage
//	GET  /v1/models             the one model the script names
//	POST /v1/embeddings         deterministic hashed bag-of-words vectors
//	                            (embed.go; "embedding_dimensions" in the
//	                            script, 256 by default)
//
// # Script format
//
// A script is JSON:
//
//	{
//	  "model": "scripted",               // optional; the model name reported
//	  "scenarios": [
//	    {
//	      "match": "(?i)weather",        // optional regexp on the first user message
//	      "model": "small",              // optional: only requests for this model
//	      "turns": [
//	        {"tool_calls": [{"name": "current_time", "arguments": {"timezone": "UTC"}}]},
//	        {"content": "It is {{last_tool_result}}. You asked: {{input}}"}
//	      ]
//	    }
//	  ]
//	}
//
// A scenario may also name a "format": it then answers only structured-
// output requests (response_format {"type": "json_schema"}) whose schema
// has that name, e.g. {"format": "task_analysis", "match": "(?i)french",
// "turns": [{"content": "{\"skills\": [\"translation\"]}"}]}; a scenario
// without format answers requests with or without one.
//
// A bare list of scenarios is accepted too. The first scenario whose match
// finds the first user message, and whose model (if any) is the request's
// model, answers (a scenario without match answers anything); when none matches the server answers 404. Turn k answers a
// conversation that already holds k assistant messages, so the server is
// stateless and any number of conversations may run at once. Past the last
// turn it answers with the last turn's content and no tool calls.
//
// A turn's fields, all optional:
//
//	content        the assistant's text; {{input}} is replaced by the first
//	               user message, {{last_tool_result}} by the content of
//	               the last tool message and {{tool_results}} by the
//	               contents of the tool messages that answered the last
//	               turn, one per line
//	tool_calls     [{"name": "echo", "arguments": {...}, "id": "call_1"}];
//	               arguments is any JSON value (an object is usual; a string
//	               is sent as is, so a script can send malformed arguments);
//	               the placeholders work inside its strings too; id defaults
//	               to call_<turn>_<i>
//	status         answer with this HTTP error status (400-599) instead
//	times          with status or garbage: misbehave only for the first
//	               `times` requests that reach this turn, then answer
//	               normally (0 = always)
//	garbage        answer 200 with a body that is not JSON
//	delay_ms       wait this long before answering (the request's context
//	               still ends the wait)
//	retry_after    with status: the Retry-After header of the error answer
//	               (seconds, or an HTTP date)
//	chunk_delay_ms when streaming: wait this long before each content
//	               chunk, so a test can see tokens arrive while the answer
//	               streams
//	usage          {"prompt_tokens": 10, "completion_tokens": 5}; computed
//	               when absent (one token per word, roughly)
//	finish_reason  defaults to "tool_calls" when the turn calls tools, else
//	               "stop"
//
// DefaultScript is the script of the offline quickstart: the agent calls
// current_time, then answers with the time and the question it was asked;
// an input starting with "plan:" delegates to two sub-tasks instead;
// "remember: FACT" calls remember, "recall: QUESTION" calls recall.
package scriptedmodel

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
)

// Script drives the server.
type Script struct {
	// Model is the model name the server reports ("scripted" when empty).
	Model     string     `json:"model,omitempty"`
	Scenarios []Scenario `json:"scenarios"`
	// Quirks make the server answer as some real servers do (quirks.go).
	Quirks []string `json:"quirks,omitempty"`
	// RateLimit refuses requests over it with 429 (quirks.go).
	RateLimit *RateLimit `json:"rate_limit,omitempty"`
	// EmbeddingDimensions is the length of the embeddings endpoint's
	// vectors (DefaultEmbeddingDimensions when 0; embed.go).
	EmbeddingDimensions int `json:"embedding_dimensions,omitempty"`
}

// Scenario answers the conversations whose first user message Match finds.
type Scenario struct {
	Match string `json:"match,omitempty"`
	// Model, when set, limits the scenario to requests for this model name
	// (so one server can script a planner, its workers and a second,
	// cheaper model).
	Model string `json:"model,omitempty"`
	// Format, when set, limits the scenario to structured-output requests
	// whose response_format is {"type": "json_schema"} with this schema
	// name (e.g. the registry's "task_analysis").
	Format string `json:"format,omitempty"`
	Turns  []Turn `json:"turns"`

	re *regexp.Regexp
}

// Turn is one scripted answer.
type Turn struct {
	Content      string     `json:"content,omitempty"`
	ToolCalls    []ToolCall `json:"tool_calls,omitempty"`
	Status       int        `json:"status,omitempty"`
	Times        int        `json:"times,omitempty"`
	Garbage      bool       `json:"garbage,omitempty"`
	DelayMS      int        `json:"delay_ms,omitempty"`
	RetryAfter   string     `json:"retry_after,omitempty"`
	ChunkDelayMS int        `json:"chunk_delay_ms,omitempty"`
	Usage        *Usage     `json:"usage,omitempty"`
	FinishReason string     `json:"finish_reason,omitempty"`
}

// ToolCall is a scripted tool call.
type ToolCall struct {
	ID        string          `json:"id,omitempty"`
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments,omitempty"`
}

// Usage is a scripted token count.
type Usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
}

// MaxDelayMS bounds a turn's delay (10 minutes).
const MaxDelayMS = 600_000

// ErrInvalidScript is returned (wrapped) for a script that cannot drive the server.
var ErrInvalidScript = errors.New("invalid script")

// ParseScript parses and checks a script.
func ParseScript(data []byte) (*Script, error) {
	var s Script
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) > 0 && trimmed[0] == '[' {
		if err := json.Unmarshal(trimmed, &s.Scenarios); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalidScript, err)
		}
	} else {
		dec := json.NewDecoder(bytes.NewReader(trimmed))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&s); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalidScript, err)
		}
	}
	if err := s.compile(); err != nil {
		return nil, err
	}
	return &s, nil
}

// LoadScript reads a script file.
func LoadScript(path string) (*Script, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("load script: %w", err)
	}
	s, err := ParseScript(data)
	if err != nil {
		return nil, fmt.Errorf("load script %s: %w", path, err)
	}
	return s, nil
}

// compile checks the script and compiles its regexps.
func (s *Script) compile() error {
	if len(s.Scenarios) == 0 {
		return fmt.Errorf("%w: no scenarios", ErrInvalidScript)
	}
	for _, q := range s.Quirks {
		if !slices.Contains(Quirks, q) {
			return fmt.Errorf("%w: unknown quirk %q (want one of %s)", ErrInvalidScript, q, strings.Join(Quirks, ", "))
		}
	}
	if rl := s.RateLimit; rl != nil && (rl.Requests < 1 || rl.WindowMS < 1 || rl.WindowMS > 3_600_000) {
		return fmt.Errorf("%w: rate_limit wants requests ≥ 1 and window_ms from 1 to 3600000", ErrInvalidScript)
	}
	if s.EmbeddingDimensions < 0 || s.EmbeddingDimensions > MaxEmbeddingDimensions {
		return fmt.Errorf("%w: embedding_dimensions %d: 0 (the default, %d) to %d", ErrInvalidScript, s.EmbeddingDimensions, DefaultEmbeddingDimensions, MaxEmbeddingDimensions)
	}
	for i := range s.Scenarios {
		sc := &s.Scenarios[i]
		if sc.Match != "" {
			re, err := regexp.Compile(sc.Match)
			if err != nil {
				return fmt.Errorf("%w: scenario %d: match: %w", ErrInvalidScript, i, err)
			}
			sc.re = re
		}
		if len(sc.Turns) == 0 {
			return fmt.Errorf("%w: scenario %d: no turns", ErrInvalidScript, i)
		}
		for k, t := range sc.Turns {
			where := fmt.Sprintf("scenario %d turn %d", i, k)
			if t.Status != 0 && (t.Status < 400 || t.Status > 599) {
				return fmt.Errorf("%w: %s: status %d is not an HTTP error (400-599)", ErrInvalidScript, where, t.Status)
			}
			if t.Times < 0 || (t.Times > 0 && t.Status == 0 && !t.Garbage) {
				return fmt.Errorf("%w: %s: times needs status or garbage and must not be negative", ErrInvalidScript, where)
			}
			if t.DelayMS < 0 || t.DelayMS > MaxDelayMS {
				return fmt.Errorf("%w: %s: delay_ms must be within 0..%d", ErrInvalidScript, where, MaxDelayMS)
			}
			if t.ChunkDelayMS < 0 || t.ChunkDelayMS > MaxDelayMS {
				return fmt.Errorf("%w: %s: chunk_delay_ms must be within 0..%d", ErrInvalidScript, where, MaxDelayMS)
			}
			if t.RetryAfter != "" && t.Status == 0 {
				return fmt.Errorf("%w: %s: retry_after needs status", ErrInvalidScript, where)
			}
			if t.Usage != nil && (t.Usage.PromptTokens < 0 || t.Usage.CompletionTokens < 0) {
				return fmt.Errorf("%w: %s: negative usage", ErrInvalidScript, where)
			}
			for j, c := range t.ToolCalls {
				if c.Name == "" {
					return fmt.Errorf("%w: %s: tool call %d has no name", ErrInvalidScript, where, j)
				}
				if len(c.Arguments) > 0 && !json.Valid(c.Arguments) {
					return fmt.Errorf("%w: %s: tool call %d: arguments are not JSON", ErrInvalidScript, where, j)
				}
			}
		}
	}
	return nil
}

// DefaultScript is the offline quickstart's script: turn 0 calls
// current_time, turn 1 answers with its result and the question. An input
// starting with "plan:" is the delegation demo instead: turn 0 delegates
// two halves to the default agent (call_agent ×2, one turn), turn 1 waits
// for both (wait_tasks), turn 2 answers with their results.
func DefaultScript() *Script {
	s := &Script{
		Model: "scripted",
		Scenarios: []Scenario{{
			Match: `(?i)^plan:`,
			Turns: []Turn{
				{
					Content: "I will split this between two assistants.",
					ToolCalls: []ToolCall{
						{Name: "call_agent", Arguments: json.RawMessage(`{"agent":"assistant","input":"the first half"}`)},
						{Name: "call_agent", Arguments: json.RawMessage(`{"agent":"assistant","input":"the second half"}`)},
					},
				},
				{Content: "Waiting for both.", ToolCalls: []ToolCall{{Name: "wait_tasks", Arguments: json.RawMessage(`{}`)}}},
				{
					Content: "You asked: \"{{input}}\". Two assistants worked on it; what they answered: {{last_tool_result}} " +
						"(This answer comes from agentmesh's scripted model, a testing and demo aid; configure a real model to get real answers.)",
				},
			},
		}, {
			// The memory demo (README, docs/memory.md): "remember: FACT"
			// stores the fact in the agent's long-term memory; "recall:
			// QUESTION" searches it and answers with what it found.
			Match: `(?i)^remember:`,
			Turns: []Turn{
				{Content: "I will remember that.", ToolCalls: []ToolCall{{Name: "remember", Arguments: json.RawMessage(`{"text":"{{input}}","scope":"agent"}`)}}},
				{Content: "Remembered ({{last_tool_result}}). (This answer comes from agentmesh's scripted model, a testing and demo aid.)"},
			},
		}, {
			Match: `(?i)^recall:`,
			Turns: []Turn{
				{Content: "Let me look in my memory.", ToolCalls: []ToolCall{{Name: "recall", Arguments: json.RawMessage(`{"query":"{{input}}","k":1}`)}}},
				{Content: "From my memory: {{last_tool_result}} (This answer comes from agentmesh's scripted model, a testing and demo aid.)"},
			},
		}, {
			Turns: []Turn{
				{
					Content:   "Let me check the time first.",
					ToolCalls: []ToolCall{{Name: "current_time", Arguments: json.RawMessage(`{"timezone":"UTC"}`)}},
				},
				{
					Content: "You asked: \"{{input}}\". I checked the clock with the current_time tool: it is {{last_tool_result}}. " +
						"(This answer comes from agentmesh's scripted model, a testing and demo aid; configure a real model to get real answers.)",
				},
			},
		}},
	}
	if err := s.compile(); err != nil {
		panic(err) // the default script is a constant
	}
	return s
}
