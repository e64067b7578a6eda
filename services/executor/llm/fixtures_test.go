package llm_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	childv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/child/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/testlog"
	"github.com/agentmesh/agentmesh/services/executor/llm"
)

// The fixture suite: for each server shape (testdata/fixtures/<server>/),
// transcripts of what that server sends, written from its documented wire
// format, are replayed by a test server to the real client, and what the
// client makes of them is checked. A fixture is a file of sections:
//
//	# what the case is, and where its format comes from
//	-- config --         optional JSON: provider, tools, tool_calls_in_text,
//	                     tool_protocol, max_tokens
//	-- response --       the HTTP answer: status line, headers, blank line,
//	                     body; response.2, response.3 … answer the next
//	                     requests (the last one answers any more)
//	-- want --           JSON: content, tool_calls [{name, arguments}],
//	                     finish_reason, usage {prompt, completion,
//	                     cache_read, cache_write}, requests (how many were
//	                     made), error_kind and error (a substring) for a
//	                     call that fails, absent {"2": ["stream_options"]}
//	                     (fields request n must not carry), present (the
//	                     same, must carry)

type fixture struct {
	name      string
	config    fixtureConfig
	responses [][]byte
	want      fixtureWant
}

type fixtureConfig struct {
	Provider        string   `json:"provider"`
	Tools           []string `json:"tools"`
	ToolCallsInText bool     `json:"tool_calls_in_text"`
	ToolProtocol    string   `json:"tool_protocol"`
	MaxTokens       int32    `json:"max_tokens"`
}

type fixtureWant struct {
	Content      *string             `json:"content"`
	ToolCalls    []fixtureCall       `json:"tool_calls"`
	FinishReason string              `json:"finish_reason"`
	Usage        *fixtureUsage       `json:"usage"`
	Requests     int                 `json:"requests"`
	ErrorKind    string              `json:"error_kind"`
	Error        string              `json:"error"`
	Absent       map[string][]string `json:"absent"`
	Present      map[string][]string `json:"present"`
}

type fixtureCall struct {
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments"`
}

type fixtureUsage struct {
	Prompt     int64 `json:"prompt"`
	Completion int64 `json:"completion"`
	CacheRead  int64 `json:"cache_read"`
	CacheWrite int64 `json:"cache_write"`
}

// loadFixture parses one fixture file.
func loadFixture(t *testing.T, path string) fixture {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	f := fixture{name: path}
	sections := map[string][]byte{}
	var order []string
	cur := ""
	for _, line := range bytes.SplitAfter(data, []byte("\n")) {
		s := strings.TrimRight(string(line), "\n")
		if strings.HasPrefix(s, "-- ") && strings.HasSuffix(s, " --") {
			cur = strings.TrimSuffix(strings.TrimPrefix(s, "-- "), " --")
			order = append(order, cur)
			sections[cur] = []byte{}
			continue
		}
		if cur != "" {
			sections[cur] = append(sections[cur], line...)
		}
	}
	if c := sections["config"]; len(bytes.TrimSpace(c)) > 0 {
		if err := json.Unmarshal(c, &f.config); err != nil {
			t.Fatalf("%s: config: %v", path, err)
		}
	}
	if err := json.Unmarshal(sections["want"], &f.want); err != nil {
		t.Fatalf("%s: want: %v", path, err)
	}
	for _, name := range order {
		if name == "response" || strings.HasPrefix(name, "response.") {
			f.responses = append(f.responses, sections[name])
		}
	}
	if len(f.responses) == 0 {
		t.Fatalf("%s: no response", path)
	}
	return f
}

// replay serves a fixture's responses in order and records the requests'
// bodies.
type replay struct {
	t         *testing.T
	responses [][]byte
	mu        sync.Mutex
	bodies    []map[string]any
	paths     []string
}

func (r *replay) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	b, _ := io.ReadAll(req.Body)
	var body map[string]any
	_ = json.Unmarshal(b, &body)
	r.mu.Lock()
	r.bodies = append(r.bodies, body)
	r.paths = append(r.paths, req.URL.Path)
	n := len(r.bodies)
	r.mu.Unlock()
	raw := r.responses[min(n, len(r.responses))-1]
	resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(raw)), req)
	if err != nil {
		r.t.Errorf("fixture response %d: %v", n, err)
		http.Error(w, err.Error(), 500)
		return
	}
	for k, vs := range resp.Header {
		if k == "Content-Length" {
			continue
		}
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, resp.Body)
}

func (r *replay) requests() []map[string]any {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]map[string]any(nil), r.bodies...)
}

// runFixture calls the client against the fixture's replay.
func runFixture(t *testing.T, f fixture) (*childv1.ModelResponse, *replay, string, error) {
	t.Helper()
	rp := &replay{t: t, responses: f.responses}
	srv := httptest.NewServer(rp)
	t.Cleanup(srv.Close)
	provider := f.config.Provider
	base := srv.URL + "/v1"
	m, err := llm.New(llm.Config{BaseURL: base, Provider: provider, Model: "m", Timeout: 10 * time.Second, Retries: 2, Backoff: time.Millisecond}, testlog.New(t))
	if err != nil {
		t.Fatal(err)
	}
	var tools []*childv1.ToolSpec
	for _, name := range f.config.Tools {
		tools = append(tools, &childv1.ToolSpec{Name: name, Description: "the " + name + " tool", ParametersJson: `{"type":"object","properties":{}}`})
	}
	var streamed strings.Builder
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := m.Complete(ctx, llm.Request{
		Settings: &agentmeshv1.ModelSettings{ToolCallsInText: f.config.ToolCallsInText, ToolProtocol: f.config.ToolProtocol, MaxTokens: f.config.MaxTokens},
		Turn: &childv1.ModelRequest{Id: 7, Tools: tools, Messages: []*childv1.Message{
			{Role: "system", Content: "You are a test."},
			{Role: "user", Content: "What time is it?"},
		}},
		OnToken: func(s string) { streamed.WriteString(s) },
	})
	return resp, rp, streamed.String(), err
}

func TestFixtures(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "fixtures", "*", "*.txt"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no fixtures: %v", err)
	}
	servers := map[string]int{}
	for _, path := range files {
		server := filepath.Base(filepath.Dir(path))
		servers[server]++
		t.Run(server+"/"+strings.TrimSuffix(filepath.Base(path), ".txt"), func(t *testing.T) {
			f := loadFixture(t, path)
			resp, rp, streamed, err := runFixture(t, f)
			checkFixture(t, f, resp, err, rp, streamed)
		})
	}
	for _, s := range []string{"openai", "anthropic", "ollama", "vllm", "llamacpp", "quirks"} {
		if servers[s] == 0 {
			t.Errorf("no fixture of server shape %s", s)
		}
	}
}

func checkFixture(t *testing.T, f fixture, resp *childv1.ModelResponse, err error, rp *replay, streamed string) {
	t.Helper()
	w := f.want
	reqs := rp.requests()
	if w.Requests > 0 && len(reqs) != w.Requests {
		t.Errorf("%d requests, want %d", len(reqs), w.Requests)
	}
	checkFields(t, reqs, w.Absent, false)
	checkFields(t, reqs, w.Present, true)
	if w.ErrorKind != "" {
		if err == nil {
			t.Fatalf("answered %v, want a %s error", resp, w.ErrorKind)
		}
		if got := llm.KindOf(err).String(); got != w.ErrorKind {
			t.Errorf("error kind %s, want %s (%v)", got, w.ErrorKind, err)
		}
		if !strings.Contains(err.Error(), w.Error) {
			t.Errorf("error %q does not contain %q", err, w.Error)
		}
		return
	}
	if err != nil {
		t.Fatalf("call failed: %v", err)
	}
	msg := resp.GetMessage()
	if w.Content != nil && msg.GetContent() != *w.Content {
		t.Errorf("content %q, want %q", msg.GetContent(), *w.Content)
	}
	// (A try that failed mid-stream streamed its part already: tokens are
	// live only, the step keeps the text.)
	if w.Content != nil && !f.config.ToolCallsInText && f.config.ToolProtocol == "" && len(reqs) == 1 && streamed != *w.Content {
		t.Errorf("streamed %q, want the content %q", streamed, *w.Content)
	}
	if resp.GetFinishReason() != w.FinishReason {
		t.Errorf("finish reason %q, want %q", resp.GetFinishReason(), w.FinishReason)
	}
	if len(msg.GetToolCalls()) != len(w.ToolCalls) {
		t.Fatalf("tool calls %v, want %d", msg.GetToolCalls(), len(w.ToolCalls))
	}
	for i, c := range msg.GetToolCalls() {
		if c.Name != w.ToolCalls[i].Name {
			t.Errorf("call %d name %q, want %q", i, c.Name, w.ToolCalls[i].Name)
		}
		var got, want any
		if err := json.Unmarshal([]byte(c.Arguments), &got); err != nil {
			t.Errorf("call %d arguments %q are not JSON", i, c.Arguments)
		}
		_ = json.Unmarshal(w.ToolCalls[i].Arguments, &want)
		if !reflect.DeepEqual(got, want) {
			t.Errorf("call %d arguments %s, want %s", i, c.Arguments, w.ToolCalls[i].Arguments)
		}
	}
	if u := w.Usage; u != nil {
		g := resp.GetUsage()
		got := fixtureUsage{g.GetPromptTokens(), g.GetCompletionTokens(), g.GetCacheReadTokens(), g.GetCacheWriteTokens()}
		if got != *u {
			t.Errorf("usage %+v, want %+v", got, *u)
		}
		if g.GetTotalTokens() != u.Prompt+u.Completion {
			t.Errorf("total tokens %d, want %d", g.GetTotalTokens(), u.Prompt+u.Completion)
		}
	}
	if resp.GetId() != 7 {
		t.Errorf("response id %d, want the request's 7", resp.GetId())
	}
}

// checkFields checks the top-level fields requests carry (present) or
// not (absent), by request number (1-based).
func checkFields(t *testing.T, reqs []map[string]any, fields map[string][]string, present bool) {
	t.Helper()
	for n, names := range fields {
		i, err := strconv.Atoi(n)
		if err != nil || i < 1 || i > len(reqs) {
			t.Errorf("request %s: not made (%d requests)", n, len(reqs))
			continue
		}
		for _, name := range names {
			if _, ok := reqs[i-1][name]; ok != present {
				t.Errorf("request %d carries %s = %v, want %v", i, name, ok, present)
			}
		}
	}
}
