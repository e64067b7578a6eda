package pgstore

import (
	"context"
	"fmt"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"github.com/agentmesh/agentmesh/services/state/store"
	"github.com/jackc/pgx/v5"
)

// graphCols are the values of the columns of migration 00025, in order:
// priority, tags, parent_task_id, waiting_on, finished_at.
func graphCols(t *agentmeshv1.Task) [5]any {
	var parent, finished any
	if t.ParentTaskId != "" {
		parent = t.ParentTaskId
	}
	if t.FinishedAt != nil {
		finished = t.FinishedAt.AsTime()
	}
	tags, waiting := t.Tags, t.WaitingOn
	if tags == nil {
		tags = []string{}
	}
	if waiting == nil {
		waiting = []string{}
	}
	return [5]any{int16(store.EffectivePriority(t.Priority)), tags, parent, waiting, finished}
}

// graphWhere adds the conditions of the TaskQuery filters of graph.go.
func graphWhere(q store.TaskQuery, where []string, arg func(any) string) []string {
	if q.Tag != "" {
		// @> (not = ANY) so that the GIN index answers it: = ANY reads
		// every row of the org (docs/benchmarks.md, "Tasks waiting on a
		// task, on Postgres").
		where = append(where, "tags @> ARRAY["+arg(q.Tag)+"]::text[]")
	}
	if len(q.Priorities) > 0 {
		p := make([]int16, len(q.Priorities))
		for i, v := range q.Priorities {
			p[i] = int16(store.EffectivePriority(v))
		}
		where = append(where, "priority = ANY("+arg(p)+"::smallint[])")
	}
	if q.ParentTaskID != "" {
		where = append(where, "parent_task_id = "+arg(q.ParentTaskID))
	}
	if q.RootTaskID != "" {
		where = append(where, "root_task_id = "+arg(q.RootTaskID)) // migration 00050
	}
	if q.WaitingOn != "" {
		// The resolver asks this at every task's end: with = ANY it was a
		// scan of all the tasks, with @> the GIN index's lookup.
		where = append(where, "waiting_on @> ARRAY["+arg(q.WaitingOn)+"]::text[]", "status = "+arg(int16(taskstate.Blocked)))
	}
	if !q.UpdatedAfter.IsZero() {
		where = append(where, "updated_at > "+arg(q.UpdatedAfter))
	}
	if !q.LiveOrFinishedAfter.IsZero() {
		terminal := []int16{int16(taskstate.Completed), int16(taskstate.Failed), int16(taskstate.Cancelled)}
		where = append(where, "(NOT (status = ANY("+arg(terminal)+"::smallint[])) OR finished_at >= "+arg(q.LiveOrFinishedAfter)+")")
	}
	return where
}

// insertTask inserts a planned task and its events inside tx. It reports
// false when the org already has a task with its idempotency key.
func insertTask(ctx context.Context, tx pgx.Tx, task *agentmeshv1.Task, events []*agentmeshv1.TaskEvent) (bool, error) {
	data, err := marshal(task)
	if err != nil {
		return false, err
	}
	g := graphCols(task)
	tag, err := tx.Exec(ctx, `
INSERT INTO tasks (id, org, agent, status, attempt, last_event_seq, idempotency_key, created_at, updated_at, data,
                   prompt_tokens, completion_tokens, total_tokens, cost_usd,
                   priority, tags, parent_task_id, waiting_on, finished_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, 0, 0, 0, 0, $11, $12, $13, $14, $15)
ON CONFLICT (org, idempotency_key) WHERE idempotency_key <> '' DO NOTHING`,
		task.Id, task.Org, task.Agent, int16(task.Status), task.Attempt, task.LastEventSeq, task.IdempotencyKey,
		task.CreatedAt.AsTime(), task.UpdatedAt.AsTime(), data, g[0], g[1], g[2], g[3], g[4])
	if err != nil {
		return false, store.Internal("create task", err)
	}
	if tag.RowsAffected() == 0 {
		return false, nil
	}
	for _, ev := range events {
		evData, err := marshal(ev)
		if err != nil {
			return false, err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO task_events (task_id, seq, type, time, data) VALUES ($1, $2, $3, $4, $5)`,
			ev.TaskId, ev.Seq, int16(ev.Type), ev.Time.AsTime(), evData); err != nil {
			return false, store.Internal("create task event", err)
		}
	}
	return true, nil
}

// lockParents reads the parents of the given ids FOR SHARE: a parent
// cannot finish until the transaction that creates its dependent commits,
// so the resolver, which looks for dependents after the parent's event,
// always finds it.
func lockParents(ctx context.Context, tx pgx.Tx, ids []string) (map[string]*agentmeshv1.Task, error) {
	out := map[string]*agentmeshv1.Task{}
	if len(ids) == 0 {
		return out, nil
	}
	rows, err := tx.Query(ctx, `SELECT data FROM tasks WHERE id = ANY($1) ORDER BY id FOR SHARE`, ids)
	if err != nil {
		return nil, store.Internal("read parents", err)
	}
	datas, err := pgx.CollectRows(rows, pgx.RowTo[[]byte])
	if err != nil {
		return nil, store.Internal("read parents", err)
	}
	for _, d := range datas {
		t, err := decodeTask(d)
		if err != nil {
			return nil, err
		}
		out[t.Id] = t
	}
	return out, nil
}

// checkParents refuses parents that are unknown or of another org.
func checkParents(org string, ids []string, parents map[string]*agentmeshv1.Task, skip map[string]bool) error {
	if len(ids) > store.MaxDependsOn {
		return bus.FieldError("depends_on", "at most %d parents, got %d", store.MaxDependsOn, len(ids))
	}
	for _, id := range ids {
		if skip[id] {
			continue
		}
		if p := parents[id]; p == nil || p.Org != org {
			return &bus.Error{Code: bus.CodeNotFound, Field: "depends_on", Message: fmt.Sprintf("task %q not found", id)}
		}
	}
	return nil
}

func (s *Store) inTx(ctx context.Context, fn func(pgx.Tx) error) error {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return store.Internal("begin", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck
	if err := fn(tx); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return store.Internal("commit", err)
	}
	return nil
}

// createWithDeps creates a task with parents in one transaction that
// holds the parents FOR SHARE while it plans (see lockParents).
func (s *Store) createWithDeps(ctx context.Context, t *agentmeshv1.Task) (*agentmeshv1.Task, []*agentmeshv1.TaskEvent, bool, error) {
	var (
		task    *agentmeshv1.Task
		events  []*agentmeshv1.TaskEvent
		created bool
	)
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		parents, err := lockParents(ctx, tx, t.DependsOn)
		if err != nil {
			return err
		}
		if err := checkParents(t.Org, t.DependsOn, parents, nil); err != nil {
			return err
		}
		task, events, err = store.PlanCreateDeps(t, "", parents, s.now())
		if err != nil {
			return err
		}
		created, err = insertTask(ctx, tx, task, events)
		return err
	})
	if err != nil {
		return nil, nil, false, err
	}
	if !created {
		cur, err := s.keyed(ctx, t)
		if err != nil {
			return nil, nil, false, fmt.Errorf("idempotency key %q lost a race, then: %w", t.IdempotencyKey, err)
		}
		return cur, nil, false, nil
	}
	return task, events, true, nil
}

// CreateTasks records a graph in one transaction (see store.Graph).
func (s *Store) CreateTasks(ctx context.Context, tasks []*agentmeshv1.Task, refs []string) ([]*agentmeshv1.Task, [][]*agentmeshv1.TaskEvent, error) {
	if _, err := store.CheckGraph(tasks, refs); err != nil {
		return nil, nil, err
	}
	var (
		outT []*agentmeshv1.Task
		outE [][]*agentmeshv1.TaskEvent
	)
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var ids []string
		for _, t := range tasks {
			for _, d := range t.DependsOn {
				if !isRef(d) {
					ids = append(ids, d)
				}
			}
		}
		parents, err := lockParents(ctx, tx, ids)
		if err != nil {
			return err
		}
		for _, t := range tasks {
			if err := checkParents(t.Org, nonRefs(t.DependsOn), parents, nil); err != nil {
				return err
			}
		}
		outT, outE, err = store.PlanGraph(tasks, refs, parents, s.now())
		if err != nil {
			return err
		}
		for i := range outT {
			ok, err := insertTask(ctx, tx, outT[i], outE[i])
			if err != nil {
				return err
			}
			if !ok {
				return bus.FieldError(fmt.Sprintf("tasks[%d].idempotency_key", i), "the org already has a task with this key")
			}
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	return outT, outE, nil
}

func isRef(d string) bool { return len(d) > 4 && d[:4] == "ref:" }

func nonRefs(ds []string) []string {
	var out []string
	for _, d := range ds {
		if !isRef(d) {
			out = append(out, d)
		}
	}
	return out
}

// ResolveDependency (see store.Graph).
func (s *Store) ResolveDependency(ctx context.Context, taskID string, parent *agentmeshv1.DependencyResult) (*agentmeshv1.Task, *agentmeshv1.TaskEvent, error) {
	return store.ResolveWith(ctx, s.write, s.now, taskID, parent)
}

// UpdateTask (see store.Graph).
func (s *Store) UpdateTask(ctx context.Context, taskID string, upd *agentmeshv1.TaskUpdate) (*agentmeshv1.Task, *agentmeshv1.TaskEvent, error) {
	return s.write(ctx, taskID, func(cur *agentmeshv1.Task) (*agentmeshv1.Task, *agentmeshv1.TaskEvent, error) {
		var parents map[string]*agentmeshv1.Task
		if upd != nil && containsField(upd.Mask, taskstate.FieldDependsOn) {
			var err error
			parents, err = store.LoadParents(ctx, s.GetTask, &agentmeshv1.Task{Org: cur.Org, DependsOn: upd.DependsOn}, nil)
			if err != nil {
				return nil, nil, err
			}
		}
		return store.PlanUpdate(cur, upd, parents, s.now())
	})
}

func containsField(mask []string, f string) bool {
	for _, m := range mask {
		if m == f {
			return true
		}
	}
	return false
}

// DeleteTask (see store.Graph): the task's events and row in one
// transaction, only while the row is still terminal.
func (s *Store) DeleteTask(ctx context.Context, taskID string) error {
	t, err := s.GetTask(ctx, taskID)
	if err != nil {
		return err
	}
	if err := store.CheckDelete(t); err != nil {
		return err
	}
	return s.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `DELETE FROM task_events WHERE task_id = $1`, taskID); err != nil {
			return store.Internal("delete task events", err)
		}
		tag, err := tx.Exec(ctx, `DELETE FROM tasks WHERE id = $1 AND last_event_seq = $2`, taskID, t.LastEventSeq)
		if err != nil {
			return store.Internal("delete task", err)
		}
		if tag.RowsAffected() == 0 {
			return bus.Errorf(bus.CodeConflict, "task %s changed while being deleted; retry", taskID)
		}
		return nil
	})
}

// ScanTasks (see store.Graph) pages through ListTasks.
func (s *Store) ScanTasks(ctx context.Context, q store.TaskQuery, fn func(*agentmeshv1.Task) bool) error {
	q.PageSize, q.PageToken = store.MaxPageSize, ""
	for {
		tasks, next, err := s.ListTasks(ctx, q)
		if err != nil {
			return err
		}
		for _, t := range tasks {
			if !fn(t) {
				return nil
			}
		}
		if next == "" {
			return nil
		}
		q.PageToken = next
	}
}

// WaitSubtasks (see store.Delegation).
func (s *Store) WaitSubtasks(ctx context.Context, taskID string, attempt int32, node string, w *agentmeshv1.SubtaskWait) (*agentmeshv1.Task, *agentmeshv1.TaskEvent, error) {
	return store.WaitWith(ctx, s.write, s.now, store.WaitArgs{TaskID: taskID, Attempt: attempt, Node: node, Wait: w})
}

// ReleaseSubtaskWait (see store.Delegation).
func (s *Store) ReleaseSubtaskWait(ctx context.Context, taskID string) (*agentmeshv1.Task, *agentmeshv1.TaskEvent, error) {
	return store.ReleaseWaitWith(ctx, s.write, s.now, taskID)
}
