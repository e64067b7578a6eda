package executor

import (
	"testing"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
)

func TestEphemeralServesItsSubtasks(t *testing.T) {
	own := &agentmeshv1.Agent{Name: "tr-agent", Skills: []string{"translation", "glossary"}, Ephemeral: true}
	for _, tt := range []struct {
		name   string
		own    *agentmeshv1.Agent
		agent  string
		skills []string
		want   bool
	}{
		{"named", own, "tr-agent", nil, true},
		{"another named", own, "helper", nil, false},
		{"skills it offers", own, "", []string{" Translation "}, true},
		{"a skill it lacks", own, "", []string{"translation", "sql"}, false},
		{"no skills asked", own, "", nil, false},
		{"a catalogue agent", &agentmeshv1.Agent{Name: "tr-agent", Skills: []string{"translation"}}, "tr-agent", nil, false},
		{"no agent", nil, "tr-agent", nil, false},
	} {
		if got := ephemeralFor(tt.own, tt.agent, tt.skills) != nil; got != tt.want {
			t.Errorf("%s: got %v, want %v", tt.name, got, tt.want)
		}
	}
}
