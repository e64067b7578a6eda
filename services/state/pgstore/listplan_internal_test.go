package pgstore

import (
	"context"
	"strings"
	"testing"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/pgtest"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"github.com/agentmesh/agentmesh/services/state/store"
	"github.com/jackc/pgx/v5"
)

// The filters on array columns are ones their GIN indexes answer. The
// resolver lists the tasks waiting on every task that ends: written as
// `$1 = ANY(waiting_on)` no index could answer it, and each end read every
// task of the org (100–500 ms at 100,000 tasks, docs/benchmarks.md). The
// table holds 5,000 blocked tasks, each waiting on a task of its own and
// tagged one of 50 tags, analysed, so that a rare value is the index's to
// find — as it is in a large org.
func TestArrayFiltersUseTheirIndexes(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, pgtest.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	seed, _, _, err := s.CreateTask(ctx, &agentmeshv1.Task{Org: "o", Title: "t", Input: "do it", Agent: "a"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.pool.Exec(ctx, `INSERT INTO tasks
		SELECT (jsonb_populate_record(NULL::tasks, to_jsonb(t) || jsonb_build_object(
			'id', t.id || '-' || g, 'status', $2::int, 'waiting_on', jsonb_build_array('w' || g), 'tags', jsonb_build_array('t' || g % 50)))).*
		FROM tasks t, generate_series(1, 5000) g WHERE t.id = $1`, seed.Id, int(taskstate.Blocked)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.pool.Exec(ctx, "ANALYZE tasks"); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		q     store.TaskQuery
		index string
	}{
		{store.TaskQuery{Org: "o", WaitingOn: "01JTASK", PageSize: 500}, "tasks_waiting_on"},
		{store.TaskQuery{WaitingOn: "01JTASK", PageSize: 1}, "tasks_waiting_on"},
		{store.TaskQuery{Org: "o", Tag: "nightly"}, "tasks_tags"}, // no task has it,
	} {
		sqlText, args, _, err := listSQL(c.q)
		if err != nil {
			t.Fatal(err)
		}
		var plan strings.Builder
		err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "SET LOCAL enable_seqscan = off"); err != nil {
				return err
			}
			rows, err := tx.Query(ctx, "EXPLAIN "+sqlText, args...)
			if err != nil {
				return err
			}
			lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
			plan.WriteString(strings.Join(lines, "\n"))
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(plan.String(), c.index) {
			t.Errorf("%s\nis planned without %s:\n%s", sqlText, c.index, plan.String())
		}
	}
}
