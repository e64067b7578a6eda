package pgstore

import (
	"context"
	"errors"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"github.com/agentmesh/agentmesh/services/state/store"
	"github.com/jackc/pgx/v5"
)

// RecordSubtask (see store.Tree).
func (s *Store) RecordSubtask(ctx context.Context, holderID string, sub *agentmeshv1.SubtaskEvent) (*agentmeshv1.Task, *agentmeshv1.TaskEvent, error) {
	return store.RecordSubtaskWith(ctx, s.write, s.History, s.now, holderID, sub)
}

// unfollowedSQL answers Unfollowed in one statement: the task's own row
// (rewritten by the end's commit, so its parent column is current), its
// unfinished sub-tasks (tasks_parent_task_id) and the blocked tasks still
// waiting on it.
const unfollowedSQL = `
SELECT t.parent_task_id IS NULL
   AND NOT EXISTS (SELECT 1 FROM tasks c WHERE c.parent_task_id = t.id AND NOT (c.status = ANY($2::smallint[])))
   AND NOT EXISTS (SELECT 1 FROM tasks d WHERE d.status = $3 AND t.id = ANY(d.waiting_on))
FROM tasks t WHERE t.id = $1`

// Unfollowed (see store.Tree) is exact: it reads after the end committed,
// and a sub-task or dependent committed before it is in its snapshot.
func (s *Store) Unfollowed(ctx context.Context, id string) (unfollowed, exact bool, err error) {
	ended := []int16{int16(taskstate.Completed), int16(taskstate.Failed), int16(taskstate.Cancelled)}
	err = s.pool.QueryRow(ctx, unfollowedSQL, id, ended, int16(taskstate.Blocked)).Scan(&unfollowed)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, true, nil
	}
	if err != nil {
		return false, false, dbError("unfollowed", err)
	}
	return unfollowed, true, nil
}
