package executor

// Releasing the child while the model thinks (Config.ReleaseAfter,
// AGENTMESH_RELEASE_AFTER).
//
// An agent child spends most of its life waiting for a model answer: the
// executor makes the call (the child has no network), the child only waits
// for the response frame. While it waits it holds ~2.5–3 MiB and a process;
// with a thousand tasks in flight on a slow model that is gigabytes held by
// processes doing nothing. When a model call has not answered within
// ReleaseAfter and the child holds nothing its checkpointed steps do not,
// the executor ends the child (and removes its sandbox) and lets the call
// go on; when the answer comes, a fresh child (from the warm pool when one
// is idle) is started with the attempt's steps as its history, rebuilds the
// conversation from them (the same replay a resumed attempt does), asks for
// the same turn, and is handed the answer already received: the model is
// never asked twice, no step is recorded twice, and the attempt, its lease,
// its budgets and its wall time are unchanged. One task may so use several
// children one after the other; a child still serves one task only.
//
// A child holds something of its own, and is never released, when
//   - it started stdio MCP servers (their sessions live in its sandbox), or
//   - a tool ran inside it in this attempt, except the utility tools that
//     leave nothing behind (echo, current_time): code_run, shell and the
//     fs_* tools write to its workspace and /tmp, a tmpfs that dies with it.
// Tools the executor runs (web_fetch, sql_query, HTTP MCP, delegation) leave
// nothing in the child.
//
// Releasing trades a spawn for memory: the child taking over costs a fresh
// sandboxed process (~12 ms of CPU on the 2-core machine) for the ~2.5 MiB
// the released one held. With few children waiting that memory is needed
// by nobody, so a child is released only while more than ReleaseAbove
// (default 64) children wait for the model; the others wait on. A thousand
// tasks on a slow model still hold about that many waiting children, and a
// few dozen slow tasks pay no spawn per slow turn.

import (
	"context"
	"fmt"
	"time"

	childv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/child/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/metrics"
	"github.com/agentmesh/agentmesh/pkg/tools"
	"google.golang.org/protobuf/proto"
)

// ReleaseStats counts the children released while their model call ran,
// and the children that took over from them.
type ReleaseStats struct {
	Released int64
	Resumed  int64
}

// ReleaseStats returns what releasing did so far.
func (s *Service) ReleaseStats() ReleaseStats {
	return ReleaseStats{Released: s.released.Load(), Resumed: s.resumed.Load()}
}

// leavesNothing reports whether the child-run tool name leaves no state in
// the child (a built-in utility tool without risk).
func leavesNothing(name string) bool {
	for _, t := range tools.Builtin() {
		if t.Name == name {
			return t.Runs == tools.InChild && t.Category == tools.CategoryUtility && t.Risk == tools.RiskNone
		}
	}
	return false
}

// releasable tracks whether the child serving an attempt may be released.
type releasable struct {
	after time.Duration // 0: never
	// held: the child holds state of its own (a stdio MCP server, a tool
	// that ran in it).
	held bool
	// steps are the attempt's checkpointed steps so far: the history a
	// child that takes over starts from.
	steps []*agentmeshv1.Step
}

func newReleasable(after time.Duration, start *childv1.Start) *releasable {
	return &releasable{
		after: after,
		held:  len(start.GetMcpServers()) > 0,
		steps: append([]*agentmeshv1.Step(nil), start.GetHistory()...),
	}
}

// can reports whether the child may be released now.
func (r *releasable) can() bool { return r.after > 0 && !r.held }

// recorded notes a checkpointed step, and whether the tool call it allows
// runs in the child and leaves something there.
func (r *releasable) recorded(step *agentmeshv1.Step, v verdict) {
	r.steps = append(r.steps, step)
	if step.GetKind() != agentmeshv1.StepKind_STEP_KIND_TOOL_CALL || v.inExecutor {
		return
	}
	switch v.decision {
	case agentmeshv1.ToolDecision_TOOL_DECISION_ALLOWED, agentmeshv1.ToolDecision_TOOL_DECISION_APPROVED:
		if !leavesNothing(step.GetToolName()) {
			r.held = true
		}
	}
}

// takeOver is the Start a child taking over the attempt gets: the first
// one's, with the steps checkpointed since as its history.
func (r *releasable) takeOver(start *childv1.Start) *childv1.Start {
	next := proto.CloneOf(start)
	next.History = r.steps
	return next
}

// release ends the child, which waits for nothing but its model call's
// answer, and removes its sandbox (awaitModel).
func (a *attempt) release() {
	a.p.cleanup()
	a.s.released.Add(1)
	metrics.ChildrenReleased.Inc()
	a.log.Debug("agent process released while its model call runs", "pid", a.p.pid)
}

// takeOver starts the child that goes on with the attempt whose child was
// released, for the answer resp of its pending turn (the turn's step has
// index a.next): it replays the history checkpointed since the Start (the
// first child's) and asks for that turn, and is handed resp, held for it —
// or, when the answer is slow (keepsEarly), the answer is checkpointed
// while it starts (startKeeping) and is the last step of its history: it
// replays it and asks nothing. When no child can take over, the answer is
// kept for the next attempt (keepUnrecorded).
func (a *attempt) takeOver(ctx context.Context, resp *childv1.ModelResponse) *serveResult {
	p, kept, err := a.startSuccessor(ctx, resp)
	if kept != nil {
		a.next = kept.Index + 1
	}
	if err != nil {
		if resp.GetError() == "" && kept == nil {
			a.observed = resp // kept for the next attempt
		}
		return &serveResult{takeOverErr: err}
	}
	a.serveBy(p)
	if kept == nil {
		a.held = resp
	}
	return nil
}

// startSuccessor starts the child taking over (kept: see takeOver) and
// sends it its Start.
func (a *attempt) startSuccessor(ctx context.Context, resp *childv1.ModelResponse) (*process, *agentmeshv1.Step, error) {
	if err := context.Cause(ctx); err != nil {
		return nil, nil, err
	}
	p, kept, err := a.startKeeping(ctx, resp, a.keepsEarly(resp))
	if kept != nil {
		a.rel.recorded(kept, verdict{})
	}
	if err != nil {
		return nil, kept, fmt.Errorf("start an agent process to take over from the released one: %w", err)
	}
	_, w := p.frames()
	if err := w.Write(&childv1.Frame{Kind: &childv1.Frame_Start{Start: a.rel.takeOver(a.start)}}); err != nil {
		p.cleanup()
		return nil, kept, fmt.Errorf("start an agent process to take over from the released one: %w", err)
	}
	a.s.resumed.Add(1)
	metrics.ChildrenTakenOver.Inc()
	return p, kept, nil
}
