// Package child is the agent loop that runs inside an agent child process.
//
// The executor re-executes its own binary with AGENTMESH_CHILD=1 (or as
// `agentmesh child`) and a clean environment; the child speaks only over
// its stdin and stdout, in the frames of services/executor/childproto, in
// its own copy of the protocol's types (agentmesh.childwire.v1: the same
// bytes as the executor's agentmesh.child.v1, without the public API, so
// that each child's start does not initialise it):
//
//	executor → child: Start, then ModelResponse and StepAck answers
//	child → executor: ModelRequest, StepRecord (one per step), then Final
//	                  or Failure
//
// The loop: build the conversation (system prompt, the task's input, and
// the steps an earlier attempt checkpointed, so a resumed task continues
// where it stopped without repeating model turns), then up to max_steps
// times: ask the executor for a model turn, report it as a MODEL_TURN step;
// if the model asked for no tool, send Final with its text; otherwise, for
// each tool call, report a TOOL_CALL step and let the executor decide: its
// StepAck says whether the call runs (here, in the sandbox, or in the
// executor, asked with a ToolRequest), is refused (unknown tool, invalid
// arguments, policy, a person's rejection: the ack's message becomes the
// observation and nothing runs) or waits for a person's approval (the task
// is blocked and the child stops; a later attempt replays the conversation
// and presents the call again). Then report the TOOL_RESULT step and add
// the observation to the conversation. Every step waits for its StepAck,
// so it is checkpointed before anything that depends on it happens (the
// executor may ack a model turn before writing it, and then writes it with
// the next step or the completion, or first when any other frame comes);
// an ack with an error (the task was cancelled, blocked, or this attempt is
// stale) ends the child quietly.
package child

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"time"

	childwirev1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/childwire/v1"
	"github.com/agentmesh/agentmesh/pkg/tools"
	_ "github.com/agentmesh/agentmesh/services/executor/child/localtools" // code_run, shell, fs_*: the sandboxed local tools
	"github.com/agentmesh/agentmesh/services/executor/childproto"
	"github.com/agentmesh/agentmesh/services/executor/sandbox"
	"google.golang.org/protobuf/types/known/durationpb"
)

// EnvChild is the environment variable that makes a binary act as the child.
const EnvChild = "AGENTMESH_CHILD"

// DefaultMaxSteps bounds model turns when Start does not.
const DefaultMaxSteps = 16

// ToolTimeout bounds one local tool call.
const ToolTimeout = 30 * time.Second

// Exit codes of Main.
const (
	ExitOK = 0
	// ExitFailed: the child sent Failure, or an ack told it to stop.
	ExitFailed = 1
	// ExitProtocol: the executor spoke out of turn, or the pipe broke.
	ExitProtocol = 2
)

// RunIfChild runs Main on stdin and stdout and exits when the environment
// says this process is an agent child; otherwise it returns at once. Call
// it first thing in main (and in TestMain of tests that spawn children).
func RunIfChild() {
	if os.Getenv(EnvChild) != "1" {
		return
	}
	os.Exit(Main(os.Stdin, os.Stdout))
}

// Main runs an agent loop over in and out and returns the exit code.
// Diagnostics go to stderr, whose tail the executor keeps for its reports.
//
// A Start marked reusable (see reuse.go) makes the child, after its Final,
// clear what the task left, send Ready and serve the next Start it reads;
// the end of its stdin ends it.
func Main(in io.Reader, out io.Writer) int {
	sandbox.EnterOrExit() // confine this process before reading anything (a no-op unsandboxed)
	prewarm()             // while a warm child waits for its task, not after
	r, w := childproto.NewReader(in), childproto.NewWriter(out)
	var start *childwirev1.Start
	for {
		l := &loop{r: r, w: w, start: start}
		err := l.run()
		if err != nil || !l.start.GetReusable() {
			return exitCode(err)
		}
		if start, err = nextTask(r, w); err != nil {
			if errors.Is(err, io.EOF) {
				return ExitOK
			}
			fmt.Fprintf(os.Stderr, "agentmesh child: %v\n", err)
			return ExitFailed
		}
	}
}

// exitCode is Main's exit code for how a task's loop ended.
func exitCode(err error) int {
	switch {
	case err == nil:
		return ExitOK
	case errors.Is(err, errStopped):
		fmt.Fprintf(os.Stderr, "agentmesh child: %v\n", err)
		return ExitFailed
	case errors.Is(err, errFailed):
		return ExitFailed
	default:
		fmt.Fprintf(os.Stderr, "agentmesh child: %v\n", err)
		return ExitProtocol
	}
}

var (
	// errStopped: an ack told the child to stop.
	errStopped = errors.New("stopped by the executor")
	// errFailed: the child reported a Failure.
	errFailed = errors.New("failure reported")
)

type loop struct {
	r *childproto.Reader
	w *childproto.Writer

	start    *childwirev1.Start
	tools    map[string]tools.Tool
	specs    []*childwirev1.ToolSpec
	messages []*childwirev1.Message
	next     int32 // index of the next step
	turns    int   // model turns taken, earlier attempts included
	reqID    int64
	mcp      mcpServers // stdio MCP servers started by this child
}

func (l *loop) run() error {
	if l.start == nil {
		f, err := readFrame(l.r)
		if err != nil {
			return fmt.Errorf("read start: %w", err)
		}
		l.start = f.GetStart()
		if l.start == nil {
			return fmt.Errorf("first frame is %s, want start", childproto.Kind(f))
		}
	}
	if err := l.resolveTools(); err != nil {
		return l.fail(fmt.Sprintf("agent configuration: %v", err), true)
	}
	// stdio MCP servers: started here, in the sandbox, before the first
	// model request (and before a resumed call runs); stopped on exit.
	defer l.stopMCP()
	if err := l.startMCP(); err != nil {
		return err
	}
	pending, final, done := l.converse()
	if done {
		return l.send(&childwirev1.Frame{Kind: &childwirev1.Frame_Final{Final: &childwirev1.Final{Answer: final}}})
	}
	if err := l.runTools(pending); err != nil {
		return err
	}

	maxSteps := maxStepsOf(l.start)
	for l.turns < maxSteps {
		l.turns++
		resp, err := l.model()
		if err != nil {
			return err
		}
		if resp.Error != "" {
			return l.fail("model call failed: "+resp.Error, false)
		}
		step, msg := TurnStep(resp, l.next)
		if _, err := l.record(step); err != nil {
			return err
		}
		l.messages = append(l.messages, msg)
		if len(msg.ToolCalls) == 0 {
			return l.send(&childwirev1.Frame{Kind: &childwirev1.Frame_Final{Final: &childwirev1.Final{Answer: msg.Content}}})
		}
		if err := l.runTools(msg.ToolCalls); err != nil {
			return err
		}
	}
	return l.fail(fmt.Sprintf("agent took %d model turns without a final answer (max_steps %d)", l.turns, maxSteps), true)
}

// TurnStep is the MODEL_TURN step a child records for the model's answer
// resp when its next step has index next, and the assistant message the
// answer adds to its conversation (the two share the tool calls; resp's
// message is used, not copied). A tool call the model gave no id gets
// call_<next>_<i>.
//
// The executor builds the same step with it for an answer the child got
// and did not live to record, or that no child could be started for, so
// the next attempt replays the answer instead of asking the model again
// (docs/architecture.md, "An answer no child recorded").
func TurnStep(resp *childwirev1.ModelResponse, next int32) (*childwirev1.WireStep, *childwirev1.Message) {
	msg := resp.GetMessage()
	if msg == nil {
		msg = &childwirev1.Message{}
	}
	msg.Role = "assistant"
	for i, c := range msg.ToolCalls {
		if c.Id == "" {
			c.Id = fmt.Sprintf("call_%d_%d", next, i)
		}
	}
	return &childwirev1.WireStep{
		Index:         next,
		Kind:          childwirev1.WireStepKind_WIRE_STEP_KIND_MODEL_TURN,
		Content:       msg.Content,
		ToolCalls:     msg.ToolCalls,
		Usage:         resp.Usage,
		Model:         resp.Model,
		FinishReason:  resp.FinishReason,
		ModelProvider: resp.Provider,
		ModelFallback: resp.Fallback,
		Duration:      durationpb.New(time.Duration(resp.DurationMs) * time.Millisecond),
	}, msg
}

// NextIndex is the index of the step a child given history records next
// (history's steps in the child's type or in the public API's).
func NextIndex[S interface{ GetIndex() int32 }](history []S) int32 {
	var next int32
	for _, s := range history {
		if i := s.GetIndex(); i >= next {
			next = i + 1
		}
	}
	return next
}

// resolveTools resolves the agent's built-in tools: those the child runs
// and those it offers the model.
func (l *loop) resolveTools() error {
	ts, err := tools.Resolve(l.start.Tools)
	if err != nil {
		return err
	}
	l.tools = make(map[string]tools.Tool, len(ts))
	for _, t := range ts {
		l.tools[t.Name] = t
		l.specs = append(l.specs, &childwirev1.ToolSpec{Name: t.Name, Description: t.Description, ParametersJson: string(t.Parameters)})
	}
	return nil
}

// converse adds the tools only the executor knows (e.g. of HTTP MCP
// servers: offered to the model, run by the executor) and opens the
// conversation: the system prompt, the task's input, and the history
// replayed (see replay for what it returns).
func (l *loop) converse() (pending []*childwirev1.WireToolCall, final string, done bool) {
	l.specs = append(l.specs, l.start.ExecutorTools...)
	if p := l.start.SystemPrompt; p != "" {
		l.messages = append(l.messages, &childwirev1.Message{Role: "system", Content: p})
	}
	l.messages = append(l.messages, &childwirev1.Message{Role: "user", Content: l.start.Input})
	return l.replay(l.start.History)
}

// maxStepsOf is the bound on model turns a child given start keeps.
func maxStepsOf(start *childwirev1.Start) int {
	if n := int(start.GetMaxSteps()); n > 0 {
		return n
	}
	return DefaultMaxSteps
}

// FirstRequest is the model request a child given start sends first, when
// start alone decides it: no stdio MCP server to start (their tools join
// the request), no tool call of the history left to run, no final answer
// in the history, and a model turn left. ok is false otherwise.
//
// It is the child's own code path (resolveTools, converse) without the
// child: the executor asks the model with it before a child runs, so that
// a spawn never sits before the first model call (docs/architecture.md,
// "The first model turn before the child"), and hands the answer to the
// child's first request when it is this one. (The executor holds its
// frames in agentmesh.child.v1's types and converts: the same bytes.)
func FirstRequest(start *childwirev1.Start) (req *childwirev1.ModelRequest, ok bool) {
	if len(start.GetMcpServers()) > 0 {
		return nil, false
	}
	l := &loop{start: start}
	if err := l.resolveTools(); err != nil {
		return nil, false
	}
	pending, _, done := l.converse()
	if done || len(pending) > 0 || l.turns >= maxStepsOf(start) {
		return nil, false
	}
	return &childwirev1.ModelRequest{Id: 1, Messages: l.messages, Tools: l.specs}, true
}

// replay rebuilds the conversation from checkpointed steps. It returns the
// tool calls of the last model turn that have no result yet, or, when the
// last model turn was the final answer, that answer and done.
func (l *loop) replay(history []*childwirev1.WireStep) (pending []*childwirev1.WireToolCall, final string, done bool) {
	steps := append([]*childwirev1.WireStep(nil), history...)
	sort.SliceStable(steps, func(i, j int) bool { return steps[i].Index < steps[j].Index })
	var last *childwirev1.WireStep
	answered := map[string]bool{}
	l.next = max(l.next, NextIndex(steps))
	for _, s := range steps {
		switch s.Kind {
		case childwirev1.WireStepKind_WIRE_STEP_KIND_MODEL_TURN:
			l.turns++
			last = s
			answered = map[string]bool{}
			l.messages = append(l.messages, &childwirev1.Message{Role: "assistant", Content: s.Content, ToolCalls: s.ToolCalls})
		case childwirev1.WireStepKind_WIRE_STEP_KIND_TOOL_RESULT:
			if answered[s.ToolCallId] {
				continue // a result recorded twice (the tool re-ran after a resume)
			}
			answered[s.ToolCallId] = true
			l.messages = append(l.messages, &childwirev1.Message{Role: "tool", Content: s.Content, ToolCallId: s.ToolCallId, Name: s.ToolName})
		}
	}
	if last == nil {
		return nil, "", false
	}
	if len(last.ToolCalls) == 0 {
		return nil, last.Content, true
	}
	for _, c := range last.ToolCalls {
		if !answered[c.Id] {
			pending = append(pending, c)
		}
	}
	return pending, "", false
}

func (l *loop) runTools(calls []*childwirev1.WireToolCall) error {
	for _, c := range calls {
		ack, err := l.record(&childwirev1.WireStep{
			Kind:       childwirev1.WireStepKind_WIRE_STEP_KIND_TOOL_CALL,
			ToolCallId: c.Id,
			ToolName:   c.Name,
			Arguments:  c.Arguments,
		})
		if err != nil {
			return err
		}
		began := time.Now()
		res := toolResult{}
		switch ack.Decision {
		case childwirev1.WireToolDecision_WIRE_TOOL_DECISION_DENIED, childwirev1.WireToolDecision_WIRE_TOOL_DECISION_REJECTED:
			res.out, res.isErr = ack.Message, true
		case childwirev1.WireToolDecision_WIRE_TOOL_DECISION_PENDING_APPROVAL:
			return fmt.Errorf("%w: waiting for approval", errStopped)
		default:
			if ack.RunInExecutor {
				res, err = l.executorTool(c)
				if err != nil {
					return err
				}
			} else {
				res.out, res.isErr = l.callTool(c, ack.GetTraceparent())
			}
		}
		size := res.size
		if size == 0 {
			size = int64(len(res.out))
		}
		if _, err := l.record(&childwirev1.WireStep{
			Kind:        childwirev1.WireStepKind_WIRE_STEP_KIND_TOOL_RESULT,
			Content:     res.out,
			ToolCallId:  c.Id,
			ToolName:    c.Name,
			IsError:     res.isErr,
			Duration:    durationpb.New(time.Since(began)),
			Decision:    ack.Decision,
			Truncated:   res.truncated,
			ResultBytes: size,
		}); err != nil {
			return err
		}
		l.messages = append(l.messages, &childwirev1.Message{Role: "tool", Content: res.out, ToolCallId: c.Id, Name: c.Name})
	}
	return nil
}

type toolResult struct {
	out       string
	isErr     bool
	truncated bool
	size      int64
}

// executorTool asks the executor to run a call it allowed.
func (l *loop) executorTool(c *childwirev1.WireToolCall) (toolResult, error) {
	l.reqID++
	id := l.reqID
	if err := l.send(&childwirev1.Frame{Kind: &childwirev1.Frame_ToolRequest{ToolRequest: &childwirev1.ToolRequest{Id: id, Call: c}}}); err != nil {
		return toolResult{}, err
	}
	f, err := readFrame(l.r)
	if err != nil {
		return toolResult{}, fmt.Errorf("read tool response: %w", err)
	}
	resp := f.GetToolResponse()
	if resp == nil {
		return toolResult{}, fmt.Errorf("got %s, want tool_response", childproto.Kind(f))
	}
	if resp.Id != id {
		return toolResult{}, fmt.Errorf("tool response %d answers no request (want %d)", resp.Id, id)
	}
	return toolResult{out: resp.Output, isErr: resp.IsError, truncated: resp.Truncated, size: resp.ResultBytes}, nil
}

// callTool runs one call, traced as the span traceparent names, and
// returns the observation for the model.
func (l *loop) callTool(c *childwirev1.WireToolCall, traceparent string) (string, bool) {
	t, ok := l.tools[c.Name]
	if !ok {
		return tools.UnknownToolMessage(c.Name, l.tools), true
	}
	ctx, cancel := context.WithTimeout(context.Background(), ToolTimeout)
	defer cancel()
	env := tools.Env{Workspace: l.start.GetWorkspace(), IdempotencyKey: l.start.TaskId + ":" + c.Id, Traceparent: traceparent}
	out, err := t.Call(ctx, env, c.Arguments)
	if err != nil {
		return "error: " + err.Error(), true
	}
	return out, false
}

// model asks the executor for one model turn.
func (l *loop) model() (*childwirev1.ModelResponse, error) {
	l.reqID++
	id := l.reqID
	err := l.send(&childwirev1.Frame{Kind: &childwirev1.Frame_ModelRequest{ModelRequest: &childwirev1.ModelRequest{
		Id: id, Messages: l.messages, Tools: l.specs,
	}}})
	if err != nil {
		return nil, err
	}
	f, err := readFrame(l.r)
	if err != nil {
		return nil, fmt.Errorf("read model response: %w", err)
	}
	resp := f.GetModelResponse()
	if resp == nil {
		return nil, fmt.Errorf("got %s, want model_response", childproto.Kind(f))
	}
	if resp.Id != id {
		return nil, fmt.Errorf("model response %d answers no request (want %d)", resp.Id, id)
	}
	return resp, nil
}

// record reports a step and waits for its checkpoint; it returns the ack
// (which, for a TOOL_CALL step, carries the executor's decision).
func (l *loop) record(s *childwirev1.WireStep) (*childwirev1.StepAck, error) {
	s.Index = l.next
	s.Attempt = l.start.Attempt
	l.next++
	if err := l.send(&childwirev1.Frame{Kind: &childwirev1.Frame_Step{Step: &childwirev1.StepRecord{Step: s}}}); err != nil {
		return nil, err
	}
	f, err := readFrame(l.r)
	if err != nil {
		return nil, fmt.Errorf("read step ack: %w", err)
	}
	ack := f.GetStepAck()
	if ack == nil {
		return nil, fmt.Errorf("got %s, want step_ack", childproto.Kind(f))
	}
	if ack.Index != s.Index {
		return nil, fmt.Errorf("ack of step %d, want %d", ack.Index, s.Index)
	}
	if ack.Error != "" {
		return nil, fmt.Errorf("%w: %s", errStopped, ack.Error)
	}
	return ack, nil
}

func (l *loop) fail(reason string, permanent bool) error {
	if err := l.send(&childwirev1.Frame{Kind: &childwirev1.Frame_Failure{Failure: &childwirev1.Failure{Reason: reason, Permanent: permanent}}}); err != nil {
		return err
	}
	return errFailed
}

// readFrame reads the next frame.
func readFrame(r *childproto.Reader) (*childwirev1.Frame, error) {
	f := new(childwirev1.Frame)
	if err := r.Read(f); err != nil {
		return nil, err
	}
	return f, nil
}

func (l *loop) send(f *childwirev1.Frame) error {
	if err := l.w.Write(f); err != nil {
		return fmt.Errorf("send %s: %w", childproto.Kind(f), err)
	}
	return nil
}
