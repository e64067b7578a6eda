package llm

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
)

// The Messages stream: named events, each data a JSON object whose type
// is the event's name. message_start (the message's id, model and the
// prompt's usage, cache reads and writes included), then per content
// block a content_block_start (text, tool_use with its id and name,
// thinking), content_block_delta events (text_delta, input_json_delta
// with a piece of the tool input's JSON, thinking_delta, signature_delta)
// and content_block_stop, then message_delta (stop_reason, the output's
// usage, cumulative) and message_stop; ping events anywhere, and an error
// event (overloaded_error …) instead of the rest. Unknown events and
// block types are skipped, as the API asks of clients.

// anEvent is one event of the stream.
type anEvent struct {
	Type    string `json:"type"`
	Message *struct {
		ID    string   `json:"id"`
		Model string   `json:"model"`
		Usage *anUsage `json:"usage"`
		// A whole (not streamed) message.
		Content    []anBlockOut `json:"content"`
		StopReason string       `json:"stop_reason"`
	} `json:"message"`
	Index        int         `json:"index"`
	ContentBlock *anBlockOut `json:"content_block"`
	Delta        *struct {
		Type        string `json:"type"`
		Text        string `json:"text"`
		PartialJSON string `json:"partial_json"`
		Thinking    string `json:"thinking"`
		StopReason  string `json:"stop_reason"`
	} `json:"delta"`
	Usage *anUsage `json:"usage"`
	Error *struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	} `json:"error"`
}

// anBlockOut is a content block of an answer.
type anBlockOut struct {
	Type     string          `json:"type"`
	Text     string          `json:"text"`
	ID       string          `json:"id"`
	Name     string          `json:"name"`
	Input    json.RawMessage `json:"input"`
	Thinking string          `json:"thinking"`
}

type anUsage struct {
	InputTokens              int64 `json:"input_tokens"`
	OutputTokens             int64 `json:"output_tokens"`
	CacheCreationInputTokens int64 `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int64 `json:"cache_read_input_tokens"`
}

// readAnthropicStream reads a Messages stream into a.
func readAnthropicStream(r io.Reader, a *assembly) error {
	sr := newSSEReader(r, MaxSSELine)
	for {
		ev, err := sr.next()
		if errors.Is(err, io.EOF) {
			break
		}
		if errors.Is(err, errSSELine) {
			return unparsable("%v", err)
		}
		if err != nil {
			return err
		}
		data := bytes.TrimSpace(ev.data)
		if len(data) == 0 {
			continue
		}
		if text, ok := fastTextDelta(data); ok {
			a.text(text)
			continue
		}
		var e anEvent
		if err := json.Unmarshal(data, &e); err != nil {
			return unparsable("an event is not JSON: %s", cutBytes(data, 256))
		}
		done, err := a.addAnthropicEvent(&e)
		if err != nil || done {
			return err
		}
	}
	if a.events == 0 {
		return unparsable("the stream carried no message (not server-sent events?)")
	}
	return nil
}

// anKeys are the names the full decoder reads (see walkKeys).
var anKeys = keyNames("type", "message", "index", "content_block", "delta", "usage", "error", "text", "partial_json",
	"thinking", "stop_reason", "id", "model", "content", "name", "input", "input_tokens", "output_tokens",
	"cache_creation_input_tokens", "cache_read_input_tokens")

// fastTextDelta reads the common event of a streamed answer — a
// content_block_delta of text ({"type":"content_block_delta","index":0,
// "delta":{"type":"text_delta","text":"…"}}) — without decoding it all,
// as fastContent does for the Chat Completions format; ok is false for
// anything else.
func fastTextDelta(data []byte) (string, bool) {
	top, inner, deltas, texts, delta, typ, text := 0, 0, 0, 0, -1, -1, [2]int{}
	ok := walkKeys(data, anKeys, func(key []byte, depth, at, v int) bool {
		value := data[v:]
		switch string(key) {
		case "type":
			if depth == 1 {
				top++
				return bytes.HasPrefix(value, []byte(`"content_block_delta"`))
			}
			inner, typ = inner+1, at
			return depth == 2 && bytes.HasPrefix(value, []byte(`"text_delta"`))
		case "delta":
			deltas, delta = deltas+1, at
			return depth == 1 && len(value) > 0 && value[0] == '{'
		case "text":
			texts, text = texts+1, [2]int{v, stringEnd(data, v)}
			return depth == 2 && len(value) > 0 && value[0] == '"' && text[1] > 0
		case "index":
			return depth == 1
		}
		return false // nothing else belongs in a text delta
	})
	if !ok || top != 1 || inner != 1 || deltas != 1 || texts != 1 || !inside(data, delta, typ) || !inside(data, delta, text[0]) || !json.Valid(data) {
		return "", false
	}
	var s string
	if json.Unmarshal(data[text[0]:text[1]], &s) != nil {
		return "", false
	}
	return s, true
}

// readAnthropicWhole reads a whole (not streamed) message into a.
func readAnthropicWhole(r io.Reader, a *assembly) error {
	b, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	var e anEvent
	if err := json.Unmarshal(b, &e.Message); err != nil || e.Message == nil {
		return unparsable("the answer is not a message: %s", cutBytes(b, 256))
	}
	m := e.Message
	a.id, a.model, a.finish = m.ID, m.Model, m.StopReason
	a.anthropicUsage(m.Usage)
	for i, blk := range m.Content {
		a.addAnthropicBlock(i, &blk)
	}
	a.events++
	return nil
}

// addAnthropicEvent takes one event; done at message_stop.
func (a *assembly) addAnthropicEvent(e *anEvent) (done bool, err error) {
	switch e.Type {
	case "message_start":
		if m := e.Message; m != nil {
			a.id, a.model = m.ID, m.Model
			a.anthropicUsage(m.Usage)
		}
		a.events++
	case "content_block_start":
		if e.ContentBlock != nil {
			a.addAnthropicBlock(e.Index, e.ContentBlock)
		}
	case "content_block_delta":
		if e.Delta != nil {
			a.addAnthropicDelta(e.Index, e.Delta.Type, e.Delta.Text, e.Delta.PartialJSON, e.Delta.Thinking)
		}
	case "message_delta":
		if e.Delta != nil && e.Delta.StopReason != "" {
			a.finish = e.Delta.StopReason
		}
		a.anthropicUsage(e.Usage)
		a.events++
	case "message_stop":
		return true, nil
	case "error":
		se := &streamError{typ: "error"}
		if e.Error != nil {
			se.typ, se.msg = e.Error.Type, e.Error.Message
		}
		return true, se
	}
	return false, nil
}

// addAnthropicBlock starts content block i (or takes a whole one).
func (a *assembly) addAnthropicBlock(i int, b *anBlockOut) {
	switch b.Type {
	case "text":
		a.text(b.Text)
	case "tool_use":
		c := a.callFor(&i, b.ID)
		c.id = b.ID
		c.addName(b.Name)
		if in := bytes.TrimSpace(b.Input); len(in) > 0 && string(in) != "{}" && string(in) != "null" {
			_ = c.addArgs(in) // a whole message's input; a stream's start has {}
			c.startArgs = true
		}
	case "thinking":
		a.reasoning += len(b.Thinking)
	}
}

// addAnthropicDelta takes a delta of content block i.
func (a *assembly) addAnthropicDelta(i int, typ, text, partialJSON, thinking string) {
	switch typ {
	case "text_delta":
		a.text(text)
	case "input_json_delta":
		c := a.callFor(&i, "")
		if c.startArgs { // the deltas are the input, not what the start held
			c.args.Reset()
			c.startArgs = false
		}
		c.addArgsText(partialJSON)
	case "thinking_delta":
		a.reasoning += len(thinking)
	}
}

// anthropicUsage folds a usage report in: the prompt is the input plus
// the cache reads and writes; the output is cumulative.
func (a *assembly) anthropicUsage(u *anUsage) {
	if u == nil {
		return
	}
	if u.InputTokens > 0 || u.CacheReadInputTokens > 0 || u.CacheCreationInputTokens > 0 {
		a.usage.prompt = u.InputTokens + u.CacheReadInputTokens + u.CacheCreationInputTokens
		a.usage.cacheRead, a.usage.cacheWrite = u.CacheReadInputTokens, u.CacheCreationInputTokens
	}
	if u.OutputTokens > 0 {
		a.usage.completion = u.OutputTokens
	}
}
