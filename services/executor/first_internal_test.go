package executor

import (
	"testing"

	childv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/child/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/metrics"
	"github.com/agentmesh/agentmesh/pkg/testlog"
	dto "github.com/prometheus/client_model/go"
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
