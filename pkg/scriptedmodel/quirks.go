package scriptedmodel

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Quirks make the server answer as some real OpenAI-compatible servers
// do (a script's "quirks" list), so a test can see the client cope:
//
//	repeat_name                every tool-call chunk repeats the call's
//	                           name and id
//	arguments_object           a tool call's arguments come whole, as a
//	                           JSON object instead of a string
//	no_index                   tool-call chunks carry no index
//	no_usage                   no usage chunk, even when asked for
//	no_done                    the stream ends without "data: [DONE]"
//	reasoning                  a reasoning_content chunk before the answer
//	tool_calls_as_text         tool calls are written into the text as
//	                           <tool_call>{…}</tool_call> (Hermes/Qwen)
//	reject_stream_options      400 for a request with stream_options
//	reject_parallel_tool_calls 400 for a request with parallel_tool_calls
//	no_json_schema             400 for a response_format of type
//	                           json_schema (an older server)
//
// A script's "rate_limit" ({"requests": N, "window_ms": W}) answers 429,
// with a Retry-After, any request past N in the last W milliseconds, as a
// provider's key would; RateLimited counts them and RequestTimes lists
// when every request came.
const (
	QuirkRepeatName              = "repeat_name"
	QuirkArgumentsObject         = "arguments_object"
	QuirkNoIndex                 = "no_index"
	QuirkNoUsage                 = "no_usage"
	QuirkNoDone                  = "no_done"
	QuirkReasoning               = "reasoning"
	QuirkToolCallsAsText         = "tool_calls_as_text"
	QuirkRejectStreamOptions     = "reject_stream_options"
	QuirkRejectParallelToolCalls = "reject_parallel_tool_calls"
	QuirkNoJSONSchema            = "no_json_schema"
)

// Quirks lists the quirk names.
var Quirks = []string{QuirkRepeatName, QuirkArgumentsObject, QuirkNoIndex, QuirkNoUsage, QuirkNoDone, QuirkReasoning,
	QuirkToolCallsAsText, QuirkRejectStreamOptions, QuirkRejectParallelToolCalls, QuirkNoJSONSchema}

// RateLimit is a script's rate limit.
type RateLimit struct {
	Requests int `json:"requests"`
	WindowMS int `json:"window_ms"`
}

// has reports whether the script has quirk q.
func (s *Server) has(q string) bool { return slices.Contains(s.script.Quirks, q) }

// refusedField is the optional field a quirky server refuses in req ("":
// none).
func (s *Server) refusedField(raw map[string]json.RawMessage, req chatRequest) string {
	switch {
	case s.has(QuirkRejectStreamOptions) && raw["stream_options"] != nil:
		return "stream_options"
	case s.has(QuirkRejectParallelToolCalls) && raw["parallel_tool_calls"] != nil:
		return "parallel_tool_calls"
	case s.has(QuirkNoJSONSchema) && req.ResponseFormat != nil && req.ResponseFormat.Type == "json_schema":
		return "response_format json_schema"
	}
	return ""
}

// callChunks are the stream chunks of tool call i: its head (id, name)
// then its arguments in pieces, or as the quirks say.
func (s *Server) callChunks(i int, c wireToolCall) []wireToolCall {
	idx := &i
	if s.has(QuirkNoIndex) {
		idx = nil
	}
	if s.has(QuirkArgumentsObject) && json.Valid([]byte(c.Function.Arguments)) && strings.HasPrefix(strings.TrimSpace(c.Function.Arguments), "{") {
		whole := wireToolCall{Index: idx, ID: c.ID, Type: "function"}
		whole.Function.Name = c.Function.Name
		whole.Function.ArgumentsObject = json.RawMessage(c.Function.Arguments)
		return []wireToolCall{whole}
	}
	head := wireToolCall{Index: idx, ID: c.ID, Type: "function"}
	head.Function.Name = c.Function.Name
	out := []wireToolCall{head}
	for _, piece := range chunks(c.Function.Arguments) {
		body := wireToolCall{Index: idx}
		if s.has(QuirkRepeatName) {
			body.ID, body.Type, body.Function.Name = c.ID, "function", c.Function.Name
		}
		body.Function.Arguments = piece
		out = append(out, body)
	}
	return out
}

// callsAsText writes a's tool calls into its text, as a model whose
// server does not parse them out would (QuirkToolCallsAsText).
func callsAsText(a answer) answer {
	if len(a.calls) == 0 {
		return a
	}
	var b strings.Builder
	b.WriteString(a.content)
	for _, c := range a.calls {
		args := c.Function.Arguments
		if !json.Valid([]byte(args)) {
			q, _ := json.Marshal(args)
			args = string(q)
		}
		fmt.Fprintf(&b, "\n<tool_call>\n{\"name\": %q, \"arguments\": %s}\n</tool_call>", c.Function.Name, args)
	}
	a.content, a.calls, a.finishReason = b.String(), nil, "stop"
	return a
}

// rateLimited records a request against the script's rate limit and
// reports whether it is over it, and then when the oldest request of the
// window leaves it.
func (s *Server) rateLimited() (time.Duration, bool) {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.times = append(s.times, now)
	if len(s.times) > maxTimes {
		s.times = s.times[len(s.times)-maxTimes/2:]
	}
	rl := s.script.RateLimit
	if rl == nil {
		return 0, false
	}
	window := time.Duration(rl.WindowMS) * time.Millisecond
	n, oldest := 0, now
	for _, t := range s.admitted {
		if now.Sub(t) < window {
			if n == 0 {
				oldest = t
			}
			n++
		}
	}
	if n >= rl.Requests {
		s.limited++
		return window - now.Sub(oldest), true
	}
	s.admitted = append(s.admitted, now)
	if len(s.admitted) > 4*rl.Requests {
		s.admitted = s.admitted[len(s.admitted)-rl.Requests:]
	}
	return 0, false
}

// maxTimes bounds the request times kept.
const maxTimes = 100_000

// RateLimited returns how many requests the script's rate limit refused
// (429).
func (s *Server) RateLimited() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.limited
}

// RequestTimes returns when each request came (the latest 100,000),
// answered or refused.
func (s *Server) RequestTimes() []time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Time(nil), s.times...)
}
