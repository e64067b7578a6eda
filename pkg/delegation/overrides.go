package delegation

import (
	"fmt"
	"slices"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
)

// ApplyOverrides returns target with call's overrides applied, narrowed to
// what the parent may use (Narrow). A tools override must be a subset of
// the target agent's tools and of what the parent may use (its agent's
// tools, less those its policy denies), else it is refused naming the
// tool: delegation never gives a sub-agent a tool its parent could not use,
// nor a laxer policy for one it could. The model override changes the
// model name only (never the endpoint or the key secret).
func ApplyOverrides(target, parent *agentmeshv1.Agent, call CallAgent) (*agentmeshv1.Agent, error) {
	out := proto.Clone(target).(*agentmeshv1.Agent)
	if call.Model != "" {
		if out.Model == nil {
			out.Model = &agentmeshv1.ModelSettings{}
		}
		out.Model.Model = call.Model
	}
	if call.SystemPrompt != nil {
		out.SystemPrompt = *call.SystemPrompt
	}
	if call.Tools != nil {
		var tools []string
		for _, t := range *call.Tools {
			if !slices.Contains(target.GetTools(), t) {
				return nil, fmt.Errorf("tool override refused: agent %q does not have tool %q (it has %v); an override may only narrow its tools", target.GetName(), t, target.GetTools())
			}
			if !ParentMayUse(parent, t) {
				return nil, fmt.Errorf("tool override refused: tool %q is not one this task may use, so it cannot give it to a sub-agent", t)
			}
			if !slices.Contains(tools, t) {
				tools = append(tools, t)
			}
		}
		out.Tools = tools
	}
	return Narrow(out, parent), nil
}

// ParentMayUse reports whether the parent's agent may use tool.
func ParentMayUse(parent *agentmeshv1.Agent, tool string) bool {
	return slices.Contains(parent.GetTools(), tool) &&
		parent.GetToolPolicies()[tool] != agentmeshv1.ToolPolicy_TOOL_POLICY_DENY
}

// ModelOnly returns the agent of a call_model sub-task: the parent's agent
// with the model named, no tools, no MCP servers, one model turn, and the
// given system prompt.
func ModelOnly(parent *agentmeshv1.Agent, model, systemPrompt string) *agentmeshv1.Agent {
	out := proto.Clone(parent).(*agentmeshv1.Agent)
	if out.Model == nil {
		out.Model = &agentmeshv1.ModelSettings{}
	}
	out.Model.Model = model
	out.SystemPrompt = systemPrompt
	out.Tools, out.McpServers, out.ToolPolicies = nil, nil, nil
	out.MaxSteps = 1
	return out
}

// Remaining is what a budget leaves after the given use and time since
// the start: unset (0) bounds stay unset. A bound that is used up is
// reported in exhausted.
func Remaining(b *agentmeshv1.Budget, turns int32, tokens int64, cost float64, elapsed time.Duration) (out *agentmeshv1.Budget, exhausted string) {
	if b == nil {
		return nil, ""
	}
	out = &agentmeshv1.Budget{}
	if b.MaxSteps > 0 {
		if out.MaxSteps = b.MaxSteps - turns; out.MaxSteps <= 0 {
			return nil, fmt.Sprintf("max_steps %d used up", b.MaxSteps)
		}
	}
	if b.MaxTokens > 0 {
		if out.MaxTokens = b.MaxTokens - tokens; out.MaxTokens <= 0 {
			return nil, fmt.Sprintf("max_tokens %d used up", b.MaxTokens)
		}
	}
	if b.MaxCostUsd > 0 {
		if out.MaxCostUsd = b.MaxCostUsd - cost; out.MaxCostUsd <= 0 {
			return nil, fmt.Sprintf("max_cost_usd %g used up", b.MaxCostUsd)
		}
	}
	if d := b.GetMaxWallTime().AsDuration(); b.MaxWallTime != nil && d > 0 {
		left := d - elapsed
		if left <= 0 {
			return nil, fmt.Sprintf("max_wall_time %s used up", d)
		}
		out.MaxWallTime = durationpb.New(left)
	}
	return out, ""
}

// Bound returns own bounded by ceiling: each bound is the smaller of the
// two, an unset one taking the other's.
func Bound(own, ceiling *agentmeshv1.Budget) *agentmeshv1.Budget {
	if ceiling == nil {
		return own
	}
	if own == nil {
		return proto.Clone(ceiling).(*agentmeshv1.Budget)
	}
	out := proto.Clone(own).(*agentmeshv1.Budget)
	if c := ceiling.MaxSteps; c > 0 && (out.MaxSteps == 0 || out.MaxSteps > c) {
		out.MaxSteps = c
	}
	if c := ceiling.MaxTokens; c > 0 && (out.MaxTokens == 0 || out.MaxTokens > c) {
		out.MaxTokens = c
	}
	if c := ceiling.MaxCostUsd; c > 0 && (out.MaxCostUsd == 0 || out.MaxCostUsd > c) {
		out.MaxCostUsd = c
	}
	if c := ceiling.GetMaxWallTime(); c != nil && c.AsDuration() > 0 &&
		(out.GetMaxWallTime().AsDuration() == 0 || out.GetMaxWallTime().AsDuration() > c.AsDuration()) {
		out.MaxWallTime = durationpb.New(c.AsDuration())
	}
	return out
}
