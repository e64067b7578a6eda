package llm_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"

	childv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/child/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/testlog"
	"github.com/agentmesh/agentmesh/services/executor/llm"
)

// benchAnswer is a typical streamed turn: 40 content chunks, a tool call
// in 8 pieces, the finish and usage chunks, [DONE] (about 9 KiB).
func benchAnswer(anthropic bool) []byte {
	var b bytes.Buffer
	if anthropic {
		b.WriteString("event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"model\":\"c\",\"usage\":{\"input_tokens\":900}}}\n\n")
		b.WriteString("event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n")
		for i := range 40 {
			fmt.Fprintf(&b, "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"word%02d \"}}\n\n", i)
		}
		b.WriteString("event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"tool_use\",\"id\":\"t\",\"name\":\"echo\",\"input\":{}}}\n\n")
		for _, p := range []string{`{\"te`, `xt\": `, `\"a b `, `c d e`, ` f g `, `h i j`, ` k l`, `\"}`} {
			fmt.Fprintf(&b, "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"%s\"}}\n\n", p)
		}
		b.WriteString("event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\"},\"usage\":{\"output_tokens\":60}}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n")
		return b.Bytes()
	}
	head := `{"id":"chatcmpl-b","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":`
	for i := range 40 {
		fmt.Fprintf(&b, "data: %s{\"content\":\"word%02d \"},\"finish_reason\":null}]}\n\n", head, i)
	}
	fmt.Fprintf(&b, "data: %s{\"tool_calls\":[{\"index\":0,\"id\":\"c\",\"type\":\"function\",\"function\":{\"name\":\"echo\",\"arguments\":\"\"}}]},\"finish_reason\":null}]}\n\n", head)
	for _, p := range []string{`{\"te`, `xt\": `, `\"a b `, `c d e`, ` f g `, `h i j`, ` k l`, `\"}`} {
		fmt.Fprintf(&b, "data: %s{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"%s\"}}]},\"finish_reason\":null}]}\n\n", head, p)
	}
	fmt.Fprintf(&b, "data: %s{},\"finish_reason\":\"tool_calls\"}]}\n\n", head)
	b.WriteString("data: {\"choices\":[],\"usage\":{\"prompt_tokens\":900,\"completion_tokens\":60,\"total_tokens\":960}}\n\ndata: [DONE]\n\n")
	return b.Bytes()
}

func benchServer(b *testing.B, body []byte) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = w.Write(body)
	}))
	b.Cleanup(srv.Close)
	return srv
}

// benchTurn is a conversation of the size an agent's turn carries.
func benchTurn() *childv1.ModelRequest {
	return &childv1.ModelRequest{Id: 1, Messages: []*childv1.Message{
		{Role: "system", Content: strings.Repeat("You are a careful agent. ", 40)},
		{Role: "user", Content: "What time is it, and echo it back."},
		{Role: "assistant", Content: "Checking.", ToolCalls: []*agentmeshv1.ToolCall{{Id: "c1", Name: "current_time", Arguments: `{"timezone":"UTC"}`}}},
		{Role: "tool", Content: "2026-01-01T00:00:00Z", ToolCallId: "c1"},
	}, Tools: []*childv1.ToolSpec{
		{Name: "echo", Description: "Echo text.", ParametersJson: `{"type":"object","properties":{"text":{"type":"string"}}}`},
		{Name: "current_time", Description: "The time.", ParametersJson: `{"type":"object","properties":{"timezone":{"type":"string"}}}`},
	}}
}

// cpuTime is the CPU time this process used so far (user and system, all
// threads): on a shared machine, CPU per call says more than wall time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// loop runs f b.N times and reports its CPU time per op (cpu-µs/op: the
// client's and the in-process stub server's together).
func loop(b *testing.B, f func()) {
	began := cpuTime()
	for b.Loop() {
		f()
	}
	b.ReportMetric(float64((cpuTime()-began).Microseconds())/float64(b.N), "cpu-µs/op")
}

// BenchmarkClient measures one streamed model call against a local stub:
// "http" is the floor — a plain keep-alive POST of a same-sized body and
// the answer read to its end — and "openai", "anthropic" the client's
// whole call (the request built, the outbound policy, the stream parsed
// and assembled, the answer priced); "limited" adds an in-process rate
// limiter's slot. The client's cost per call is the difference
// (docs/benchmarks.md).
func BenchmarkClient(b *testing.B) {
	openaiSrv := benchServer(b, benchAnswer(false))
	anthropicSrv := benchServer(b, benchAnswer(true))
	b.Run("http", func(b *testing.B) {
		hc := &http.Client{}
		body := bytes.Repeat([]byte("x"), 2500)
		loop(b, func() {
			resp, err := hc.Post(openaiSrv.URL+"/v1/chat/completions", "application/json", bytes.NewReader(body))
			if err != nil {
				b.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		})
	})
	run := func(b *testing.B, cfg llm.Config) {
		cfg.Model, cfg.Timeout = "m", time.Minute
		m, err := llm.New(cfg, testlog.New(b))
		if err != nil {
			b.Fatal(err)
		}
		req := llm.Request{Turn: benchTurn(), Org: "acme", OnToken: func(string) {}}
		loop(b, func() {
			resp, err := m.Complete(context.Background(), req)
			if err != nil || len(resp.GetMessage().GetToolCalls()) != 1 {
				b.Fatalf("%v %v", resp, err)
			}
		})
	}
	b.Run("openai", func(b *testing.B) { run(b, llm.Config{BaseURL: openaiSrv.URL + "/v1"}) })
	b.Run("anthropic", func(b *testing.B) { run(b, llm.Config{BaseURL: anthropicSrv.URL, Provider: "anthropic"}) })
	b.Run("limited", func(b *testing.B) {
		run(b, llm.Config{BaseURL: openaiSrv.URL + "/v1", Limiter: llm.NewLocalLimiter(time.Minute)})
	})
}
