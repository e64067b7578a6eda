package llm

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"

	childv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/child/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
)

func TestSSEReader(t *testing.T) {
	in := ": comment\r\n" +
		"event: a\r\ndata: one\r\ndata:two\r\n\r\n" + // CRLF, two data lines, no space after ':'
		"id: 5\nretry: 10\ndata: {\"x\":1}\n\n" +
		"\n\n" + // empty events are skipped
		"error: {\"code\":500}\n\n" + // llama.cpp's error line
		"data: last" // no blank line at the end
	r := newSSEReader(strings.NewReader(in), 64)
	want := []sseEvent{{"a", []byte("one\ntwo")}, {"", []byte(`{"x":1}`)}, {"error", []byte(`{"code":500}`)}, {"", []byte("last")}}
	for i, w := range want {
		ev, err := r.next()
		if err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		if ev.name != w.name || !bytes.Equal(ev.data, w.data) {
			t.Fatalf("event %d = %q %q, want %q %q", i, ev.name, ev.data, w.name, w.data)
		}
	}
	if _, err := r.next(); !errors.Is(err, io.EOF) {
		t.Fatalf("after the last event: %v, want EOF", err)
	}
}

func TestSSELineBounded(t *testing.T) {
	r := newSSEReader(strings.NewReader("data: "+strings.Repeat("x", 1000)+"\n\n"), 100)
	if _, err := r.next(); !errors.Is(err, errSSELine) {
		t.Fatalf("a 1000-byte line with a 100-byte bound: %v", err)
	}
	// The parsers make a line too long an answer that does not parse.
	a := &assembly{}
	long := "data: " + strings.Repeat("y", MaxSSELine+10) + "\n\n"
	if err := readOpenAIStream(strings.NewReader(long), a); !errors.Is(err, errUnparsable) || classify(err) != KindRejected {
		t.Fatalf("over-long line: %v", err)
	}
}

// FuzzSSEReader: never panics, never returns an event larger than the
// input, and ends.
func FuzzSSEReader(f *testing.F) {
	for _, s := range []string{"data: x\n\n", "event: e\ndata: a\ndata: b\n\n", ":c\r\n\r\n", "data", "error: {}\n", "\r\r\n\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		r := newSSEReader(strings.NewReader(in), 256)
		for i := 0; i <= len(in)+1; i++ {
			ev, err := r.next()
			if err != nil {
				return
			}
			if len(ev.data) > len(in) {
				t.Fatalf("event data of %d bytes from %d bytes of input", len(ev.data), len(in))
			}
		}
		t.Fatal("the reader did not end")
	})
}

// FuzzOpenAIStream: whatever a server sends, the parser never panics, and
// an answer it accepts is one the child can take: every tool call named,
// its arguments JSON, a known finish reason.
func FuzzOpenAIStream(f *testing.F) {
	for _, s := range []string{
		`data: {"choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":"stop"}]}` + "\n\ndata: [DONE]\n\n",
		`data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"a","function":{"name":"f","arguments":"{\"x\":"}}]}}]}` + "\n\n" +
			`data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"name":"f","arguments":"1}"}}]},"finish_reason":"tool_calls"}]}` + "\n\n",
		`data: {"choices":[{"index":0,"delta":{"tool_calls":[{"function":{"name":"g","arguments":{"a":[1]}}}]}}]}` + "\n\n",
		`data: {"error":{"message":"boom","type":"server_error"}}` + "\n\n",
		`data: {"object":"error","message":"bad","code":400}` + "\n\n",
		"error: {\"code\":500}\n\n",
		`data: {"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":1}}}` + "\n\n",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		a := &assembly{}
		if err := readOpenAIStream(strings.NewReader(in), a); err != nil {
			return
		}
		checkAnswer(t, a)
	})
}

// FuzzAnthropicStream: as FuzzOpenAIStream, for the Messages stream.
func FuzzAnthropicStream(f *testing.F) {
	for _, s := range []string{
		"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"model\":\"c\",\"usage\":{\"input_tokens\":3,\"cache_read_input_tokens\":2}}}\n\n" +
			"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"tool_use\",\"id\":\"t\",\"name\":\"f\",\"input\":{}}}\n\n" +
			"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"a\\\":1}\"}}\n\n" +
			"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\"},\"usage\":{\"output_tokens\":4}}\n\n" +
			"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
		"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{}}\n\nevent: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"x\"}}\n\n",
		"event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n",
		"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"thinking\",\"thinking\":\"t\"}}\n\n",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		a := &assembly{}
		if err := readAnthropicStream(strings.NewReader(in), a); err != nil {
			return
		}
		checkAnswer(t, a)
	})
}

// checkAnswer checks what an accepted stream assembled into.
func checkAnswer(t *testing.T, a *assembly) {
	t.Helper()
	resp, err := a.response()
	if err != nil {
		return // refused at assembly: an empty answer, a call without a name
	}
	switch resp.FinishReason {
	case FinishStop, FinishToolCalls, FinishLength, FinishContentFilter:
	default:
		t.Fatalf("finish reason %q", resp.FinishReason)
	}
	for _, c := range resp.GetMessage().GetToolCalls() {
		if c.Name == "" {
			t.Fatalf("a tool call without a name: %v", c)
		}
	}
	if u := resp.GetUsage(); u.GetTotalTokens() != u.GetPromptTokens()+u.GetCompletionTokens() {
		t.Fatalf("usage %v", u)
	}
}

func TestOpenAIBody(t *testing.T) {
	temp := float32(0)
	req := Request{
		Settings: &agentmeshv1.ModelSettings{Temperature: &temp},
		Turn: &childv1.ModelRequest{Messages: []*childv1.Message{
			{Role: "system", Content: "s"},
			{Role: "user", Content: "u"},
			{Role: "assistant", ToolCalls: []*agentmeshv1.ToolCall{{Id: "c1", Name: "echo", Arguments: `{"text":"x"}`}}},
			{Role: "tool", Content: "x", ToolCallId: "c1"},
		}, Tools: []*childv1.ToolSpec{{Name: "echo", ParametersJson: `{"type":"object"}`}}},
	}
	b, sent, err := openAIBody(Endpoint{Model: "m", MaxTokens: 100}, req, nil)
	if err != nil {
		t.Fatal(err)
	}
	var body map[string]any
	_ = json.Unmarshal(b, &body)
	if body["temperature"] != 0.0 {
		t.Errorf("temperature 0 not sent: %v", body["temperature"])
	}
	if body["max_tokens"] != 100.0 || body["stream"] != true || body["parallel_tool_calls"] != true {
		t.Errorf("body = %s", b)
	}
	if strings.Join(sent, ",") != "stream_options,parallel_tool_calls" {
		t.Errorf("sent = %v", sent)
	}
	msgs := body["messages"].([]any)
	call := msgs[2].(map[string]any)["tool_calls"].([]any)[0].(map[string]any)
	if call["id"] != "c1" || call["function"].(map[string]any)["arguments"] != `{"text":"x"}` {
		t.Errorf("assistant call = %v", call)
	}
	if msgs[3].(map[string]any)["tool_call_id"] != "c1" {
		t.Errorf("tool message = %v", msgs[3])
	}
	b, sent, _ = openAIBody(Endpoint{Model: "m"}, req, map[string]bool{fieldStreamOptions: true, fieldParallelToolCalls: true})
	if len(sent) != 0 || strings.Contains(string(b), "stream_options") || strings.Contains(string(b), "parallel_tool_calls") {
		t.Errorf("refused fields sent: %s", b)
	}
}

func TestAnthropicBody(t *testing.T) {
	long := strings.Repeat("You are a careful agent. ", 200) // past the cache minimum
	req := Request{Turn: &childv1.ModelRequest{Messages: []*childv1.Message{
		{Role: "system", Content: long},
		{Role: "user", Content: "what time?"},
		{Role: "assistant", Content: "checking", ToolCalls: []*agentmeshv1.ToolCall{
			{Id: "t1", Name: "current_time", Arguments: `{"timezone":"UTC"}`},
			{Id: "t2", Name: "echo", Arguments: `not json`},
		}},
		{Role: "tool", Content: "noon", ToolCallId: "t1"},
		{Role: "tool", Content: "x", ToolCallId: "t2"},
		{Role: "user", Content: "and?"},
	}, Tools: []*childv1.ToolSpec{{Name: "current_time", Description: "d", ParametersJson: `{"type":"object"}`}}}}
	b, err := anthropicBody(Endpoint{Model: "claude"}, req)
	if err != nil {
		t.Fatal(err)
	}
	var body struct {
		MaxTokens int `json:"max_tokens"`
		System    []struct {
			Text         string          `json:"text"`
			CacheControl json.RawMessage `json:"cache_control"`
		} `json:"system"`
		Messages []struct {
			Role    string           `json:"role"`
			Content []map[string]any `json:"content"`
		} `json:"messages"`
		Tools []struct {
			Name        string          `json:"name"`
			InputSchema json.RawMessage `json:"input_schema"`
		} `json:"tools"`
	}
	if err := json.Unmarshal(b, &body); err != nil {
		t.Fatal(err)
	}
	if body.MaxTokens != DefaultAnthropicMaxTokens {
		t.Errorf("max_tokens = %d", body.MaxTokens)
	}
	if len(body.System) != 1 || body.System[0].Text != long || string(body.System[0].CacheControl) != `{"type":"ephemeral"}` {
		t.Errorf("system = %+v", body.System)
	}
	if len(body.Tools) != 1 || string(body.Tools[0].InputSchema) != `{"type":"object"}` {
		t.Errorf("tools = %+v", body.Tools)
	}
	roles := []string{}
	for _, m := range body.Messages {
		roles = append(roles, m.Role)
	}
	// The two tool results and the user's next words are one user turn.
	if strings.Join(roles, ",") != "user,assistant,user" {
		t.Fatalf("roles = %v", roles)
	}
	asst := body.Messages[1].Content
	if asst[0]["type"] != "text" || asst[1]["type"] != "tool_use" || asst[1]["id"] != "t1" {
		t.Errorf("assistant blocks = %v", asst)
	}
	if in := asst[1]["input"].(map[string]any); in["timezone"] != "UTC" {
		t.Errorf("tool_use input = %v", in)
	}
	if in := asst[2]["input"].(map[string]any); in["arguments"] != "not json" {
		t.Errorf("arguments that are not an object: input = %v", in)
	}
	user := body.Messages[2].Content
	if user[0]["type"] != "tool_result" || user[0]["tool_use_id"] != "t1" || user[0]["content"] != "noon" || user[2]["text"] != "and?" {
		t.Errorf("user blocks = %v", user)
	}
	if user[2]["cache_control"] == nil || user[0]["cache_control"] != nil {
		t.Errorf("the conversation's breakpoint is not on its last block: %v", user)
	}
	// A short prompt gets no breakpoint (it would not be cached).
	short := Request{Turn: &childv1.ModelRequest{Messages: []*childv1.Message{{Role: "system", Content: "s"}, {Role: "user", Content: "u"}}}}
	if b, _ := anthropicBody(Endpoint{Model: "c", MaxTokens: 77}, short); strings.Contains(string(b), "cache_control") || !strings.Contains(string(b), `"max_tokens":77`) {
		t.Errorf("short body = %s", b)
	}
}

func TestTextToolCalls(t *testing.T) {
	tests := []struct {
		name, in, content string
		calls             []string // name + arguments
	}{
		{"one", "Looking.\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n</tool_call>", "Looking.", []string{`f{"a":1}`}},
		{"two", "<tool_call>{\"name\":\"f\",\"arguments\":{}}</tool_call><tool_call>{\"name\":\"g\",\"parameters\":{\"b\":\"c\"}}</tool_call>", "", []string{"f{}", `g{"b":"c"}`}},
		{"string arguments", "<tool_call>{\"name\":\"f\",\"arguments\":\"{\\\"a\\\":2}\"}</tool_call>", "", []string{`f{"a":2}`}},
		{"unclosed last", "x <tool_call>{\"name\":\"f\",\"arguments\":{}}", "x", []string{"f{}"}},
		{"not json stays", "<tool_call>not json</tool_call>", "<tool_call>not json</tool_call>", nil},
		{"no name stays", "<tool_call>{\"arguments\":{}}</tool_call>", "<tool_call>{\"arguments\":{}}</tool_call>", nil},
		{"arguments not object", "<tool_call>{\"name\":\"f\",\"arguments\":[1]}</tool_call>", "<tool_call>{\"name\":\"f\",\"arguments\":[1]}</tool_call>", nil},
		{"none", "plain", "plain", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := &childv1.ModelResponse{Message: &childv1.Message{Content: tt.in}, FinishReason: FinishStop}
			n := textToolCalls(resp)
			if n != len(tt.calls) || resp.Message.Content != tt.content {
				t.Fatalf("%d calls, content %q; want %d, %q", n, resp.Message.Content, len(tt.calls), tt.content)
			}
			for i, c := range resp.Message.ToolCalls {
				if c.Name+c.Arguments != tt.calls[i] || c.Id == "" {
					t.Errorf("call %d = %v, want %s", i, c, tt.calls[i])
				}
			}
			if n > 0 && resp.FinishReason != FinishToolCalls {
				t.Errorf("finish %q", resp.FinishReason)
			}
		})
	}
	// Native calls win: the text is left alone.
	resp := &childv1.ModelResponse{Message: &childv1.Message{Content: "<tool_call>{\"name\":\"f\"}</tool_call>", ToolCalls: []*agentmeshv1.ToolCall{{Name: "g"}}}}
	if textToolCalls(resp) != 0 || len(resp.Message.ToolCalls) != 1 {
		t.Error("text calls read beside native ones")
	}
}

func TestClassify(t *testing.T) {
	tests := []struct {
		err  error
		want Kind
	}{
		{&httpError{status: 400}, KindRejected},
		{&httpError{status: 401}, KindRejected},
		{&httpError{status: 403}, KindRejected},
		{&httpError{status: 404}, KindRejected},
		{&httpError{status: 413}, KindRejected},
		{&httpError{status: 422}, KindRejected},
		{&httpError{status: 408}, KindTransient},
		{&httpError{status: 429}, KindRateLimited},
		{&httpError{status: 500}, KindTransient},
		{&httpError{status: 503}, KindTransient},
		{&httpError{status: 529}, KindTransient},
		{unparsable("x"), KindRejected},
		{ErrResponseTooLarge, KindRejected},
		{&streamError{typ: "overloaded_error"}, KindTransient},
		{&streamError{typ: "invalid_request_error"}, KindRejected},
		{&streamError{status: 400}, KindRejected},
		{&streamError{status: 503}, KindTransient},
		{&streamError{typ: "rate_limit_error"}, KindRateLimited},
		{io.ErrUnexpectedEOF, KindTransient},
		{errors.New("connection reset by peer"), KindTransient},
	}
	for _, tt := range tests {
		if got := classify(tt.err); got != tt.want {
			t.Errorf("classify(%v) = %s, want %s", tt.err, got, tt.want)
		}
	}
}

// BenchmarkParse measures the stream parsers alone on a typical turn (40
// content chunks, a tool call in 8 pieces, finish, usage).
func BenchmarkParse(b *testing.B) {
	for _, tc := range []struct {
		name string
		read func(io.Reader, *assembly) error
	}{{"openai", readOpenAIStream}, {"anthropic", readAnthropicStream}} {
		body := benchBody(tc.name == "anthropic")
		b.Run(tc.name, func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				a := &assembly{}
				if err := tc.read(bytes.NewReader(body), a); err != nil {
					b.Fatal(err)
				}
				if _, err := a.response(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func benchBody(anthropic bool) []byte {
	var b bytes.Buffer
	if anthropic {
		b.WriteString("event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"model\":\"c\",\"usage\":{\"input_tokens\":900}}}\n\n")
		for i := range 40 {
			b.WriteString("event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"word" + strings.Repeat("x", i%3) + " \"}}\n\n")
		}
		b.WriteString("event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n")
		return b.Bytes()
	}
	for i := range 48 {
		b.WriteString(`data: {"id":"chatcmpl-b","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"word` + strings.Repeat("x", i%3) + ` "},"finish_reason":null}]}` + "\n\n")
	}
	b.WriteString("data: [DONE]\n\n")
	return b.Bytes()
}

// FuzzFastContent: whenever the fast readers take a chunk, the full
// decoders read it the same: the same text, and nothing else of use.
func FuzzFastContent(f *testing.F) {
	for _, s := range []string{
		`{"id":"c","object":"chat.completion.chunk","model":"m","choices":[{"index":0,"delta":{"content":"hi \"there\""},"finish_reason":null}]}`,
		`{"choices":[{"index":0,"delta":{"content":"a","role":"assistant"},"finish_reason":null}],"usage":null}`,
		`{"choices":[{"index":0,"delta":{"content":"a"},"finish_reason":"stop"}]}`,
		`{"choices":[{"index":1,"delta":{"content":"a"}}]}`,
		`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"x\u00e9"}}`,
		`{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{}"}}`,
		`{"type":"content_block_delta","x":{"type":"text_delta","text":"a"},"delta":{}}`,
		`{"choices":[{"index":0}],"x":{"delta":{"content":"0"}}}`,
		`{"choices":[{"index":0,"x":{"y":1},"delta":{"content":"0"}}]}`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		data := []byte(in)
		if text, ok := fastContent(data); ok {
			slow := &assembly{} // a first chunk: always the full decoder
			if err := slow.addOpenAIChunk(data, false); err != nil {
				t.Fatalf("fast took %q, the decoder refuses it: %v", in, err)
			}
			if slow.content.String() != text || len(slow.calls) != 0 || slow.finish != "" || slow.usage != (usage{}) || slow.reasoning != 0 {
				t.Fatalf("fast %q, decoder %q calls %d finish %q usage %v reasoning %d for %q", text, slow.content.String(), len(slow.calls), slow.finish, slow.usage, slow.reasoning, in)
			}
		}
		if text, ok := fastTextDelta(data); ok {
			var e anEvent
			if err := json.Unmarshal(data, &e); err != nil || e.Type != "content_block_delta" || e.Delta == nil || e.Delta.Type != "text_delta" || e.Delta.Text != text {
				t.Fatalf("fast text %q, decoder %+v %v for %q", text, e, err, in)
			}
		}
	})
}
