package llm

import (
	"encoding/json"
	"strings"
	"testing"

	childv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/child/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
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
