package scriptedmodel

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"
)

func startServer(t *testing.T, script string) (*Server, *openai.Client) {
	t.Helper()
	var s *Script
	if script != "" {
		var err error
		if s, err = ParseScript([]byte(script)); err != nil {
			t.Fatalf("ParseScript: %v", err)
		}
	}
	srv := New(s)
	url, err := srv.Start("127.0.0.1:0")
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { srv.Close() })
	cfg := openai.DefaultConfig("unused")
	cfg.BaseURL = url
	return srv, openai.NewClientWithConfig(cfg)
}

var toolSpec = []openai.Tool{{Type: openai.ToolTypeFunction, Function: &openai.FunctionDefinition{
	Name: "current_time", Parameters: json.RawMessage(`{"type":"object"}`),
}}}

func TestDefaultScriptConversation(t *testing.T) {
	srv, c := startServer(t, "")
	ctx := context.Background()
	msgs := []openai.ChatCompletionMessage{
		{Role: "system", Content: "you are helpful"},
		{Role: "user", Content: "what time is it?"},
	}
	resp, err := c.CreateChatCompletion(ctx, openai.ChatCompletionRequest{Model: "any", Messages: msgs, Tools: toolSpec})
	if err != nil {
		t.Fatalf("turn 0: %v", err)
	}
	ch := resp.Choices[0]
	if len(ch.Message.ToolCalls) != 1 || ch.Message.ToolCalls[0].Function.Name != "current_time" || ch.FinishReason != openai.FinishReasonToolCalls {
		t.Fatalf("turn 0 = %+v, want a current_time call", ch)
	}
	if resp.Usage.PromptTokens == 0 || resp.Usage.TotalTokens != resp.Usage.PromptTokens+resp.Usage.CompletionTokens {
		t.Errorf("usage = %+v", resp.Usage)
	}
	if resp.Model != "any" {
		t.Errorf("model = %q, want the requested one", resp.Model)
	}
	msgs = append(msgs, ch.Message, openai.ChatCompletionMessage{Role: "tool", Content: "2026-01-02T03:04:05Z", ToolCallID: ch.Message.ToolCalls[0].ID})
	resp, err = c.CreateChatCompletion(ctx, openai.ChatCompletionRequest{Model: "any", Messages: msgs, Tools: toolSpec})
	if err != nil {
		t.Fatalf("turn 1: %v", err)
	}
	got := resp.Choices[0].Message.Content
	if !strings.Contains(got, "2026-01-02T03:04:05Z") || !strings.Contains(got, "what time is it?") || len(resp.Choices[0].Message.ToolCalls) != 0 {
		t.Errorf("turn 1 content = %q, want the tool result and the input", got)
	}
	if n := srv.Requests(); n != 2 {
		t.Errorf("Requests = %d, want 2", n)
	}
}

const twoScenarios = `{
  "model": "scripted-test",
  "scenarios": [
    {"match": "(?i)^echo", "turns": [
      {"content": "calling", "tool_calls": [{"name": "echo", "arguments": {"text": "you said {{input}}", "n": [1, "{{input}}"]}}, {"name": "echo", "id": "mine", "arguments": "{broken"}]},
      {"content": "tool said: {{last_tool_result}}", "usage": {"prompt_tokens": 7, "completion_tokens": 3}}
    ]},
    {"turns": [{"content": "fallback héllo wörld, a longer answer so that it streams in several chunks"}]}
  ]
}`

func TestStreaming(t *testing.T) {
	_, c := startServer(t, twoScenarios)
	stream, err := c.CreateChatCompletionStream(context.Background(), openai.ChatCompletionRequest{
		Model: "m", Stream: true, StreamOptions: &openai.StreamOptions{IncludeUsage: true},
		Messages: []openai.ChatCompletionMessage{{Role: "user", Content: "echo this"}},
	})
	if err != nil {
		t.Fatalf("stream: %v", err)
	}
	defer stream.Close()
	var content strings.Builder
	type call struct{ id, name, args string }
	calls := map[int]*call{}
	var usage *openai.Usage
	var finish openai.FinishReason
	chunks := 0
	for {
		r, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("recv: %v", err)
		}
		chunks++
		if r.Usage != nil {
			usage = r.Usage
		}
		for _, ch := range r.Choices {
			content.WriteString(ch.Delta.Content)
			if ch.FinishReason != "" {
				finish = ch.FinishReason
			}
			for _, tc := range ch.Delta.ToolCalls {
				if tc.Index == nil {
					t.Fatalf("tool call delta without index")
				}
				c := calls[*tc.Index]
				if c == nil {
					c = &call{}
					calls[*tc.Index] = c
				}
				if tc.ID != "" {
					c.id = tc.ID
				}
				c.name += tc.Function.Name
				c.args += tc.Function.Arguments
			}
		}
	}
	if content.String() != "calling" || finish != openai.FinishReasonToolCalls {
		t.Errorf("content %q finish %q", content.String(), finish)
	}
	if len(calls) != 2 || calls[0].name != "echo" || calls[1].id != "mine" || calls[1].args != "{broken" {
		t.Fatalf("calls = %+v %+v", calls[0], calls[1])
	}
	var args map[string]any
	if err := json.Unmarshal([]byte(calls[0].args), &args); err != nil || args["text"] != "you said echo this" {
		t.Errorf("args %q (%v), want placeholders filled", calls[0].args, err)
	}
	if usage == nil || usage.TotalTokens == 0 {
		t.Errorf("usage = %v, want a usage chunk", usage)
	}

	// The fallback scenario, streamed in several chunks, multi-byte runes intact.
	stream2, err := c.CreateChatCompletionStream(context.Background(), openai.ChatCompletionRequest{
		Model: "m", Messages: []openai.ChatCompletionMessage{{Role: "user", Content: "anything"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer stream2.Close()
	content.Reset()
	n := 0
	for {
		r, err := stream2.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("recv: %v", err)
		}
		if r.Usage != nil {
			t.Errorf("usage chunk sent without include_usage")
		}
		for _, ch := range r.Choices {
			if ch.Delta.Content != "" {
				n++
			}
			content.WriteString(ch.Delta.Content)
		}
	}
	if !strings.HasPrefix(content.String(), "fallback héllo wörld") || n < 3 {
		t.Errorf("content %q in %d chunks", content.String(), n)
	}
}

func TestTurnsFollowTheConversation(t *testing.T) {
	_, c := startServer(t, twoScenarios)
	conv := []openai.ChatCompletionMessage{{Role: "user", Content: "Echo me"}}
	ask := func() openai.ChatCompletionResponse {
		t.Helper()
		resp, err := c.CreateChatCompletion(context.Background(), openai.ChatCompletionRequest{Model: "m", Messages: conv})
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	r := ask()
	if len(r.Choices[0].Message.ToolCalls) != 2 {
		t.Fatalf("turn 0 = %+v", r.Choices[0].Message)
	}
	conv = append(conv, r.Choices[0].Message, openai.ChatCompletionMessage{Role: "tool", Content: "pong", ToolCallID: "x"})
	r = ask()
	if r.Choices[0].Message.Content != "tool said: pong" || r.Usage.PromptTokens != 7 || r.Usage.TotalTokens != 10 {
		t.Errorf("turn 1 = %q usage %+v", r.Choices[0].Message.Content, r.Usage)
	}
	conv = append(conv, r.Choices[0].Message, openai.ChatCompletionMessage{Role: "user", Content: "more"})
	r = ask()
	if r.Choices[0].Message.Content != "tool said: pong" || len(r.Choices[0].Message.ToolCalls) != 0 || r.Choices[0].FinishReason != openai.FinishReasonStop {
		t.Errorf("past the last turn = %+v, want the last content without tool calls", r.Choices[0])
	}
}

func TestInjectedFailures(t *testing.T) {
	srv, c := startServer(t, `{"scenarios":[
		{"match":"flaky","turns":[{"content":"recovered","status":503,"times":2}]},
		{"match":"broken","turns":[{"content":"x","status":500}]},
		{"match":"garbage","turns":[{"content":"x","garbage":true}]},
		{"match":"slow","turns":[{"content":"late","delay_ms":5000}]}
	]}`)
	ask := func(ctx context.Context, input string) (openai.ChatCompletionResponse, error) {
		return c.CreateChatCompletion(ctx, openai.ChatCompletionRequest{Model: "m", Messages: []openai.ChatCompletionMessage{{Role: "user", Content: input}}})
	}
	ctx := context.Background()
	for i := range 2 {
		_, err := ask(ctx, "flaky")
		var apiErr *openai.APIError
		if !errors.As(err, &apiErr) || apiErr.HTTPStatusCode != 503 {
			t.Fatalf("flaky call %d: err = %v, want HTTP 503", i, err)
		}
	}
	if r, err := ask(ctx, "flaky"); err != nil || r.Choices[0].Message.Content != "recovered" {
		t.Fatalf("third flaky call = %v, %v; want recovered", r, err)
	}
	for range 2 {
		var apiErr *openai.APIError
		if _, err := ask(ctx, "broken"); !errors.As(err, &apiErr) || apiErr.HTTPStatusCode != 500 {
			t.Fatalf("broken: err = %v, want HTTP 500 every time", err)
		}
	}
	if _, err := ask(ctx, "garbage"); err == nil {
		t.Fatal("garbage: no error")
	}
	if _, err := ask(ctx, "nothing matches"); err == nil || !strings.Contains(err.Error(), "404") {
		t.Fatalf("no scenario: err = %v, want 404", err)
	}
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	began := time.Now()
	if _, err := ask(short, "slow"); err == nil || time.Since(began) > 4*time.Second {
		t.Fatalf("slow: err = %v after %v, want a timeout well before the delay", err, time.Since(began))
	}
	if n := srv.Requests(); n != 8 {
		t.Errorf("Requests = %d, want 8", n)
	}
}

func TestModels(t *testing.T) {
	_, c := startServer(t, twoScenarios)
	list, err := c.ListModels(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Models) != 1 || list.Models[0].ID != "scripted-test" {
		t.Errorf("models = %+v", list.Models)
	}
}

func TestBadRequests(t *testing.T) {
	srv := New(nil)
	for _, body := range []string{`not json`, `{"messages":[]}`} {
		rec := httptest.NewRecorder()
		srv.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(body)))
		if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), `"error"`) {
			t.Errorf("%s: got %d %s, want 400 with an OpenAI error body", body, rec.Code, rec.Body)
		}
	}
}

func TestParseScript(t *testing.T) {
	tests := []struct {
		name, in, wantErr string
	}{
		{"bare list", `[{"turns":[{"content":"hi"}]}]`, ""},
		{"empty", `{}`, "no scenarios"},
		{"no turns", `{"scenarios":[{"match":"x"}]}`, "no turns"},
		{"bad regexp", `{"scenarios":[{"match":"(","turns":[{}]}]}`, "match"},
		{"bad status", `{"scenarios":[{"turns":[{"status":200}]}]}`, "status 200"},
		{"times without failure", `{"scenarios":[{"turns":[{"times":1}]}]}`, "times"},
		{"negative delay", `{"scenarios":[{"turns":[{"delay_ms":-1}]}]}`, "delay_ms"},
		{"nameless tool", `{"scenarios":[{"turns":[{"tool_calls":[{"arguments":{}}]}]}]}`, "no name"},
		{"unknown field", `{"scenarios":[{"turns":[{}]}],"colour":1}`, "unknown field"},
		{"not json", `{`, "invalid script"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseScript([]byte(tt.in))
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("err = %v", err)
				}
				return
			}
			if !errors.Is(err, ErrInvalidScript) || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("err = %v, want ErrInvalidScript containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestLoadScript(t *testing.T) {
	if _, err := LoadScript(t.TempDir() + "/missing.json"); err == nil {
		t.Error("missing file: no error")
	}
}

func FuzzParseScript(f *testing.F) {
	f.Add([]byte(twoScenarios), "echo hi")
	f.Add([]byte(`[{"turns":[{"content":"{{input}}","tool_calls":[{"name":"x","arguments":"{{last_tool_result}}"}]}]}]`), "x")
	f.Fuzz(func(t *testing.T, data []byte, input string) {
		s, err := ParseScript(data)
		if err != nil {
			return
		}
		for i := range s.Scenarios {
			for k := range s.Scenarios[i].Turns {
				s.Scenarios[i].Turns[k].DelayMS = 0
			}
		}
		body, _ := json.Marshal(map[string]any{"model": "m", "stream": len(input)%2 == 0,
			"messages": []map[string]any{{"role": "user", "content": input}, {"role": "assistant", "content": "a"}}})
		rec := httptest.NewRecorder()
		New(s).ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(string(body))))
		if rec.Code == 0 {
			t.Fatal("no answer")
		}
	})
}
