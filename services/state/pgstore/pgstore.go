// Package pgstore is the Postgres implementation of store.Store, the
// production system of record. It owns three tables (migrations embedded
// and applied by Open with goose):
//
//	tasks        one row per task: the filter columns (org, agent, status,
//	             attempt, last_event_seq, idempotency_key, times) and data,
//	             the agentmesh.v1.Task protobuf
//	task_events  the task's history: (task_id, seq) → agentmesh.v1.TaskEvent
//	agents       the agent catalogue: (org, name) → version, skills,
//	             agentmesh.v1.Agent; org '' holds the shared agents
//
// and those of migration 00080 (memory.go): working_state, memories,
// memory_counters, memory_forgotten and threads. Migration 90 is in Go
// (keynames.go): api_keys.name and its unique index.
//
// The tasks row also keeps the task's usage totals in columns
// (prompt_tokens, completion_tokens, total_tokens, cost_usd), written with
// the data by every write, so Usage sums them in SQL.
//
// What a write does is decided by the shared planning in package store; this
// package only persists it. Every task write is one statement that updates
// the task row with compare-and-set on last_event_seq and inserts the event
// only when the update matched; a lost race re-reads and re-plans, a
// bounded number of times. The statements of the writes waiting at the same
// moment are sent as one batch and commit as one transaction (group
// commit, groupcommit.go); each caller is answered after that commit.
package pgstore

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/services/state/store"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
	"google.golang.org/protobuf/proto"
)

//go:embed migrations/*.sql
var migrations embed.FS

// maxRetries bounds the re-read/re-plan loop of a write that lost a
// compare-and-set.
const maxRetries = 64

// Store is the Postgres store. It is safe for concurrent use.
type Store struct {
	pool *pgxpool.Pool
	now  func() time.Time
	// cache saves the read before a write (see writeCache).
	cache writeCache
	// group commits concurrent task writes together (groupcommit.go).
	group *store.GroupCommit[rowWrite]
	// answers holds whether anything follows the ends this process
	// committed, until state asks (ends.go).
	answers endAnswers
}

var _ store.Store = (*Store)(nil)

// Open connects to url, applies the migrations and returns the store.
func Open(ctx context.Context, url string) (*Store, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("pgstore: parse url: %w", err)
	}
	if err := migrate(ctx, cfg.ConnConfig); err != nil {
		return nil, err
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("pgstore: connect: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("pgstore: ping: %w", err)
	}
	s := &Store{pool: pool, now: time.Now}
	s.group = store.NewGroupCommit(s.flush)
	return s, nil
}

// migrate applies the embedded migrations under a Postgres advisory lock,
// so several state services starting at once migrate once.
func migrate(ctx context.Context, cc *pgx.ConnConfig) error {
	db := stdlib.OpenDB(*cc.Copy())
	defer db.Close()
	p, err := migrator(db)
	if err != nil {
		return err
	}
	if _, err := p.Up(ctx); err != nil {
		return fmt.Errorf("pgstore: migrate: %w", err)
	}
	return nil
}

// migrator is the goose provider of the embedded migrations (and the Go
// one, keynames.go) on db, under a Postgres advisory lock.
func migrator(db *sql.DB) (*goose.Provider, error) {
	sub, err := fs.Sub(migrations, "migrations")
	if err != nil {
		return nil, fmt.Errorf("pgstore: migrations: %w", err)
	}
	locker, err := lock.NewPostgresSessionLocker()
	if err != nil {
		return nil, fmt.Errorf("pgstore: migration lock: %w", err)
	}
	p, err := goose.NewProvider(goose.DialectPostgres, db, sub, goose.WithSessionLocker(locker),
		goose.WithGoMigrations(keyNamesMigration))
	if err != nil {
		return nil, fmt.Errorf("pgstore: migrations: %w", err)
	}
	return p, nil
}

// Close closes the pool.
func (s *Store) Close() error {
	s.pool.Close()
	return nil
}

func marshal(m proto.Message) ([]byte, error) {
	b, err := proto.Marshal(m)
	if err != nil {
		return nil, dbError("marshal", err)
	}
	return b, nil
}

func decodeTask(b []byte) (*agentmeshv1.Task, error) {
	t := &agentmeshv1.Task{}
	if err := proto.Unmarshal(b, t); err != nil {
		return nil, dbError("decode task", err)
	}
	return t, nil
}

// createSQL inserts a task and its two events in one statement; a
// duplicate idempotency key makes it insert nothing.
const createSQL = `
WITH t AS (
  INSERT INTO tasks (id, org, agent, status, attempt, last_event_seq, idempotency_key, created_at, updated_at, data,
                     prompt_tokens, completion_tokens, total_tokens, cost_usd,
                     priority, tags, parent_task_id, waiting_on, finished_at)
  VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, 0, 0, 0, 0, $19, $20, $21, $22, $23)
  ON CONFLICT (org, idempotency_key) WHERE idempotency_key <> '' DO NOTHING
  RETURNING id
)
INSERT INTO task_events (task_id, seq, type, time, data)
SELECT t.id, e.seq, e.type, e.time, e.data FROM t,
  (VALUES ($11::bigint, $12::smallint, $13::timestamptz, $14::bytea),
          ($15::bigint, $16::smallint, $17::timestamptz, $18::bytea)) AS e(seq, type, time, data)`

// CreateTask inserts the task and its two events in one statement, committed
// with the writes waiting at the same moment (group commit). A concurrent
// duplicate idempotency key makes the insert do nothing; the existing task
// is then returned.
func (s *Store) CreateTask(ctx context.Context, t *agentmeshv1.Task) (*agentmeshv1.Task, []*agentmeshv1.TaskEvent, bool, error) {
	if t == nil {
		return nil, nil, false, bus.FieldError("task", "a task is required")
	}
	if t.IdempotencyKey != "" {
		if cur, err := s.keyed(ctx, t); err == nil || !errors.Is(err, bus.ErrNotFound) {
			return cur, nil, false, err
		}
	}
	if len(t.DependsOn) > 0 {
		return s.createWithDeps(ctx, t)
	}
	task, events := store.PlanCreate(t, s.now())
	data, err := marshal(task)
	if err != nil {
		return nil, nil, false, err
	}
	ev1, err := marshal(events[0])
	if err != nil {
		return nil, nil, false, err
	}
	ev2, err := marshal(events[1])
	if err != nil {
		return nil, nil, false, err
	}
	g := graphCols(task)
	err = s.group.Do(ctx, rowWrite{id: task.Id, sql: createSQL, args: []any{
		task.Id, task.Org, task.Agent, int16(task.Status), task.Attempt, task.LastEventSeq, task.IdempotencyKey,
		task.CreatedAt.AsTime(), task.UpdatedAt.AsTime(), data,
		events[0].Seq, int16(events[0].Type), events[0].Time.AsTime(), ev1,
		events[1].Seq, int16(events[1].Type), events[1].Time.AsTime(), ev2,
		g[0], g[1], g[2], g[3], g[4]}})
	if err != nil && !errors.Is(err, errLostRace) {
		return nil, nil, false, dbError("create task", err)
	}
	if err != nil {
		// Nothing inserted: another create with the same key won.
		cur, err := s.keyed(ctx, t)
		if err != nil {
			return nil, nil, false, fmt.Errorf("idempotency key %q lost a race, then: %w", t.IdempotencyKey, err)
		}
		return cur, nil, false, nil
	}
	s.cache.put(task)
	return task, events, true, nil
}

// keyed returns the org's task with t's idempotency key when t is a retry
// of the request that created it (store.SameRequest).
func (s *Store) keyed(ctx context.Context, t *agentmeshv1.Task) (*agentmeshv1.Task, error) {
	cur, err := s.byKey(ctx, t.Org, t.IdempotencyKey)
	if err != nil {
		return nil, err
	}
	if err := store.SameRequest(cur, t); err != nil {
		return nil, err
	}
	return cur, nil
}

func (s *Store) byKey(ctx context.Context, org, key string) (*agentmeshv1.Task, error) {
	var data []byte
	err := s.pool.QueryRow(ctx, `SELECT data FROM tasks WHERE org = $1 AND idempotency_key = $2 AND idempotency_key <> ''`, org, key).Scan(&data)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, bus.Errorf(bus.CodeNotFound, "no task with idempotency key %q", key)
	}
	if err != nil {
		return nil, dbError("get task by idempotency key", err)
	}
	return decodeTask(data)
}

// GetTask returns the task or not_found.
func (s *Store) GetTask(ctx context.Context, id string) (*agentmeshv1.Task, error) {
	var data []byte
	err := s.pool.QueryRow(ctx, `SELECT data FROM tasks WHERE id = $1`, id).Scan(&data)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, store.TaskNotFound(id)
	}
	if err != nil {
		return nil, dbError("get task", err)
	}
	return decodeTask(data)
}

// listSQL is ListTasks' query for q, its arguments and the page size.
func listSQL(q store.TaskQuery) (string, []any, int, error) {
	after, err := store.DecodeToken(q.PageToken)
	if err != nil {
		return "", nil, 0, err
	}
	var (
		where []string
		args  []any
	)
	arg := func(v any) string {
		args = append(args, v)
		return fmt.Sprintf("$%d", len(args))
	}
	if q.Org != "" {
		where = append(where, "org = "+arg(q.Org))
	}
	if q.Agent != "" {
		where = append(where, "agent = "+arg(q.Agent))
	}
	if len(q.Statuses) > 0 {
		st := make([]int16, len(q.Statuses))
		for i, v := range q.Statuses {
			st[i] = int16(v)
		}
		where = append(where, "status = ANY("+arg(st)+"::smallint[])")
	}
	if !q.CreatedAfter.IsZero() {
		where = append(where, "created_at > "+arg(q.CreatedAfter))
	}
	if !q.CreatedBefore.IsZero() {
		where = append(where, "created_at < "+arg(q.CreatedBefore))
	}
	if !q.UpdatedBefore.IsZero() {
		where = append(where, "updated_at < "+arg(q.UpdatedBefore))
	}
	where = graphWhere(q, where, arg)
	if after != "" {
		where = append(where, "id < "+arg(after))
	}
	n := store.PageSize(q.PageSize)
	sqlText := "SELECT data FROM tasks"
	if len(where) > 0 {
		sqlText += " WHERE " + strings.Join(where, " AND ")
	}
	sqlText += " ORDER BY id DESC LIMIT " + arg(n+1)
	return sqlText, args, n, nil
}

// ListTasks returns one page of tasks newest first; the page token is the
// last id of the previous page (keyset pagination).
func (s *Store) ListTasks(ctx context.Context, q store.TaskQuery) ([]*agentmeshv1.Task, string, error) {
	sqlText, args, n, err := listSQL(q)
	if err != nil {
		return nil, "", err
	}
	rows, err := s.pool.Query(ctx, sqlText, args...)
	if err != nil {
		return nil, "", dbError("list tasks", err)
	}
	datas, err := pgx.CollectRows(rows, pgx.RowTo[[]byte])
	if err != nil {
		return nil, "", dbError("list tasks", err)
	}
	tasks := make([]*agentmeshv1.Task, 0, min(len(datas), n))
	for _, d := range datas[:min(len(datas), n)] {
		t, err := decodeTask(d)
		if err != nil {
			return nil, "", err
		}
		tasks = append(tasks, t)
	}
	next := ""
	if len(datas) > n {
		next = store.EncodeToken(tasks[len(tasks)-1].Id)
	}
	return tasks, next, nil
}

// write runs the compare-and-set loop shared by Transition and AppendStep:
// read (or take the cached row), plan, then commit the update-if-unchanged
// plus the event insert through the group commit (groupcommit.go), with
// the writes of other tasks waiting at the same moment.
func (s *Store) write(ctx context.Context, id string, plan func(cur *agentmeshv1.Task) (*agentmeshv1.Task, *agentmeshv1.TaskEvent, error)) (*agentmeshv1.Task, *agentmeshv1.TaskEvent, error) {
	next, evs, err := s.writeEvents(ctx, id, store.OneEvent(plan))
	if err != nil {
		return nil, nil, err
	}
	return next, evs[0], nil
}

// writeEvents is write for a plan of one or more events: one statement
// updates the row and inserts them all.
func (s *Store) writeEvents(ctx context.Context, id string, plan store.WritePlan) (*agentmeshv1.Task, []*agentmeshv1.TaskEvent, error) {
	for range maxRetries {
		cur, cached := s.cache.get(id), true
		if cur == nil {
			var err error
			if cur, err = s.GetTask(ctx, id); err != nil {
				return nil, nil, err
			}
			cached = false
		}
		next, evs, err := plan(cur)
		if err != nil && cached {
			// The cached row may be behind: decide on a fresh read.
			s.cache.forget(id)
			continue
		}
		if err != nil {
			return nil, nil, err
		}
		w, err := newRowWrite(cur.LastEventSeq, next, evs...)
		if err != nil {
			return nil, nil, err
		}
		err = s.group.Do(ctx, w)
		if err == nil {
			s.cache.put(next)
			return next, evs, nil
		}
		if !errors.Is(err, errLostRace) {
			return nil, nil, dbError("write task "+id, err)
		}
		s.cache.forget(id) // another writer got there first: re-read
		if err := ctx.Err(); err != nil {
			return nil, nil, dbError("write task "+id, err)
		}
	}
	return nil, nil, bus.Errorf(bus.CodeConflict, "task %s: too much contention, retry", id)
}

// Transition changes a task's status (see store.Store).
func (s *Store) Transition(ctx context.Context, tr store.Transition) (*agentmeshv1.Task, *agentmeshv1.TaskEvent, error) {
	return s.write(ctx, tr.TaskID, func(cur *agentmeshv1.Task) (*agentmeshv1.Task, *agentmeshv1.TaskEvent, error) {
		return store.PlanTransition(cur, tr, s.now())
	})
}

// AppendStep checkpoints a step (see store.Store). It is idempotent on
// (task, attempt, step index): a retry of a committed step returns it.
func (s *Store) AppendStep(ctx context.Context, taskID string, attempt int32, step *agentmeshv1.Step) (*agentmeshv1.Task, *agentmeshv1.TaskEvent, error) {
	return store.AppendStepBy(ctx, s.Checkpoint, taskID, attempt, step)
}

// Checkpoint appends steps, then tr, in one statement (see store.Store).
func (s *Store) Checkpoint(ctx context.Context, taskID string, attempt int32, steps []*agentmeshv1.Step, tr *store.Transition) (*agentmeshv1.Task, []*agentmeshv1.TaskEvent, error) {
	return store.CheckpointOnce(ctx, s.History, s.now, store.CheckpointArgs{Attempt: attempt, Steps: steps, Transition: tr}, func(plan store.WritePlan) (*agentmeshv1.Task, []*agentmeshv1.TaskEvent, error) {
		return s.writeEvents(ctx, taskID, plan)
	})
}

// Usage sums the usage columns of the matching tasks; rows written before
// those columns existed (NULLs) are summed from their data.
func (s *Store) Usage(ctx context.Context, org, agent string, from, to time.Time) (*agentmeshv1.Usage, int64, error) {
	var (
		where []string
		args  []any
	)
	arg := func(v any) string {
		args = append(args, v)
		return fmt.Sprintf("$%d", len(args))
	}
	if org != "" {
		where = append(where, "org = "+arg(org))
	}
	if agent != "" {
		where = append(where, "agent = "+arg(agent))
	}
	if !from.IsZero() {
		where = append(where, "created_at > "+arg(from))
	}
	if !to.IsZero() {
		where = append(where, "created_at < "+arg(to))
	}
	cond := "TRUE"
	if len(where) > 0 {
		cond = strings.Join(where, " AND ")
	}
	sum := &agentmeshv1.Usage{}
	var n int64
	err := s.pool.QueryRow(ctx, `
SELECT count(*), COALESCE(sum(prompt_tokens), 0)::bigint, COALESCE(sum(completion_tokens), 0)::bigint,
       COALESCE(sum(total_tokens), 0)::bigint, COALESCE(sum(cost_usd), 0)::double precision
FROM tasks WHERE `+cond+` AND total_tokens IS NOT NULL`, args...).Scan(&n, &sum.PromptTokens, &sum.CompletionTokens, &sum.TotalTokens, &sum.CostUsd)
	if err != nil {
		return nil, 0, dbError("usage", err)
	}
	rows, err := s.pool.Query(ctx, `SELECT data FROM tasks WHERE `+cond+` AND total_tokens IS NULL`, args...)
	if err != nil {
		return nil, 0, dbError("usage", err)
	}
	datas, err := pgx.CollectRows(rows, pgx.RowTo[[]byte])
	if err != nil {
		return nil, 0, dbError("usage", err)
	}
	for _, d := range datas {
		t, err := decodeTask(d)
		if err != nil {
			return nil, 0, err
		}
		store.AddUsage(sum, t.GetUsage())
		n++
	}
	return sum, n, nil
}

// History returns events after afterSeq, oldest first.
func (s *Store) History(ctx context.Context, taskID string, afterSeq int64, limit int) ([]*agentmeshv1.TaskEvent, error) {
	if limit <= 0 || limit > store.MaxPageSize {
		limit = store.MaxPageSize
	}
	rows, err := s.pool.Query(ctx, `SELECT data FROM task_events WHERE task_id = $1 AND seq > $2 ORDER BY seq LIMIT $3`, taskID, afterSeq, limit)
	if err != nil {
		return nil, dbError("history", err)
	}
	datas, err := pgx.CollectRows(rows, pgx.RowTo[[]byte])
	if err != nil {
		return nil, dbError("history", err)
	}
	if len(datas) == 0 {
		var one int
		err := s.pool.QueryRow(ctx, `SELECT 1 FROM tasks WHERE id = $1`, taskID).Scan(&one)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil, store.TaskNotFound(taskID)
		}
		if err != nil {
			return nil, dbError("history", err)
		}
		return nil, nil
	}
	events := make([]*agentmeshv1.TaskEvent, len(datas))
	for i, d := range datas {
		ev := &agentmeshv1.TaskEvent{}
		if err := proto.Unmarshal(d, ev); err != nil {
			return nil, dbError("decode event", err)
		}
		events[i] = ev
	}
	return events, nil
}

func (s *Store) getAgent(ctx context.Context, org, name string) (*agentmeshv1.Agent, error) {
	var data []byte
	err := s.pool.QueryRow(ctx, `SELECT data FROM agents WHERE org = $1 AND name = $2`, org, name).Scan(&data)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, dbError("get agent", err)
	}
	a := &agentmeshv1.Agent{}
	if err := proto.Unmarshal(data, a); err != nil {
		return nil, dbError("decode agent", err)
	}
	a.Org = org
	return a, nil
}

// PutAgent creates or replaces an agent (see store.Store).
func (s *Store) PutAgent(ctx context.Context, a *agentmeshv1.Agent, create bool, expectedVersion int64) (*agentmeshv1.Agent, error) {
	if a == nil || a.Name == "" {
		return nil, bus.FieldError("agent.name", "a name is required")
	}
	return versioned[*agentmeshv1.Agent]{
		kind: "agent", name: a.Name,
		get: func(ctx context.Context) (*agentmeshv1.Agent, error) { return s.getAgent(ctx, a.Org, a.Name) },
		plan: func(cur *agentmeshv1.Agent) (*agentmeshv1.Agent, error) {
			return store.PlanAgent(cur, a, create, expectedVersion, s.now())
		},
		write: s.writeAgent,
	}.put(ctx)
}

// writeAgent inserts next (cur nil) or updates cur's version to next, and
// reports whether it wrote the row.
func (s *Store) writeAgent(ctx context.Context, cur, next *agentmeshv1.Agent) (bool, error) {
	data, err := marshal(next)
	if err != nil {
		return false, err
	}
	skills := next.Skills
	if skills == nil {
		skills = []string{}
	}
	var tag pgconn.CommandTag
	if cur == nil {
		tag, err = s.pool.Exec(ctx, `INSERT INTO agents (org, name, version, skills, updated_at, data) VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (org, name) DO NOTHING`,
			next.Org, next.Name, next.Version, skills, next.UpdatedAt.AsTime(), data)
	} else {
		tag, err = s.pool.Exec(ctx, `UPDATE agents SET version = $3, skills = $4, updated_at = $5, data = $6 WHERE org = $1 AND name = $2 AND version = $7`,
			next.Org, next.Name, next.Version, skills, next.UpdatedAt.AsTime(), data, cur.Version)
	}
	if err != nil {
		return false, dbError("put agent", err)
	}
	return tag.RowsAffected() == 1, nil
}

// GetAgent returns org's agent or not_found.
func (s *Store) GetAgent(ctx context.Context, org, name string) (*agentmeshv1.Agent, error) {
	a, err := s.getAgent(ctx, org, name)
	if err != nil {
		return nil, err
	}
	if a == nil {
		return nil, store.AgentNotFound(name)
	}
	return a, nil
}

// ListAgents returns q.Org's agents and the shared ones by name, one page.
func (s *Store) ListAgents(ctx context.Context, q store.AgentQuery) ([]*agentmeshv1.Agent, string, error) {
	tok, err := store.DecodeToken(q.PageToken)
	if err != nil {
		return nil, "", err
	}
	afterOrg, afterName := store.SplitAgentPos(tok)
	n := store.PageSize(q.PageSize)
	rows, err := s.pool.Query(ctx, `SELECT org, data FROM agents
		WHERE org IN ('', $1) AND ($2 = '' OR $2 = ANY(skills)) AND (name COLLATE "C", org COLLATE "C") > ($3 COLLATE "C", $4 COLLATE "C")
		ORDER BY name COLLATE "C", org COLLATE "C" LIMIT $5`,
		q.Org, q.Skill, afterName, afterOrg, n+1)
	if err != nil {
		return nil, "", dbError("list agents", err)
	}
	type row struct {
		Org  string
		Data []byte
	}
	datas, err := pgx.CollectRows(rows, pgx.RowToStructByPos[row])
	if err != nil {
		return nil, "", dbError("list agents", err)
	}
	agents := make([]*agentmeshv1.Agent, 0, min(len(datas), n))
	for _, d := range datas[:min(len(datas), n)] {
		a := &agentmeshv1.Agent{}
		if err := proto.Unmarshal(d.Data, a); err != nil {
			return nil, "", dbError("decode agent", err)
		}
		a.Org = d.Org
		agents = append(agents, a)
	}
	next := ""
	if len(datas) > n {
		last := agents[len(agents)-1]
		next = store.EncodeToken(store.AgentPos(last.Org, last.Name))
	}
	return agents, next, nil
}

// DeleteAgent removes org's agent or answers not_found.
func (s *Store) DeleteAgent(ctx context.Context, org, name string) error {
	tag, err := s.pool.Exec(ctx, `DELETE FROM agents WHERE org = $1 AND name = $2`, org, name)
	if err != nil {
		return dbError("delete agent", err)
	}
	if tag.RowsAffected() == 0 {
		return store.AgentNotFound(name)
	}
	return nil
}
