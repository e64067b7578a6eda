package executor

import (
	"strings"
	"testing"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"google.golang.org/protobuf/types/known/durationpb"
)

func TestBudgetCheck(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	r := &modelRun{
		budget:  &agentmeshv1.Budget{MaxTokens: 100, MaxCostUsd: 0.5, MaxSteps: 3, MaxWallTime: durationpb.New(time.Minute)},
		started: now.Add(-30 * time.Second),
		now:     func() time.Time { return now },
	}
	if why := r.check(false); why != "" {
		t.Fatalf("fresh run: %q", why)
	}
	r.tokens = 100
	if why := r.check(true); why != "" {
		t.Errorf("exactly on the budget after a response: %q", why)
	}
	if why := r.check(false); why != "budget exhausted: 100 tokens used, max_tokens 100" {
		t.Errorf("before the next call: %q", why)
	}
	r.tokens, r.cost = 0, 0.75
	if why := r.check(true); why != "budget exhausted: $0.75 spent, max_cost_usd 0.5" {
		t.Errorf("cost: %q", why)
	}
	r.cost, r.turns = 0, 3
	if why := r.check(false); why != "budget exhausted: 3 steps used, max_steps 3" {
		t.Errorf("steps: %q", why)
	}
	r.turns = 0
	if d, cause := r.attemptLimit(10 * time.Minute); d != 30*time.Second || cause.Error() != "budget exhausted: 1m0s wall time used, max_wall_time 1m0s" {
		t.Errorf("attempt limit = %v %v", d, cause)
	}
	if d, cause := r.attemptLimit(10 * time.Second); d != 10*time.Second || cause.Error() != "wall time 10s exceeded" {
		t.Errorf("attempt limit = %v %v", d, cause)
	}
	r.started = now.Add(-2 * time.Minute)
	if why := r.check(false); !strings.HasPrefix(why, "budget exhausted: 2m0s wall time used, max_wall_time 1m0s") {
		t.Errorf("wall: %q", why)
	}
	if got := r.maxSteps(16); got != 3 {
		t.Errorf("maxSteps(16) = %d", got)
	}
	if got := r.maxSteps(2); got != 2 {
		t.Errorf("maxSteps(2) = %d", got)
	}
	if (&modelRun{}).check(false) != "" {
		t.Error("no budget, yet exhausted")
	}
}
