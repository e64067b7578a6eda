package llm

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	childv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/child/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
)

// The JSON ReAct fallback, for models without native tool calling (an
// agent's model.tool_protocol "react"). It lives entirely in the executor's
// model path, so the child's loop is the same for both protocols:
//
//   - the tool specs and the protocol are rendered into a system message
//     and the model is called without tools;
//   - the conversation's earlier tool calls and tool results are rendered
//     back as text (an assistant turn holds the JSON the model would have
//     written; a tool result becomes a user message "Observation ...");
//   - the answer must be exactly one JSON object, optionally inside a
//     ```json fence:
//     {"thought": "...", "action": {"tool": "...", "arguments": {...}}} or
//     {"thought": "...", "final_answer": "..."};
//     unknown keys, wrong types, both or neither of action and final_answer
//     are invalid; thought is optional, arguments may be omitted ({});
//   - invalid output gets ONE repair turn that tells the model what was
//     wrong; still invalid, the model call fails with the reason;
//   - a valid action becomes a ModelResponse with one tool call (a
//     generated id), a final answer a ModelResponse with its text.

// completeReAct makes a ReAct endpoint's call: the conversation rendered
// for a model without tools, its answer parsed, and one bounded repair
// turn that tells the model what was wrong when it is not valid ReAct. An
// answer cut at its token limit is returned as it is (the executor fails
// the task: a repair would be cut again).
func (m *Models) completeReAct(ctx context.Context, p Provider, ep Endpoint, req Request) (*childv1.ModelResponse, error) {
	turn := &childv1.ModelRequest{Id: req.Turn.GetId(), Messages: reactMessages(req.Turn.GetMessages(), req.Turn.GetTools())}
	rreq := req
	rreq.Turn = turn
	out, err := p.Complete(ctx, ep, rreq)
	if err != nil || Truncated(out) || Filtered(out) {
		return out, err
	}
	usage := out.Usage
	text := out.GetMessage().GetContent()
	parsed, perr := parseReAct(text)
	if perr != nil {
		m.log.Info("model output is not valid ReAct; one repair turn", "model", ep.Model, "err", perr)
		turn.Messages = append(turn.Messages,
			&childv1.Message{Role: "assistant", Content: text},
			&childv1.Message{Role: "user", Content: reactRepair(perr)})
		out, err = p.Complete(ctx, ep, rreq)
		if err != nil {
			var e *Error
			if errors.As(err, &e) {
				inner := *e
				inner.text = fmt.Sprintf("repair turn after invalid ReAct output (%s): %s", cutText(perr.Error(), 512), e.text)
				return nil, &inner
			}
			return nil, err
		}
		addUsage(usage, out.Usage)
		out.Usage = usage
		if Truncated(out) || Filtered(out) {
			return out, nil
		}
		if parsed, perr = parseReAct(out.GetMessage().GetContent()); perr != nil {
			return nil, &Error{Kind: KindTransient, text: fmt.Sprintf("output does not follow the JSON ReAct protocol after one repair turn: %v", perr), cause: perr}
		}
	}
	out.Message, out.FinishReason = reactResponse(parsed)
	return out, nil
}

// addUsage adds b's counts to a.
func addUsage(a, b *agentmeshv1.Usage) {
	a.PromptTokens += b.GetPromptTokens()
	a.CompletionTokens += b.GetCompletionTokens()
	a.TotalTokens += b.GetTotalTokens()
	a.CacheReadTokens += b.GetCacheReadTokens()
	a.CacheWriteTokens += b.GetCacheWriteTokens()
}

// reactTurn is one valid ReAct answer.
type reactTurn struct {
	Thought     string
	Tool        string
	Arguments   string // a JSON object
	FinalAnswer string
	Final       bool
}

// errReAct marks output that does not follow the protocol.
var errReAct = errors.New("not a valid ReAct answer")

// parseReAct parses and validates one ReAct answer. The error says what is
// wrong, in words the model can act on.
func parseReAct(text string) (reactTurn, error) {
	body := stripFence(strings.TrimSpace(text))
	if body == "" {
		return reactTurn{}, fmt.Errorf("%w: the reply is empty", errReAct)
	}
	if body[0] != '{' {
		return reactTurn{}, fmt.Errorf("%w: the reply must be one JSON object and nothing else", errReAct)
	}
	var top map[string]json.RawMessage
	if err := decodeOne([]byte(body), &top); err != nil {
		return reactTurn{}, fmt.Errorf("%w: the reply is not one JSON object: %v", errReAct, err)
	}
	var t reactTurn
	for k := range top {
		switch k {
		case "thought", "action", "final_answer":
		default:
			return reactTurn{}, fmt.Errorf("%w: unknown key %q (allowed: thought, action, final_answer)", errReAct, k)
		}
	}
	if raw, ok := top["thought"]; ok {
		if err := stringField(raw, &t.Thought); err != nil {
			return reactTurn{}, fmt.Errorf("%w: \"thought\" must be a string", errReAct)
		}
	}
	actRaw, hasAction := top["action"]
	finRaw, hasFinal := top["final_answer"]
	switch {
	case hasAction && hasFinal:
		return reactTurn{}, fmt.Errorf("%w: give either \"action\" or \"final_answer\", not both", errReAct)
	case !hasAction && !hasFinal:
		return reactTurn{}, fmt.Errorf("%w: give \"action\" (to call a tool) or \"final_answer\" (to finish)", errReAct)
	case hasFinal:
		if err := stringField(finRaw, &t.FinalAnswer); err != nil {
			return reactTurn{}, fmt.Errorf("%w: \"final_answer\" must be a string", errReAct)
		}
		t.Final = true
		return t, nil
	}
	var act map[string]json.RawMessage
	if !isObject(actRaw) || json.Unmarshal(actRaw, &act) != nil {
		return reactTurn{}, fmt.Errorf("%w: \"action\" must be an object {\"tool\": \"...\", \"arguments\": {...}}", errReAct)
	}
	for k := range act {
		if k != "tool" && k != "arguments" {
			return reactTurn{}, fmt.Errorf("%w: unknown key %q in \"action\" (allowed: tool, arguments)", errReAct, k)
		}
	}
	toolRaw, ok := act["tool"]
	if !ok {
		return reactTurn{}, fmt.Errorf("%w: \"action\" needs \"tool\", the name of the tool to call", errReAct)
	}
	if err := stringField(toolRaw, &t.Tool); err != nil || strings.TrimSpace(t.Tool) == "" {
		return reactTurn{}, fmt.Errorf("%w: \"action.tool\" must be a non-empty string", errReAct)
	}
	t.Arguments = "{}"
	if args, ok := act["arguments"]; ok {
		if !isObject(args) {
			return reactTurn{}, fmt.Errorf("%w: \"action.arguments\" must be a JSON object", errReAct)
		}
		var buf bytes.Buffer
		if err := json.Compact(&buf, args); err != nil {
			return reactTurn{}, fmt.Errorf("%w: \"action.arguments\": %v", errReAct, err)
		}
		t.Arguments = buf.String()
	}
	return t, nil
}

// stripFence removes one surrounding ``` or ```json fence.
func stripFence(s string) string {
	if !strings.HasPrefix(s, "```") {
		return s
	}
	nl := strings.IndexByte(s, '\n')
	if nl < 0 {
		return s
	}
	lang := strings.TrimSpace(s[3:nl])
	if lang != "" && !strings.EqualFold(lang, "json") {
		return s
	}
	rest := strings.TrimSpace(s[nl+1:])
	if !strings.HasSuffix(rest, "```") {
		return s
	}
	return strings.TrimSpace(strings.TrimSuffix(rest, "```"))
}

// decodeOne decodes exactly one JSON value from b, nothing after it.
func decodeOne(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("text after the JSON object")
	}
	return nil
}

func isObject(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) > 0 && raw[0] == '{'
}

// stringField decodes a JSON string (not null, not a number).
func stringField(raw json.RawMessage, out *string) error {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '"' {
		return errors.New("not a string")
	}
	return json.Unmarshal(raw, out)
}

// reactSystem renders the protocol and the tools into a system message.
func reactSystem(tools []*childv1.ToolSpec) string {
	var b strings.Builder
	b.WriteString(`You can use tools. Answer every turn with exactly ONE JSON object and nothing else (no prose around it).

To call a tool:
{"thought": "why you call it", "action": {"tool": "<tool name>", "arguments": {<arguments as the tool's JSON Schema says>}}}

To finish with your answer:
{"thought": "why you are done", "final_answer": "<your answer for the user>"}

Rules: the keys are exactly "thought", "action" (with "tool" and "arguments") and "final_answer"; give "action" or "final_answer", never both; "arguments" is a JSON object. After an action you receive the tool's result as an "Observation" message; then answer again with one JSON object.
`)
	if len(tools) == 0 {
		b.WriteString("\nNo tools are available: answer with final_answer.\n")
		return b.String()
	}
	b.WriteString("\nTools:\n")
	for _, t := range tools {
		fmt.Fprintf(&b, "- %s: %s\n  arguments schema: %s\n", t.Name, oneLineText(t.Description), compactJSON(t.ParametersJson))
	}
	return b.String()
}

func oneLineText(s string) string { return strings.Join(strings.Fields(s), " ") }

func compactJSON(s string) string {
	var buf bytes.Buffer
	if json.Compact(&buf, []byte(s)) != nil {
		return s
	}
	return buf.String()
}

// reactMessages renders the conversation for a model without tool support:
// the protocol joins the system message; assistant tool calls become the
// JSON the model would have written; tool results become user messages.
func reactMessages(msgs []*childv1.Message, tools []*childv1.ToolSpec) []*childv1.Message {
	sys := reactSystem(tools)
	out := make([]*childv1.Message, 0, len(msgs)+1)
	if len(msgs) > 0 && msgs[0].Role == "system" {
		out = append(out, &childv1.Message{Role: "system", Content: msgs[0].Content + "\n\n" + sys})
		msgs = msgs[1:]
	} else {
		out = append(out, &childv1.Message{Role: "system", Content: sys})
	}
	for _, m := range msgs {
		switch m.Role {
		case "assistant":
			out = append(out, &childv1.Message{Role: "assistant", Content: reactRender(m)})
		case "tool":
			name := m.Name
			if name == "" {
				name = "the tool"
			}
			out = append(out, &childv1.Message{
				Role:    "user",
				Content: fmt.Sprintf("Observation from %s (call %s):\n%s", name, m.ToolCallId, m.Content),
			})
		default:
			out = append(out, &childv1.Message{Role: m.Role, Content: m.Content})
		}
	}
	return out
}

// reactRender writes an assistant message as ReAct JSON: one object per
// tool call (one per line), or a final answer.
func reactRender(m *childv1.Message) string {
	type action struct {
		Tool      string          `json:"tool"`
		Arguments json.RawMessage `json:"arguments"`
	}
	type turn struct {
		Thought     string  `json:"thought"`
		Action      *action `json:"action,omitempty"`
		FinalAnswer *string `json:"final_answer,omitempty"`
	}
	var lines []string
	for i, c := range m.ToolCalls {
		args := json.RawMessage(c.Arguments)
		if !json.Valid(args) {
			q, _ := json.Marshal(c.Arguments)
			args = q
		}
		t := turn{Action: &action{Tool: c.Name, Arguments: args}}
		if i == 0 {
			t.Thought = m.Content
		}
		b, err := json.Marshal(t)
		if err != nil {
			continue
		}
		lines = append(lines, string(b))
	}
	if len(lines) == 0 {
		content := m.Content
		b, err := json.Marshal(turn{FinalAnswer: &content})
		if err != nil {
			return m.Content
		}
		return string(b)
	}
	return strings.Join(lines, "\n")
}

// reactRepair is the message of the one repair turn.
func reactRepair(err error) string {
	return "Your last reply was not valid: " + strings.TrimPrefix(err.Error(), errReAct.Error()+": ") +
		". Reply again with exactly one JSON object: either {\"thought\": \"...\", \"action\": {\"tool\": \"...\", \"arguments\": {...}}} or {\"thought\": \"...\", \"final_answer\": \"...\"}."
}

// reactResponse fills a ModelResponse message from a valid ReAct turn.
func reactResponse(t reactTurn) (*childv1.Message, string) {
	if t.Final {
		return &childv1.Message{Role: "assistant", Content: t.FinalAnswer}, "stop"
	}
	return &childv1.Message{Role: "assistant", Content: t.Thought, ToolCalls: []*agentmeshv1.ToolCall{{
		Id: newCallID(), Name: t.Tool, Arguments: t.Arguments,
	}}}, "tool_calls"
}

func newCallID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "react_" + hex.EncodeToString(b[:])
}
