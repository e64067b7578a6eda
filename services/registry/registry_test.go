package registry

import (
	"math"
	"strings"
	"testing"

	busv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/bus/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
)

func agent(name string, skills ...string) *agentmeshv1.Agent {
	return &agentmeshv1.Agent{Name: name, Skills: skills}
}

func names(cands []*agentmeshv1.RoutingCandidate) string {
	var out []string
	for _, c := range cands {
		out = append(out, c.Agent)
	}
	return strings.Join(out, ",")
}

func TestScoreCapability(t *testing.T) {
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
	}{
		{"single skill: the specialist beats the generalist", []string{"sql"}, "sql-expert,generalist"},
		{"full coverage beats partial", []string{"sql", "postgres"}, "sql-expert,generalist"},
		{"more of the required skills wins", []string{"sql", "python", "writing"}, "generalist,writer,sql-expert"},
		{"no agent offers it", []string{"cooking"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cands, ranked := Score(agents, nil, tt.required, Weights{Capability: 1})
			if got := names(cands); got != tt.want {
				t.Fatalf("candidates = %s, want %s", got, tt.want)
			}
			for i, c := range cands {
				if ranked[i].Name != c.Agent {
					t.Fatalf("ranked[%d] = %s, candidate %s", i, ranked[i].Name, c.Agent)
				}
				if c.Score <= 0 || c.Score > 1 || c.Score != c.Capability {
					t.Errorf("%s: score %v, capability %v", c.Agent, c.Score, c.Capability)
				}
			}
		})
	}
}

// An idle agent beats a saturated one of equal skill; with no load the
// tie goes by name, whatever the input order.
func TestScoreWorkloadAndTies(t *testing.T) {
	a := &agentmeshv1.Agent{Name: "alpha", Skills: []string{"sql"}, MaxConcurrency: 4}
	b := &agentmeshv1.Agent{Name: "beta", Skills: []string{"sql"}, MaxConcurrency: 4}
	busy := []*busv1.AgentStats{{Running: 4}, {Running: 0}}
	cands, _ := Score([]*agentmeshv1.Agent{a, b}, busy, []string{"sql"}, DefaultWeights)
	if got := names(cands); got != "beta,alpha" {
		t.Fatalf("idle vs saturated: %s, want beta,alpha", got)
	}
	if cands[0].Workload != 1 || cands[1].Workload != 0 || cands[1].Running != 4 {
		t.Fatalf("workload parts: %+v / %+v", cands[0], cands[1])
	}
	for _, order := range [][]*agentmeshv1.Agent{{a, b}, {b, a}} {
		cands, _ := Score(order, nil, []string{"sql"}, DefaultWeights)
		if got := names(cands); got != "alpha,beta" {
			t.Fatalf("tie: %s, want alpha,beta", got)
		}
	}
}

func TestScoreBreakdown(t *testing.T) {
	a := &agentmeshv1.Agent{Name: "a", Skills: []string{"sql", "web"}, RoutingPriority: 80}
	st := []*busv1.AgentStats{{Running: 1, Completed: 3, Failed: 1}}
	w := Weights{Capability: 0.4, Workload: 0.3, Priority: 0.2, Affinity: 0.1}
	cands, _ := Score([]*agentmeshv1.Agent{a}, st, []string{"sql", "python"}, w)
	c := cands[0]
	want := map[string][2]float64{
		"capability": {c.Capability, 0.5 * (0.8 + 0.2*0.5)},
		"workload":   {c.Workload, 0.5},
		"priority":   {c.Priority, 0.8},
		"affinity":   {c.Affinity, 4.0 / 6.0},
		"score":      {c.Score, 0.4*0.45 + 0.3*0.5 + 0.2*0.8 + 0.1*4.0/6.0},
	}
	for k, v := range want {
		if math.Abs(v[0]-v[1]) > 1e-9 {
			t.Errorf("%s = %v, want %v", k, v[0], v[1])
		}
	}
	if strings.Join(c.MatchedSkills, ",") != "sql" || strings.Join(c.MissingSkills, ",") != "python" {
		t.Errorf("matched %v missing %v", c.MatchedSkills, c.MissingSkills)
	}
	// The org's affinity can outweigh a small capability gap.
	b := &agentmeshv1.Agent{Name: "b", Skills: []string{"sql"}}
	trusted := &agentmeshv1.Agent{Name: "c", Skills: []string{"sql", "web"}}
	cands, _ = Score([]*agentmeshv1.Agent{b, trusted}, []*busv1.AgentStats{{Failed: 5}, {Completed: 20}}, []string{"sql"}, Weights{Capability: 0.1, Affinity: 0.9})
	if got := names(cands); got != "c,b" {
		t.Fatalf("affinity: %s, want c,b", got)
	}
}

func TestParseWeights(t *testing.T) {
	w, err := ParseWeights("capability=0.4, workload=0.3,priority=0.2,affinity=0.1")
	if err != nil || w != DefaultWeights {
		t.Fatalf("ParseWeights = %+v, %v", w, err)
	}
	if w, err := ParseWeights(""); err != nil || w != DefaultWeights {
		t.Fatalf("empty: %+v, %v", w, err)
	}
	if w, err := ParseWeights("capability=1"); err != nil || w != (Weights{Capability: 1}) {
		t.Fatalf("one weight: %+v, %v", w, err)
	}
	for in, mention := range map[string]string{
		"capability=-0.1":            "capability",
		"workload=abc":               "workload",
		"capability=NaN":             "capability",
		"speed=1":                    "speed",
		"capability":                 "capability",
		"capability=0,workload=0":    "above 0",
		"affinity=0.1,affinity=0.2":  "affinity",
		"capability=1,priority=+Inf": "priority",
	} {
		_, err := ParseWeights(in)
		if err == nil || !strings.Contains(err.Error(), mention) {
			t.Errorf("ParseWeights(%q) = %v, want an error naming %q", in, err, mention)
		}
	}
}

func FuzzParseWeights(f *testing.F) {
	f.Add("capability=0.4,workload=0.3,priority=0.2,affinity=0.1")
	f.Add("capability=-1")
	f.Add("=,=")
	f.Fuzz(func(t *testing.T, s string) {
		w, err := ParseWeights(s)
		if err != nil {
			return
		}
		for _, v := range []float64{w.Capability, w.Workload, w.Priority, w.Affinity} {
			if v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
				t.Fatalf("accepted %q as %+v", s, w)
			}
		}
		if !(w.sum() > 0) {
			t.Fatalf("accepted %q with sum %v", s, w.sum())
		}
	})
}
