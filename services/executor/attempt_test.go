package executor

// Unit tests of the attempt's frame methods, each alone: the child is a
// fake of its frame channel (what the attempt writes to it is read back
// from a buffer; the serve test speaks to it over pipes), the model a fake
// llm.Client, the state service a fake recorder. The integration tests
// (executor_test.go and the others) run the real child, model and state.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	childv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/child/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/testlog"
	"github.com/agentmesh/agentmesh/pkg/tools"
	"github.com/agentmesh/agentmesh/services/executor/childproto"
	"github.com/agentmesh/agentmesh/services/executor/llm"
	"google.golang.org/protobuf/proto"
)

// fakeModel answers every call with a copy of resp, or with err.
type fakeModel struct {
	mu    sync.Mutex
	resp  *childv1.ModelResponse
	err   error
	calls []llm.Request
}

func (m *fakeModel) Complete(_ context.Context, req llm.Request) (*childv1.ModelResponse, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.calls = append(m.calls, req)
	if m.err != nil {
		return nil, m.err
	}
	resp := proto.CloneOf(m.resp)
	resp.Id = req.Turn.GetId()
	return resp, nil
}

func (m *fakeModel) called() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.calls)
}

// fakeState records the checkpoints and the blocks an attempt writes.
type fakeState struct {
	mu      sync.Mutex
	err     error
	writes  [][]*agentmeshv1.Step
	blocked []*agentmeshv1.Approval
}

func (f *fakeState) appendSteps(_ context.Context, _ string, _ int32, steps ...*agentmeshv1.Step) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return f.err
	}
	f.writes = append(f.writes, steps)
	return nil
}

func (f *fakeState) block(_ context.Context, _ *agentmeshv1.Task, _ int32, a *agentmeshv1.Approval) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.blocked = append(f.blocked, a)
	return f.err
}

func (f *fakeState) written() [][]*agentmeshv1.Step {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([][]*agentmeshv1.Step(nil), f.writes...)
}

// unitAttempt is an attempt of task t1 (attempt 1) of an agent with the
// given tools, its child a buffer, releasing off.
type unitAttempt struct {
	*attempt
	model *fakeModel
	state *fakeState
	out   *bytes.Buffer // what the attempt wrote to its child
}

func newUnitAttempt(t *testing.T, spec *agentmeshv1.Agent, exec map[string]ExecFunc) *unitAttempt {
	t.Helper()
	s := &Service{cfg: Config{ReleaseAfter: -1}, log: testlog.New(t)}
	task := &agentmeshv1.Task{Id: "t1", Org: "acme", AgentSpec: spec}
	u := &unitAttempt{
		attempt: s.newAttempt(s.log, task, 1),
		model:   &fakeModel{resp: &childv1.ModelResponse{Message: &childv1.Message{Role: "assistant", Content: "hi"}, Model: "m-1", Usage: &agentmeshv1.Usage{TotalTokens: 10}}},
		state:   &fakeState{},
		out:     &bytes.Buffer{},
	}
	a := u.attempt
	a.model, a.rec = u.model, u.state
	a.start = &childv1.Start{TaskId: task.Id, Attempt: 1}
	a.mr = &modelRun{now: time.Now, started: time.Now()}
	a.dl = s.newDelegator(task, 1, a.mr, nil)
	a.gate = newGate(task, nil, a.dl.tools(exec), nil)
	a.rel = newReleasable(releaseAfter(s.cfg), a.start)
	a.w = childproto.NewWriter(u.out)
	return u
}

// sent reads back the frames the attempt wrote to its child since the
// last call.
func (u *unitAttempt) sent(t *testing.T) []*childv1.Frame {
	t.Helper()
	r := childproto.NewReader(u.out)
	var out []*childv1.Frame
	for {
		f, err := readFrame(r)
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("reading what the attempt sent: %v", err)
		}
		out = append(out, f)
	}
}

func echoAgent() *agentmeshv1.Agent {
	return &agentmeshv1.Agent{Name: "helper", Tools: []string{"echo"}}
}

func turnStep(index int32, content string) *agentmeshv1.Step {
	return &agentmeshv1.Step{Index: index, Kind: agentmeshv1.StepKind_STEP_KIND_MODEL_TURN, Content: content}
}

func echoCall(index int32, id string) *agentmeshv1.Step {
	return &agentmeshv1.Step{Index: index, Kind: agentmeshv1.StepKind_STEP_KIND_TOOL_CALL, ToolCallId: id, ToolName: "echo", Arguments: `{"text":"x"}`}
}

var hello = &childv1.ModelRequest{Id: 7, Messages: []*childv1.Message{{Role: "user", Content: "hello"}}}

// A quick answer is asked once, counted, handed to the child addressed to
// its request, remembered until the child reports it, and not written.
func TestAttemptModelRequestQuickAnswer(t *testing.T) {
	u := newUnitAttempt(t, echoAgent(), nil)
	u.model.resp.DurationMs = 5
	if res := u.onModelRequest(context.Background(), hello); res != nil {
		t.Fatalf("the conversation ended: %+v", res)
	}
	frames := u.sent(t)
	if len(frames) != 1 || frames[0].GetModelResponse().GetId() != 7 || frames[0].GetModelResponse().GetMessage().GetContent() != "hi" {
		t.Fatalf("sent %v, want the answer addressed to request 7", frames)
	}
	if n := u.model.called(); n != 1 {
		t.Errorf("the model was asked %d times, want once", n)
	}
	if got := u.model.calls[0].Turn.GetMessages(); len(got) != 1 || got[0].GetContent() != "hello" {
		t.Errorf("the model was asked %v, want the child's conversation", got)
	}
	if u.observed == nil || u.early != nil {
		t.Errorf("observed %v, early %v: want the answer remembered and no early write", u.observed, u.early)
	}
	if u.mr.turns != 1 || u.mr.tokens != 10 {
		t.Errorf("counted %d turns, %d tokens; want 1 and 10", u.mr.turns, u.mr.tokens)
	}
	if w := u.state.written(); len(w) != 0 {
		t.Errorf("wrote %v for a quick answer", w)
	}
}

// A slow answer is written at once, beside the hand-over, as the turn the
// child will report; the child's next frame settles it.
func TestAttemptModelRequestSlowAnswerKept(t *testing.T) {
	u := newUnitAttempt(t, echoAgent(), nil)
	u.model.resp.DurationMs = 500
	u.next = 3
	if res := u.onModelRequest(context.Background(), hello); res != nil {
		t.Fatalf("the conversation ended: %+v", res)
	}
	if u.early == nil {
		t.Fatal("a slow answer was not written early")
	}
	recorded := u.settleEarly()
	w := u.state.written()
	if len(w) != 1 || len(w[0]) != 1 || w[0][0].GetIndex() != 3 || w[0][0].GetKind() != agentmeshv1.StepKind_STEP_KIND_MODEL_TURN || w[0][0].GetContent() != "hi" || w[0][0].GetAttempt() != 1 {
		t.Fatalf("wrote %v, want the answer as model turn 3 of attempt 1", w)
	}
	if !proto.Equal(recorded, w[0][0]) || u.observed != nil || u.early != nil {
		t.Errorf("settled %v (observed %v, early %v), want the step written and nothing left in flight", recorded, u.observed, u.early)
	}
	if frames := u.sent(t); len(frames) != 1 || frames[0].GetModelResponse() == nil {
		t.Errorf("sent %v, want the answer handed over", frames)
	}
}

// A child that took over asks for its predecessor's turn: it is handed
// the answer held for it, and the model is not asked again.
func TestAttemptModelRequestHeldAnswer(t *testing.T) {
	u := newUnitAttempt(t, echoAgent(), nil)
	u.held = &childv1.ModelResponse{Id: 1, Message: &childv1.Message{Content: "held"}}
	if res := u.onModelRequest(context.Background(), &childv1.ModelRequest{Id: 9}); res != nil {
		t.Fatalf("the conversation ended: %+v", res)
	}
	if n := u.model.called(); n != 0 {
		t.Errorf("the model was asked %d times for an answer in hand", n)
	}
	frames := u.sent(t)
	if len(frames) != 1 || frames[0].GetModelResponse().GetId() != 9 || frames[0].GetModelResponse().GetMessage().GetContent() != "held" {
		t.Fatalf("sent %v, want the held answer addressed to request 9", frames)
	}
	if u.held != nil || u.observed == nil {
		t.Errorf("held %v, observed %v: want the answer handed over and remembered", u.held, u.observed)
	}
}

// A budget used up answers with an error, asks nothing and ends the
// conversation as a budget failure.
func TestAttemptModelRequestBudgetSpent(t *testing.T) {
	u := newUnitAttempt(t, echoAgent(), nil)
	u.mr.budget, u.mr.turns = &agentmeshv1.Budget{MaxSteps: 2}, 2
	res := u.onModelRequest(context.Background(), hello)
	if res == nil || res.kind != agentmeshv1.FailureKind_FAILURE_KIND_BUDGET || !res.last {
		t.Fatalf("ended %+v, want a budget failure", res)
	}
	if n := u.model.called(); n != 0 {
		t.Errorf("the model was asked %d times past the budget", n)
	}
	if frames := u.sent(t); len(frames) != 1 || !strings.Contains(frames[0].GetModelResponse().GetError(), "budget exhausted") {
		t.Errorf("sent %v, want the budget's error", frames)
	}
}

// A failed call is handed to the child as an error (its loop reports the
// failure) and marks the attempt's model as down.
func TestAttemptModelRequestFailedCall(t *testing.T) {
	u := newUnitAttempt(t, echoAgent(), nil)
	// A 503 whose retries were spent: transient (MODEL); a refusal no
	// retry changes would be MODEL_REJECTED.
	u.model.err = llm.NewError(llm.KindTransient, errors.New("model m at http://x: 503 (4 attempts)"))
	if res := u.onModelRequest(context.Background(), hello); res != nil {
		t.Fatalf("the conversation ended: %+v", res)
	}
	if frames := u.sent(t); len(frames) != 1 || frames[0].GetModelResponse().GetError() != u.model.err.Error() {
		t.Errorf("sent %v, want the call's error", frames)
	}
	if u.observed != nil || u.mr.modelErr == "" {
		t.Errorf("observed %v, modelErr %q: want no answer remembered and the model marked down", u.observed, u.mr.modelErr)
	}
	if res := u.onFailure(&childv1.Failure{Reason: "model call failed"}); res.kind != agentmeshv1.FailureKind_FAILURE_KIND_MODEL {
		t.Errorf("the child's failure after it: kind %v, want MODEL", res.kind)
	}
}

// The child's report of the answer it was handed gets the usage and model
// the executor saw, is acknowledged and waits to be written with the next
// step.
func TestAttemptStepModelTurnDeferred(t *testing.T) {
	u := newUnitAttempt(t, echoAgent(), nil)
	u.observed = &childv1.ModelResponse{Model: "m-1", Usage: &agentmeshv1.Usage{TotalTokens: 12}}
	step := turnStep(0, "hi")
	step.Usage, step.Model = &agentmeshv1.Usage{}, "free-model" // the child's word
	if res := u.onStep(context.Background(), step, nil); res != nil {
		t.Fatalf("the conversation ended: %+v", res)
	}
	if u.deferred != step || step.GetModel() != "m-1" || step.GetUsage().GetTotalTokens() != 12 || step.GetAttempt() != 1 {
		t.Errorf("deferred %v: want the step with the executor's usage and model", u.deferred)
	}
	if frames := u.sent(t); len(frames) != 1 || frames[0].GetStepAck().GetIndex() != 0 || frames[0].GetStepAck().GetError() != "" {
		t.Errorf("sent %v, want the turn acknowledged", frames)
	}
	if w := u.state.written(); len(w) != 0 {
		t.Errorf("wrote %v: the turn should wait for the next step", w)
	}
}

// A model turn the executor asked nothing for, or other than the turn it
// wrote early, breaks the protocol; the turn written early is acked
// without a second write.
func TestAttemptStepModelTurnChecked(t *testing.T) {
	u := newUnitAttempt(t, echoAgent(), nil)
	if res := u.onStep(context.Background(), turnStep(0, "made up"), nil); res == nil || res.protoErr == nil {
		t.Errorf("a turn without a model call: %+v, want a protocol error", res)
	}
	recorded := turnStep(0, "the answer")
	recorded.Attempt = 1
	if res := u.onStep(context.Background(), turnStep(0, "another answer"), recorded); res == nil || res.protoErr == nil {
		t.Errorf("a turn other than the one written: %+v, want a protocol error", res)
	}
	if res := u.onStep(context.Background(), echoCall(0, "c0"), recorded); res == nil || res.protoErr == nil {
		t.Errorf("a tool call before the turn written: %+v, want a protocol error", res)
	}
	u.sent(t)
	if res := u.onStep(context.Background(), turnStep(0, "the answer"), recorded); res != nil {
		t.Fatalf("the very turn written: %+v", res)
	}
	if frames := u.sent(t); len(frames) != 1 || frames[0].GetStepAck() == nil || frames[0].GetStepAck().GetError() != "" {
		t.Errorf("sent %v, want the turn acknowledged", frames)
	}
	if w := u.state.written(); len(w) != 0 {
		t.Errorf("wrote %v for a turn already written", w)
	}
}

// A tool call is judged by the gate and written together with the turn
// that asked for it, in one write.
func TestAttemptStepToolCallWrittenWithTheTurn(t *testing.T) {
	u := newUnitAttempt(t, echoAgent(), nil)
	turn := turnStep(0, "let me echo")
	u.deferred = turn
	call := echoCall(1, "c1")
	if res := u.onStep(context.Background(), call, nil); res != nil {
		t.Fatalf("the conversation ended: %+v", res)
	}
	w := u.state.written()
	if len(w) != 1 || len(w[0]) != 2 || w[0][0] != turn || w[0][1] != call {
		t.Fatalf("wrote %v, want the turn and the call in one write", w)
	}
	if call.GetDecision() != agentmeshv1.ToolDecision_TOOL_DECISION_ALLOWED || call.GetIdempotencyKey() != "t1:c1" || call.GetArgumentsSha256() == "" {
		t.Errorf("the call's audit fields: %v", call)
	}
	frames := u.sent(t)
	if len(frames) != 1 || frames[0].GetStepAck().GetDecision() != agentmeshv1.ToolDecision_TOOL_DECISION_ALLOWED || frames[0].GetStepAck().GetRunInExecutor() {
		t.Errorf("sent %v, want the call allowed, to run in the child", frames)
	}
	if u.deferred != nil || len(u.rel.steps) != 2 || u.next != 2 {
		t.Errorf("deferred %v, %d steps recorded, next %d: want none, 2, 2", u.deferred, len(u.rel.steps), u.next)
	}
}

// Steps out of order, a result of a call never judged, and a failed write
// end the conversation; the failed write is in the ack.
func TestAttemptStepRefused(t *testing.T) {
	u := newUnitAttempt(t, echoAgent(), nil)
	u.deferred = turnStep(2, "")
	if res := u.onStep(context.Background(), echoCall(1, "c1"), nil); res == nil || res.protoErr == nil {
		t.Errorf("step 1 after step 2: %+v, want a protocol error", res)
	}
	u.deferred = nil
	result := &agentmeshv1.Step{Index: 4, Kind: agentmeshv1.StepKind_STEP_KIND_TOOL_RESULT, ToolCallId: "forged", ToolName: "echo"}
	if res := u.onStep(context.Background(), result, nil); res == nil || res.protoErr == nil {
		t.Errorf("a result of a call never judged: %+v, want a protocol error", res)
	}
	u.sent(t)
	u.state.err = errors.New("state is down")
	if res := u.onStep(context.Background(), echoCall(5, "c5"), nil); res == nil || !errors.Is(res.stepErr, u.state.err) {
		t.Fatalf("a failed write: %+v, want its error", res)
	}
	if frames := u.sent(t); len(frames) != 1 || frames[0].GetStepAck().GetError() != "state is down" {
		t.Errorf("sent %v, want the write's error in the ack", frames)
	}
}

// A call that needs a person's approval is written, then blocks the task.
func TestAttemptStepBlocksOnApproval(t *testing.T) {
	spec := &agentmeshv1.Agent{Name: "ops", Tools: []string{"shell"}, ToolPolicies: map[string]agentmeshv1.ToolPolicy{"shell": agentmeshv1.ToolPolicy_TOOL_POLICY_REQUIRE_APPROVAL}}
	u := newUnitAttempt(t, spec, nil)
	call := &agentmeshv1.Step{Index: 0, Kind: agentmeshv1.StepKind_STEP_KIND_TOOL_CALL, ToolCallId: "c0", ToolName: "shell", Arguments: `{"command":"ls"}`}
	res := u.onStep(context.Background(), call, nil)
	if res == nil || !res.blocked || res.blockedOn != "waiting for approval" {
		t.Fatalf("ended %+v, want the task blocked on the approval", res)
	}
	if w := u.state.written(); len(w) != 1 || w[0][0] != call || call.GetDecision() != agentmeshv1.ToolDecision_TOOL_DECISION_PENDING_APPROVAL {
		t.Errorf("wrote %v, want the call, pending approval", w)
	}
	if len(u.state.blocked) != 1 || u.state.blocked[0].GetTool() != "shell" {
		t.Errorf("blocked on %v, want the shell call's approval", u.state.blocked)
	}
	if frames := u.sent(t); len(frames) != 1 || frames[0].GetStepAck().GetError() != "waiting for approval of shell" {
		t.Errorf("sent %v", frames)
	}
}

// A tool the executor runs runs once, for the call the gate allowed.
func TestAttemptToolRequest(t *testing.T) {
	runs := 0
	fetch := func(_ context.Context, env tools.Env, args json.RawMessage, _ bool) (ExecResult, error) {
		runs++
		return ExecResult{Output: "fetched " + string(args) + " key " + env.IdempotencyKey}, nil
	}
	u := newUnitAttempt(t, &agentmeshv1.Agent{Name: "web", Tools: []string{"web_fetch"}}, map[string]ExecFunc{"web_fetch": fetch})
	call := &agentmeshv1.Step{Index: 0, Kind: agentmeshv1.StepKind_STEP_KIND_TOOL_CALL, ToolCallId: "c0", ToolName: "web_fetch", Arguments: `{"url":"https://example.com"}`}
	if v := u.gate.decide(call); v.decision != agentmeshv1.ToolDecision_TOOL_DECISION_ALLOWED || !v.inExecutor {
		t.Fatalf("verdict %+v", v)
	}
	req := &childv1.ToolRequest{Id: 4, Call: &agentmeshv1.ToolCall{Id: "c0", Name: "web_fetch", Arguments: `{"url":"https://example.com"}`}}
	for range 2 {
		if res := u.onToolRequest(context.Background(), req); res != nil {
			t.Fatalf("the conversation ended: %+v", res)
		}
	}
	frames := u.sent(t)
	if len(frames) != 2 || frames[0].GetToolResponse().GetId() != 4 || frames[0].GetToolResponse().GetOutput() != `fetched {"url":"https://example.com"} key t1:c0` {
		t.Fatalf("sent %v, want the tool's output", frames)
	}
	if runs != 1 || !frames[1].GetToolResponse().GetIsError() {
		t.Errorf("ran %d times; second answer %v: want one run, the second refused", runs, frames[1].GetToolResponse())
	}
}

// A call state did not answer (a spawn whose outcome is unknown) is not
// answered to the child: the attempt ends and goes back to the queue, and
// the next attempt presents the call again, with the same id.
func TestAttemptToolRequestUnsettled(t *testing.T) {
	spawn := func(context.Context, tools.Env, json.RawMessage, bool) (ExecResult, error) {
		return ExecResult{}, fmt.Errorf("%w (spawn of call c0: timed out)", errUnsettled)
	}
	u := newUnitAttempt(t, &agentmeshv1.Agent{Name: "web", Tools: []string{"web_fetch"}}, map[string]ExecFunc{"web_fetch": spawn})
	call := &agentmeshv1.Step{Index: 0, Kind: agentmeshv1.StepKind_STEP_KIND_TOOL_CALL, ToolCallId: "c0", ToolName: "web_fetch", Arguments: `{"url":"https://example.com"}`}
	u.gate.decide(call)
	res := u.onToolRequest(context.Background(), &childv1.ToolRequest{Id: 1, Call: &agentmeshv1.ToolCall{Id: "c0", Name: "web_fetch", Arguments: call.Arguments}})
	if res == nil || !errors.Is(res.unsettled, errUnsettled) {
		t.Fatalf("result %+v, want the conversation ended unsettled", res)
	}
	if frames := u.sent(t); len(frames) != 0 {
		t.Errorf("sent %v to the child, want nothing (no answer for a call that may have run)", frames)
	}
	if out := u.outcomeOf(context.Background(), *res, "killed"); out.kind != outRequeue {
		t.Errorf("outcome %+v, want requeue", out)
	}
}

// Tools the child says its stdio MCP servers offer must be of one of the
// agent's stdio servers.
func TestAttemptToolsDiscovered(t *testing.T) {
	u := newUnitAttempt(t, echoAgent(), nil)
	res := u.onToolsDiscovered(&childv1.ToolsDiscovered{Tools: []*childv1.ToolSpec{{Name: "mcp__nowhere__grab", ParametersJson: `{"type":"object"}`}}})
	if res == nil || res.protoErr == nil {
		t.Errorf("a tool of no configured server: %+v, want a protocol error", res)
	}
}

// The final answer ends the conversation, with the turn that gave it,
// not yet written: the completion records it.
func TestAttemptFinal(t *testing.T) {
	u := newUnitAttempt(t, echoAgent(), nil)
	turn := turnStep(0, "42")
	u.deferred = turn
	res := u.onFinal(&childv1.Final{Answer: "42"})
	if res.final.GetAnswer() != "42" || !res.last || len(res.steps) != 1 || res.steps[0] != turn || u.deferred != nil {
		t.Errorf("ended %+v, want the answer with its turn", res)
	}
	if w := u.state.written(); len(w) != 0 {
		t.Errorf("wrote %v: the completion writes the turn", w)
	}
}

// A frame other than a step writes the deferred turn first; a child that
// took over must ask for its turn before anything else.
func TestAttemptFrame(t *testing.T) {
	u := newUnitAttempt(t, echoAgent(), nil)
	u.deferred = turnStep(0, "")
	ctx := context.Background()
	if res := u.frame(ctx, &childv1.Frame{Kind: &childv1.Frame_ToolRequest{ToolRequest: &childv1.ToolRequest{Id: 1, Call: &agentmeshv1.ToolCall{Id: "c"}}}}); res != nil {
		t.Fatalf("the conversation ended: %+v", res)
	}
	if w := u.state.written(); len(w) != 1 || w[0][0].GetIndex() != 0 || u.deferred != nil {
		t.Errorf("wrote %v, want the deferred turn before the tool ran", w)
	}
	u.held = &childv1.ModelResponse{}
	if res := u.frame(ctx, &childv1.Frame{Kind: &childv1.Frame_Final{Final: &childv1.Final{}}}); res == nil || res.protoErr == nil {
		t.Errorf("a successor's final before its turn: %+v, want a protocol error", res)
	}
}

// However the conversation ends, an answer no child recorded is written
// as the turn the child would have written; with nothing left, nothing is.
func TestAttemptKeepUnrecorded(t *testing.T) {
	u := newUnitAttempt(t, echoAgent(), nil)
	u.keepUnrecorded(context.Background())
	if w := u.state.written(); len(w) != 0 {
		t.Fatalf("wrote %v with nothing in flight", w)
	}
	u.observed = &childv1.ModelResponse{Message: &childv1.Message{Content: "paid for"}, Usage: &agentmeshv1.Usage{TotalTokens: 3}}
	u.next = 4
	u.keepUnrecorded(context.Background())
	w := u.state.written()
	if len(w) != 1 || w[0][0].GetIndex() != 4 || w[0][0].GetContent() != "paid for" || w[0][0].GetUsage().GetTotalTokens() != 3 {
		t.Errorf("wrote %v, want the answer as model turn 4", w)
	}
}

// serve runs the conversation: Start, the model turn, its report, the
// final answer — with the turn written by the completion.
func TestAttemptServe(t *testing.T) {
	u := newUnitAttempt(t, echoAgent(), nil)
	childIn, execOut := io.Pipe()
	execIn, childOut := io.Pipe()
	u.r, u.w = childproto.NewReader(execIn), childproto.NewWriter(execOut)
	t.Cleanup(func() { execOut.Close(); execIn.Close() })
	childErr := make(chan error, 1)
	go func() { childErr <- playChild(childproto.NewReader(childIn), childproto.NewWriter(childOut)) }()

	res := u.serve(context.Background())
	if err := <-childErr; err != nil {
		t.Fatalf("the fake child: %v", err)
	}
	if res.final.GetAnswer() != "hi" || !res.last || len(res.steps) != 1 {
		t.Fatalf("ended %+v, want the final answer with its turn", res)
	}
	if turn := res.steps[0]; turn.GetContent() != "hi" || turn.GetUsage().GetTotalTokens() != 10 || turn.GetModel() != "m-1" || turn.GetAttempt() != 1 {
		t.Errorf("the answer's turn %v, want the executor's usage and model", turn)
	}
	if n, w := u.model.called(), u.state.written(); n != 1 || len(w) != 0 {
		t.Errorf("%d model calls, writes %v: want one call and no write (the completion writes the turn)", n, w)
	}
}

// playChild is the child's side of TestAttemptServe: it reads Start, asks
// for one model turn, reports it and gives the answer.
func playChild(r *childproto.Reader, w *childproto.Writer) error {
	f, err := readFrame(r)
	if err != nil || f.GetStart() == nil {
		return fmt.Errorf("want Start, got %v, %v", f, err)
	}
	if err := w.Write(&childv1.Frame{Kind: &childv1.Frame_ModelRequest{ModelRequest: hello}}); err != nil {
		return err
	}
	if f, err = readFrame(r); err != nil || f.GetModelResponse() == nil {
		return fmt.Errorf("want the answer, got %v, %v", f, err)
	}
	answer := f.GetModelResponse().GetMessage().GetContent()
	if err := w.Write(&childv1.Frame{Kind: &childv1.Frame_Step{Step: &childv1.StepRecord{Step: turnStep(0, answer)}}}); err != nil {
		return err
	}
	if f, err = readFrame(r); err != nil || f.GetStepAck() == nil || f.GetStepAck().GetError() != "" {
		return fmt.Errorf("want the turn's ack, got %v, %v", f, err)
	}
	return w.Write(&childv1.Frame{Kind: &childv1.Frame_Final{Final: &childv1.Final{Answer: answer}}})
}
