package executor_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	busv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/bus/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/subjects"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/proto"
)

// stepWrites records the step lists of the checkpoint and completion
// requests the executor sends to state.
type stepWrites struct {
	mu       sync.Mutex
	appends  [][]int32 // step indexes of each AppendStep request
	complete [][]int32 // step indexes each Complete request carried
}

func watchStepWrites(t *testing.T, e *env) *stepWrites {
	t.Helper()
	// The grouping counted is that of quick answers: a call slowed past
	// KeepAnswersAfter on a loaded machine (-race) would have its answer
	// written on its own, early (TestSlowAnswerWrittenWhileItsChildTakesIt).
	e.cfg.KeepAnswersAfter = -1
	w := &stepWrites{}
	indexes := func(steps []*agentmeshv1.Step) []int32 {
		var out []int32
		for _, s := range steps {
			out = append(out, s.GetIndex())
		}
		return out
	}
	for subject, fn := range map[string]func(*nats.Msg){
		e.names.State(subjects.StateAppendStep): func(m *nats.Msg) {
			var req busv1.AppendStepRequest
			if proto.Unmarshal(m.Data, &req) == nil {
				w.mu.Lock()
				w.appends = append(w.appends, indexes(append([]*agentmeshv1.Step{req.Step}, req.MoreSteps...)))
				w.mu.Unlock()
			}
		},
		e.names.State(subjects.StateComplete): func(m *nats.Msg) {
			var req busv1.TransitionRequest
			if proto.Unmarshal(m.Data, &req) == nil {
				w.mu.Lock()
				w.complete = append(w.complete, indexes(req.Steps))
				w.mu.Unlock()
			}
		},
	} {
		sub, err := e.nc.Subscribe(subject, fn)
		if err != nil {
			t.Fatalf("subscribe %s: %v", subject, err)
		}
		t.Cleanup(func() { _ = sub.Unsubscribe() })
	}
	if err := e.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return w
}

func (w *stepWrites) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return fmt.Sprintf("step writes %v, completions with steps %v", w.appends, w.complete)
}

// A model turn is checkpointed with the tool call it asked for, and the
// turn that gave the answer with the completion: two requests and two
// store writes fewer per tool-using task, the same events in the same
// order, each model turn asked once.
func TestCheckpointsWrittenTogether(t *testing.T) {
	e := newEnv(t)
	w := watchStepWrites(t, e)
	e.startExecutor()
	task := e.submit("echo: together")
	got := e.waitStatus(task.Id, taskstate.Completed, 60*time.Second)
	if got.Result != "the tool said echo: together" || got.StepCount != 4 {
		t.Errorf("task: result %q, %d steps; want the echo and 4 steps", got.Result, got.StepCount)
	}
	// The requests, as the state service received them: the first turn
	// and its call, the call's result, and the answer's turn with the
	// completion.
	if want := "step writes [[0 1] [2]], completions with steps [[3]]"; w.String() != want {
		t.Errorf("got %s, want %s", w, want)
	}
	var kinds []string
	for _, ev := range e.history(task.Id)[4:] {
		if ev.Type == agentmeshv1.EventType_EVENT_TYPE_STEP {
			kinds = append(kinds, fmt.Sprintf("%d:%s", ev.Step.Index, ev.Step.Kind))
		} else {
			kinds = append(kinds, taskstate.Name(ev.Status))
		}
	}
	want := "[0:STEP_KIND_MODEL_TURN 1:STEP_KIND_TOOL_CALL 2:STEP_KIND_TOOL_RESULT 3:STEP_KIND_MODEL_TURN completed]"
	if fmt.Sprint(kinds) != want {
		t.Errorf("history after running: got %v, want %s", kinds, want)
	}
	for turn := range 2 {
		if n := e.model.RequestsAt(turn); n != 1 {
			t.Errorf("model turn %d asked %d times, want once", turn, n)
		}
	}
}

// A model turn acked to the child and waiting for its tool call is still
// checkpointed when the child dies before reporting the call: the next
// attempt finds the answer and does not ask the model again.
// So is one held when the child breaks the protocol.
func TestDeferredTurnWrittenWhenTheChildDies(t *testing.T) {
	for _, tc := range []struct{ marker, why string }{
		{DieAfterTurnMarker, "simulated crash after a model turn"},
		{LieAfterTurnMarker, "a model turn step without a model call"},
	} {
		t.Run(tc.marker, func(t *testing.T) {
			e := newEnv(t)
			w := watchStepWrites(t, e)
			e.startExecutor()
			task := e.submit(tc.marker)
			got := e.waitStatus(task.Id, taskstate.Failed, 60*time.Second)
			if !strings.Contains(got.Error, tc.why) {
				t.Errorf("error %q, want it to say %q", got.Error, tc.why)
			}
			turns := modelTurns(e.history(task.Id))
			if len(turns) != 1 || turns[0].Index != 0 || turns[0].Attempt != 1 || len(turns[0].ToolCalls) != 1 {
				t.Fatalf("model turns in the history: %v, want the child's one real turn (attempt 1, index 0, its tool call); %s", turns, w)
			}
		})
	}
}

// A model turn too large to share a request is written on its own at once,
// so no checkpoint request grows past what one step needs.
func TestLargeTurnWrittenAlone(t *testing.T) {
	e := newEnv(t)
	big := strings.Repeat("long thought. ", 300<<10/14)
	e.useScript(`{"scenarios": [{"turns": [
	  {"content": "` + big + `", "tool_calls": [{"name": "echo", "arguments": {"text": "x"}}]},
	  {"content": "done"}
	]}]}`)
	w := watchStepWrites(t, e)
	e.startExecutor()
	task := e.submit("large")
	got := e.waitStatus(task.Id, taskstate.Completed, 60*time.Second)
	if got.Result != "done" {
		t.Errorf("result %q", got.Result)
	}
	if want := "step writes [[0] [1] [2]], completions with steps [[3]]"; w.String() != want {
		t.Errorf("got %s, want %s", w, want)
	}
}
