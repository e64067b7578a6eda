package llm

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	childv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/child/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
)

// An answer being put together from a stream, whichever provider sent it.
// Each quirk of a real server is handled here, once:
//
//   - a tool call's name sent whole in every chunk (some servers repeat it)
//     is kept once, not glued ("current_timecurrent_time"); a name split
//     across chunks is joined, as long as no argument came yet;
//   - arguments sent as a JSON object instead of a string are taken as the
//     object's JSON;
//   - a tool call delta without an index continues the call of its id, or
//     the last call when it names none; one without an id gets one later
//     (the child names it call_<step>_<n>);
//   - several tool calls interleaved by index are kept apart;
//   - reasoning text (reasoning_content, reasoning, thinking blocks) is not
//     the answer: it is counted, not kept;
//   - finish reasons are normalised (normFinish): "length" and
//     "content_filter" stay for the executor to judge, tool calls win over
//     a "stop" sent with them, and "tool_calls" with no call is "stop"
//     when there is text, an empty answer (retried) when there is none.

// assembly is a streamed answer being put together.
type assembly struct {
	id, model string
	content   strings.Builder
	// reasoning counts the bytes of reasoning text the answer carried.
	reasoning int
	calls     []*toolCall
	// finish is the finish reason as the server said it.
	finish string
	usage  usage
	// events counts the stream's events that were understood.
	events  int
	onToken func(string)
}

// toolCall is one tool call being put together.
type toolCall struct {
	index    int
	hasIndex bool
	id, name string
	args     strings.Builder
	argsSeen bool
	// startArgs: args came whole with the block's start (Anthropic).
	startArgs bool
}

// usage is an answer's token counts. prompt counts every prompt token,
// cached ones included.
type usage struct {
	prompt, completion, cacheRead, cacheWrite int64
}

// text adds answer text and streams it.
func (a *assembly) text(s string) {
	if s == "" {
		return
	}
	a.content.WriteString(s)
	if a.onToken != nil {
		a.onToken(s)
	}
}

// callFor finds the call a tool call delta continues, or starts one: by
// its index when it has one; else by its id; else the last call.
func (a *assembly) callFor(index *int, id string) *toolCall {
	if index != nil {
		for _, c := range a.calls {
			if c.hasIndex && c.index == *index {
				return c
			}
		}
		return a.newCall(&toolCall{index: *index, hasIndex: true, id: id})
	}
	if id != "" {
		for _, c := range a.calls {
			if c.id == id {
				return c
			}
		}
		return a.newCall(&toolCall{id: id})
	}
	if n := len(a.calls); n > 0 {
		return a.calls[n-1]
	}
	return a.newCall(&toolCall{})
}

func (a *assembly) newCall(c *toolCall) *toolCall {
	a.calls = append(a.calls, c)
	return c
}

// addName adds a name piece: the first is the name; a piece equal to the
// name so far repeats it; once arguments came, a name only repeats; else
// it continues a name split across chunks.
func (c *toolCall) addName(piece string) {
	switch {
	case piece == "":
	case c.name == "":
		c.name = piece
	case piece == c.name || c.argsSeen:
	default:
		c.name += piece
	}
}

// addArgs adds an arguments piece: a JSON string is a piece of the
// arguments' text; an object (or any other JSON value) is the whole
// arguments.
func (c *toolCall) addArgs(raw json.RawMessage) error {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return unparsable("tool call arguments: %v", err)
		}
		c.addArgsText(s)
		return nil
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return unparsable("tool call arguments: %v", err)
	}
	c.args.Reset()
	c.args.Write(buf.Bytes())
	c.argsSeen = true
	return nil
}

func (c *toolCall) addArgsText(s string) {
	if s != "" {
		c.args.WriteString(s)
		c.argsSeen = true
	}
}

// errEmptyAnswer: the answer said it calls tools and carried neither a call
// nor text. Another try may give a real one.
var errEmptyAnswer = errors.New("the answer carried no text and no tool call")

// response is the assembled answer as the child is handed it.
func (a *assembly) response() (*childv1.ModelResponse, error) {
	msg := &childv1.Message{Role: "assistant", Content: a.content.String()}
	for _, c := range a.calls {
		if c.name == "" {
			return nil, unparsable("a tool call without a name")
		}
		args := c.args.String()
		if strings.TrimSpace(args) == "" {
			args = "{}"
		}
		msg.ToolCalls = append(msg.ToolCalls, &agentmeshv1.ToolCall{Id: c.id, Name: c.name, Arguments: args})
	}
	finish := normFinish(a.finish, len(msg.ToolCalls) > 0)
	if finish == FinishStop && len(msg.ToolCalls) == 0 && msg.Content == "" && isToolFinish(a.finish) {
		return nil, errEmptyAnswer
	}
	u := a.usage
	return &childv1.ModelResponse{
		Message:      msg,
		Model:        a.model,
		FinishReason: finish,
		Usage: &agentmeshv1.Usage{
			PromptTokens: u.prompt, CompletionTokens: u.completion, TotalTokens: u.prompt + u.completion,
			CacheReadTokens: u.cacheRead, CacheWriteTokens: u.cacheWrite,
		},
	}, nil
}

// Finish reasons of a ModelResponse, normalised across providers.
const (
	FinishStop      = "stop"
	FinishToolCalls = "tool_calls"
	// FinishLength: the answer was cut at its token limit (OpenAI's
	// "length", Anthropic's "max_tokens" and
	// "model_context_window_exceeded"). Never a success (the executor
	// fails the task, FailureKind MODEL_TRUNCATED).
	FinishLength = "length"
	// FinishContentFilter: the provider withheld the answer (OpenAI's
	// "content_filter", Anthropic's "refusal").
	FinishContentFilter = "content_filter"
)

// normFinish normalises a finish reason; hasCalls says whether the
// answer carries tool calls.
func normFinish(raw string, hasCalls bool) string {
	switch raw {
	case "length", "max_tokens", "model_context_window_exceeded":
		return FinishLength
	case "content_filter", "refusal":
		return FinishContentFilter
	}
	if hasCalls {
		return FinishToolCalls
	}
	return FinishStop
}

func isToolFinish(raw string) bool {
	return raw == "tool_calls" || raw == "function_call" || raw == "tool_use"
}

// Truncated reports whether resp was cut at its token limit.
func Truncated(resp *childv1.ModelResponse) bool { return resp.GetFinishReason() == FinishLength }

// Filtered reports whether the provider withheld resp's answer.
func Filtered(resp *childv1.ModelResponse) bool {
	return resp.GetFinishReason() == FinishContentFilter
}

// cutBytes is b for an error message: at most n bytes, on one line.
func cutBytes(b []byte, n int) string {
	s := strings.Join(strings.Fields(string(b)), " ")
	if len(s) > n {
		return fmt.Sprintf("%s…", strings.ToValidUTF8(s[:n], ""))
	}
	return s
}
