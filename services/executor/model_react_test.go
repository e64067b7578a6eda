package executor

import (
	"encoding/json"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	childv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/child/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"google.golang.org/protobuf/types/known/durationpb"
)

func TestParseReAct(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want reactTurn
		err  string
	}{
		{"action", `{"thought":"t","action":{"tool":"echo","arguments":{"text":"a b"}}}`, reactTurn{Thought: "t", Tool: "echo", Arguments: `{"text":"a b"}`}, ""},
		{"action without arguments", `{"action":{"tool":"current_time"}}`, reactTurn{Tool: "current_time", Arguments: "{}"}, ""},
		{"final", `{"thought":"t","final_answer":"42"}`, reactTurn{Thought: "t", FinalAnswer: "42", Final: true}, ""},
		{"final without thought", ` {"final_answer":""} `, reactTurn{Final: true}, ""},
		{"json fence", "```json\n{\"final_answer\":\"x\"}\n```", reactTurn{FinalAnswer: "x", Final: true}, ""},
		{"bare fence", "```\n{\"final_answer\":\"x\"}\n```", reactTurn{FinalAnswer: "x", Final: true}, ""},
		{"other fence", "```python\n{\"final_answer\":\"x\"}\n```", reactTurn{}, "one JSON object"},
		{"empty", "  ", reactTurn{}, "empty"},
		{"prose", "The answer is 4", reactTurn{}, "one JSON object"},
		{"prose after", `{"final_answer":"x"} and more`, reactTurn{}, "text after"},
		{"two objects", `{"final_answer":"x"}{"final_answer":"y"}`, reactTurn{}, "text after"},
		{"unknown key", `{"final_answer":"x","confidence":1}`, reactTurn{}, `unknown key "confidence"`},
		{"both", `{"action":{"tool":"echo","arguments":{}},"final_answer":"x"}`, reactTurn{}, "not both"},
		{"neither", `{"thought":"hm"}`, reactTurn{}, `"action" (to call a tool) or "final_answer"`},
		{"thought not string", `{"thought":1,"final_answer":"x"}`, reactTurn{}, `"thought" must be a string`},
		{"final not string", `{"final_answer":{"a":1}}`, reactTurn{}, `"final_answer" must be a string`},
		{"final null", `{"final_answer":null}`, reactTurn{}, `"final_answer" must be a string`},
		{"action not object", `{"action":"echo"}`, reactTurn{}, `"action" must be an object`},
		{"action unknown key", `{"action":{"tool":"echo","args":{}}}`, reactTurn{}, `unknown key "args"`},
		{"action no tool", `{"action":{"arguments":{}}}`, reactTurn{}, `needs "tool"`},
		{"tool empty", `{"action":{"tool":" ","arguments":{}}}`, reactTurn{}, "non-empty string"},
		{"tool not string", `{"action":{"tool":3}}`, reactTurn{}, "non-empty string"},
		{"arguments not object", `{"action":{"tool":"echo","arguments":"{\"text\":\"a\"}"}}`, reactTurn{}, "must be a JSON object"},
		{"arguments array", `{"action":{"tool":"echo","arguments":[1]}}`, reactTurn{}, "must be a JSON object"},
		{"truncated", `{"final_answer":"x"`, reactTurn{}, "not one JSON object"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseReAct(tt.in)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err = %v, want one containing %q (got %+v)", err, tt.err, got)
				}
				return
			}
			if err != nil {
				t.Fatalf("err = %v", err)
			}
			if got != tt.want {
				t.Fatalf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

// FuzzParseReAct: the parser never panics; what it accepts is exactly one
// of an action (a named tool, arguments a JSON object) or a final answer,
// and rendering it back as ReAct text parses to the same turn.
func FuzzParseReAct(f *testing.F) {
	for _, s := range []string{
		`{"thought":"t","action":{"tool":"echo","arguments":{"text":"a"}}}`,
		`{"final_answer":"x"}`,
		"```json\n{\"final_answer\":\"x\"}\n```",
		`{"action":{"tool":"a"},"final_answer":"b"}`,
		`{"thought":null}`, `[]`, `{`, `{"action":{"tool":"x","arguments":{"a":[1,{"b":null}]}}}`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		got, err := parseReAct(in)
		if err != nil {
			return
		}
		if got.Final {
			if got.Tool != "" || got.Arguments != "" {
				t.Fatalf("final answer with an action: %+v", got)
			}
		} else {
			var args map[string]any
			if strings.TrimSpace(got.Tool) == "" || json.Unmarshal([]byte(got.Arguments), &args) != nil || args == nil {
				t.Fatalf("accepted action without a tool or object arguments: %+v", got)
			}
		}
		msg, _ := reactResponse(got)
		again, err := parseReAct(reactRender(msg))
		if err != nil {
			t.Fatalf("rendered %+v does not parse back: %v", got, err)
		}
		if again.Final != got.Final || again.FinalAnswer != got.FinalAnswer || again.Tool != got.Tool || again.Arguments != got.Arguments || (!got.Final && again.Thought != got.Thought) {
			t.Fatalf("round trip: %+v → %+v", got, again)
		}
	})
}

func TestReActMessages(t *testing.T) {
	msgs := reactMessages([]*childv1.Message{
		{Role: "system", Content: "Be brief."},
		{Role: "user", Content: "hi"},
		{Role: "assistant", Content: "calling", ToolCalls: []*agentmeshv1.ToolCall{{Id: "c1", Name: "echo", Arguments: `{"text":"x"}`}}},
		{Role: "tool", Content: "x", ToolCallId: "c1", Name: "echo"},
	}, []*childv1.ToolSpec{{Name: "echo", Description: "Echo\n text.", ParametersJson: `{ "type": "object" }`}})
	if len(msgs) != 4 {
		t.Fatalf("%d messages", len(msgs))
	}
	if msgs[0].Role != "system" || !strings.HasPrefix(msgs[0].Content, "Be brief.\n\n") || !strings.Contains(msgs[0].Content, `- echo: Echo text.`) || !strings.Contains(msgs[0].Content, `{"type":"object"}`) {
		t.Errorf("system = %q", msgs[0].Content)
	}
	if msgs[2].Content != `{"thought":"calling","action":{"tool":"echo","arguments":{"text":"x"}}}` || msgs[2].ToolCalls != nil {
		t.Errorf("assistant = %+v", msgs[2])
	}
	if msgs[3].Role != "user" || msgs[3].Content != "Observation from echo (call c1):\nx" {
		t.Errorf("observation = %+v", msgs[3])
	}
}

func TestParsePrices(t *testing.T) {
	p, err := ParsePrices(" gpt-4o-mini=0.15/0.60, llama3.1=0/0 ,")
	if err != nil {
		t.Fatal(err)
	}
	if len(p) != 2 || p["gpt-4o-mini"] != (Price{0.15, 0.60}) || p["llama3.1"] != (Price{}) {
		t.Fatalf("prices = %v", p)
	}
	if p.String() != "gpt-4o-mini=0.15/0.6,llama3.1=0/0" {
		t.Errorf("String = %q", p.String())
	}
	u := &agentmeshv1.Usage{PromptTokens: 1_000_000, CompletionTokens: 2_000_000}
	if c, ok := p.Cost(u, "unknown", "gpt-4o-mini"); !ok || math.Abs(c-1.35) > 1e-12 {
		t.Errorf("cost = %v %v, want 1.35 (falls back to the answered model)", c, ok)
	}
	if c, ok := p.Cost(u, "nope"); ok || c != 0 {
		t.Errorf("unpriced cost = %v %v", c, ok)
	}
	if p, err := ParsePrices(""); err != nil || len(p) != 0 {
		t.Errorf("empty: %v %v", p, err)
	}
	for _, bad := range []string{"gpt", "gpt=1", "gpt=1/", "gpt=/1", "=1/2", "gpt=-1/2", "gpt=1/NaN", "gpt=1/Inf", "gpt=a/b", "gpt=1/2,gpt=1/2", "g p=1/2", "gpt=1/2/3", "gpt=2000000/1"} {
		if _, err := ParsePrices(bad); err == nil {
			t.Errorf("ParsePrices(%q) accepted", bad)
		}
	}
}

// FuzzParsePrices: never panics; an accepted table has finite,
// non-negative prices and survives a round trip through String.
func FuzzParsePrices(f *testing.F) {
	for _, s := range []string{"gpt-4o-mini=0.15/0.60,llama3.1=0/0", "a=1/2", "a=1e3/0x10", "a=.5/5.", ",,", "a=1/2,a=3/4"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		p, err := ParsePrices(in)
		if err != nil {
			return
		}
		for m, pr := range p {
			for _, v := range []float64{pr.PromptPerM, pr.CompletionPerM} {
				if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 || v > maxPricePerM {
					t.Fatalf("model %q: price %v accepted", m, v)
				}
			}
			if m == "" || strings.ContainsAny(m, ",=/ ") {
				t.Fatalf("model name %q accepted", m)
			}
		}
		again, err := ParsePrices(p.String())
		if err != nil || len(again) != len(p) {
			t.Fatalf("round trip of %q: %v %v", p.String(), again, err)
		}
		for m, pr := range p {
			if again[m] != pr {
				t.Fatalf("round trip: %q %v → %v", m, pr, again[m])
			}
		}
	})
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"3", 3 * time.Second, true},
		{" 0 ", 0, true},
		{"3600", MaxRetryAfter, true},
		{"-1", 0, false},
		{"", 0, false},
		{"soon", 0, false},
		{now.Add(10 * time.Second).Format(http.TimeFormat), 10 * time.Second, true},
		{now.Add(time.Hour).Format(http.TimeFormat), MaxRetryAfter, true},
		{now.Add(-time.Hour).Format(http.TimeFormat), 0, true},
	}
	for _, tt := range tests {
		got, ok := parseRetryAfter(tt.in, now)
		if got != tt.want || ok != tt.ok {
			t.Errorf("parseRetryAfter(%q) = %v %v, want %v %v", tt.in, got, ok, tt.want, tt.ok)
		}
	}
}

func TestBudgetCheck(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	r := &modelRun{
		budget:  &agentmeshv1.Budget{MaxTokens: 100, MaxCostUsd: 0.5, MaxSteps: 3, MaxWallTime: durationpb.New(time.Minute)},
		started: now.Add(-30 * time.Second),
		now:     func() time.Time { return now },
	}
	if why := r.check(false); why != "" {
		t.Fatalf("fresh run: %q", why)
	}
	r.tokens = 100
	if why := r.check(true); why != "" {
		t.Errorf("exactly on the budget after a response: %q", why)
	}
	if why := r.check(false); why != "budget exhausted: 100 tokens used, max_tokens 100" {
		t.Errorf("before the next call: %q", why)
	}
	r.tokens, r.cost = 0, 0.75
	if why := r.check(true); why != "budget exhausted: $0.75 spent, max_cost_usd 0.5" {
		t.Errorf("cost: %q", why)
	}
	r.cost, r.turns = 0, 3
	if why := r.check(false); why != "budget exhausted: 3 steps used, max_steps 3" {
		t.Errorf("steps: %q", why)
	}
	r.turns = 0
	if d, cause := r.attemptLimit(10 * time.Minute); d != 30*time.Second || cause.Error() != "budget exhausted: 1m0s wall time used, max_wall_time 1m0s" {
		t.Errorf("attempt limit = %v %v", d, cause)
	}
	if d, cause := r.attemptLimit(10 * time.Second); d != 10*time.Second || cause.Error() != "wall time 10s exceeded" {
		t.Errorf("attempt limit = %v %v", d, cause)
	}
	r.started = now.Add(-2 * time.Minute)
	if why := r.check(false); !strings.HasPrefix(why, "budget exhausted: 2m0s wall time used, max_wall_time 1m0s") {
		t.Errorf("wall: %q", why)
	}
	if got := r.maxSteps(16); got != 3 {
		t.Errorf("maxSteps(16) = %d", got)
	}
	if got := r.maxSteps(2); got != 2 {
		t.Errorf("maxSteps(2) = %d", got)
	}
	if (&modelRun{}).check(false) != "" {
		t.Error("no budget, yet exhausted")
	}
}
