package registry

import (
	"errors"
	"strings"
	"testing"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
)

func agent(name string, skills ...string) *agentmeshv1.Agent {
	return &agentmeshv1.Agent{Name: name, Skills: skills}
}

func TestRank(t *testing.T) {
	agents := []*agentmeshv1.Agent{
		agent("generalist", "sql", "python", "web", "writing"),
		agent("sql-expert", "sql", "postgres"),
		agent("writer", "writing"),
		agent("nothing"),
	}
	tests := []struct {
		name     string
		required []string
		want     string
		wantCand []string
	}{
		{"single skill prefers the specialist", []string{"sql"}, "sql-expert", []string{"sql-expert", "generalist"}},
		{"full overlap beats partial", []string{"sql", "postgres"}, "sql-expert", []string{"sql-expert", "generalist"}},
		{"more matched skills wins", []string{"sql", "python", "writing"}, "generalist", []string{"generalist", "writer", "sql-expert"}},
		{"case and spaces ignored", []string{" SQL "}, "sql-expert", []string{"sql-expert", "generalist"}},
		{"no agent offers it", []string{"cooking"}, "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			best, cands := Rank(agents, tt.required)
			got := ""
			if best != nil {
				got = best.Name
			}
			if got != tt.want {
				t.Fatalf("best = %q, want %q", got, tt.want)
			}
			var names []string
			for _, c := range cands {
				names = append(names, c.Agent)
				if c.Score <= 0 || c.Score > 1 {
					t.Errorf("candidate %s score %v outside (0,1]", c.Agent, c.Score)
				}
			}
			if strings.Join(names, ",") != strings.Join(tt.wantCand, ",") {
				t.Errorf("candidates = %v, want %v", names, tt.wantCand)
			}
		})
	}
}

func TestValidateAgent(t *testing.T) {
	temp := float32(3)
	tests := []struct {
		name      string
		agent     *agentmeshv1.Agent
		wantCode  string
		wantField string
	}{
		{"valid", &agentmeshv1.Agent{Name: "helper", Tools: []string{"echo", "current_time"}, Skills: []string{"general"}}, "", ""},
		{"missing", nil, bus.CodeInvalidArgument, "agent"},
		{"empty name", &agentmeshv1.Agent{}, bus.CodeInvalidArgument, "agent.name"},
		{"upper-case name", &agentmeshv1.Agent{Name: "Helper"}, bus.CodeInvalidArgument, "agent.name"},
		{"name with dot", &agentmeshv1.Agent{Name: "a.b"}, bus.CodeInvalidArgument, "agent.name"},
		{"unknown tool", &agentmeshv1.Agent{Name: "a", Tools: []string{"rm_rf"}}, bus.CodeFailedPrecondition, "agent.tools[0]"},
		{"bad skill", &agentmeshv1.Agent{Name: "a", Skills: []string{"has space"}}, bus.CodeInvalidArgument, "agent.skills[0]"},
		{"duplicate skill", &agentmeshv1.Agent{Name: "a", Skills: []string{"x", "x"}}, bus.CodeInvalidArgument, "agent.skills[1]"},
		{"negative concurrency", &agentmeshv1.Agent{Name: "a", MaxConcurrency: -1}, bus.CodeInvalidArgument, "agent.max_concurrency"},
		{"too many steps", &agentmeshv1.Agent{Name: "a", MaxSteps: MaxSteps + 1}, bus.CodeInvalidArgument, "agent.max_steps"},
		{"bad base url", &agentmeshv1.Agent{Name: "a", Model: &agentmeshv1.ModelSettings{BaseUrl: "ftp://x"}}, bus.CodeInvalidArgument, "agent.model.base_url"},
		{"hot temperature", &agentmeshv1.Agent{Name: "a", Model: &agentmeshv1.ModelSettings{Temperature: &temp}}, bus.CodeInvalidArgument, "agent.model.temperature"},
		{"huge prompt", &agentmeshv1.Agent{Name: "a", SystemPrompt: strings.Repeat("x", MaxSystemPrompt+1)}, bus.CodeResourceExhausted, "agent.system_prompt"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := ValidateAgent(tt.agent)
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
				t.Fatalf("got code %q field %q, want %q %q", be.Code, be.Field, tt.wantCode, tt.wantField)
			}
		})
	}
}
