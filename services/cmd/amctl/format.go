package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// maxShown bounds tool arguments and results in the event view.
const maxShown = 1000

// printEvent writes one event as one entry: "#seq  kind  detail".
func printEvent(w io.Writer, ev *agentmeshv1.TaskEvent) {
	kind, detail := describeEvent(ev)
	head := fmt.Sprintf("#%-4d %-10s ", ev.GetSeq(), kind)
	lines := strings.Split(strings.TrimRight(detail, "\n"), "\n")
	fmt.Fprintln(w, strings.TrimRight(head+lines[0], " "))
	pad := strings.Repeat(" ", len(head))
	for _, l := range lines[1:] {
		fmt.Fprintln(w, strings.TrimRight(pad+l, " "))
	}
}

// describeEvent returns an event's kind word and what to say about it.
func describeEvent(ev *agentmeshv1.TaskEvent) (string, string) {
	switch ev.GetType() {
	case agentmeshv1.EventType_EVENT_TYPE_CREATED:
		return "created", ""
	case agentmeshv1.EventType_EVENT_TYPE_STATUS:
		var parts []string
		switch ev.GetStatus() {
		case taskstate.Assigned:
			parts = append(parts, fmt.Sprintf("attempt %d", ev.GetAttempt()))
		case taskstate.Running:
			if ev.GetNode() != "" {
				parts = append(parts, "on "+ev.GetNode())
			}
		}
		if ev.GetReason() != "" && ev.GetStatus() != taskstate.Completed {
			parts = append(parts, oneLine(ev.GetReason()))
		}
		if a := ev.GetApproval(); a != nil && a.GetStatus() == agentmeshv1.ApprovalStatus_APPROVAL_STATUS_PENDING {
			parts = append(parts, fmt.Sprintf("decide with: amctl approvals approve|reject %s", a.GetId()))
		}
		return taskstate.Name(ev.GetStatus()), strings.Join(parts, ": ")
	case agentmeshv1.EventType_EVENT_TYPE_STEP:
		return describeStep(ev.GetStep())
	case agentmeshv1.EventType_EVENT_TYPE_DEPENDENCY:
		return "dependency", oneLine(ev.GetReason())
	case agentmeshv1.EventType_EVENT_TYPE_UPDATED:
		return "updated", oneLine(strings.TrimPrefix(ev.GetReason(), "updated: "))
	case agentmeshv1.EventType_EVENT_TYPE_PROPOSAL:
		return "proposal", describeProposal(ev)
	}
	return "event", ev.GetType().String()
}

func describeStep(s *agentmeshv1.Step) (string, string) {
	switch s.GetKind() {
	case agentmeshv1.StepKind_STEP_KIND_MODEL_TURN:
		text := strings.TrimSpace(s.GetContent())
		if text == "" && len(s.GetToolCalls()) > 0 {
			var names []string
			for _, tc := range s.GetToolCalls() {
				names = append(names, tc.GetName())
			}
			text = "(calls " + strings.Join(names, ", ") + ")"
		}
		if u := s.GetUsage(); u.GetTotalTokens() > 0 {
			text += fmt.Sprintf("  [%d tokens]", u.GetTotalTokens())
		}
		return "model", text
	case agentmeshv1.StepKind_STEP_KIND_TOOL_CALL:
		return "tool", fmt.Sprintf("%s %s", s.GetToolName(), clip(oneLine(s.GetArguments()), maxShown))
	case agentmeshv1.StepKind_STEP_KIND_TOOL_RESULT:
		kind := "result"
		if s.GetIsError() {
			kind = "tool error"
		}
		return kind, fmt.Sprintf("%s → %s", s.GetToolName(), clip(strings.TrimSpace(s.GetContent()), maxShown))
	}
	return "step", clip(s.GetContent(), maxShown)
}

// clip shortens s to n bytes (on a rune boundary) and says how much is left.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !isRuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%s… (%d more bytes)", s[:cut], len(s)-cut)
}

func isRuneStart(b byte) bool { return b&0xC0 != 0x80 }

// printTask writes a task as "field: value" lines.
func printTask(w io.Writer, t *agentmeshv1.Task) {
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', 0)
	row := func(k, v string) {
		if v != "" {
			fmt.Fprintf(tw, "%s:\t%s\n", k, v)
		}
	}
	row("id", t.GetId())
	row("status", taskstate.Name(t.GetStatus()))
	row("agent", t.GetAgent())
	routing := routingSummary(t.GetRouting())
	if p := t.GetPendingProposal(); p != nil && p.GetStatus() != agentmeshv1.ProposalStatus_PROPOSAL_STATUS_PENDING && t.GetRouting().GetMethod() == "proposal" {
		routing += "; " + proposalStatusName(p.GetStatus())
		if by := p.GetDecidedBy(); by != "" {
			routing += " by " + by
		}
	}
	row("routing", routing)
	row("skills", strings.Join(t.GetRequiredSkills(), ", "))
	row("priority", priorityName(t.GetPriority()))
	row("title", t.GetTitle())
	row("created", when(t.GetCreatedAt()))
	row("started", when(t.GetStartedAt()))
	row("finished", when(t.GetFinishedAt()))
	if t.GetAttempt() > 0 {
		row("attempt", fmt.Sprint(t.GetAttempt()))
	}
	row("node", t.GetNode())
	row("isolation", t.GetIsolation())
	if t.GetRetryCount() > 0 {
		row("retries", fmt.Sprint(t.GetRetryCount()))
	}
	if t.GetNextRetryAt() != nil && t.GetStatus() == taskstate.Queued {
		row("next retry", when(t.GetNextRetryAt()))
	}
	if t.GetLastError() != "" {
		row("last failure", taskstate.KindName(t.GetLastFailureKind())+": "+clip(t.GetLastError(), 200))
	}
	if t.GetStepCount() > 0 {
		row("steps", fmt.Sprint(t.GetStepCount()))
	}
	if u := t.GetUsage(); u.GetTotalTokens() > 0 {
		row("tokens", fmt.Sprintf("%d (prompt %d, completion %d)", u.GetTotalTokens(), u.GetPromptTokens(), u.GetCompletionTokens()))
	}
	costRows(row, t)
	for _, k := range sortedKeys(t.GetMetadata()) {
		row("meta "+k, t.GetMetadata()[k])
	}
	graphRows(row, t)
	row("events", fmt.Sprint(t.GetLastEventSeq()))
	_ = tw.Flush()
	block(w, "input", t.GetInput())
	block(w, "result", t.GetResult())
	block(w, "error", t.GetError())
}

// block prints a multi-line field under its name.
func block(w io.Writer, name, text string) {
	if text == "" {
		return
	}
	fmt.Fprintf(w, "%s:\n", name)
	for _, l := range strings.Split(strings.TrimRight(text, "\n"), "\n") {
		fmt.Fprintf(w, "  %s\n", l)
	}
}

func when(ts *timestamppb.Timestamp) string {
	if ts == nil {
		return ""
	}
	return ts.AsTime().Local().Format(time.RFC3339)
}

// printAgent writes an agent as "field: value" lines.
func printAgent(w io.Writer, a *agentmeshv1.Agent) {
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', 0)
	row := func(k, v string) {
		if v != "" {
			fmt.Fprintf(tw, "%s:\t%s\n", k, v)
		}
	}
	row("name", a.GetName())
	row("description", a.GetDescription())
	row("model", modelOf(a))
	row("base url", a.GetModel().GetBaseUrl())
	if a.GetModel() != nil && a.GetModel().Temperature != nil {
		row("temperature", fmt.Sprint(a.GetModel().GetTemperature()))
	}
	if a.GetModel().GetMaxTokens() > 0 {
		row("max tokens", fmt.Sprint(a.GetModel().GetMaxTokens()))
	}
	row("tools", strings.Join(a.GetTools(), ", "))
	row("skills", strings.Join(a.GetSkills(), ", "))
	row("max concurrency", limitOf(a.GetMaxConcurrency()))
	if a.GetMaxSteps() > 0 {
		row("max steps", fmt.Sprint(a.GetMaxSteps()))
	} else {
		row("max steps", fmt.Sprintf("%d (the executor's default; AGENTMESH_MAX_STEPS changes it)", defaultMaxSteps))
	}
	row("retries", retriesOf(a.GetRetryPolicy()))
	if d := a.GetQueueTimeout().AsDuration(); d > 0 {
		row("queue timeout", d.String())
	} else {
		row("queue timeout", "no limit")
	}
	if d := a.GetApprovalTimeout().AsDuration(); d > 0 {
		row("approval timeout", d.String())
	} else {
		row("approval timeout", defaultApprovalTimeout.String()+" (default)")
	}
	if p := a.GetRoutingPriority(); p > 0 {
		row("routing priority", fmt.Sprint(p))
	} else {
		row("routing priority", "50 (default)")
	}
	if b := a.GetBudget(); b != nil {
		row("budget", budgetOf(b))
	}
	for _, tool := range sortedKeys(a.GetToolPolicies()) {
		row("tool policy "+tool, toolPolicyName(a.GetToolPolicies()[tool]))
	}
	for _, m := range a.GetMcpServers() {
		row("mcp server "+m.GetName(), mcpOf(m))
	}
	row("version", fmt.Sprint(a.GetVersion()))
	row("created", when(a.GetCreatedAt()))
	row("updated", when(a.GetUpdatedAt()))
	_ = tw.Flush()
	block(w, "system prompt", a.GetSystemPrompt())
}

func modelOf(a *agentmeshv1.Agent) string {
	if m := a.GetModel().GetModel(); m != "" {
		return m
	}
	return "(executor default)"
}

// Defaults the server applies to an agent's unset fields (amctl prints
// them so "agents get" shows what a task really gets).
const (
	// defaultMaxSteps is executor.DefaultMaxSteps (checked by a test).
	defaultMaxSteps        = 16
	defaultApprovalTimeout = time.Hour
)

// retriesOf describes the effective retry policy of an agent's tasks.
func retriesOf(p *agentmeshv1.RetryPolicy) string {
	eff := taskstate.MergeRetryPolicy(taskstate.DefaultRetryPolicy(), p)
	s := fmt.Sprintf("%d (backoff %s ×%g up to %s)", eff.GetMaxAttempts()-1,
		eff.GetInitialBackoff().AsDuration(), eff.GetMultiplier(), eff.GetMaxBackoff().AsDuration())
	if p.GetMaxAttempts() == 0 {
		s += " (default)"
	}
	return s
}

func budgetOf(b *agentmeshv1.Budget) string {
	var parts []string
	if b.GetMaxSteps() > 0 {
		parts = append(parts, fmt.Sprintf("%d steps", b.GetMaxSteps()))
	}
	if b.GetMaxTokens() > 0 {
		parts = append(parts, fmt.Sprintf("%d tokens", b.GetMaxTokens()))
	}
	if b.GetMaxCostUsd() > 0 {
		parts = append(parts, fmt.Sprintf("$%g", b.GetMaxCostUsd()))
	}
	if d := b.GetMaxWallTime().AsDuration(); d > 0 {
		parts = append(parts, d.String()+" wall time")
	}
	if len(parts) == 0 {
		return "no limit"
	}
	return strings.Join(parts, ", ")
}

func toolPolicyName(p agentmeshv1.ToolPolicy) string {
	return strings.ReplaceAll(strings.ToLower(strings.TrimPrefix(p.String(), "TOOL_POLICY_")), "_", " ")
}

// mcpOf describes an MCP server: its URL or command, never its env
// values (they may hold secrets).
func mcpOf(m *agentmeshv1.McpServer) string {
	s := m.GetUrl()
	if s == "" {
		s = strings.Join(m.GetCommand(), " ")
	}
	if len(m.GetEnv()) > 0 {
		s += " (env " + strings.Join(sortedKeys(m.GetEnv()), ", ") + ")"
	}
	if m.GetRequireApproval() {
		s += ", every call needs approval"
	}
	return s
}

func limitOf(n int32) string {
	if n == 0 {
		return "no limit"
	}
	return fmt.Sprint(n)
}
