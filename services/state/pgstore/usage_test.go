package pgstore_test

import (
	"context"
	"math"
	"testing"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/pgtest"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"github.com/agentmesh/agentmesh/services/state/store"
	"github.com/jackc/pgx/v5"
)

// Rows written before the usage columns existed (NULLs there) are summed
// from their data.
func TestUsageOfRowsBeforeTheUsageColumns(t *testing.T) {
	ctx := context.Background()
	url := pgtest.NewDatabase(t)
	s := open(t, url)
	var ids []string
	for i := range 2 {
		task, _, _, err := s.CreateTask(ctx, &agentmeshv1.Task{Org: "acme", Agent: "writer", Input: "x"})
		if err != nil {
			t.Fatal(err)
		}
		task, _, err = s.Transition(ctx, store.Transition{TaskID: task.Id, To: taskstate.Assigned, NextAttempt: true})
		if err != nil {
			t.Fatal(err)
		}
		task, _, err = s.Transition(ctx, store.Transition{TaskID: task.Id, To: taskstate.Running, Attempt: task.Attempt})
		if err != nil {
			t.Fatal(err)
		}
		u := &agentmeshv1.Usage{PromptTokens: int64(10 * (i + 1)), CompletionTokens: 5, TotalTokens: int64(10*(i+1) + 5), CostUsd: 0.25}
		if _, _, err := s.AppendStep(ctx, task.Id, task.Attempt, &agentmeshv1.Step{Kind: agentmeshv1.StepKind_STEP_KIND_MODEL_TURN, Usage: u}); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, task.Id)
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `UPDATE tasks SET prompt_tokens = NULL, completion_tokens = NULL, total_tokens = NULL, cost_usd = NULL WHERE id = $1`, ids[0]); err != nil {
		t.Fatal(err)
	}
	got, n, err := s.Usage(ctx, "acme", "", time.Time{}, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if n != 2 || got.PromptTokens != 30 || got.CompletionTokens != 10 || got.TotalTokens != 40 || math.Abs(got.CostUsd-0.5) > 1e-12 {
		t.Fatalf("usage = %v over %d tasks, want 30/10/40 $0.5 over 2", got, n)
	}
}
