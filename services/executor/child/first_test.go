package child

import (
	"testing"

	childv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/child/v1"
	childwirev1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/childwire/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"google.golang.org/protobuf/proto"
)

// wire decodes the bytes of from (the executor's types) into to (the
// child's own, or back) and returns to, as the executor does.
func wire[T proto.Message](t *testing.T, from proto.Message, to T) T {
	t.Helper()
	b, err := proto.Marshal(from)
	if err == nil {
		err = proto.Unmarshal(b, to)
	}
	if err != nil {
		t.Fatalf("%T to %T: %v", from, to, err)
	}
	return to
}

// FirstRequest is what the child itself asks first, for every kind of
// Start it answers for: the executor hands the model's answer to that
// request to the child, so the two must never differ.
func TestFirstRequestIsTheChildsOwn(t *testing.T) {
	turn := func(i int32, content string, calls ...*agentmeshv1.ToolCall) *agentmeshv1.Step {
		return &agentmeshv1.Step{Index: i, Kind: agentmeshv1.StepKind_STEP_KIND_MODEL_TURN, Content: content, ToolCalls: calls}
	}
	call := &agentmeshv1.ToolCall{Id: "c1", Name: "echo", Arguments: `{"text":"hi"}`}
	result := &agentmeshv1.Step{Index: 2, Kind: agentmeshv1.StepKind_STEP_KIND_TOOL_RESULT, ToolCallId: "c1", ToolName: "echo", Content: "hi"}
	toolCall := &agentmeshv1.Step{Index: 1, Kind: agentmeshv1.StepKind_STEP_KIND_TOOL_CALL, ToolCallId: "c1", ToolName: "echo"}
	for name, start := range map[string]*childv1.Start{
		"bare":             {TaskId: "t", Attempt: 1, Input: "hello"},
		"prompt and tools": {TaskId: "t", Attempt: 1, SystemPrompt: "Be brief.", Input: "hello", Tools: []string{"echo", "current_time"}, MaxSteps: 3},
		"executor tools": {TaskId: "t", Attempt: 1, Input: "x", Tools: []string{"echo"},
			ExecutorTools: []*childv1.ToolSpec{{Name: "web_fetch", Description: "fetch", ParametersJson: `{"type":"object"}`}}},
		// Out of order on purpose: the child sorts the history by index.
		"resumed after a tool result": {TaskId: "t", Attempt: 2, SystemPrompt: "s", Input: "x", Tools: []string{"echo"},
			History: []*agentmeshv1.Step{result, turn(0, "let me echo", call), toolCall}},
	} {
		t.Run(name, func(t *testing.T) {
			wreq, ok := FirstRequest(wire(t, start, &childwirev1.Start{}))
			if !ok {
				t.Fatal("FirstRequest: not decided by the start alone")
			}
			want := wire(t, wreq, &childv1.ModelRequest{})
			d := startChild(t, start)
			got := d.modelRequest()
			if got.GetId() != want.GetId() {
				t.Errorf("request id %d, FirstRequest's %d", got.GetId(), want.GetId())
			}
			if !proto.Equal(want, got) {
				t.Fatalf("the child asked\n%v\nFirstRequest says\n%v", got, want)
			}
		})
	}
}

// FirstRequest declines where the child's first move is not a model
// request decided by the start: stdio MCP servers add their tools, a tool
// call without a result runs first, a final answer ends at once, no turn
// is left; and an unknown tool fails the task.
func TestFirstRequestDeclines(t *testing.T) {
	call := &agentmeshv1.ToolCall{Id: "c1", Name: "echo", Arguments: `{"text":"hi"}`}
	for name, start := range map[string]*childv1.Start{
		"stdio mcp":    {Input: "x", McpServers: []*agentmeshv1.McpServer{{Name: "fs", Command: []string{"true"}}}},
		"pending call": {Input: "x", Tools: []string{"echo"}, History: []*agentmeshv1.Step{{Index: 0, Kind: agentmeshv1.StepKind_STEP_KIND_MODEL_TURN, ToolCalls: []*agentmeshv1.ToolCall{call}}}},
		"answered":     {Input: "x", History: []*agentmeshv1.Step{{Index: 0, Kind: agentmeshv1.StepKind_STEP_KIND_MODEL_TURN, Content: "done"}}},
		"no turn left": {Input: "x", MaxSteps: 1, Tools: []string{"echo"}, History: []*agentmeshv1.Step{{Index: 0, Kind: agentmeshv1.StepKind_STEP_KIND_MODEL_TURN, ToolCalls: []*agentmeshv1.ToolCall{call}}, {Index: 1, Kind: agentmeshv1.StepKind_STEP_KIND_TOOL_RESULT, ToolCallId: "c1", Content: "hi"}}},
		"unknown tool": {Input: "x", Tools: []string{"no_such_tool"}},
	} {
		if req, ok := FirstRequest(wire(t, start, &childwirev1.Start{})); ok {
			t.Errorf("%s: FirstRequest decided %v", name, req)
		}
	}
}

// TurnStep is the MODEL_TURN step the child itself records for an answer
// (the executor records it for an answer no child lived to record): the
// same step for a first turn and a resumed one, tool calls without an id
// named as the child names them.
func TestTurnStepIsTheChildsOwn(t *testing.T) {
	call := func(id string) *agentmeshv1.ToolCall {
		return &agentmeshv1.ToolCall{Id: id, Name: "echo", Arguments: `{"text":"hi"}`}
	}
	answered := &agentmeshv1.Step{Index: 0, Kind: agentmeshv1.StepKind_STEP_KIND_MODEL_TURN, Content: "let me echo", ToolCalls: []*agentmeshv1.ToolCall{call("c1")}}
	result := &agentmeshv1.Step{Index: 4, Kind: agentmeshv1.StepKind_STEP_KIND_TOOL_RESULT, ToolCallId: "c1", ToolName: "echo", Content: "hi"}
	for name, tc := range map[string]struct {
		start *childv1.Start
		calls []*agentmeshv1.ToolCall
		next  int32
	}{
		"first turn, calls without ids": {&childv1.Start{TaskId: "t", Attempt: 1, Input: "hello", Tools: []string{"echo"}}, []*agentmeshv1.ToolCall{call(""), call("")}, 0},
		"first turn, the answer":        {&childv1.Start{TaskId: "t", Attempt: 1, Input: "hello"}, nil, 0},
		// An index gap on purpose: the next step follows the highest index.
		"resumed": {&childv1.Start{TaskId: "t", Attempt: 2, Input: "x", Tools: []string{"echo"}, History: []*agentmeshv1.Step{result, answered}}, []*agentmeshv1.ToolCall{call(""), call("given")}, 5},
	} {
		t.Run(name, func(t *testing.T) {
			if got := NextIndex(tc.start.GetHistory()); got != tc.next {
				t.Fatalf("NextIndex %d, want %d", got, tc.next)
			}
			d := startChild(t, tc.start)
			req := d.modelRequest()
			resp := &childv1.ModelResponse{
				Id:      req.Id,
				Message: &childv1.Message{Role: "assistant", Content: "thinking", ToolCalls: tc.calls},
				Usage:   &agentmeshv1.Usage{PromptTokens: 5, CompletionTokens: 2, TotalTokens: 7},
				Model:   "m", FinishReason: "tool_calls", DurationMs: 3,
			}
			wstep, _ := TurnStep(wire(t, resp, &childwirev1.ModelResponse{}), NextIndex(tc.start.GetHistory()))
			want := wire(t, wstep, &agentmeshv1.Step{})
			want.Attempt = tc.start.Attempt
			d.send(&childv1.Frame{Kind: &childv1.Frame_ModelResponse{ModelResponse: resp}})
			got := d.step(agentmeshv1.StepKind_STEP_KIND_MODEL_TURN, tc.next)
			if !proto.Equal(got, want) {
				t.Fatalf("the child recorded\n%v\nTurnStep says\n%v", got, want)
			}
			for i, c := range got.ToolCalls {
				if c.Id == "" || tc.calls[i].Id != "" && c.Id != tc.calls[i].Id {
					t.Errorf("tool call %d has id %q", i, c.Id)
				}
			}
		})
	}
}
