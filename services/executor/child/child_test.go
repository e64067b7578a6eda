package child

import (
	"io"
	"strings"
	"testing"
	"time"

	childv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/child/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/services/executor/childproto"
)

// driver plays the executor's side of the protocol against Main.
type driver struct {
	t    *testing.T
	w    *childproto.Writer
	r    *childproto.Reader
	done chan int
}

func startChild(t *testing.T, start *childv1.Start) *driver {
	t.Helper()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	d := &driver{t: t, w: childproto.NewWriter(inW), r: childproto.NewReader(outR), done: make(chan int, 1)}
	go func() {
		code := Main(inR, outW)
		outW.Close()
		d.done <- code
	}()
	t.Cleanup(func() { inW.Close(); outR.Close() })
	if start != nil {
		d.send(&childv1.Frame{Kind: &childv1.Frame_Start{Start: start}})
	}
	return d
}

func (d *driver) send(f *childv1.Frame) {
	d.t.Helper()
	if err := d.w.Write(f); err != nil {
		d.t.Fatalf("send %s: %v", childproto.Kind(f), err)
	}
}

func (d *driver) read() *childv1.Frame {
	d.t.Helper()
	f := new(childv1.Frame)
	err := d.r.Read(f)
	if err != nil {
		d.t.Fatalf("read: %v", err)
	}
	return f
}

func (d *driver) modelRequest() *childv1.ModelRequest {
	d.t.Helper()
	f := d.read()
	if f.GetModelRequest() == nil {
		d.t.Fatalf("got %s, want model_request", childproto.Kind(f))
	}
	return f.GetModelRequest()
}

func (d *driver) answer(req *childv1.ModelRequest, content string, calls ...*agentmeshv1.ToolCall) {
	d.t.Helper()
	d.send(&childv1.Frame{Kind: &childv1.Frame_ModelResponse{ModelResponse: &childv1.ModelResponse{
		Id:      req.Id,
		Message: &childv1.Message{Role: "assistant", Content: content, ToolCalls: calls},
		Usage:   &agentmeshv1.Usage{PromptTokens: 5, CompletionTokens: 2, TotalTokens: 7},
		Model:   "m", FinishReason: "stop", DurationMs: 3,
	}}})
}

// step reads a step and acks it.
func (d *driver) step(want agentmeshv1.StepKind, index int32) *agentmeshv1.Step {
	d.t.Helper()
	f := d.read()
	s := f.GetStep().GetStep()
	if s == nil {
		d.t.Fatalf("got %s, want step", childproto.Kind(f))
	}
	if s.Kind != want || s.Index != index {
		d.t.Fatalf("got step %d %v, want %d %v", s.Index, s.Kind, index, want)
	}
	d.send(&childv1.Frame{Kind: &childv1.Frame_StepAck{StepAck: &childv1.StepAck{Index: s.Index}}})
	return s
}

func (d *driver) exit() int {
	d.t.Helper()
	select {
	case code := <-d.done:
		return code
	case <-time.After(5 * time.Second):
		d.t.Fatal("child did not exit")
		return -1
	}
}

const (
	turn   = agentmeshv1.StepKind_STEP_KIND_MODEL_TURN
	call   = agentmeshv1.StepKind_STEP_KIND_TOOL_CALL
	result = agentmeshv1.StepKind_STEP_KIND_TOOL_RESULT
)

func TestToolCallRoundTrip(t *testing.T) {
	d := startChild(t, &childv1.Start{TaskId: "t", Attempt: 3, SystemPrompt: "be brief", Input: "say hi", Tools: []string{"echo"}})
	req := d.modelRequest()
	if len(req.Messages) != 2 || req.Messages[0].Role != "system" || req.Messages[1].Content != "say hi" {
		t.Fatalf("first messages = %v", req.Messages)
	}
	if len(req.Tools) != 1 || req.Tools[0].Name != "echo" || !strings.Contains(req.Tools[0].ParametersJson, `"text"`) {
		t.Fatalf("tools = %v", req.Tools)
	}
	d.answer(req, "", &agentmeshv1.ToolCall{Id: "c1", Name: "echo", Arguments: `{"text":"hi"}`})
	s := d.step(turn, 0)
	if s.Attempt != 3 || len(s.ToolCalls) != 1 || s.Usage.GetTotalTokens() != 7 || s.Model != "m" || s.Duration.AsDuration() != 3*time.Millisecond {
		t.Errorf("model turn step = %v", s)
	}
	if s := d.step(call, 1); s.ToolName != "echo" || s.Arguments != `{"text":"hi"}` || s.ToolCallId != "c1" {
		t.Errorf("tool call step = %v", s)
	}
	if s := d.step(result, 2); s.Content != "hi" || s.IsError {
		t.Errorf("tool result step = %v", s)
	}
	req = d.modelRequest()
	if n := len(req.Messages); n != 4 {
		t.Fatalf("second request has %d messages, want 4: %v", n, req.Messages)
	}
	if m := req.Messages[3]; m.Role != "tool" || m.Content != "hi" || m.ToolCallId != "c1" {
		t.Errorf("tool message = %v", m)
	}
	if m := req.Messages[2]; m.Role != "assistant" || len(m.ToolCalls) != 1 {
		t.Errorf("assistant message = %v", m)
	}
	d.answer(req, "hi to you")
	d.step(turn, 3)
	f := d.read()
	if f.GetFinal().GetAnswer() != "hi to you" {
		t.Fatalf("got %v, want final", f)
	}
	if code := d.exit(); code != ExitOK {
		t.Errorf("exit = %d, want 0", code)
	}
}

func TestBadToolCallsBecomeObservations(t *testing.T) {
	d := startChild(t, &childv1.Start{Input: "x", Tools: []string{"echo"}})
	req := d.modelRequest()
	d.answer(req, "", &agentmeshv1.ToolCall{Id: "a", Name: "rm_rf", Arguments: `{}`},
		&agentmeshv1.ToolCall{Id: "b", Name: "echo", Arguments: `{"text": 5}`},
		&agentmeshv1.ToolCall{Name: "echo", Arguments: `not json`})
	d.step(turn, 0)
	d.step(call, 1)
	if s := d.step(result, 2); !s.IsError || !strings.Contains(s.Content, `unknown tool "rm_rf"`) || !strings.Contains(s.Content, "echo") {
		t.Errorf("unknown tool result = %v", s)
	}
	d.step(call, 3)
	if s := d.step(result, 4); !s.IsError || !strings.Contains(s.Content, "invalid arguments") || !strings.Contains(s.Content, "want string") {
		t.Errorf("invalid arguments result = %v", s)
	}
	d.step(call, 5)
	if s := d.step(result, 6); !s.IsError || s.ToolCallId == "" {
		t.Errorf("not-json result = %v (a missing call id must be filled in)", s)
	}
	req = d.modelRequest()
	if n := len(req.Messages); n != 5 {
		t.Fatalf("model sees %d messages, want 5 (the error observations included)", n)
	}
	d.answer(req, "sorry")
	d.step(turn, 7)
	if f := d.read(); f.GetFinal().GetAnswer() != "sorry" {
		t.Fatalf("got %v, want final", f)
	}
	d.exit()
}

func TestMaxSteps(t *testing.T) {
	d := startChild(t, &childv1.Start{Input: "x", Tools: []string{"echo"}, MaxSteps: 2})
	idx := int32(0)
	for range 2 {
		req := d.modelRequest()
		d.answer(req, "", &agentmeshv1.ToolCall{Id: "c", Name: "echo", Arguments: `{"text":"again"}`})
		d.step(turn, idx)
		d.step(call, idx+1)
		d.step(result, idx+2)
		idx += 3
	}
	f := d.read()
	if f.GetFailure() == nil || !strings.Contains(f.GetFailure().Reason, "max_steps 2") || !f.GetFailure().Permanent {
		t.Fatalf("got %v, want a permanent failure naming max_steps", f)
	}
	if code := d.exit(); code != ExitFailed {
		t.Errorf("exit = %d, want %d", code, ExitFailed)
	}
}

func TestModelErrorFails(t *testing.T) {
	d := startChild(t, &childv1.Start{Input: "x"})
	req := d.modelRequest()
	d.send(&childv1.Frame{Kind: &childv1.Frame_ModelResponse{ModelResponse: &childv1.ModelResponse{Id: req.Id, Error: "server said 500 three times"}}})
	f := d.read()
	if !strings.Contains(f.GetFailure().GetReason(), "server said 500 three times") {
		t.Fatalf("got %v, want failure with the model error", f)
	}
	if code := d.exit(); code != ExitFailed {
		t.Errorf("exit = %d, want %d", code, ExitFailed)
	}
}

func TestUnknownToolInSpecFails(t *testing.T) {
	d := startChild(t, &childv1.Start{Input: "x", Tools: []string{"echo", "teleport"}})
	f := d.read()
	if !strings.Contains(f.GetFailure().GetReason(), "teleport") || !f.GetFailure().Permanent {
		t.Fatalf("got %v, want permanent failure naming teleport", f)
	}
	d.exit()
}

func TestAckErrorStops(t *testing.T) {
	d := startChild(t, &childv1.Start{Input: "x", Tools: []string{"echo"}})
	req := d.modelRequest()
	d.answer(req, "", &agentmeshv1.ToolCall{Id: "c", Name: "echo", Arguments: `{"text":"a"}`})
	f := d.read()
	d.send(&childv1.Frame{Kind: &childv1.Frame_StepAck{StepAck: &childv1.StepAck{Index: f.GetStep().GetStep().GetIndex(), Error: "task cancelled"}}})
	if code := d.exit(); code != ExitFailed {
		t.Errorf("exit = %d, want %d", code, ExitFailed)
	}
	if f := new(childv1.Frame); d.r.Read(f) != io.EOF {
		t.Errorf("child sent %v after a stop ack", f)
	}
}

func TestResume(t *testing.T) {
	history := []*agentmeshv1.Step{
		{Index: 0, Kind: turn, ToolCalls: []*agentmeshv1.ToolCall{{Id: "c1", Name: "echo", Arguments: `{"text":"one"}`}, {Id: "c2", Name: "echo", Arguments: `{"text":"two"}`}}},
		{Index: 1, Kind: call, ToolCallId: "c1", ToolName: "echo"},
		{Index: 2, Kind: result, ToolCallId: "c1", ToolName: "echo", Content: "one"},
		{Index: 3, Kind: call, ToolCallId: "c2", ToolName: "echo"},
	}
	d := startChild(t, &childv1.Start{Input: "x", Tools: []string{"echo"}, History: history, MaxSteps: 2})
	// c2 has no result: it runs first, then the conversation goes on.
	if s := d.step(call, 4); s.ToolCallId != "c2" {
		t.Fatalf("resumed call = %v, want c2", s)
	}
	if s := d.step(result, 5); s.Content != "two" {
		t.Fatalf("resumed result = %v", s)
	}
	req := d.modelRequest()
	var roles []string
	for _, m := range req.Messages {
		roles = append(roles, m.Role)
	}
	if got := strings.Join(roles, ","); got != "user,assistant,tool,tool" {
		t.Fatalf("resumed conversation roles = %s", got)
	}
	d.answer(req, "one two")
	d.step(turn, 6)
	if f := d.read(); f.GetFinal().GetAnswer() != "one two" {
		t.Fatalf("got %v, want final", f)
	}
	d.exit()
}

func TestResumeAfterFinalTurn(t *testing.T) {
	history := []*agentmeshv1.Step{{Index: 0, Kind: turn, Content: "already answered"}}
	d := startChild(t, &childv1.Start{Input: "x", History: history})
	if f := d.read(); f.GetFinal().GetAnswer() != "already answered" {
		t.Fatalf("got %v, want final without a model call", f)
	}
	if code := d.exit(); code != ExitOK {
		t.Errorf("exit = %d", code)
	}
}

func TestProtocolErrors(t *testing.T) {
	t.Run("first frame not start", func(t *testing.T) {
		d := startChild(t, nil)
		d.send(&childv1.Frame{Kind: &childv1.Frame_StepAck{StepAck: &childv1.StepAck{}}})
		if code := d.exit(); code != ExitProtocol {
			t.Errorf("exit = %d, want %d", code, ExitProtocol)
		}
	})
	t.Run("wrong response id", func(t *testing.T) {
		d := startChild(t, &childv1.Start{Input: "x"})
		req := d.modelRequest()
		req.Id += 7
		d.answer(req, "x")
		if code := d.exit(); code != ExitProtocol {
			t.Errorf("exit = %d, want %d", code, ExitProtocol)
		}
	})
}
