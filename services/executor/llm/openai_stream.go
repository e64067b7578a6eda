package llm

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
)

// The Chat Completions stream: "data: {chunk}" events, then "data:
// [DONE]". Each chunk's first choice carries deltas of the answer —
// content, reasoning, tool call pieces — and at the end a finish reason;
// with stream_options.include_usage a last chunk with no choices carries
// the usage. What real servers do besides (assembly.go handles the tool
// call quirks): no [DONE] (the body just ends), no usage chunk, usage in
// every chunk (the last one counts), usage only in the last content chunk,
// reasoning in reasoning_content (vLLM, llama.cpp, DeepSeek) or reasoning
// (Ollama, OpenRouter), an error object instead of a chunk (OpenAI's
// {"error": …}, vLLM's {"object": "error", …}, llama.cpp's "error:"
// line), and a whole JSON completion where a stream was asked for.

// oaChunk is a streamed chunk, or a whole completion.
type oaChunk struct {
	ID      string          `json:"id"`
	Object  string          `json:"object"`
	Model   string          `json:"model"`
	Choices []oaChoice      `json:"choices"`
	Usage   *oaUsage        `json:"usage"`
	Error   json.RawMessage `json:"error"`
	// vLLM's error object: {"object": "error", "message", "type", "code"}.
	Message string          `json:"message"`
	Type    string          `json:"type"`
	Code    json.RawMessage `json:"code"`
}

type oaChoice struct {
	Index        int      `json:"index"`
	Delta        *oaDelta `json:"delta"`
	Message      *oaDelta `json:"message"`
	FinishReason *string  `json:"finish_reason"`
}

type oaDelta struct {
	Content          *string      `json:"content"`
	ReasoningContent *string      `json:"reasoning_content"`
	Reasoning        *string      `json:"reasoning"`
	ToolCalls        []oaCallPart `json:"tool_calls"`
}

type oaCallPart struct {
	Index    *int   `json:"index"`
	ID       string `json:"id"`
	Function struct {
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
	} `json:"function"`
}

type oaUsage struct {
	PromptTokens        int64 `json:"prompt_tokens"`
	CompletionTokens    int64 `json:"completion_tokens"`
	PromptTokensDetails *struct {
		CachedTokens int64 `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
}

// readOpenAIStream reads a Chat Completions stream into a.
func readOpenAIStream(r io.Reader, a *assembly) error {
	sr := newSSEReader(r, MaxSSELine)
	for {
		ev, err := sr.next()
		if errors.Is(err, io.EOF) {
			break // no [DONE]: the body's end ends the answer
		}
		if errors.Is(err, errSSELine) {
			return unparsable("%v", err)
		}
		if err != nil {
			return err // cut short: the network, or the response cap
		}
		data := bytes.TrimSpace(ev.data)
		if string(data) == "[DONE]" {
			break
		}
		if len(data) == 0 {
			continue
		}
		if err := a.addOpenAIChunk(data, ev.name == "error"); err != nil {
			return err
		}
	}
	if a.events == 0 {
		return unparsable("the stream carried no answer (not server-sent events?)")
	}
	return nil
}

// readOpenAIWhole reads a whole (not streamed) completion into a.
func readOpenAIWhole(r io.Reader, a *assembly) error {
	b, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	if err := a.addOpenAIChunk(bytes.TrimSpace(b), false); err != nil {
		return err
	}
	if a.events == 0 {
		return unparsable("the answer has no choices")
	}
	return nil
}

// addOpenAIChunk takes one chunk (or a whole completion).
func (a *assembly) addOpenAIChunk(data []byte, isError bool) error {
	var ch oaChunk
	if err := json.Unmarshal(data, &ch); err != nil {
		if isError {
			return &streamError{msg: cutBytes(data, 512)}
		}
		return unparsable("a chunk is not JSON: %s", cutBytes(data, 256))
	}
	if se := ch.streamError(isError); se != nil {
		return se
	}
	if ch.Model != "" {
		a.model = ch.Model
	}
	if ch.ID != "" {
		a.id = ch.ID
	}
	if u := ch.Usage; u != nil {
		a.usage.prompt, a.usage.completion = u.PromptTokens, u.CompletionTokens
		if d := u.PromptTokensDetails; d != nil {
			a.usage.cacheRead = d.CachedTokens
		}
		a.events++
	}
	for _, c := range ch.Choices {
		if c.Index != 0 {
			continue // one choice is asked for
		}
		a.events++
		if c.FinishReason != nil && *c.FinishReason != "" {
			a.finish = *c.FinishReason
		}
		d := c.Delta
		if d == nil {
			d = c.Message
		}
		if err := a.addOpenAIDelta(d); err != nil {
			return err
		}
	}
	return nil
}

// addOpenAIDelta takes a choice's delta (or a whole message).
func (a *assembly) addOpenAIDelta(d *oaDelta) error {
	if d == nil {
		return nil
	}
	if d.Content != nil {
		a.text(*d.Content)
	}
	if d.ReasoningContent != nil {
		a.reasoning += len(*d.ReasoningContent)
	}
	if d.Reasoning != nil {
		a.reasoning += len(*d.Reasoning)
	}
	for _, p := range d.ToolCalls {
		c := a.callFor(p.Index, p.ID)
		if p.ID != "" && c.id == "" {
			c.id = p.ID
		}
		c.addName(p.Function.Name)
		if err := c.addArgs(p.Function.Arguments); err != nil {
			return err
		}
	}
	return nil
}

// streamError is the error a chunk is instead of an answer, or nil.
func (ch *oaChunk) streamError(isError bool) *streamError {
	if len(ch.Error) > 0 && string(ch.Error) != "null" {
		var e struct {
			Message string          `json:"message"`
			Type    string          `json:"type"`
			Code    json.RawMessage `json:"code"`
		}
		if json.Unmarshal(ch.Error, &e) != nil {
			var s string
			_ = json.Unmarshal(ch.Error, &s)
			return &streamError{msg: s}
		}
		return &streamError{typ: e.Type, msg: e.Message, status: statusOf(e.Code, e.Type)}
	}
	if ch.Object == "error" || (isError && ch.Message != "") {
		return &streamError{typ: ch.Type, msg: ch.Message, status: statusOf(ch.Code, ch.Type)}
	}
	return nil
}

// statusOf reads an error code that is an HTTP status (vLLM's and
// llama.cpp's numeric codes); 0 otherwise.
func statusOf(code json.RawMessage, typ string) int {
	var n int
	if json.Unmarshal(code, &n) == nil && n >= 400 && n < 600 {
		return n
	}
	var s string
	if json.Unmarshal(code, &s) == nil && s == "rate_limit_exceeded" || typ == "rate_limit_exceeded" {
		return 429
	}
	return 0
}
