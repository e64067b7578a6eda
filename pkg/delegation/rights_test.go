package delegation

import (
	"slices"
	"testing"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
)

const (
	unset   = agentmeshv1.ToolPolicy_TOOL_POLICY_UNSPECIFIED
	byTool  = agentmeshv1.ToolPolicy_TOOL_POLICY_DEFAULT
	allowed = agentmeshv1.ToolPolicy_TOOL_POLICY_ALLOW
	gated   = agentmeshv1.ToolPolicy_TOOL_POLICY_REQUIRE_APPROVAL
	denied  = agentmeshv1.ToolPolicy_TOOL_POLICY_DENY
)

func TestStricter(t *testing.T) {
	order := []agentmeshv1.ToolPolicy{allowed, unset, gated, denied}
	for i, a := range order {
		for j, b := range order {
			want := order[max(i, j)]
			if got := Stricter(a, b); got != want {
				t.Errorf("Stricter(%v, %v) = %v, want %v", a, b, got, want)
			}
		}
	}
	if got := Stricter(byTool, allowed); got != unset {
		t.Errorf("Stricter(DEFAULT, ALLOW) = %v, want the tool's default (unset)", got)
	}
	if got := Stricter(agentmeshv1.ToolPolicy(99), allowed); got != unset {
		t.Errorf("an unknown policy against ALLOW = %v, want the tool's default", got)
	}
}

// The matrix of the issue: the parent's shell absent, denied or gated
// against the target's allowed or gated: never a laxer right than both.
func TestNarrowShellMatrix(t *testing.T) {
	parent := func(p agentmeshv1.ToolPolicy, has bool) *agentmeshv1.Agent {
		a := &agentmeshv1.Agent{Name: "p", Tools: []string{"call_agent"}}
		if has {
			a.Tools = append(a.Tools, "shell")
			a.ToolPolicies = map[string]agentmeshv1.ToolPolicy{"shell": p}
		}
		return a
	}
	target := func(p agentmeshv1.ToolPolicy) *agentmeshv1.Agent {
		return &agentmeshv1.Agent{Name: "t", Tools: []string{"shell", "echo"}, ToolPolicies: map[string]agentmeshv1.ToolPolicy{"shell": p}}
	}
	for _, tc := range []struct {
		name      string
		parent    *agentmeshv1.Agent
		target    agentmeshv1.ToolPolicy
		wantShell bool
		want      agentmeshv1.ToolPolicy
	}{
		{"absent x allowed", parent(unset, false), allowed, false, 0},
		{"absent x gated", parent(unset, false), gated, false, 0},
		{"denied x allowed", parent(denied, true), allowed, false, 0},
		{"denied x gated", parent(denied, true), gated, false, 0},
		{"gated x allowed", parent(gated, true), allowed, true, gated},
		{"gated x gated", parent(gated, true), gated, true, gated},
		{"default x allowed", parent(unset, true), allowed, true, unset},
		{"allowed x allowed", parent(allowed, true), allowed, true, allowed},
		{"allowed x gated", parent(allowed, true), gated, true, gated},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tg := target(tc.target)
			got := Narrow(tg, tc.parent)
			if has := slices.Contains(got.Tools, "shell"); has != tc.wantShell {
				t.Fatalf("tools %v: shell there = %v, want %v", got.Tools, has, tc.wantShell)
			}
			if slices.Contains(got.Tools, "echo") {
				t.Errorf("tools %v: echo, which the parent lacks", got.Tools)
			}
			if tc.wantShell && got.ToolPolicies["shell"] != tc.want {
				t.Errorf("shell policy %v, want %v", got.ToolPolicies["shell"], tc.want)
			}
			if tg.ToolPolicies["shell"] != tc.target || len(tg.Tools) != 2 {
				t.Errorf("target changed: %v", tg)
			}
			// Narrowing again changes nothing (state narrows what the
			// executor narrowed).
			if again := Narrow(got, tc.parent); !slices.Equal(again.Tools, got.Tools) || again.ToolPolicies["shell"] != got.ToolPolicies["shell"] {
				t.Errorf("narrowed twice: %v, then %v", got, again)
			}
		})
	}
}

func TestNarrowMCPServers(t *testing.T) {
	parent := &agentmeshv1.Agent{Name: "p", McpServers: []*agentmeshv1.McpServer{
		{Name: "docs", Url: "https://a/docs", RequireApproval: true},
		{Name: "cli", Command: []string{"mcp-cli"}},
	}}
	target := &agentmeshv1.Agent{Name: "t", McpServers: []*agentmeshv1.McpServer{
		{Name: "docs", Url: "https://a/docs"},                               // the parent's: kept, gated
		{Name: "cli", Command: []string{"mcp-cli", "--write"}},              // same name, other command: not the parent's
		{Name: "mail", Url: "https://a/mail"},                               // the parent has none
		{Name: "cli2", Command: []string{"mcp-cli"}, RequireApproval: true}, // other name
	}}
	got := Narrow(target, parent)
	if len(got.McpServers) != 1 || got.McpServers[0].Name != "docs" || !got.McpServers[0].RequireApproval {
		t.Fatalf("MCP servers %v, want docs alone, approval required", got.McpServers)
	}
}
