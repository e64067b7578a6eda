package executor

import (
	"testing"

	childv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/child/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/metrics"
	"github.com/agentmesh/agentmesh/pkg/testlog"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/proto"
)

// The answer asked ahead goes to the child's first request only when the
// child asked the same; otherwise it is dropped (after its call ended) and
// counted, and the answer handed over is addressed to the child's request.
func TestFirstAnswerOnlyForTheSameRequest(t *testing.T) {
	s := &Service{log: testlog.New(t)}
	task := &agentmeshv1.Task{Id: "t1"}
	req := &childv1.ModelRequest{Id: 1, Messages: []*childv1.Message{{Role: "user", Content: "hello"}}}
	ahead := func() *asked {
		a := &asked{req: req, done: make(chan struct{}), resp: &childv1.ModelResponse{Id: 1, Message: &childv1.Message{Content: "hi"}}}
		close(a.done)
		return a
	}
	differed := func() float64 {
		var m dto.Metric
		if err := metrics.FirstTurns.WithLabelValues("differed").Write(&m); err != nil {
			t.Fatal(err)
		}
		return m.GetCounter().GetValue()
	}
	d0 := differed()

	same := &childv1.ModelRequest{Id: 5, Messages: []*childv1.Message{{Role: "user", Content: "hello"}}}
	at := &attempt{s: s, task: task, log: s.log}
	a := at.firstAnswer(ahead(), same)
	if a == nil {
		t.Fatal("the child's identical request was not given the answer asked ahead")
	}
	if resp, _ := a.answer(same.GetId()); resp.GetId() != 5 || resp.GetMessage().GetContent() != "hi" {
		t.Errorf("answer %v, want the one asked ahead addressed to request 5", resp)
	}
	if n := differed() - d0; n != 0 {
		t.Errorf("%v requests counted as different", n)
	}

	other := &childv1.ModelRequest{Id: 1, Messages: []*childv1.Message{{Role: "user", Content: "something else"}}}
	if a := at.firstAnswer(ahead(), other); a != nil {
		t.Fatal("a different request was given the answer asked for another")
	}
	if n := differed() - d0; n != 1 {
		t.Errorf("%v requests counted as different, want 1", n)
	}
}

// sameRequest tells requests apart by any message or tool, never by id.
func TestSameRequest(t *testing.T) {
	a := &childv1.ModelRequest{Id: 1, Messages: []*childv1.Message{{Role: "user", Content: "x"}}, Tools: []*childv1.ToolSpec{{Name: "echo"}}}
	b := proto.CloneOf(a)
	b.Id = 7
	if !sameRequest(a, b) {
		t.Error("requests differing only by id are not the same")
	}
	c := proto.CloneOf(a)
	c.Messages[0].Content = "y"
	d := proto.CloneOf(a)
	d.Tools = append(d.Tools, &childv1.ToolSpec{Name: "more"})
	e := proto.CloneOf(a)
	e.Messages = append(e.Messages, &childv1.Message{Role: "user", Content: "x"})
	for i, other := range []*childv1.ModelRequest{c, d, e} {
		if sameRequest(a, other) {
			t.Errorf("request %d: a different request is the same", i)
		}
	}
}

// firstRequest and childTurnStep run the child's own code on the
// executor's types: the same request and step as the child's, through
// the bytes both encode.
func TestChildCodeInTheExecutorsTypes(t *testing.T) {
	start := &childv1.Start{TaskId: "t", Attempt: 2, SystemPrompt: "s", Input: "x", Tools: []string{"echo"},
		History: []*agentmeshv1.Step{{Index: 3, Kind: agentmeshv1.StepKind_STEP_KIND_TOOL_RESULT, ToolCallId: "c1", ToolName: "echo", Content: "hi"},
			{Index: 0, Kind: agentmeshv1.StepKind_STEP_KIND_MODEL_TURN, ToolCalls: []*agentmeshv1.ToolCall{{Id: "c1", Name: "echo", Arguments: "{}"}}}}}
	req, ok := firstRequest(start)
	if !ok || len(req.GetMessages()) != 4 || req.GetMessages()[2].GetToolCalls()[0].GetId() != "c1" || req.GetMessages()[3].GetContent() != "hi" || len(req.GetTools()) != 1 {
		t.Fatalf("firstRequest = %v, %v", req, ok)
	}
	resp := &childv1.ModelResponse{Id: 1, Message: &childv1.Message{Content: "ok", ToolCalls: []*agentmeshv1.ToolCall{{Name: "echo"}}},
		Usage: &agentmeshv1.Usage{TotalTokens: 9}, Model: "m", DurationMs: 1500}
	step := childTurnStep(resp, 4)
	if step.GetIndex() != 4 || step.GetKind() != agentmeshv1.StepKind_STEP_KIND_MODEL_TURN || step.GetUsage().GetTotalTokens() != 9 ||
		step.GetToolCalls()[0].GetId() != "call_4_0" || step.GetDuration().AsDuration().Milliseconds() != 1500 {
		t.Errorf("childTurnStep = %v", step)
	}
	if resp.GetMessage().GetToolCalls()[0].GetId() != "" {
		t.Error("childTurnStep changed the executor's response")
	}
}
