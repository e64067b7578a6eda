package main

import (
	"strings"
	"testing"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/services/stack"
)

// The README's delegation demo on the quickstart's own stack (the default
// script, the seeded assistant): a planner given call_agent and wait_tasks
// answers "plan: …" by delegating two halves to the assistant in one turn,
// waiting for both and combining their answers; `amctl tree` shows the two
// sub-tasks.
func TestDelegationDemoOnTheDefaultScript(t *testing.T) {
	addr := realStackWith(t, stack.Config{SeedSkills: stack.DefaultSkills(), SeedAgents: []*agentmeshv1.Agent{stack.DefaultAgent()}})
	mustRun(t, addr, []string{"agent planner created"}, "agents", "create", "planner", "--tool", "call_agent", "--tool", "wait_tasks")
	out := mustRun(t, addr, []string{"completed", "Two assistants worked on it", `You asked: \"the first half\"`, `You asked: \"the second half\"`},
		"submit", "--agent", "planner", "--wait", "plan: a picnic for six")
	m := idRe.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no task id in %q", out)
	}
	tree := mustRun(t, addr, []string{"planner", "assistant"}, "tree", m[1])
	if n := strings.Count(tree, "assistant"); n != 2 {
		t.Errorf("tree shows %d assistant sub-tasks, want 2:\n%s", n, tree)
	}
}
