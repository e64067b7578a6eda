package executor

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	childv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/child/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/tools"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// ExecResult is what a tool run by the executor returns.
type ExecResult struct {
	Output    string
	IsError   bool
	Truncated bool
	// Size of the full output before truncation (0 = len(Output)).
	Size int64
}

// ExecFunc runs a tool on the child's behalf, with arguments that passed
// the tool's schema and the gate's policy. approved is true when a person
// approved this very call (a tool may then do what it otherwise refuses,
// e.g. sql_query's writes).
type ExecFunc func(ctx context.Context, env tools.Env, args json.RawMessage, approved bool) (ExecResult, error)

// ExecToolTimeout bounds one tool call run by the executor.
const ExecToolTimeout = 60 * time.Second

// gate is the executor's tool gate for one attempt of one task: every tool
// call the child reports (a TOOL_CALL step) is checked here before it runs —
// is it one of the agent's tools, do its arguments satisfy the schema, what
// does policy say (the tool's approval rule, its per-call assessment, the
// agent's overrides), was it approved or rejected by a person — and the
// decision is recorded in the step (the audit trail) and sent back in the
// StepAck. A tool that runs in the executor runs only if the gate allowed
// that exact call, and only once.
type gate struct {
	task *agentmeshv1.Task
	// names of the tools the agent may use.
	allowed map[string]tools.Tool
	// decided approvals of this task's earlier attempts, by tool call id.
	approvals map[string]*agentmeshv1.Approval
	// executor-side implementations, by tool name.
	exec map[string]ExecFunc
	// calls allowed to run in the executor and not run yet, by tool call id.
	pending map[string]allowedCall
	// the decision on every call judged in this attempt, by tool call id.
	decided map[string]agentmeshv1.ToolDecision
	now     func() time.Time
}

type allowedCall struct {
	name, args string
	approved   bool
}

func newGate(task *agentmeshv1.Task, approvals map[string]*agentmeshv1.Approval, exec map[string]ExecFunc, extra []tools.Tool) *gate {
	g := &gate{
		task: task, approvals: approvals, exec: exec,
		allowed: map[string]tools.Tool{}, pending: map[string]allowedCall{}, now: time.Now,
		decided: map[string]agentmeshv1.ToolDecision{},
	}
	for _, name := range task.GetAgentSpec().GetTools() {
		if t, ok := tools.Lookup(name); ok {
			g.allowed[name] = t
		}
	}
	for _, t := range extra {
		g.allowed[t.Name] = t
	}
	return g
}

// addTools lets more tools through the gate (tools of MCP servers the
// child started).
func (g *gate) addTools(ts ...tools.Tool) {
	for _, t := range ts {
		g.allowed[t.Name] = t
	}
}

// verdict is the gate's decision on one call.
type verdict struct {
	decision agentmeshv1.ToolDecision
	// message is the observation for the model when the call does not run.
	message string
	// inExecutor: the executor runs the call (ToolRequest).
	inExecutor bool
	// approval requested (decision PENDING_APPROVAL).
	approval *agentmeshv1.Approval
}

// decide judges a TOOL_CALL step and fills its audit fields.
func (g *gate) decide(step *agentmeshv1.Step) verdict {
	sum := sha256.Sum256([]byte(step.Arguments))
	step.ArgumentsSha256 = hex.EncodeToString(sum[:])
	step.IdempotencyKey = g.task.Id + ":" + step.ToolCallId
	v := g.judge(step)
	step.Decision = v.decision
	g.decided[step.ToolCallId] = v.decision
	if v.approval != nil {
		step.ApprovalId = v.approval.Id
	}
	if v.decision == agentmeshv1.ToolDecision_TOOL_DECISION_ALLOWED || v.decision == agentmeshv1.ToolDecision_TOOL_DECISION_APPROVED {
		if v.inExecutor {
			g.pending[step.ToolCallId] = allowedCall{name: step.ToolName, args: step.Arguments,
				approved: v.decision == agentmeshv1.ToolDecision_TOOL_DECISION_APPROVED}
		}
	}
	return v
}

func (g *gate) judge(step *agentmeshv1.Step) verdict {
	deny := func(format string, args ...any) verdict {
		return verdict{decision: agentmeshv1.ToolDecision_TOOL_DECISION_DENIED, message: "error: " + fmt.Sprintf(format, args...)}
	}
	t, ok := g.allowed[step.ToolName]
	if !ok {
		return verdict{decision: agentmeshv1.ToolDecision_TOOL_DECISION_DENIED, message: tools.UnknownToolMessage(step.ToolName, g.allowed)}
	}
	step.Risk = string(t.Risk)
	if err := t.Check(step.Arguments); err != nil {
		return deny("%v (nothing ran; fix the arguments and call again)", err)
	}
	if why := memoryDenied(g.task, t.Name, step.Arguments); why != "" {
		return deny("%s (nothing ran)", why) // memory.go
	}
	inExec := t.Runs == tools.InExecutor
	if inExec && g.exec[t.Name] == nil {
		return deny("tool %q is not available on this executor (it is not configured)", t.Name)
	}
	needs, reason := t.NeedsApproval, "tool "+t.Name+" needs approval"
	if t.Assess != nil {
		args := step.Arguments
		if strings.TrimSpace(args) == "" {
			args = "{}"
		}
		a := t.Assess(json.RawMessage(args))
		if a.Risk != "" {
			step.Risk = string(a.Risk)
		}
		if a.Deny {
			return deny("%s: %s", t.Name, a.Reason)
		}
		if a.NeedsApproval {
			needs = true
			if a.Reason != "" {
				reason = a.Reason
			}
		}
	}
	switch g.task.GetAgentSpec().GetToolPolicies()[t.Name] {
	case agentmeshv1.ToolPolicy_TOOL_POLICY_DENY:
		return deny("the agent's policy does not allow tool %q", t.Name)
	case agentmeshv1.ToolPolicy_TOOL_POLICY_ALLOW:
		needs = false
	case agentmeshv1.ToolPolicy_TOOL_POLICY_REQUIRE_APPROVAL:
		needs, reason = true, "the agent's policy requires approval for "+t.Name
	}
	if !needs {
		return verdict{decision: agentmeshv1.ToolDecision_TOOL_DECISION_ALLOWED, inExecutor: inExec}
	}
	if a := g.approvals[step.ToolCallId]; a != nil {
		if !decidedCall(a, step) {
			return deny("call %q is not the call a person decided (approval %s was for tool %q with arguments SHA-256 %s; this call is tool %q with %s); it did not run",
				step.ToolCallId, a.Id, a.Tool, approvalSum(a), step.ToolName, step.ArgumentsSha256)
		}
		switch a.Status {
		case agentmeshv1.ApprovalStatus_APPROVAL_STATUS_APPROVED:
			return verdict{decision: agentmeshv1.ToolDecision_TOOL_DECISION_APPROVED, inExecutor: inExec, approval: a}
		case agentmeshv1.ApprovalStatus_APPROVAL_STATUS_REJECTED:
			msg := "a person rejected this call"
			if a.Comment != "" {
				msg += ": " + a.Comment
			}
			return verdict{decision: agentmeshv1.ToolDecision_TOOL_DECISION_REJECTED, approval: a,
				message: msg + " (it did not run; do something else or answer without it)"}
		}
	}
	timeout := DefaultApprovalTimeout
	if d := g.task.GetAgentSpec().GetApprovalTimeout(); d != nil && d.AsDuration() > 0 {
		timeout = d.AsDuration()
	}
	return verdict{decision: agentmeshv1.ToolDecision_TOOL_DECISION_PENDING_APPROVAL, approval: &agentmeshv1.Approval{
		Status: agentmeshv1.ApprovalStatus_APPROVAL_STATUS_PENDING, ToolCallId: step.ToolCallId, Tool: t.Name,
		Arguments: step.Arguments, ArgumentsSha256: step.ArgumentsSha256, Risk: step.Risk, Reason: reason,
		Deadline: timestamppb.New(g.now().Add(timeout)),
	}}
}

// approvalSum is the SHA-256 (hex) of the arguments an approval decided:
// the one the record fixed, else computed from the arguments it holds.
func approvalSum(a *agentmeshv1.Approval) string {
	if a.GetArgumentsSha256() != "" {
		return a.GetArgumentsSha256()
	}
	sum := sha256.Sum256([]byte(a.GetArguments()))
	return hex.EncodeToString(sum[:])
}

// decidedCall reports whether step is exactly the call approval a was
// decided for: the same tool and the same SHA-256 of the exact arguments.
// Anything else (a child that resumes with other arguments under the same
// call id) is not covered by the decision.
func decidedCall(a *agentmeshv1.Approval, step *agentmeshv1.Step) bool {
	return a.GetTool() == step.ToolName && subtle.ConstantTimeCompare([]byte(approvalSum(a)), []byte(step.ArgumentsSha256)) == 1
}

// result checks a TOOL_RESULT step against the gate's record and stamps
// the decision the call ran (or was refused) under. A result for a call the
// gate never judged, or for a call it did not let run (pending approval),
// is a protocol error.
func (g *gate) result(step *agentmeshv1.Step) error {
	d, ok := g.decided[step.ToolCallId]
	if !ok {
		return fmt.Errorf("tool result for call %q, which the executor never judged", step.ToolCallId)
	}
	if d == agentmeshv1.ToolDecision_TOOL_DECISION_PENDING_APPROVAL {
		return fmt.Errorf("tool result for call %q, which waits for approval", step.ToolCallId)
	}
	step.Decision = d
	if d == agentmeshv1.ToolDecision_TOOL_DECISION_DENIED || d == agentmeshv1.ToolDecision_TOOL_DECISION_REJECTED {
		step.IsError = true
	}
	return nil
}

// DefaultApprovalTimeout is how long a pending approval waits when the
// agent sets no approval_timeout.
const DefaultApprovalTimeout = time.Hour

// run runs a call the gate allowed to run in the executor, once. An error
// (errUnsettled) means the call must not be answered: whether it had its
// effect is not known, and the next attempt presents it again.
func (g *gate) run(ctx context.Context, req *childv1.ToolRequest) (*childv1.ToolResponse, error) {
	c := req.GetCall()
	resp := &childv1.ToolResponse{Id: req.GetId(), IsError: true}
	a, ok := g.pending[c.GetId()]
	if !ok || a.name != c.GetName() || a.args != c.GetArguments() {
		resp.Output = fmt.Sprintf("error: tool call %q was not allowed by the executor", c.GetId())
		return resp, nil
	}
	delete(g.pending, c.GetId())
	fn := g.exec[a.name]
	args := a.args
	if strings.TrimSpace(args) == "" {
		args = "{}"
	}
	ctx, cancel := context.WithTimeout(ctx, ExecToolTimeout)
	defer cancel()
	res, err := fn(ctx, tools.Env{IdempotencyKey: g.task.Id + ":" + c.GetId()}, json.RawMessage(args), a.approved)
	if errors.Is(err, errUnsettled) {
		return nil, err
	}
	if err != nil {
		resp.Output = "error: " + err.Error()
		resp.ResultBytes = int64(len(resp.Output))
		return resp, nil
	}
	out := res.Output
	truncated := res.Truncated
	if len(out) > tools.MaxOutput {
		out, truncated = out[:tools.MaxOutput]+"\n[output cut at 256 KiB]", true
	}
	size := res.Size
	if size == 0 {
		size = int64(len(res.Output))
	}
	return &childv1.ToolResponse{Id: req.GetId(), Output: out, IsError: res.IsError, Truncated: truncated, ResultBytes: size}, nil
}
