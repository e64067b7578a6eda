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

// oaChunk is a streamed chunk, or a whole completion. Only what is used is
// decoded, into plain values where absence and emptiness mean the same:
// a chunk costs few allocations (docs/benchmarks.md).
type oaChunk struct {
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
	FinishReason string   `json:"finish_reason"`
}

type oaDelta struct {
	Content          string       `json:"content"`
	ReasoningContent string       `json:"reasoning_content"`
	Reasoning        string       `json:"reasoning"`
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
	if a.events > 0 && !isError {
		if content, ok := fastContent(data); ok {
			a.events++
			a.text(content)
			return nil
		}
	}
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
	if ch.Model != "" && ch.Model != a.model {
		a.model = ch.Model
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
		if c.FinishReason != "" {
			a.finish = c.FinishReason
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

// oaKeys are the names the full decoder reads (encoding/json matches them
// in any case: the fast reader takes only their exact spelling).
var oaKeys = keyNames("object", "model", "choices", "usage", "error", "message", "type", "code", "index", "delta",
	"finish_reason", "content", "reasoning_content", "reasoning", "tool_calls", "prompt_tokens", "completion_tokens",
	"prompt_tokens_details", "cached_tokens", "id", "function", "name", "arguments")

func keyNames(names ...string) [][]byte {
	out := make([][]byte, len(names))
	for i, n := range names {
		out[i] = []byte(n)
	}
	return out
}

// fastContent reads the common chunk of a streamed answer — one choice,
// index 0, a content delta and nothing else of use
// ({…,"choices":[{"index":0,"delta":{"content":"…"},"finish_reason":null}]})
// — without decoding it all: most of a stream is such chunks, and a full
// decode costs a dozen allocations each (docs/benchmarks.md). One pass
// over its keys (walkKeys) checks each sits where the format puts it; ok
// is false when the chunk may hold anything more (a tool call, a finish
// reason, usage, reasoning, an error, another choice): the full decoder
// takes it. FuzzFastContent checks the reader agrees with the full
// decoder.
func fastContent(data []byte) (string, bool) {
	choices, deltas, contents, indexes, delta, content := 0, 0, 0, 0, -1, [2]int{}
	ok := walkKeys(data, oaKeys, func(key []byte, depth, at, v int) bool {
		value := data[v:]
		switch string(key) {
		case "choices":
			choices++
			return depth == 1
		case "delta":
			deltas, delta = deltas+1, at
			return depth == 3 && len(value) > 0 && value[0] == '{'
		case "index":
			indexes++
			return depth == 3 && len(value) > 1 && value[0] == '0' && (value[1] < '0' || value[1] > '9')
		case "content":
			contents, content = contents+1, [2]int{v, stringEnd(data, v)}
			return depth == 4 && len(value) > 0 && value[0] == '"' && content[1] > 0
		case "finish_reason", "usage":
			return bytes.HasPrefix(value, []byte("null"))
		case "object":
			return !bytes.HasPrefix(value, []byte(`"error"`))
		case "tool_calls", "error", "reasoning_content", "reasoning", "message":
			return false
		}
		return true
	})
	if !ok || choices != 1 || deltas != 1 || contents != 1 || indexes > 1 || !inside(data, delta, content[0]) || !json.Valid(data) {
		return "", false
	}
	var s string
	if json.Unmarshal(data[content[0]:content[1]], &s) != nil {
		return "", false
	}
	return s, true
}

// walkKeys calls visit for each key of data, with its depth (1 inside
// the top-level object), the index of its opening quote and that of its
// value; it reports false as soon as visit does, at a string that does not
// end, or at a key the full decoder could read as one of names although
// it is spelled otherwise (encoding/json matches names in any case).
func walkKeys(data []byte, names [][]byte, visit func(key []byte, depth, at, v int) bool) bool {
	depth := 0
	for i := 0; i < len(data); i++ {
		switch data[i] {
		case '{', '[':
			depth++
		case '}', ']':
			depth--
		case '"':
			end := stringEnd(data, i)
			if end < 0 {
				return false
			}
			if v := skipSpace(data, end); v < len(data) && data[v] == ':' {
				key := data[i+1 : end-1]
				if !plainKey(key) && foldsTo(key, names) || !visit(key, depth, i, skipSpace(data, v+1)) {
					return false
				}
			}
			i = end - 1
		}
	}
	return true
}

// foldsTo reports whether key could be read as one of names: it folds to
// one, or holds an escape.
func foldsTo(key []byte, names [][]byte) bool {
	if bytes.IndexByte(key, '\\') >= 0 {
		return true
	}
	for _, n := range names {
		if bytes.EqualFold(key, n) {
			return true
		}
	}
	return false
}

// skipSpace is the index of the first byte at or after i that is not
// JSON white space.
func skipSpace(data []byte, i int) int {
	for i < len(data) && (data[i] == ' ' || data[i] == '\t' || data[i] == '\r' || data[i] == '\n') {
		i++
	}
	return i
}

// plainKey reports whether key is lower-case ASCII letters, digits and
// '_' only: no case folding can make it another such name.
func plainKey(key []byte) bool {
	for _, c := range key {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '_' {
			return false
		}
	}
	return true
}

// inside reports whether pos lies in the object or array that is the
// value of the key at data[key].
func inside(data []byte, key, pos int) bool {
	colon := bytes.IndexByte(data[key:], ':')
	if colon < 0 {
		return false
	}
	open := key + colon + 1
	if open >= len(data) || (data[open] != '{' && data[open] != '[') {
		return false
	}
	depth := 0
	for i := open; i < len(data); i++ {
		switch data[i] {
		case '"':
			end := stringEnd(data, i)
			if end < 0 {
				return false
			}
			i = end - 1
		case '{', '[':
			depth++
		case '}', ']':
			if depth--; depth == 0 {
				return open < pos && pos < i
			}
		}
	}
	return false
}

// stringEnd is the index just past the JSON string that starts at
// data[start] (a quote), or -1.
func stringEnd(data []byte, start int) int {
	for i := start + 1; i < len(data); i++ {
		switch data[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return -1
}

// addOpenAIDelta takes a choice's delta (or a whole message).
func (a *assembly) addOpenAIDelta(d *oaDelta) error {
	if d == nil {
		return nil
	}
	a.text(d.Content)
	a.reasoning += len(d.ReasoningContent) + len(d.Reasoning)
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
