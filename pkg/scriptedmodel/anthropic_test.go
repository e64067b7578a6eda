package scriptedmodel

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
)

// postMessages posts body to /v1/messages with the API's headers (key ""
// sends none).
func postMessages(t *testing.T, base, key, version, body string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, base+"/messages", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if version != "" {
		req.Header.Set("anthropic-version", version)
	}
	if key != "" {
		req.Header.Set("x-api-key", key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// events reads a stream's named events.
func events(t *testing.T, r io.Reader) (names []string, data []map[string]any) {
	t.Helper()
	sc := bufio.NewScanner(r)
	name := ""
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			var d map[string]any
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &d); err != nil {
				t.Fatalf("event %s: %v", name, err)
			}
			if d["type"] != name {
				t.Fatalf("event %s carries type %v", name, d["type"])
			}
			names, data = append(names, name), append(data, d)
		}
	}
	return names, data
}

const anScript = `{"scenarios": [{"match": "time", "turns": [
  {"content": "Checking.", "tool_calls": [{"name": "current_time", "id": "t1", "arguments": {"timezone": "UTC"}}]},
  {"content": "It is {{last_tool_result}}."}
]}]}`

func TestAnthropicConversation(t *testing.T) {
	srv, _ := startServer(t, anScript)
	base := srv.URL()
	turn0 := `{"model":"claude","max_tokens":100,"stream":true,"system":"be brief","messages":[{"role":"user","content":"what time is it?"}]}`
	resp := postMessages(t, base, "k", "2023-06-01", turn0)
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("turn 0: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	names, data := events(t, resp.Body)
	want := "message_start,ping,content_block_start,content_block_delta,content_block_stop,content_block_start,content_block_delta,content_block_delta,content_block_stop,message_delta,message_stop"
	if strings.Join(names, ",") != want {
		t.Fatalf("events %v", names)
	}
	tool := data[5]["content_block"].(map[string]any)
	if tool["type"] != "tool_use" || tool["name"] != "current_time" || tool["id"] != "toolu_t1" {
		t.Errorf("tool_use block %v", tool)
	}
	input := data[6]["delta"].(map[string]any)["partial_json"].(string) + data[7]["delta"].(map[string]any)["partial_json"].(string)
	if input != `{"timezone":"UTC"}` {
		t.Errorf("input %q", input)
	}
	if d := data[9]["delta"].(map[string]any); d["stop_reason"] != "tool_use" {
		t.Errorf("message_delta %v", d)
	}
	// Turn 1: the tool result in a user turn.
	turn1 := `{"model":"claude","max_tokens":100,"messages":[{"role":"user","content":"what time is it?"},
	  {"role":"assistant","content":[{"type":"text","text":"Checking."},{"type":"tool_use","id":"toolu_t1","name":"current_time","input":{"timezone":"UTC"}}]},
	  {"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_t1","content":"noon"}]}]}`
	resp = postMessages(t, base, "k", "2023-06-01", turn1)
	var msg struct {
		Content    []map[string]any `json:"content"`
		StopReason string           `json:"stop_reason"`
		Usage      map[string]int   `json:"usage"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&msg); err != nil || resp.StatusCode != 200 {
		t.Fatalf("turn 1: %d %v", resp.StatusCode, err)
	}
	if msg.Content[0]["text"] != "It is noon." || msg.StopReason != "end_turn" || msg.Usage["input_tokens"] == 0 || msg.Usage["output_tokens"] == 0 {
		t.Errorf("turn 1 = %+v", msg)
	}
	if srv.RequestsAt(1) != 1 {
		t.Errorf("turn 1 asked %d times", srv.RequestsAt(1))
	}
	conv := srv.Received()[1]
	if conv[len(conv)-1].Role != "tool" || conv[len(conv)-1].Text != "noon" {
		t.Errorf("received %+v", conv)
	}
}

// What the API refuses, the server refuses, in the API's error shape.
func TestAnthropicRefuses(t *testing.T) {
	s, err := ParseScript([]byte(anScript))
	if err != nil {
		t.Fatal(err)
	}
	srv := New(s, WithAnthropicKey("sk-ant"))
	base, err := srv.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	ok := `{"model":"c","max_tokens":10,"messages":[{"role":"user","content":"what time"}]}`
	tests := []struct {
		name, key, version, body string
		status                   int
		typ                      string
	}{
		{"no version", "sk-ant", "", ok, 400, "invalid_request_error"},
		{"wrong key", "nope", "2023-06-01", ok, 401, "authentication_error"},
		{"no max_tokens", "sk-ant", "2023-06-01", `{"model":"c","messages":[{"role":"user","content":"x"}]}`, 400, "invalid_request_error"},
		{"starts with assistant", "sk-ant", "2023-06-01", `{"model":"c","max_tokens":1,"messages":[{"role":"assistant","content":"x"}]}`, 400, "invalid_request_error"},
		{"roles repeat", "sk-ant", "2023-06-01", `{"model":"c","max_tokens":1,"messages":[{"role":"user","content":"x"},{"role":"user","content":"y"}]}`, 400, "invalid_request_error"},
		{"orphan tool_result", "sk-ant", "2023-06-01", `{"model":"c","max_tokens":1,"messages":[{"role":"user","content":"x"},{"role":"assistant","content":"y"},{"role":"user","content":[{"type":"tool_result","tool_use_id":"nope","content":"z"}]}]}`, 400, "invalid_request_error"},
		{"empty text", "sk-ant", "2023-06-01", `{"model":"c","max_tokens":1,"messages":[{"role":"user","content":[{"type":"text","text":""}]}]}`, 400, "invalid_request_error"},
		{"fine", "sk-ant", "2023-06-01", ok, 200, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := postMessages(t, base, tt.key, tt.version, tt.body)
			if resp.StatusCode != tt.status {
				t.Fatalf("status %d, want %d", resp.StatusCode, tt.status)
			}
			if tt.typ == "" {
				return
			}
			var e struct {
				Type  string            `json:"type"`
				Error map[string]string `json:"error"`
			}
			if err := json.NewDecoder(resp.Body).Decode(&e); err != nil || e.Type != "error" || e.Error["type"] != tt.typ || e.Error["message"] == "" {
				t.Errorf("body %+v %v, want an %s", e, err, tt.typ)
			}
		})
	}
}

func TestAnthropicErrorsAndCache(t *testing.T) {
	srv, _ := startServer(t, `{"scenarios": [
	  {"match": "busy", "turns": [{"content": "x", "status": 529, "times": 1}]},
	  {"match": "limited", "turns": [{"content": "x", "status": 429, "retry_after": "3"}]},
	  {"turns": [{"content": "cached answer"}]}]}`)
	base := srv.URL()
	req := func(input, system string) *http.Response {
		return postMessages(t, base, "", "2023-06-01", `{"model":"c","max_tokens":10,"system":`+system+`,"messages":[{"role":"user","content":"`+input+`"}]}`)
	}
	resp := req("busy", `"s"`)
	var e struct {
		Error map[string]string `json:"error"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&e)
	if resp.StatusCode != 529 || e.Error["type"] != "overloaded_error" {
		t.Errorf("529: %d %v", resp.StatusCode, e)
	}
	if resp := req("busy", `"s"`); resp.StatusCode != 200 {
		t.Errorf("after the scripted 529: %d", resp.StatusCode)
	}
	resp = req("limited", `"s"`)
	_ = json.NewDecoder(resp.Body).Decode(&e)
	if resp.StatusCode != 429 || e.Error["type"] != "rate_limit_error" || resp.Header.Get("Retry-After") != "3" {
		t.Errorf("429: %d %v %q", resp.StatusCode, e, resp.Header.Get("Retry-After"))
	}
	// A system prompt marked for caching: written the first time, read after.
	system := `[{"type":"text","text":"a long and stable system prompt for caching","cache_control":{"type":"ephemeral"}}]`
	usage := func() map[string]int {
		var m struct {
			Usage map[string]int `json:"usage"`
		}
		_ = json.NewDecoder(req("hello", system).Body).Decode(&m)
		return m.Usage
	}
	first, second := usage(), usage()
	if first["cache_creation_input_tokens"] == 0 || first["cache_read_input_tokens"] != 0 {
		t.Errorf("first usage %v, want a cache write", first)
	}
	if second["cache_read_input_tokens"] != first["cache_creation_input_tokens"] || second["cache_creation_input_tokens"] != 0 {
		t.Errorf("second usage %v, want a cache read of %d", second, first["cache_creation_input_tokens"])
	}
}

// Each quirk shows in what the server sends.
func TestQuirks(t *testing.T) {
	turn := `{"content": "hi", "tool_calls": [{"name": "current_time", "id": "c1", "arguments": {"timezone": "UTC", "pad": "some words to split"}}]}`
	tests := []struct {
		quirk string
		check func(t *testing.T, status int, body string)
	}{
		{QuirkRepeatName, func(t *testing.T, _ int, body string) {
			if n := strings.Count(body, `"name":"current_time"`); n < 3 {
				t.Errorf("the name came %d times", n)
			}
		}},
		{QuirkArgumentsObject, func(t *testing.T, _ int, body string) {
			if !strings.Contains(body, `"arguments":{"pad":"some words to split","timezone":"UTC"}`) && !strings.Contains(body, `"arguments":{"timezone":"UTC","pad":"some words to split"}`) {
				t.Errorf("no object arguments in %s", body)
			}
		}},
		{QuirkNoIndex, func(t *testing.T, _ int, body string) {
			if strings.Contains(body, `"index":0,"id"`) || strings.Contains(body, `"tool_calls":[{"index"`) {
				t.Errorf("a tool call chunk has an index: %s", body)
			}
		}},
		{QuirkNoUsage, func(t *testing.T, _ int, body string) {
			if strings.Contains(body, `"usage"`) {
				t.Errorf("usage sent")
			}
		}},
		{QuirkNoDone, func(t *testing.T, _ int, body string) {
			if strings.Contains(body, "[DONE]") {
				t.Errorf("[DONE] sent")
			}
		}},
		{QuirkReasoning, func(t *testing.T, _ int, body string) {
			if !strings.Contains(body, `"reasoning_content"`) {
				t.Errorf("no reasoning")
			}
		}},
		{QuirkToolCallsAsText, func(t *testing.T, _ int, body string) {
			if strings.Contains(body, `"tool_calls"`) || !strings.Contains(body, `\u003ctool_call\u003e`) {
				t.Errorf("calls not as text: %s", body)
			}
		}},
		{QuirkRejectStreamOptions, func(t *testing.T, status int, body string) {
			if status != 400 || !strings.Contains(body, "stream_options") {
				t.Errorf("%d %s", status, body)
			}
		}},
		{QuirkRejectParallelToolCalls, func(t *testing.T, status int, body string) {
			if status != 400 || !strings.Contains(body, "parallel_tool_calls") {
				t.Errorf("%d %s", status, body)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.quirk, func(t *testing.T) {
			srv, _ := startServer(t, `{"quirks": ["`+tt.quirk+`"], "scenarios": [{"turns": [`+turn+`]}]}`)
			resp := post(t, srv.URL(), `{"model":"m","stream":true,"stream_options":{"include_usage":true},"parallel_tool_calls":true,"messages":[{"role":"user","content":"x"}]}`)
			b, _ := io.ReadAll(resp.Body)
			tt.check(t, resp.StatusCode, string(b))
		})
	}
	if _, err := ParseScript([]byte(`{"quirks": ["nope"], "scenarios": [{"turns": [{"content": "x"}]}]}`)); err == nil {
		t.Error("an unknown quirk was accepted")
	}
}

// A script's rate limit answers 429 past its requests in its window, with
// the wait until the oldest leaves it.
func TestScriptRateLimit(t *testing.T) {
	srv, _ := startServer(t, `{"rate_limit": {"requests": 3, "window_ms": 2000}, "scenarios": [{"turns": [{"content": "x"}]}]}`)
	req := `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
	var statuses []int
	for range 5 {
		resp := post(t, srv.URL(), req)
		statuses = append(statuses, resp.StatusCode)
		if resp.StatusCode == 429 && resp.Header.Get("Retry-After") == "" {
			t.Error("429 without Retry-After")
		}
	}
	if got := statuses; got[0] != 200 || got[2] != 200 || got[3] != 429 || got[4] != 429 {
		t.Errorf("statuses %v", got)
	}
	if srv.RateLimited() != 2 || len(srv.RequestTimes()) != 5 {
		t.Errorf("limited %d, times %d", srv.RateLimited(), len(srv.RequestTimes()))
	}
	if _, err := ParseScript([]byte(`{"rate_limit": {"requests": 0, "window_ms": 5}, "scenarios": [{"turns": [{"content": "x"}]}]}`)); err == nil {
		t.Error("a rate limit of 0 requests was accepted")
	}
}
