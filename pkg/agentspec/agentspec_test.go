package agentspec

import (
	"errors"
	"math"
	"strings"
	"testing"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
)

// TestAgent is the one table of the agent rules the router, the registry
// and state all apply.
func TestAgent(t *testing.T) {
	temp := float32(3)
	nanTemp := float32(math.NaN()) // NaN < 0 and NaN > 2 are both false
	tests := []struct {
		name      string
		agent     *agentmeshv1.Agent
		wantCode  string
		wantField string
	}{
		{"valid", &agentmeshv1.Agent{Name: "helper", Tools: []string{"echo", "current_time"}, Skills: []string{"general", "sql:postgres", "lang/fr", "a.b-c_d"}}, "", ""},
		{"missing", nil, bus.CodeInvalidArgument, "agent"},
		{"empty name", &agentmeshv1.Agent{}, bus.CodeInvalidArgument, "agent.name"},
		{"upper-case name", &agentmeshv1.Agent{Name: "Helper"}, bus.CodeInvalidArgument, "agent.name"},
		{"name with dot", &agentmeshv1.Agent{Name: "a.b"}, bus.CodeInvalidArgument, "agent.name"},
		{"name too long", &agentmeshv1.Agent{Name: strings.Repeat("a", 64)}, bus.CodeInvalidArgument, "agent.name"},
		{"longest name", &agentmeshv1.Agent{Name: strings.Repeat("a", 63)}, "", ""},
		{"unknown tool", &agentmeshv1.Agent{Name: "a", Tools: []string{"rm_rf"}}, bus.CodeFailedPrecondition, "agent.tools[0]"},
		{"skill with space", &agentmeshv1.Agent{Name: "a", Skills: []string{"has space"}}, bus.CodeInvalidArgument, "agent.skills[0]"},
		{"upper-case skill", &agentmeshv1.Agent{Name: "a", Skills: []string{"ok", "SQL"}}, bus.CodeInvalidArgument, "agent.skills[1]"},
		{"skill with wildcard", &agentmeshv1.Agent{Name: "a", Skills: []string{"a*"}}, bus.CodeInvalidArgument, "agent.skills[0]"},
		{"skill starting with dash", &agentmeshv1.Agent{Name: "a", Skills: []string{"-x"}}, bus.CodeInvalidArgument, "agent.skills[0]"},
		{"empty skill", &agentmeshv1.Agent{Name: "a", Skills: []string{""}}, bus.CodeInvalidArgument, "agent.skills[0]"},
		{"skill too long", &agentmeshv1.Agent{Name: "a", Skills: []string{strings.Repeat("s", MaxSkillBytes+1)}}, bus.CodeInvalidArgument, "agent.skills[0]"},
		{"longest skill", &agentmeshv1.Agent{Name: "a", Skills: []string{strings.Repeat("s", MaxSkillBytes)}}, "", ""},
		{"duplicate skill", &agentmeshv1.Agent{Name: "a", Skills: []string{"x", "x"}}, bus.CodeInvalidArgument, "agent.skills[1]"},
		{"too many skills", &agentmeshv1.Agent{Name: "a", Skills: manySkills(MaxSkills + 1)}, bus.CodeResourceExhausted, "agent.skills"},
		{"most skills", &agentmeshv1.Agent{Name: "a", Skills: manySkills(MaxSkills)}, "", ""},
		{"negative concurrency", &agentmeshv1.Agent{Name: "a", MaxConcurrency: -1}, bus.CodeInvalidArgument, "agent.max_concurrency"},
		{"routing priority too high", &agentmeshv1.Agent{Name: "a", RoutingPriority: 101}, bus.CodeInvalidArgument, "agent.routing_priority"},
		{"negative routing priority", &agentmeshv1.Agent{Name: "a", RoutingPriority: -1}, bus.CodeInvalidArgument, "agent.routing_priority"},
		{"too many steps", &agentmeshv1.Agent{Name: "a", MaxSteps: MaxSteps + 1}, bus.CodeInvalidArgument, "agent.max_steps"},
		{"negative steps", &agentmeshv1.Agent{Name: "a", MaxSteps: -1}, bus.CodeInvalidArgument, "agent.max_steps"},
		{"negative budget", &agentmeshv1.Agent{Name: "a", Budget: &agentmeshv1.Budget{MaxTokens: -1}}, bus.CodeInvalidArgument, "agent.budget.max_tokens"},
		{"bad base url", &agentmeshv1.Agent{Name: "a", Model: &agentmeshv1.ModelSettings{BaseUrl: "ftp://x"}}, bus.CodeInvalidArgument, "agent.model.base_url"},
		{"hot temperature", &agentmeshv1.Agent{Name: "a", Model: &agentmeshv1.ModelSettings{Temperature: &temp}}, bus.CodeInvalidArgument, "agent.model.temperature"},
		{"NaN temperature", &agentmeshv1.Agent{Name: "a", Model: &agentmeshv1.ModelSettings{Temperature: &nanTemp}}, bus.CodeInvalidArgument, "agent.model.temperature"},
		{"huge prompt", &agentmeshv1.Agent{Name: "a", SystemPrompt: strings.Repeat("x", MaxSystemPrompt+1)}, bus.CodeResourceExhausted, "agent.system_prompt"},
		{"huge description", &agentmeshv1.Agent{Name: "a", Description: strings.Repeat("x", MaxDescription+1)}, bus.CodeResourceExhausted, "agent.description"},
		{"react protocol", &agentmeshv1.Agent{Name: "a", Model: &agentmeshv1.ModelSettings{ToolProtocol: "react"}}, "", ""},
		{"native protocol, any case", &agentmeshv1.Agent{Name: "a", Model: &agentmeshv1.ModelSettings{ToolProtocol: " Native"}}, "", ""},
		{"unknown tool protocol", &agentmeshv1.Agent{Name: "a", Model: &agentmeshv1.ModelSettings{ToolProtocol: "xml"}}, bus.CodeInvalidArgument, "agent.model.tool_protocol"},
		{"anthropic provider", &agentmeshv1.Agent{Name: "a", Model: &agentmeshv1.ModelSettings{Provider: "anthropic", BaseUrl: "https://api.anthropic.com", Fallbacks: []string{"gpt-4o-mini"}, SmallModel: "haiku", RequestsPerMinute: 60, TokensPerMinute: 100000}}, "", ""},
		{"unknown provider", &agentmeshv1.Agent{Name: "a", Model: &agentmeshv1.ModelSettings{Provider: "cohere"}}, bus.CodeInvalidArgument, "agent.model.provider"},
		{"empty fallback", &agentmeshv1.Agent{Name: "a", Model: &agentmeshv1.ModelSettings{Fallbacks: []string{"x", ""}}}, bus.CodeInvalidArgument, "agent.model.fallbacks[1]"},
		{"fallback to itself", &agentmeshv1.Agent{Name: "a", Model: &agentmeshv1.ModelSettings{Model: "m", Fallbacks: []string{"m"}}}, bus.CodeInvalidArgument, "agent.model.fallbacks[0]"},
		{"too many fallbacks", &agentmeshv1.Agent{Name: "a", Model: &agentmeshv1.ModelSettings{Fallbacks: strings.Split("a,b,c,d,e,f,g,h,i", ",")}}, bus.CodeInvalidArgument, "agent.model.fallbacks"},
		{"negative rpm", &agentmeshv1.Agent{Name: "a", Model: &agentmeshv1.ModelSettings{RequestsPerMinute: -1}}, bus.CodeInvalidArgument, "agent.model.requests_per_minute"},
		{"absurd tpm", &agentmeshv1.Agent{Name: "a", Model: &agentmeshv1.ModelSettings{TokensPerMinute: 1 << 40}}, bus.CodeInvalidArgument, "agent.model.tokens_per_minute"},
		{"long small model", &agentmeshv1.Agent{Name: "a", Model: &agentmeshv1.ModelSettings{SmallModel: strings.Repeat("m", MaxModelName+1)}}, bus.CodeInvalidArgument, "agent.model.small_model"},
		{"known tool policy", &agentmeshv1.Agent{Name: "a", ToolPolicies: map[string]agentmeshv1.ToolPolicy{"shell": agentmeshv1.ToolPolicy_TOOL_POLICY_DENY}}, "", ""},
		{"unknown tool policy", &agentmeshv1.Agent{Name: "a", ToolPolicies: map[string]agentmeshv1.ToolPolicy{"echo": agentmeshv1.ToolPolicy_TOOL_POLICY_ALLOW, "shell": 9}}, bus.CodeInvalidArgument, "agent.tool_policies[shell]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Agent(tt.agent)
			if tt.wantCode == "" {
				if err != nil {
					t.Fatalf("got %v, want no error", err)
				}
				return
			}
			var be *bus.Error
			if !errors.As(err, &be) {
				t.Fatalf("got %v, want a *bus.Error", err)
			}
			if be.Code != tt.wantCode || be.Field != tt.wantField {
				t.Fatalf("got code %q field %q (%v), want %q %q", be.Code, be.Field, err, tt.wantCode, tt.wantField)
			}
		})
	}
}

func manySkills(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = "s" + strings.Repeat("x", i%10) + string(rune('a'+i%26)) + string(rune('a'+i/26))
	}
	return out
}

func TestNormalizeSkills(t *testing.T) {
	got := NormalizeSkills([]string{" SQL ", "Lang/FR"})
	if strings.Join(got, ",") != "sql,lang/fr" {
		t.Fatalf("NormalizeSkills = %q", got)
	}
	if NormalizeSkills(nil) != nil {
		t.Fatal("NormalizeSkills(nil) is not nil")
	}
	if err := Skills("required_skills", NormalizeSkills([]string{" Translation "})); err != nil {
		t.Fatalf("a normalised skill is refused: %v", err)
	}
}

// FuzzSkills: whatever Skills accepts is a valid, distinct, bounded list,
// and every refusal names a field with a client error code.
func FuzzSkills(f *testing.F) {
	f.Add("sql,python")
	f.Add("a b,,x")
	f.Add("x,x")
	f.Fuzz(func(t *testing.T, list string) {
		skills := strings.Split(list, ",")
		err := Skills("skills", skills)
		if err != nil {
			var be *bus.Error
			if !errors.As(err, &be) || be.Field == "" || (be.Code != bus.CodeInvalidArgument && be.Code != bus.CodeResourceExhausted) {
				t.Fatalf("refusal %v does not name a field with a client error code", err)
			}
			return
		}
		seen := map[string]bool{}
		for _, s := range skills {
			if !ValidSkill(s) || seen[s] || len(s) > MaxSkillBytes {
				t.Fatalf("accepted %q", skills)
			}
			seen[s] = true
		}
	})
}

// A skill's free text (description, prompt template, config values) may
// hold any UTF-8 but NUL: Postgres keeps no NUL in text or jsonb, so it is
// refused by name on every store alike.
func TestSkillText(t *testing.T) {
	tests := []struct {
		name      string
		skill     *agentmeshv1.Skill
		wantField string
	}{
		{"plain", &agentmeshv1.Skill{Name: "s", Description: "Line one.\n\tLine two ✓", PromptTemplate: "Do {x}.\r\n", Config: map[string]string{"k": "v\n"}}, ""},
		{"NUL in description", &agentmeshv1.Skill{Name: "s", Description: "a\x00b"}, "skill.description"},
		{"NUL in prompt template", &agentmeshv1.Skill{Name: "s", PromptTemplate: "\x00"}, "skill.prompt_template"},
		{"NUL in a config value", &agentmeshv1.Skill{Name: "s", Config: map[string]string{"k": "a\x00"}}, "skill.config"},
		{"description not UTF-8", &agentmeshv1.Skill{Name: "s", Description: "\xff"}, "skill.description"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Skill(tt.skill)
			if tt.wantField == "" {
				if err != nil {
					t.Fatalf("got %v, want no error", err)
				}
				return
			}
			var be *bus.Error
			if !errors.As(err, &be) || be.Code != bus.CodeInvalidArgument || be.Field != tt.wantField {
				t.Fatalf("got %v, want invalid_argument on %s", err, tt.wantField)
			}
		})
	}
}
