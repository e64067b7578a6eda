package router

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"google.golang.org/protobuf/types/known/structpb"
)

// The run API (RunService, seed 004's agent sessions) is a view of tasks:
// StartRun submits a task (its messages the input, max_steps its budget,
// model and tools narrowing the agent's settings for this task only),
// GetRun reads the task and its recorded steps and shows them as ReAct
// steps (thought, action, observation, final answer), CancelRun cancels
// the task. Nothing of a run is stored apart from its task.

// runServer implements agentmeshv1.RunService.
type runServer struct {
	agentmeshv1.UnimplementedRunServiceServer
	s *Service
}

// Limits of a run's request.
const (
	maxRunMessages   = 1000
	maxModelBytes    = 256
	maxRunTools      = 256
	maxRunSteps      = 10000
	maxRunHistory    = 10 // pages of history a GetRun reads (10,000 events)
	runPollURLPrefix = "/v1/runs/"
)

// The run statuses of seed 004.
const (
	runPending   = "pending"
	runRunning   = "running"
	runCompleted = "completed"
	runFailed    = "failed"
	runCancelled = "cancelled"
)

func (r *runServer) StartRun(ctx context.Context, req *agentmeshv1.StartRunRequest) (*agentmeshv1.StartRunResponse, error) {
	resp, err := r.s.startRun(ctx, req)
	return resp, toStatus(r.s.log, "StartRun", err)
}

func (r *runServer) GetRun(ctx context.Context, req *agentmeshv1.GetRunRequest) (*agentmeshv1.GetRunResponse, error) {
	sess, err := r.s.runSession(ctx, taskstate.NormalizeTaskID(req.GetSessionId()), "session_id")
	if err != nil {
		return nil, toStatus(r.s.log, "GetRun", err)
	}
	return &agentmeshv1.GetRunResponse{Session: sess}, nil
}

func (r *runServer) CancelRun(ctx context.Context, req *agentmeshv1.CancelRunRequest) (*agentmeshv1.CancelRunResponse, error) {
	id := taskstate.NormalizeTaskID(req.GetSessionId())
	if err := checkID("session_id", id); err != nil {
		return nil, toStatus(r.s.log, "CancelRun", err)
	}
	if _, err := r.s.cancelTask(ctx, &agentmeshv1.CancelTaskRequest{Id: id, Reason: req.GetReason()}); err != nil {
		return nil, toStatus(r.s.log, "CancelRun", err)
	}
	sess, err := r.s.runSession(ctx, id, "session_id")
	if err != nil {
		return nil, toStatus(r.s.log, "CancelRun", err)
	}
	return &agentmeshv1.CancelRunResponse{Session: sess}, nil
}

// startRun validates the run, submits its task and answers where to poll.
func (s *Service) startRun(ctx context.Context, req *agentmeshv1.StartRunRequest) (*agentmeshv1.StartRunResponse, error) {
	input, err := runInput(req.GetMessages(), s.cfg.MaxInputBytes)
	if err != nil {
		return nil, err
	}
	if err := checkRunOverrides(req); err != nil {
		return nil, err
	}
	sub := &agentmeshv1.SubmitTaskRequest{
		Title: req.GetTitle(), Input: input, Agent: req.GetAgent(), RequiredSkills: req.GetRequiredSkills(),
		IdempotencyKey: req.GetIdempotencyKey(),
	}
	if n := req.GetMaxSteps(); n > 0 {
		sub.Budget = &agentmeshv1.Budget{MaxSteps: n}
	}
	resp, err := s.submitWith(ctx, sub, func(spec *agentmeshv1.Agent) error { return narrowForRun(spec, req) })
	if err != nil {
		return nil, err
	}
	id := resp.GetTask().GetId()
	return &agentmeshv1.StartRunResponse{SessionId: id, Status: runStatus(resp.GetTask().GetStatus()), PollUrl: runPollURLPrefix + id}, nil
}

// runInput turns a run's messages into its task's input: one message is
// the input; more are a transcript, one "role: content" block each. The
// last message must be the user's.
func runInput(msgs []*agentmeshv1.RunMessage, maxBytes int) (string, error) {
	switch {
	case len(msgs) == 0:
		return "", bus.FieldError("messages", "required: at least one message, the last from the user")
	case len(msgs) > maxRunMessages:
		return "", bus.FieldError("messages", "%d messages is over the limit of %d", len(msgs), maxRunMessages)
	}
	size := 0
	for i, m := range msgs {
		field := fmt.Sprintf("messages[%d]", i)
		switch m.GetRole() {
		case "user", "assistant", "system":
		default:
			return "", bus.FieldError(field+".role", "want user, assistant or system, got %.40q", m.GetRole())
		}
		if strings.TrimSpace(m.GetContent()) == "" {
			return "", bus.FieldError(field+".content", "required")
		}
		if err := printableText(field+".content", m.GetContent()); err != nil {
			return "", err
		}
		size += len(m.GetRole()) + len(m.GetContent()) + 4
	}
	if last := msgs[len(msgs)-1]; last.GetRole() != "user" {
		return "", bus.FieldError(fmt.Sprintf("messages[%d].role", len(msgs)-1), "the last message must be the user's, got %q", last.GetRole())
	}
	if size > maxBytes {
		return "", tooLarge("messages", "%d bytes is over the limit of %d bytes", size, maxBytes)
	}
	if len(msgs) == 1 {
		return msgs[0].GetContent(), nil
	}
	var b strings.Builder
	for i, m := range msgs {
		if i > 0 {
			b.WriteString("\n\n")
		}
		b.WriteString(m.GetRole() + ": " + m.GetContent())
	}
	return b.String(), nil
}

// printableText is valid UTF-8 without control characters other than
// newlines and tabs.
func printableText(field, s string) error {
	return printable(field, strings.NewReplacer("\n", " ", "\r", " ", "\t", " ").Replace(s))
}

// checkRunOverrides checks the fields that narrow the agent.
func checkRunOverrides(req *agentmeshv1.StartRunRequest) error {
	if m := req.GetModel(); m != "" {
		if len(m) > maxModelBytes || strings.TrimSpace(m) != m {
			return bus.FieldError("model", "want a model name of at most %d bytes without surrounding spaces", maxModelBytes)
		}
		if err := printable("model", m); err != nil {
			return err
		}
	}
	if len(req.GetTools()) > maxRunTools {
		return bus.FieldError("tools", "%d tools is over the limit of %d", len(req.GetTools()), maxRunTools)
	}
	for i, t := range req.GetTools() {
		if t == "" || len(t) > 128 {
			return bus.FieldError(fmt.Sprintf("tools[%d]", i), "want a tool name")
		}
	}
	if n := req.GetMaxSteps(); n < 0 || n > maxRunSteps {
		return bus.FieldError("max_steps", "must be between 0 and %d", maxRunSteps)
	}
	return nil
}

// narrowForRun applies a run's model and tools to its task's agent
// settings: the model replaces the agent's model name (same endpoint, same
// key); tools keep only those named, each of which the agent must have.
func narrowForRun(spec *agentmeshv1.Agent, req *agentmeshv1.StartRunRequest) error {
	if m := req.GetModel(); m != "" {
		if spec.Model == nil {
			spec.Model = &agentmeshv1.ModelSettings{}
		}
		spec.Model.Model = m
	}
	if len(req.GetTools()) == 0 {
		return nil
	}
	keep := make([]string, 0, len(req.GetTools()))
	for _, t := range req.GetTools() {
		if !slices.Contains(spec.GetTools(), t) {
			return &bus.Error{Code: bus.CodeInvalidArgument, Field: "tools",
				Message: fmt.Sprintf("agent %q has no tool %q (a run may narrow its agent's tools, never add one; its tools: %s)", spec.GetName(), t, strings.Join(spec.GetTools(), ", "))}
		}
		if !slices.Contains(keep, t) {
			keep = append(keep, t)
		}
	}
	spec.Tools = keep
	return nil
}

// runStatus maps a task's status onto seed 004's session status.
func runStatus(st agentmeshv1.TaskStatus) string {
	switch st {
	case taskstate.Running:
		return runRunning
	case taskstate.Completed:
		return runCompleted
	case taskstate.Failed:
		return runFailed
	case taskstate.Cancelled:
		return runCancelled
	}
	return runPending
}

// runSession reads the task and its steps (field names the id's field in
// errors).
func (s *Service) runSession(ctx context.Context, id, field string) (*agentmeshv1.RunSession, error) {
	if err := checkID(field, id); err != nil {
		return nil, err
	}
	task, err := s.getTask(ctx, id)
	if err != nil {
		return nil, err
	}
	var steps []*agentmeshv1.Step
	after := int64(0)
	for page := 0; page < maxRunHistory; page++ {
		hist, err := s.history(ctx, id, after, historyPage)
		if err != nil {
			return nil, err
		}
		for _, ev := range hist.GetEvents() {
			after = ev.GetSeq()
			if ev.GetType() == agentmeshv1.EventType_EVENT_TYPE_STEP && ev.GetStep() != nil {
				steps = append(steps, ev.GetStep())
			}
		}
		if len(hist.GetEvents()) < historyPage || after >= hist.GetLastSeq() {
			break
		}
	}
	return buildSession(task, steps), nil
}

// buildSession shows a task and its recorded steps as a run: each tool
// call of a model turn is a step (the turn's text its thought, the call
// its action, the tool's result its observation); a turn without tool
// calls is a step of thought; a completed task's last step carries the
// final answer.
func buildSession(task *agentmeshv1.Task, steps []*agentmeshv1.Step) *agentmeshv1.RunSession {
	sess := &agentmeshv1.RunSession{
		SessionId: task.GetId(), OrgId: task.GetOrg(), Status: runStatus(task.GetStatus()),
		Totals: task.GetUsage(), Agent: task.GetAgent(), Error: task.GetError(), TaskStatus: task.GetStatus(),
		CreatedAt: task.GetCreatedAt(), FinishedAt: task.GetFinishedAt(),
	}
	if sess.Totals == nil {
		sess.Totals = &agentmeshv1.Usage{}
	}
	byCall := map[string]*agentmeshv1.RunStep{}
	seen := map[int32]bool{}
	for _, st := range steps {
		if seen[st.GetIndex()] { // a step recorded again by a retried attempt
			continue
		}
		seen[st.GetIndex()] = true
		switch st.GetKind() {
		case agentmeshv1.StepKind_STEP_KIND_MODEL_TURN:
			if len(st.GetToolCalls()) == 0 {
				sess.Steps = append(sess.Steps, &agentmeshv1.RunStep{Thought: st.GetContent()})
			}
			for i, tc := range st.GetToolCalls() {
				rs := &agentmeshv1.RunStep{Action: runAction(tc)}
				if i == 0 {
					rs.Thought = st.GetContent()
				}
				byCall[tc.GetId()] = rs
				sess.Steps = append(sess.Steps, rs)
			}
		case agentmeshv1.StepKind_STEP_KIND_TOOL_RESULT:
			if rs := byCall[st.GetToolCallId()]; rs != nil {
				rs.Observation, rs.ObservationIsError = st.GetContent(), st.GetIsError()
			}
		}
	}
	if task.GetStatus() == taskstate.Completed {
		sess.FinalAnswer = task.GetResult()
		n := len(sess.Steps)
		if n == 0 || sess.Steps[n-1].GetAction() != nil {
			sess.Steps = append(sess.Steps, &agentmeshv1.RunStep{})
		}
		last := sess.Steps[len(sess.Steps)-1]
		last.IsFinal, last.FinalAnswer = true, task.GetResult()
	}
	for i, rs := range sess.Steps {
		rs.Index = int32(i + 1)
	}
	return sess
}

// runAction is a tool call as a run's action: its arguments as a JSON
// object when they are one.
func runAction(tc *agentmeshv1.ToolCall) *agentmeshv1.RunAction {
	a := &agentmeshv1.RunAction{Tool: tc.GetName(), ArgumentsJson: tc.GetArguments(), Id: tc.GetId()}
	var obj map[string]any
	if json.Unmarshal([]byte(tc.GetArguments()), &obj) == nil && obj != nil {
		if st, err := structpb.NewStruct(obj); err == nil {
			a.Args = st
		}
	}
	return a
}
