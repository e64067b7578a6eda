package e2e

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/pgtest"
	"github.com/agentmesh/agentmesh/services/registry"
)

// BenchmarkMatchAgents: one org with 1,000 agents over 100 skills (each
// agent offers 3, so a skill has ~30 agents; "common" is offered by all
// 1,000), MatchAgents through the gRPC API on the whole stack. Reports
// p50/p99 per call; and SubmitTask by skills against SubmitTask naming
// the agent (the cost matching adds to a submit).
func BenchmarkMatchAgents(b *testing.B) {
	// "no-cache": the registry lists the candidates from state on every
	// match (as before the candidate cache), for before/after in one run.
	b.Run("embedded/no-cache", func(b *testing.B) { benchMatch(b, opts{registry: registry.Config{CandidateTTL: -1}}) })
	b.Run("embedded", func(b *testing.B) { benchMatch(b, opts{}) })
	b.Run("postgres/no-cache", func(b *testing.B) {
		benchMatch(b, opts{postgres: pgtest.NewDatabase(b), registry: registry.Config{CandidateTTL: -1}})
	})
	b.Run("postgres", func(b *testing.B) { benchMatch(b, opts{postgres: pgtest.NewDatabase(b)}) })
}

func benchMatch(b *testing.B, o opts) {
	e := start(b, o)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	for i := range 100 {
		mkSkills(b, ctx, e.skills, fmt.Sprintf("skill-%02d", i))
	}
	mkSkills(b, ctx, e.skills, "common")
	for i := range 1000 {
		skills := []string{"common"}
		for _, k := range []int{i % 100, (i*7 + 3) % 100, (i*13 + 5) % 100} {
			if s := fmt.Sprintf("skill-%02d", k); !slices.Contains(skills, s) {
				skills = append(skills, s)
			}
		}
		_, err := e.agents.CreateAgent(ctx, &agentmeshv1.CreateAgentRequest{Agent: &agentmeshv1.Agent{
			Name: fmt.Sprintf("agent-%04d", i), Skills: skills, MaxConcurrency: int32(1 + i%4),
		}})
		if err != nil {
			b.Fatal(err)
		}
	}
	measure := func(name string, call func(i int) error) { measureCalls(b, name, call) }
	measure("two-skills-~60-candidates", func(i int) error {
		_, err := e.agents.MatchAgents(ctx, &agentmeshv1.MatchAgentsRequest{RequiredSkills: []string{fmt.Sprintf("skill-%02d", i%100), fmt.Sprintf("skill-%02d", (i+50)%100)}})
		return err
	})
	measure("one-skill-1000-candidates", func(i int) error {
		_, err := e.agents.MatchAgents(ctx, &agentmeshv1.MatchAgentsRequest{RequiredSkills: []string{"common"}})
		return err
	})
	measure("submit-named", func(i int) error {
		_, err := e.tasks.SubmitTask(ctx, &agentmeshv1.SubmitTaskRequest{Input: "slow bench", Agent: fmt.Sprintf("agent-%04d", i%1000)})
		return err
	})
	measure("submit-analysed-fallback", func(i int) error {
		// Neither agent nor skills: the task analysis over the org's 101
		// skills (the fallback: no model), then scored matching.
		_, err := e.tasks.SubmitTask(ctx, &agentmeshv1.SubmitTaskRequest{Input: fmt.Sprintf("slow bench: the skill %02d (a test's) please", i%100)})
		return err
	})
	measure("submit-by-two-skills", func(i int) error {
		_, err := e.tasks.SubmitTask(ctx, &agentmeshv1.SubmitTaskRequest{Input: "slow bench", RequiredSkills: []string{fmt.Sprintf("skill-%02d", i%100), fmt.Sprintf("skill-%02d", (i+50)%100)}})
		return err
	})
}
