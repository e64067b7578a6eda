package llm

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	childv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/child/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
)

// Tool calls written as text. Some models (Qwen and Hermes chat templates,
// and servers that do not parse their output into tool calls) write a
// tool call into the answer's text:
//
//	<tool_call>
//	{"name": "current_time", "arguments": {"timezone": "UTC"}}
//	</tool_call>
//
// For a model marked so (the model table's tool_calls_in_text, the
// agent's model.tool_calls_in_text) and an answer without native tool
// calls, every such block whose JSON names a tool becomes a tool call,
// and is taken out of the text. Opt-in: for any other model a
// <tool_call> in the text stays text. A block whose JSON does not parse
// stays text too (the agent sees what the model wrote).

const (
	toolCallOpen  = "<tool_call>"
	toolCallClose = "</tool_call>"
	// maxTextCalls bounds the calls read out of one answer.
	maxTextCalls = 64
)

// textToolCalls moves the tool calls written in resp's text into its tool
// calls, when it has none of its own. It reports how many it found.
func textToolCalls(resp *childv1.ModelResponse) int {
	msg := resp.GetMessage()
	if msg == nil || len(msg.ToolCalls) > 0 || !strings.Contains(msg.Content, toolCallOpen) {
		return 0
	}
	rest, text := msg.Content, strings.Builder{}
	var calls []*agentmeshv1.ToolCall
	for len(calls) < maxTextCalls {
		i := strings.Index(rest, toolCallOpen)
		if i < 0 {
			break
		}
		body := rest[i+len(toolCallOpen):]
		j := strings.Index(body, toolCallClose)
		end := len(body) // an unclosed last block runs to the end
		if j >= 0 {
			end = j
		}
		call, ok := parseTextCall(body[:end])
		if !ok {
			text.WriteString(rest[:i+len(toolCallOpen)])
			rest = body
			continue
		}
		call.Id = fmt.Sprintf("call_text_%d", len(calls))
		calls = append(calls, call)
		text.WriteString(rest[:i])
		rest = body[min(end+len(toolCallClose), len(body)):]
	}
	if len(calls) == 0 {
		return 0
	}
	text.WriteString(rest)
	msg.Content = strings.TrimSpace(text.String())
	msg.ToolCalls = calls
	if resp.FinishReason == FinishStop {
		resp.FinishReason = FinishToolCalls
	}
	return len(calls)
}

// parseTextCall reads one block's {"name": …, "arguments": …}
// ("parameters" too); arguments may be an object or a JSON string.
func parseTextCall(s string) (*agentmeshv1.ToolCall, bool) {
	var v struct {
		Name       string          `json:"name"`
		Arguments  json.RawMessage `json:"arguments"`
		Parameters json.RawMessage `json:"parameters"`
	}
	if json.Unmarshal([]byte(strings.TrimSpace(s)), &v) != nil || strings.TrimSpace(v.Name) == "" {
		return nil, false
	}
	raw := v.Arguments
	if len(raw) == 0 {
		raw = v.Parameters
	}
	c := &toolCall{}
	if err := c.addArgs(raw); err != nil {
		return nil, false
	}
	args := c.args.String()
	if args == "" {
		args = "{}"
	}
	var obj map[string]json.RawMessage
	if json.Unmarshal([]byte(args), &obj) != nil || obj == nil {
		return nil, false
	}
	var compact bytes.Buffer
	_ = json.Compact(&compact, []byte(args))
	return &agentmeshv1.ToolCall{Name: strings.TrimSpace(v.Name), Arguments: compact.String()}, true
}
