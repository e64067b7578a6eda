// Package budget checks the bounds of a task's or an agent's budget
// (agentmesh.v1.Budget) where they come in: at submit (router) and on an
// agent definition (registry). A bound of 0 (or an absent wall time) means
// "not set"; anything set must be positive, finite and below the maxima
// here, so that no budget can be negative, NaN, infinite or absurd.
package budget

import (
	"math"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
)

// The largest bounds accepted.
const (
	MaxSteps    = 1000
	MaxTokens   = 1_000_000_000
	MaxCostUSD  = 1_000_000.0
	MaxWallTime = 7 * 24 * time.Hour
)

// Validate checks b (nil is fine) and names the first bad field as
// prefix + "." + the field's name ("budget.max_cost_usd").
func Validate(prefix string, b *agentmeshv1.Budget) error {
	if b == nil {
		return nil
	}
	f := func(name string) string { return prefix + "." + name }
	if n := b.GetMaxSteps(); n < 0 || n > MaxSteps {
		return bus.FieldError(f("max_steps"), "must be between 1 and %d (0: not set), got %d", MaxSteps, n)
	}
	if n := b.GetMaxTokens(); n < 0 || n > MaxTokens {
		return bus.FieldError(f("max_tokens"), "must be between 1 and %d (0: not set), got %d", MaxTokens, n)
	}
	c := b.GetMaxCostUsd()
	switch {
	case math.IsNaN(c) || math.IsInf(c, 0):
		return bus.FieldError(f("max_cost_usd"), "must be a finite number, got %v", c)
	case c < 0 || c > MaxCostUSD:
		return bus.FieldError(f("max_cost_usd"), "must be between 0 and %g (0: not set), got %g", MaxCostUSD, c)
	}
	if w := b.GetMaxWallTime(); w != nil {
		if err := w.CheckValid(); err != nil {
			return bus.FieldError(f("max_wall_time"), "not a valid duration: %v", err)
		}
		if d := w.AsDuration(); d < 0 || d > MaxWallTime {
			return bus.FieldError(f("max_wall_time"), "must be between 0 and %s, got %s", MaxWallTime, d)
		}
	}
	return nil
}

// Merge takes each bound from the task's budget, else the agent's (nil when
// both are nil): the budget a task runs under.
func Merge(task, agent *agentmeshv1.Budget) *agentmeshv1.Budget {
	if task == nil && agent == nil {
		return nil
	}
	b := &agentmeshv1.Budget{
		MaxSteps: task.GetMaxSteps(), MaxTokens: task.GetMaxTokens(),
		MaxCostUsd: task.GetMaxCostUsd(), MaxWallTime: task.GetMaxWallTime(),
	}
	if b.MaxSteps == 0 {
		b.MaxSteps = agent.GetMaxSteps()
	}
	if b.MaxTokens == 0 {
		b.MaxTokens = agent.GetMaxTokens()
	}
	if b.MaxCostUsd == 0 {
		b.MaxCostUsd = agent.GetMaxCostUsd()
	}
	if b.MaxWallTime == nil {
		b.MaxWallTime = agent.GetMaxWallTime()
	}
	return b
}
