package storetest

import (
	"math"
	"testing"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"github.com/agentmesh/agentmesh/services/state/store"
)

// runningWith creates a task of org and agent, runs it and checkpoints one
// model turn per usage.
func runningWith(t *testing.T, s store.Store, org, agent string, usages ...*agentmeshv1.Usage) *agentmeshv1.Task {
	t.Helper()
	task := create(t, s, newTask(org, agent, ""))
	task = move(t, s, task.Id, store.Transition{To: taskstate.Assigned, NextAttempt: true})
	task = move(t, s, task.Id, store.Transition{To: taskstate.Running, Attempt: task.Attempt})
	for i, u := range usages {
		got, _, err := s.AppendStep(ctxT(t), task.Id, task.Attempt, &agentmeshv1.Step{
			Index: int32(i), Kind: agentmeshv1.StepKind_STEP_KIND_MODEL_TURN, Content: "turn", Usage: u,
		})
		if err != nil {
			t.Fatalf("AppendStep: %v", err)
		}
		task = got
	}
	return task
}

func usage(p, c int64, cost float64) *agentmeshv1.Usage {
	return &agentmeshv1.Usage{PromptTokens: p, CompletionTokens: c, TotalTokens: p + c, CostUsd: cost}
}

func testUsage(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	type want struct {
		p, c, total int64
		cost        float64
		tasks       int64
	}
	check := func(what, org, agent string, from, to time.Time, w want) {
		t.Helper()
		got, n, err := s.Usage(ctx, org, agent, from, to)
		if err != nil {
			t.Fatalf("%s: Usage: %v", what, err)
		}
		if n != w.tasks || got.PromptTokens != w.p || got.CompletionTokens != w.c || got.TotalTokens != w.total || math.Abs(got.CostUsd-w.cost) > 1e-9 {
			t.Errorf("%s: got %v over %d tasks, want %+v", what, got, n, w)
		}
	}
	check("empty store", "acme", "", time.Time{}, time.Time{}, want{})

	t1 := runningWith(t, s, "acme", "writer", usage(10, 5, 0.01), usage(20, 10, 0.02))
	tick(t1.CreatedAt.AsTime())
	t2 := runningWith(t, s, "acme", "coder", usage(1, 1, 0.5))
	tick(t2.CreatedAt.AsTime())
	t3 := runningWith(t, s, "other", "writer", usage(100, 100, 1))
	tick(t3.CreatedAt.AsTime())
	t4 := create(t, s, newTask("acme", "writer", "")) // no steps yet
	// Finishing a task keeps its usage.
	move(t, s, t1.Id, store.Transition{To: taskstate.Completed, Attempt: t1.Attempt, Result: "done"})
	move(t, s, t2.Id, store.Transition{To: taskstate.Failed, Attempt: t2.Attempt, Reason: "budget", FailureKind: agentmeshv1.FailureKind_FAILURE_KIND_BUDGET})

	check("org", "acme", "", time.Time{}, time.Time{}, want{31, 16, 47, 0.53, 3})
	check("org and agent", "acme", "writer", time.Time{}, time.Time{}, want{30, 15, 45, 0.03, 2})
	check("other org", "other", "", time.Time{}, time.Time{}, want{100, 100, 200, 1, 1})
	check("every org", "", "", time.Time{}, time.Time{}, want{131, 116, 247, 1.53, 4})
	check("unknown org", "nobody", "", time.Time{}, time.Time{}, want{})
	check("created after t1", "acme", "", t1.CreatedAt.AsTime(), time.Time{}, want{1, 1, 2, 0.5, 2})
	check("created before t2", "acme", "", time.Time{}, t2.CreatedAt.AsTime(), want{30, 15, 45, 0.03, 1})
	check("between t1 and t4", "", "", t1.CreatedAt.AsTime(), t4.CreatedAt.AsTime(), want{101, 101, 202, 1.5, 2})

	// A step checkpointed later adds to the sums.
	runningStep := runningWith(t, s, "acme", "coder")
	if _, _, err := s.AppendStep(ctx, runningStep.Id, runningStep.Attempt, &agentmeshv1.Step{
		Index: 0, Kind: agentmeshv1.StepKind_STEP_KIND_MODEL_TURN, Usage: usage(2, 3, 0.25),
	}); err != nil {
		t.Fatal(err)
	}
	check("after another step", "acme", "coder", time.Time{}, time.Time{}, want{3, 4, 7, 0.75, 2})
}
