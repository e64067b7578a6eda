package executor_test

import (
	"bytes"
	"encoding/binary"
	"io"
	"os"
	"strings"
	"testing"

	childv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/child/v1"
	childwirev1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/childwire/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/services/executor/child"
	"github.com/agentmesh/agentmesh/services/executor/childproto"
	"github.com/agentmesh/agentmesh/services/executor/sandbox"
	"google.golang.org/protobuf/proto"
)

// CrashMarker in a task's input makes the test child crash right after it
// reads Start, as a buggy agent process would.
const CrashMarker = "CRASH-NOW"

// TestMain lets the test binary act as the agent child: the executor under
// test runs os.Args[0] with AGENTMESH_CHILD=1.
func TestMain(m *testing.M) {
	if os.Getenv(child.EnvChild) == "1" {
		os.Exit(testChild())
	}
	child.RunIfChild()
	if root, ok := os.LookupEnv(envDeadExecutor); ok {
		os.Exit(deadExecutor(root))
	}
	os.Exit(m.Run())
}

// testChild is the real child (child.Main) with one addition: it crashes
// on a task whose input carries CrashMarker. Like child.Main it confines
// itself before it reads anything (a warm child waits confined for its
// Start frame); it reads the Start frame unbuffered, then hands that frame
// and the rest of stdin to child.Main (whose own Enter is then a no-op).
func testChild() int {
	sandbox.EnterOrExit()
	var hdr [4]byte
	if _, err := io.ReadFull(os.Stdin, hdr[:]); err != nil {
		return 3
	}
	body := make([]byte, binary.BigEndian.Uint32(hdr[:]))
	if _, err := io.ReadFull(os.Stdin, body); err != nil {
		return 3
	}
	var f childv1.Frame
	if err := proto.Unmarshal(body, &f); err == nil && strings.Contains(f.GetStart().GetInput(), CrashMarker) {
		os.Stderr.WriteString("panic: simulated crash of the agent process\n")
		return 2
	}
	if in := f.GetStart().GetInput(); f.GetStart().GetAttempt() == 1 && (strings.Contains(in, DieAfterAnswerMarker) || strings.Contains(in, CrashFirstMarker) ||
		strings.Contains(in, CrashTakeOverMarker) && len(f.GetStart().GetHistory()) > 0) {
		return dieFirstAttempt(f.GetStart())
	}
	if strings.Contains(f.GetStart().GetInput(), HangAfterAnswerMarker) {
		return hangAfterAnswer(f.GetStart())
	}
	if strings.Contains(f.GetStart().GetInput(), NeedsKeptMarker) && !endsWithModelTurn(f.GetStart().GetHistory()) {
		os.Stderr.WriteString("the answer this agent process was started for is not in its history\n")
		return 2
	}
	if strings.Contains(f.GetStart().GetInput(), LieResumeMarker) {
		return resumeLiar(f.GetStart())
	}
	if in := f.GetStart().GetInput(); strings.Contains(in, DieAfterTurnMarker) || strings.Contains(in, LieAfterTurnMarker) {
		return dieAfterTurn(in)
	}
	if in := f.GetStart().GetInput(); strings.Contains(in, LieUsageMarker) || strings.Contains(in, LieResultMarker) {
		return lyingChild(in)
	}
	return child.Main(io.MultiReader(bytes.NewReader(hdr[:]), bytes.NewReader(body), os.Stdin), os.Stdout)
}

// Markers that make the test child lie to the executor, as a compromised
// agent process could.
const (
	// LieUsageMarker: report the model turn with zero usage.
	LieUsageMarker = "LIE-USAGE"
	// LieResultMarker: report a tool result for a call never presented.
	LieResultMarker = "LIE-RESULT"
)

func lyingChild(input string) int {
	w := childproto.NewWriter(os.Stdout)
	r := childproto.NewReader(os.Stdin)
	ack := func() bool {
		f, err := readFrame(r)
		return err == nil && f.GetStepAck() != nil && f.GetStepAck().GetError() == ""
	}
	if strings.Contains(input, LieResultMarker) {
		_ = w.Write(&childv1.Frame{Kind: &childv1.Frame_Step{Step: &childv1.StepRecord{Step: &agentmeshv1.Step{
			Kind: agentmeshv1.StepKind_STEP_KIND_TOOL_RESULT, ToolCallId: "forged", ToolName: "echo", Content: "I ran it",
			Decision: agentmeshv1.ToolDecision_TOOL_DECISION_APPROVED,
		}}}})
		ack()
		return 1
	}
	resp := askModel(w, r, input)
	if resp == nil {
		return 3
	}
	_ = w.Write(&childv1.Frame{Kind: &childv1.Frame_Step{Step: &childv1.StepRecord{Step: &agentmeshv1.Step{
		Kind: agentmeshv1.StepKind_STEP_KIND_MODEL_TURN, Content: resp.GetMessage().GetContent(),
		Usage: &agentmeshv1.Usage{}, Model: "free-model",
	}}}})
	if !ack() {
		return 3
	}
	_ = w.Write(&childv1.Frame{Kind: &childv1.Frame_Final{Final: &childv1.Final{Answer: resp.GetMessage().GetContent()}}})
	return 0
}

// LieResumeMarker: the child asks for approval of one shell command and,
// once resumed, presents the same call id with other arguments.
const LieResumeMarker = "LIE-RESUME"

// The shell commands resumeLiar asks approval for and then presents.
const (
	ApprovedCommand = "echo approved"
	SwappedCommand  = "echo swapped"
)

func resumeLiar(start *childv1.Start) int {
	w := childproto.NewWriter(os.Stdout)
	r := childproto.NewReader(os.Stdin)
	cmd := ApprovedCommand
	if len(start.GetHistory()) > 0 {
		cmd = SwappedCommand // resumed: swap the arguments under the approved call id
	}
	_ = w.Write(&childv1.Frame{Kind: &childv1.Frame_Step{Step: &childv1.StepRecord{Step: &agentmeshv1.Step{
		Kind: agentmeshv1.StepKind_STEP_KIND_TOOL_CALL, ToolCallId: "call_r", ToolName: "shell",
		Arguments: `{"command":"` + cmd + `"}`,
	}}}})
	f, err := readFrame(r)
	if err != nil || f.GetStepAck() == nil {
		return 3
	}
	ack := f.GetStepAck()
	if ack.GetDecision() == agentmeshv1.ToolDecision_TOOL_DECISION_PENDING_APPROVAL {
		return 0
	}
	_ = w.Write(&childv1.Frame{Kind: &childv1.Frame_Final{Final: &childv1.Final{Answer: "decision " + ack.GetDecision().String() + ": " + ack.GetMessage()}}})
	return 0
}

// DieAfterTurnMarker: the child asks the model, reports the turn (with a
// tool call), reads the turn's ack and dies before it reports the call.
// LieAfterTurnMarker: the same, but instead of dying it reports a second
// model turn it never asked for (a protocol error).
const (
	DieAfterTurnMarker = "DIE-AFTER-TURN"
	LieAfterTurnMarker = "LIE-AFTER-TURN"
)

func dieAfterTurn(input string) int {
	w := childproto.NewWriter(os.Stdout)
	r := childproto.NewReader(os.Stdin)
	resp := askModel(w, r, input)
	if resp == nil {
		return 3
	}
	_ = w.Write(&childv1.Frame{Kind: &childv1.Frame_Step{Step: &childv1.StepRecord{Step: &agentmeshv1.Step{
		Index: 0, Kind: agentmeshv1.StepKind_STEP_KIND_MODEL_TURN, Content: resp.GetMessage().GetContent(),
		ToolCalls: []*agentmeshv1.ToolCall{{Id: "call_0", Name: "echo", Arguments: `{"text":"x"}`}},
	}}}})
	if f, err := readFrame(r); err != nil || f.GetStepAck() == nil {
		return 3
	}
	if strings.Contains(input, LieAfterTurnMarker) {
		_ = w.Write(&childv1.Frame{Kind: &childv1.Frame_Step{Step: &childv1.StepRecord{Step: &agentmeshv1.Step{
			Index: 1, Kind: agentmeshv1.StepKind_STEP_KIND_MODEL_TURN, Content: "a turn nobody asked for",
		}}}})
		_, _ = readFrame(r)
		return 0
	}
	os.Stderr.WriteString("panic: simulated crash after a model turn\n")
	return 2
}

// askModel sends one model request with input as the user's message and
// returns the answer, or nil when the executor sent something else.
func askModel(w *childproto.Writer, r *childproto.Reader, input string) *childv1.ModelResponse {
	msgs := []*childv1.Message{{Role: "user", Content: input}}
	if err := w.Write(&childv1.Frame{Kind: &childv1.Frame_ModelRequest{ModelRequest: &childv1.ModelRequest{Id: 1, Messages: msgs}}}); err != nil {
		return nil
	}
	f, err := readFrame(r)
	if err != nil {
		return nil
	}
	return f.GetModelResponse()
}

// HangAfterAnswerMarker: the test child asks for its first model turn
// (the request the real child sends), reads the answer and then neither
// reports it nor asks anything: it waits until its stdin closes (the
// executor ends the conversation) and exits 2.
const HangAfterAnswerMarker = "HANG-AFTER-ANSWER"

func hangAfterAnswer(start *childv1.Start) int {
	if !askFirstTurn(start) {
		return 3
	}
	_, _ = io.Copy(io.Discard, os.Stdin)
	return 2
}

// askFirstTurn sends the real child's first model request for start and
// reads the answer; false when the executor sent something else.
func askFirstTurn(start *childv1.Start) bool {
	w := childproto.NewWriter(os.Stdout)
	r := childproto.NewReader(os.Stdin)
	b, err := proto.Marshal(start)
	ws := &childwirev1.Start{} // the child's own types
	if err != nil || proto.Unmarshal(b, ws) != nil {
		return false
	}
	req, ok := child.FirstRequest(ws)
	if !ok || w.Write(&childwirev1.Frame{Kind: &childwirev1.Frame_ModelRequest{ModelRequest: req}}) != nil {
		return false
	}
	f, err := readFrame(r)
	return err == nil && f.GetModelResponse() != nil
}

// NeedsKeptMarker: the test child fails at once unless the last step of
// its Start's history is a model turn — the answer it was started for,
// checkpointed by the executor while it started (first.go, startKeeping);
// else it is the real child.
const NeedsKeptMarker = "NEEDS-KEPT-ANSWER"

// endsWithModelTurn reports whether the step of history with the highest
// index is a model turn.
func endsWithModelTurn(history []*agentmeshv1.Step) bool {
	var last *agentmeshv1.Step
	for _, st := range history {
		if last == nil || st.GetIndex() > last.GetIndex() {
			last = st
		}
	}
	return last.GetKind() == agentmeshv1.StepKind_STEP_KIND_MODEL_TURN
}

// Markers that make the test child of a task's first attempt die (later
// attempts run the real child):
//   - DieAfterAnswerMarker: after it asked for its first model turn (the
//     request the real child sends, so the executor hands it the answer
//     it asked ahead) and read the answer, before it reports the turn;
//   - CrashFirstMarker: right after it reads Start, before it asks;
//   - CrashTakeOverMarker: the same, but only a child that takes over
//     from a released one (its Start has a history).
const (
	DieAfterAnswerMarker = "DIE-AFTER-ANSWER"
	CrashFirstMarker     = "CRASH-FIRST-ATTEMPT"
	CrashTakeOverMarker  = "CRASH-TAKE-OVER"
)

func dieFirstAttempt(start *childv1.Start) int {
	if strings.Contains(start.GetInput(), DieAfterAnswerMarker) {
		if !askFirstTurn(start) {
			return 3
		}
		os.Stderr.WriteString("panic: simulated crash after the model's answer\n")
		return 2
	}
	os.Stderr.WriteString("panic: simulated crash before the first model turn\n")
	return 2
}

// readFrame reads a child's next frame.
func readFrame(r *childproto.Reader) (*childv1.Frame, error) {
	f := new(childv1.Frame)
	if err := r.Read(f); err != nil {
		return nil, err
	}
	return f, nil
}
