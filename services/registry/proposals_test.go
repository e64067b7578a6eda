package registry

import (
	"strings"
	"testing"

	"github.com/agentmesh/agentmesh/pkg/agentspec"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
)

func TestDraftName(t *testing.T) {
	for _, tt := range []struct {
		skills []string
		want   string
	}{
		{[]string{"translation"}, "translation-agent"},
		{[]string{"sql", "code.review"}, "sql-code-review-agent"},
		{[]string{"ns:tool/x"}, "ns-tool-x-agent"},
		{[]string{"_"}, "proposed-agent"},
		{nil, "proposed-agent"},
		{[]string{strings.Repeat("a", 63), "b"}, strings.Repeat("a", 48) + "-agent"},
	} {
		got := DraftName(tt.skills)
		if got != tt.want {
			t.Errorf("DraftName(%q) = %q, want %q", tt.skills, got, tt.want)
		}
		if err := agentspec.Name("name", got); err != nil {
			t.Errorf("DraftName(%q) = %q: %v", tt.skills, got, err)
		}
	}
}

// Every drafted name is a valid agent name with room for a "-99" suffix.
func FuzzDraftName(f *testing.F) {
	for _, s := range []string{"translation", "a.b:c/d", "-", "_x", strings.Repeat("z", 70), "ü"} {
		f.Add(s, "sql")
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		name := DraftName([]string{a, b})
		if err := agentspec.Name("name", name+"-99"); err != nil {
			t.Fatalf("DraftName(%q, %q) = %q: %v", a, b, name, err)
		}
	})
}

func TestDraft(t *testing.T) {
	a := Draft("tr-agent", []*agentmeshv1.Skill{
		{Name: "translation", Description: "translate text", RequiredTools: []string{"web_fetch", "echo"}, PromptTemplate: "Translate faithfully."},
		{Name: "glossary", RequiredTools: []string{"echo"}, PromptTemplate: "  Use the glossary.  "},
	}, "gpt-x")
	if a.Name != "tr-agent" || strings.Join(a.Skills, ",") != "translation,glossary" || strings.Join(a.Tools, ",") != "echo,web_fetch" ||
		a.GetModel().GetModel() != "gpt-x" || a.Ephemeral {
		t.Errorf("draft = %v", a)
	}
	for _, want := range []string{"- translation: translate text", "- glossary\n", "Translate faithfully.", "Use the glossary."} {
		if !strings.Contains(a.SystemPrompt, want) {
			t.Errorf("prompt lacks %q:\n%s", want, a.SystemPrompt)
		}
	}
	if err := agentspec.Agent(a); err != nil {
		t.Errorf("draft is not a valid agent: %v", err)
	}
	if Draft("x-agent", nil, "").Model != nil {
		t.Errorf("no model configured: the draft names none (the executor's default)")
	}
}

func TestParseProposalSettings(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want float64
		ok   bool
	}{
		{"", DefaultProposalThreshold, true},
		{" 0 ", 0, true},
		{"0.75", 0.75, true},
		{"1", 0, false},
		{"-0.1", 0, false},
		{"NaN", 0, false},
		{"half", 0, false},
	} {
		got, err := ParseProposalThreshold(tt.in)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("ParseProposalThreshold(%q) = %v, %v; want %v ok=%v", tt.in, got, err, tt.want, tt.ok)
		}
		if err != nil && !strings.Contains(err.Error(), "AGENTMESH_PROPOSAL_THRESHOLD") {
			t.Errorf("error %q does not name the variable", err)
		}
	}
	for in, want := range map[string]bool{"": false, "on": false, "OFF": true, "false": true} {
		if got, err := ParseProposals(in); err != nil || got != want {
			t.Errorf("ParseProposals(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	if _, err := ParseProposals("sometimes"); err == nil || !strings.Contains(err.Error(), "AGENTMESH_PROPOSALS") {
		t.Errorf("ParseProposals(sometimes) = %v, want an error naming the variable", err)
	}
	bad := 1.0
	if _, err := newProposals(ProposalConfig{Threshold: &bad}); err == nil {
		t.Errorf("threshold 1 accepted")
	}
}

func FuzzParseProposalThreshold(f *testing.F) {
	for _, s := range []string{"", "0.5", "1e-3", "-0", "Inf", "0x1p-2", " 0.9 "} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := ParseProposalThreshold(s)
		if err == nil && !(v >= 0 && v < 1) {
			t.Fatalf("ParseProposalThreshold(%q) = %v, outside [0, 1)", s, v)
		}
	})
}

func TestProposalFit(t *testing.T) {
	p := proposals{threshold: 0.5}
	if p.fit(nil) {
		t.Errorf("no candidate fits")
	}
	if p.fit([]*agentmeshv1.RoutingCandidate{{Capability: 0.5}, {Capability: 0.2}}) {
		t.Errorf("a capability of exactly the threshold fits")
	}
	if !p.fit([]*agentmeshv1.RoutingCandidate{{Capability: 0.2}, {Capability: 0.9}}) {
		t.Errorf("a capable candidate further down the ranking does not fit")
	}
}
