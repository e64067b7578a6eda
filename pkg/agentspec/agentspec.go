// Package agentspec is the one home of the rules for agent definitions and
// skill names. The router (before a request goes on the bus), the registry
// (before it stores) and the state service (the system of record) all
// check agents and skills with these functions, so the three cannot
// disagree.
//
// Skills are lower-case tokens: a letter or digit, then letters, digits and
// _.:/- (1-64 bytes). A request's skill list (a task's required skills, a
// ListAgents filter) is normalised first — trimmed and lower-cased — so
// " SQL " asks for "sql"; an agent's own skills must already be in that
// form.
package agentspec

import (
	"fmt"
	"math"
	"net/url"
	"regexp"
	"slices"
	"strings"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/budget"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/mcp"
	"github.com/agentmesh/agentmesh/pkg/memory"
	"github.com/agentmesh/agentmesh/pkg/modeltable"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"github.com/agentmesh/agentmesh/pkg/tools"
)

// Patterns of names and skills.
const (
	NamePattern  = `[a-z0-9][a-z0-9_-]{0,62}`
	SkillPattern = `[a-z0-9][a-z0-9_.:/-]{0,63}`
)

// Limits of an agent definition.
const (
	MaxSystemPrompt = 64 << 10
	MaxDescription  = 4 << 10
	MaxSkills       = 64
	MaxSkillBytes   = 64
	MaxTools        = 64
	MaxSteps        = 1000
	MaxModelName    = 256
	// MaxRoutingPriority bounds Agent.routing_priority.
	MaxRoutingPriority = 100
)

// Tool-calling protocols of ModelSettings.tool_protocol (the executor's;
// empty = native). Any other value is refused when the agent is defined,
// not when its first task runs.
const (
	ToolProtocolNative = "native"
	ToolProtocolReAct  = "react"
)

var (
	nameRE  = regexp.MustCompile(`^` + NamePattern + `$`)
	skillRE = regexp.MustCompile(`^` + SkillPattern + `$`)
)

// ValidSkill reports whether sk is a valid (normalised) skill name.
func ValidSkill(sk string) bool { return skillRE.MatchString(sk) }

// Name checks an agent name; field names it in the error.
func Name(field, name string) error {
	if name == "" {
		return bus.FieldError(field, "required")
	}
	if !nameRE.MatchString(name) {
		return bus.FieldError(field, "must match %s, got %.80q", NamePattern, name)
	}
	return nil
}

// NormalizeSkills returns skills trimmed and lower-cased (a new slice; nil
// for an empty list).
func NormalizeSkills(skills []string) []string {
	if len(skills) == 0 {
		return nil
	}
	out := make([]string, len(skills))
	for i, s := range skills {
		out[i] = strings.ToLower(strings.TrimSpace(s))
	}
	return out
}

// Skills checks a list of skills: at most MaxSkills, each a valid skill
// name, no duplicates.
func Skills(field string, skills []string) error {
	if len(skills) > MaxSkills {
		return &bus.Error{Code: bus.CodeResourceExhausted, Field: field, Message: fmt.Sprintf("%d skills is over the limit of %d", len(skills), MaxSkills)}
	}
	seen := make(map[string]bool, len(skills))
	for i, sk := range skills {
		f := fmt.Sprintf("%s[%d]", field, i)
		switch {
		case sk == "":
			return bus.FieldError(f, "must not be empty")
		case !skillRE.MatchString(sk):
			return bus.FieldError(f, "must be lower-case letters, digits and _.:/- (1-%d bytes, starting with a letter or digit), got %.80q", MaxSkillBytes, sk)
		case seen[sk]:
			return bus.FieldError(f, "duplicate skill %q", sk)
		}
		seen[sk] = true
	}
	return nil
}

// Agent checks an agent definition and names the first bad field.
func Agent(a *agentmeshv1.Agent) error {
	if a == nil {
		return bus.FieldError("agent", "required")
	}
	if err := Name("agent.name", a.Name); err != nil {
		return err
	}
	if len(a.Description) > MaxDescription {
		return &bus.Error{Code: bus.CodeResourceExhausted, Field: "agent.description", Message: fmt.Sprintf("longer than %d bytes", MaxDescription)}
	}
	if len(a.SystemPrompt) > MaxSystemPrompt {
		return &bus.Error{Code: bus.CodeResourceExhausted, Field: "agent.system_prompt", Message: fmt.Sprintf("longer than %d bytes", MaxSystemPrompt)}
	}
	if err := Skills("agent.skills", a.Skills); err != nil {
		return err
	}
	if len(a.Tools) > MaxTools {
		return &bus.Error{Code: bus.CodeResourceExhausted, Field: "agent.tools", Message: fmt.Sprintf("more than %d tools", MaxTools)}
	}
	for i, t := range a.Tools {
		if _, ok := tools.Lookup(t); !ok {
			return &bus.Error{Code: bus.CodeFailedPrecondition, Field: fmt.Sprintf("agent.tools[%d]", i), Message: fmt.Sprintf("unknown tool %q", t)}
		}
	}
	if len(a.McpServers) > mcp.MaxServers {
		return &bus.Error{Code: bus.CodeResourceExhausted, Field: "agent.mcp_servers", Message: fmt.Sprintf("more than %d MCP servers", mcp.MaxServers)}
	}
	servers := map[string]bool{}
	for i, m := range a.McpServers {
		if err := mcp.Validate(m); err != nil {
			return bus.FieldError(fmt.Sprintf("agent.mcp_servers[%d]", i), "%v", err)
		}
		if servers[m.Name] {
			return bus.FieldError(fmt.Sprintf("agent.mcp_servers[%d]", i), "duplicate MCP server %q", m.Name)
		}
		servers[m.Name] = true
	}
	if err := toolPolicies(a.ToolPolicies); err != nil {
		return err
	}
	if a.MaxConcurrency < 0 {
		return bus.FieldError("agent.max_concurrency", "must not be negative")
	}
	if a.RoutingPriority < 0 || a.RoutingPriority > MaxRoutingPriority {
		return bus.FieldError("agent.routing_priority", "must be between 0 and %d", MaxRoutingPriority)
	}
	if err := taskstate.ValidateRetryPolicy("agent.retry_policy", a.RetryPolicy); err != nil {
		return err
	}
	if err := taskstate.ValidateQueueTimeout("agent.queue_timeout", a.QueueTimeout); err != nil {
		return err
	}
	if a.MaxSteps < 0 || a.MaxSteps > MaxSteps {
		return bus.FieldError("agent.max_steps", "must be between 0 and %d", MaxSteps)
	}
	if err := budget.Validate("agent.budget", a.Budget); err != nil {
		return err
	}
	if field, err := memory.CheckPolicy(a); err != nil {
		return bus.FieldError("agent."+field, "%v", err)
	}
	if m := a.Model; m != nil {
		if m.BaseUrl != "" {
			u, err := url.Parse(m.BaseUrl)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				return bus.FieldError("agent.model.base_url", "must be an http or https URL, got %q", m.BaseUrl)
			}
		}
		// NaN fails both comparisons: it must be refused by name (a model
		// request cannot be encoded with it, so every task would fail).
		if t := m.Temperature; t != nil && (math.IsNaN(float64(*t)) || *t < 0 || *t > 2) {
			return bus.FieldError("agent.model.temperature", "must be between 0 and 2")
		}
		if m.MaxTokens < 0 {
			return bus.FieldError("agent.model.max_tokens", "must not be negative")
		}
		if len(m.Model) > MaxModelName {
			return bus.FieldError("agent.model.model", "longer than %d bytes", MaxModelName)
		}
		switch strings.ToLower(strings.TrimSpace(m.ToolProtocol)) {
		case "", ToolProtocolNative, ToolProtocolReAct:
		default:
			return bus.FieldError("agent.model.tool_protocol", "unknown tool protocol %.80q: want %q (the provider's tool calls, the default) or %q (JSON ReAct for models without tool calling)",
				m.ToolProtocol, ToolProtocolNative, ToolProtocolReAct)
		}
		if err := modelRouting(m); err != nil {
			return err
		}
	}
	return nil
}

// Bounds of an agent's model routing and limits.
const (
	MaxFallbacks = modeltable.MaxFallbacks
	// MaxAgentRequestsPerMinute and MaxAgentTokensPerMinute bound an
	// agent's own rate limits (more is a typo, not a limit).
	MaxAgentRequestsPerMinute = modeltable.MaxRequestsPerMinute
	MaxAgentTokensPerMinute   = modeltable.MaxTokensPerMinute
)

// modelRouting checks an agent's provider, fallbacks, small model and
// rate limits.
func modelRouting(m *agentmeshv1.ModelSettings) error {
	if m.Provider != "" && !modeltable.ValidProvider(m.Provider) {
		return bus.FieldError("agent.model.provider", "unknown provider %.80q: want %s", m.Provider, strings.Join(modeltable.Providers, " or "))
	}
	if len(m.Fallbacks) > MaxFallbacks {
		return bus.FieldError("agent.model.fallbacks", "more than %d fallbacks", MaxFallbacks)
	}
	for i, f := range m.Fallbacks {
		if f == "" || len(f) > MaxModelName || f == m.Model {
			return bus.FieldError(fmt.Sprintf("agent.model.fallbacks[%d]", i), "want a model name (1-%d bytes) other than the agent's model, got %.80q", MaxModelName, f)
		}
	}
	if len(m.SmallModel) > MaxModelName {
		return bus.FieldError("agent.model.small_model", "longer than %d bytes", MaxModelName)
	}
	if m.RequestsPerMinute < 0 || m.RequestsPerMinute > MaxAgentRequestsPerMinute {
		return bus.FieldError("agent.model.requests_per_minute", "want 0 (no limit) to %d, got %d", MaxAgentRequestsPerMinute, m.RequestsPerMinute)
	}
	if m.TokensPerMinute < 0 || m.TokensPerMinute > MaxAgentTokensPerMinute {
		return bus.FieldError("agent.model.tokens_per_minute", "want 0 (no limit) to %d, got %d", int64(MaxAgentTokensPerMinute), m.TokensPerMinute)
	}
	return nil
}

// toolPolicies checks that every policy is one of the ToolPolicy values (a
// number outside the enum arrives from clients that send numbers).
func toolPolicies(p map[string]agentmeshv1.ToolPolicy) error {
	tools := make([]string, 0, len(p))
	for tool := range p {
		tools = append(tools, tool)
	}
	slices.Sort(tools)
	for _, tool := range tools {
		if _, ok := agentmeshv1.ToolPolicy_name[int32(p[tool])]; !ok {
			return bus.FieldError(fmt.Sprintf("agent.tool_policies[%s]", tool), "unknown tool policy %d: want TOOL_POLICY_DEFAULT, TOOL_POLICY_ALLOW, TOOL_POLICY_REQUIRE_APPROVAL or TOOL_POLICY_DENY", int32(p[tool]))
		}
	}
	return nil
}
