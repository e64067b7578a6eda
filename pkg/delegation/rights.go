package delegation

import (
	"maps"
	"slices"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"google.golang.org/protobuf/proto"
)

// Rights only narrow (ARCHITECTURE.md, invariant 12). A sub-task runs its
// target agent with the rights of that agent and of its parent together:
//
//   - its tools are the target's tools that the parent may use (the
//     parent's tools less those its policy denies): a tool the parent lacks
//     or is denied is not the sub-task's either;
//   - its policy for each tool is the stricter of the two (Stricter);
//   - its MCP servers are the target's that the parent has too (the same
//     name and endpoint), approval required when either requires it.
//
// The parent's rights are its own task's effective settings (its agent_spec
// in the record, itself narrowed when it is a sub-task), so a grandchild
// is bounded by the whole chain above it. State applies Narrow when it
// creates the sub-task (services/state, spawn), from the parent's record,
// whatever the executor or the model asked for; the executor's gate then
// applies the sub-task's agent_spec as it does any task's.

// policyRank orders policies from the laxest to the strictest. Unset and
// DEFAULT both mean the tool's own rule (its approval rule and per-call
// assessment), stricter than ALLOW, which skips them.
func policyRank(p agentmeshv1.ToolPolicy) int {
	switch p {
	case agentmeshv1.ToolPolicy_TOOL_POLICY_ALLOW:
		return 0
	case agentmeshv1.ToolPolicy_TOOL_POLICY_REQUIRE_APPROVAL:
		return 2
	case agentmeshv1.ToolPolicy_TOOL_POLICY_DENY:
		return 3
	}
	return 1 // unset, DEFAULT, or a value no agent may hold
}

// Stricter returns the stricter of two tool policies: deny > require
// approval > the tool's default > allow. The tool's default is returned as
// TOOL_POLICY_UNSPECIFIED.
func Stricter(a, b agentmeshv1.ToolPolicy) agentmeshv1.ToolPolicy {
	if policyRank(b) > policyRank(a) {
		a = b
	}
	if policyRank(a) == 1 {
		return agentmeshv1.ToolPolicy_TOOL_POLICY_UNSPECIFIED
	}
	return a
}

// Narrow returns target's settings as a sub-task of a task running parent
// may have them (see above). target is not changed.
func Narrow(target, parent *agentmeshv1.Agent) *agentmeshv1.Agent {
	out := proto.Clone(target).(*agentmeshv1.Agent)
	out.Tools = nil
	for _, t := range target.GetTools() {
		if ParentMayUse(parent, t) && !slices.Contains(out.Tools, t) {
			out.Tools = append(out.Tools, t)
		}
	}
	out.McpServers = nil
	for _, srv := range target.GetMcpServers() {
		if own := sameServer(parent.GetMcpServers(), srv); own != nil {
			kept := proto.Clone(srv).(*agentmeshv1.McpServer)
			kept.RequireApproval = srv.GetRequireApproval() || own.GetRequireApproval()
			out.McpServers = append(out.McpServers, kept)
		}
	}
	out.ToolPolicies = nil
	names := slices.Collect(maps.Keys(target.GetToolPolicies()))
	names = append(names, slices.Collect(maps.Keys(parent.GetToolPolicies()))...)
	for _, name := range names {
		p := Stricter(target.GetToolPolicies()[name], parent.GetToolPolicies()[name])
		if p == agentmeshv1.ToolPolicy_TOOL_POLICY_UNSPECIFIED {
			continue
		}
		if out.ToolPolicies == nil {
			out.ToolPolicies = map[string]agentmeshv1.ToolPolicy{}
		}
		out.ToolPolicies[name] = p
	}
	return out
}

// sameServer returns the server of servers that is srv — the same name and
// the same endpoint (command, environment, URL) — whatever either says of
// approval; nil when there is none.
func sameServer(servers []*agentmeshv1.McpServer, srv *agentmeshv1.McpServer) *agentmeshv1.McpServer {
	want := proto.Clone(srv).(*agentmeshv1.McpServer)
	want.RequireApproval = false
	for _, s := range servers {
		got := proto.Clone(s).(*agentmeshv1.McpServer)
		got.RequireApproval = false
		if proto.Equal(got, want) {
			return s
		}
	}
	return nil
}
