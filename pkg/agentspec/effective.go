package agentspec

import (
	"slices"
	"strings"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"google.golang.org/protobuf/proto"
)

// Effective returns the settings a task of agent a runs with: a copy of a
// whose system prompt ends with the prompt templates of its skills (in the
// order a offers them) and whose tools include their required tools, with
// applied_skills naming each skill at its version. skills are the
// catalogue entries of a's skills (the org's own, else the shared one);
// a skill of a that is missing is recorded with version 0 and adds
// nothing.
//
// It never escalates beyond a's tool policies: a required tool that a's
// tool_policies deny is left out, and the policies (approval included)
// apply to every added tool as to a's own.
//
// A template may name {{skill}} (the skill's name) and {{config.KEY}}
// (the value of KEY in the skill's configuration; "" when unset).
//
// A template a's own system prompt already carries is not repeated: an
// agent drafted by a proposal has its skills' templates written into its
// prompt, so that it reads whole when a person decides on it, and runs
// with each of them once.
func Effective(a *agentmeshv1.Agent, skills []*agentmeshv1.Skill) *agentmeshv1.Agent {
	out := proto.Clone(a).(*agentmeshv1.Agent)
	out.AppliedSkills = nil
	if len(a.GetSkills()) == 0 {
		return out
	}
	byName := make(map[string]*agentmeshv1.Skill, len(skills))
	for _, sk := range skills {
		byName[sk.GetName()] = sk
	}
	var prompt strings.Builder
	prompt.WriteString(a.GetSystemPrompt())
	for _, name := range a.GetSkills() {
		sk := byName[name]
		if sk == nil {
			out.AppliedSkills = append(out.AppliedSkills, &agentmeshv1.AppliedSkill{Name: name})
			continue
		}
		out.AppliedSkills = append(out.AppliedSkills, &agentmeshv1.AppliedSkill{Name: name, Org: sk.GetOrg(), Version: sk.GetVersion()})
		if t := Template(sk); t != "" && !strings.Contains(a.GetSystemPrompt(), t) {
			if prompt.Len() > 0 {
				prompt.WriteString("\n\n")
			}
			prompt.WriteString(t)
		}
		for _, tool := range sk.GetRequiredTools() {
			if slices.Contains(out.Tools, tool) || a.GetToolPolicies()[tool] == agentmeshv1.ToolPolicy_TOOL_POLICY_DENY {
				continue
			}
			out.Tools = append(out.Tools, tool)
		}
	}
	out.SystemPrompt = prompt.String()
	return out
}

// Template is sk's prompt template with its placeholders filled, as
// Effective applies it.
func Template(sk *agentmeshv1.Skill) string { return strings.TrimSpace(expandTemplate(sk)) }

// expandTemplate fills a skill's prompt template's placeholders.
func expandTemplate(sk *agentmeshv1.Skill) string {
	t := sk.GetPromptTemplate()
	if !strings.Contains(t, "{{") {
		return t
	}
	var b strings.Builder
	for {
		i := strings.Index(t, "{{")
		if i < 0 {
			break
		}
		j := strings.Index(t[i:], "}}")
		if j < 0 {
			break
		}
		b.WriteString(t[:i])
		key := strings.TrimSpace(t[i+2 : i+j])
		switch {
		case key == "skill":
			b.WriteString(sk.GetName())
		case strings.HasPrefix(key, "config."):
			b.WriteString(sk.GetConfig()[strings.TrimPrefix(key, "config.")])
		default:
			b.WriteString(t[i : i+j+2]) // not a placeholder: kept as written
		}
		t = t[i+j+2:]
	}
	b.WriteString(t)
	return b.String()
}
