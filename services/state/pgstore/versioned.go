package pgstore

import (
	"context"

	"github.com/agentmesh/agentmesh/pkg/bus"
)

// Agents and skills are versioned rows keyed by (org, name), written by one
// loop: read the row, let the plan (store.PlanAgent, store.PlanSkill)
// decide what to write, then insert it (ON CONFLICT DO NOTHING) if there
// was none or update it WHERE version is the one read; when no row was
// written another writer came in between: read and plan again, at most
// maxRetries times.

// versioned is one write of a versioned row of type T.
type versioned[T any] struct {
	kind string // "agent" or "skill", in errors
	name string
	// get reads the row (nil when absent); plan makes the row to write
	// from it; write inserts next when cur is nil, else updates cur's
	// version to next, and reports whether it wrote a row.
	get   func(ctx context.Context) (T, error)
	plan  func(cur T) (T, error)
	write func(ctx context.Context, cur, next T) (bool, error)
}

// put runs the loop and returns the row written.
func (v versioned[T]) put(ctx context.Context) (T, error) {
	var zero T
	for range maxRetries {
		cur, err := v.get(ctx)
		if err != nil {
			return zero, err
		}
		next, err := v.plan(cur)
		if err != nil {
			return zero, err
		}
		won, err := v.write(ctx, cur, next)
		if err != nil {
			return zero, err
		}
		if won {
			return next, nil
		}
		// Lost a race: re-read, and let the plan decide again.
	}
	return zero, bus.Errorf(bus.CodeConflict, "%s %q: too much contention, retry", v.kind, v.name)
}
