package agentspec

import (
	"strings"
	"testing"
	"unicode/utf8"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
)

// An agent's effective settings carry its skills' prompt templates (in its
// order, placeholders filled) and required tools, never a tool its
// policies deny, and name each skill's version; the catalogue's agent is
// not changed.
func TestEffective(t *testing.T) {
	a := &agentmeshv1.Agent{
		Name: "writer", SystemPrompt: "You write.", Tools: []string{"echo"},
		Skills:       []string{"french", "research", "gone"},
		ToolPolicies: map[string]agentmeshv1.ToolPolicy{"web_fetch": agentmeshv1.ToolPolicy_TOOL_POLICY_DENY},
	}
	skills := []*agentmeshv1.Skill{
		{Name: "research", Org: "", Version: 4, PromptTemplate: "Cite sources ({{skill}}).", RequiredTools: []string{"web_fetch", "current_time", "echo"}},
		{Name: "french", Org: "acme", Version: 2, PromptTemplate: "Answer in {{config.lang}}; keep {{unknown}} as is.", Config: map[string]string{"lang": "French"}},
	}
	got := Effective(a, skills)
	if want := "You write.\n\nAnswer in French; keep {{unknown}} as is.\n\nCite sources (research)."; got.SystemPrompt != want {
		t.Errorf("prompt = %q, want %q", got.SystemPrompt, want)
	}
	if s := strings.Join(got.Tools, ","); s != "echo,current_time" {
		t.Errorf("tools = %s, want echo,current_time (web_fetch is denied)", s)
	}
	var applied []string
	for _, ap := range got.AppliedSkills {
		applied = append(applied, ap.Name+"@"+ap.Org+"/"+string(rune('0'+ap.Version)))
	}
	if s := strings.Join(applied, ","); s != "french@acme/2,research@/4,gone@/0" {
		t.Errorf("applied = %s", s)
	}
	if a.SystemPrompt != "You write." || len(a.Tools) != 1 || a.AppliedSkills != nil {
		t.Errorf("the catalogue's agent changed: %v", a)
	}
	// A template the agent's prompt already carries (a drafted agent's)
	// is not repeated; the skill is still recorded.
	drafted := &agentmeshv1.Agent{Name: "d", Skills: []string{"french"}, SystemPrompt: "Proposed.\n\n" + Template(skills[1])}
	if got := Effective(drafted, skills); got.SystemPrompt != drafted.SystemPrompt || len(got.AppliedSkills) != 1 || got.AppliedSkills[0].Version != 2 {
		t.Errorf("drafted: prompt %q, applied %v", got.SystemPrompt, got.AppliedSkills)
	}
	// No skills: the agent as it is.
	plain := Effective(&agentmeshv1.Agent{Name: "p", SystemPrompt: "x", Tools: []string{"echo"}}, nil)
	if plain.SystemPrompt != "x" || len(plain.Tools) != 1 || plain.AppliedSkills != nil {
		t.Errorf("plain = %v", plain)
	}
}

// A prompt template is outside input: any text expands without panic,
// keeps valid UTF-8 valid and fills only the placeholders it names.
func FuzzExpandTemplate(f *testing.F) {
	for _, s := range []string{"", "{{skill}}", "a {{config.k}} b", "{{", "}}{{", "{{config.}}", "{{ skill }}{{x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, tmpl string) {
		sk := &agentmeshv1.Skill{Name: "s", PromptTemplate: tmpl, Config: map[string]string{"k": "v"}}
		out := expandTemplate(sk)
		if utf8.ValidString(tmpl) && !utf8.ValidString(out) {
			t.Fatalf("expand(%q) = %q: not valid UTF-8", tmpl, out)
		}
		if !strings.Contains(tmpl, "{{") && out != tmpl {
			t.Fatalf("expand(%q) = %q, want it unchanged", tmpl, out)
		}
	})
}
