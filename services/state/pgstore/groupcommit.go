package pgstore

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"github.com/agentmesh/agentmesh/services/state/store"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Group commit of task writes (CreateTask without dependencies,
// Transition, AppendStep). The writes that
// wait at the same moment are sent as one pgx batch: one round trip, and
// one implicit transaction (the batch ends with a single Sync), so one
// commit for all of them. Each write's statement is its own
// compare-and-set, so one that lost a race (0 rows: another writer moved
// the task) leaves the others to commit, and its caller alone re-reads and
// re-plans. A statement that fails outright aborts the whole transaction;
// the group is then sent again one write at a time, so each caller gets its
// own error and the others still commit.

// errLostRace says a write's compare-and-set matched no row.
var errLostRace = errors.New("lost a compare-and-set race")

// updateIfUnchanged updates the task row if its last_event_seq is still
// the one the write was planned against; the statements below insert the
// write's events only then.
const updateIfUnchanged = `
WITH u AS (
  UPDATE tasks SET status = $3, attempt = $4, last_event_seq = $5, updated_at = $6, data = $7,
    prompt_tokens = $11, completion_tokens = $12, total_tokens = $13, cost_usd = $14,
    priority = $15, tags = $16, parent_task_id = $17, waiting_on = $18, finished_at = $19
  WHERE id = $1 AND last_event_seq = $2
  RETURNING id
)`

// writeSQL is a write of one event ($8, $9, $10: its type, time, data).
const writeSQL = updateIfUnchanged + `
INSERT INTO task_events (task_id, seq, type, time, data)
SELECT u.id, $5, $8, $9, $10 FROM u`

// writeManySQL is a write of several events ($8, $9, $10 and $20: their
// types, times, data and seqs, as arrays).
const writeManySQL = updateIfUnchanged + `
INSERT INTO task_events (task_id, seq, type, time, data)
SELECT u.id, e.seq, e.type, e.time, e.data
FROM u, unnest($20::bigint[], $8::smallint[], $9::timestamptz[], $10::bytea[]) AS e(seq, type, time, data)`

// rowWrite is one planned task write: its statement (writeSQL, or
// createSQL for a new task) and arguments. A statement that changes no row
// is errLostRace.
type rowWrite struct {
	id   string
	sql  string
	args []any
	// ends says the write ends the task (it appends a terminal STATUS
	// event): its group also asks, after the commit, whether anything
	// follows that end (see ends.go).
	ends bool
}

func newRowWrite(prevSeq int64, next *agentmeshv1.Task, evs ...*agentmeshv1.TaskEvent) (rowWrite, error) {
	data, err := marshal(next)
	if err != nil {
		return rowWrite{}, err
	}
	ends := false
	for _, ev := range evs {
		if ev.Type == agentmeshv1.EventType_EVENT_TYPE_STATUS && taskstate.Terminal(ev.Status) {
			ends = true
		}
	}
	g := graphCols(next)
	args := []any{
		next.Id, prevSeq, int16(next.Status), next.Attempt, next.LastEventSeq, next.UpdatedAt.AsTime(), data,
		nil, nil, nil, // the event's columns
		next.GetUsage().GetPromptTokens(), next.GetUsage().GetCompletionTokens(), next.GetUsage().GetTotalTokens(), next.GetUsage().GetCostUsd(),
		g[0], g[1], g[2], g[3], g[4],
	}
	if len(evs) == 1 {
		ev := evs[0]
		evData, err := marshal(ev)
		if err != nil {
			return rowWrite{}, err
		}
		args[7], args[8], args[9] = int16(ev.Type), ev.Time.AsTime(), evData
		return rowWrite{id: next.Id, sql: writeSQL, args: args, ends: ends}, nil
	}
	seqs, types, times, datas := make([]int64, len(evs)), make([]int16, len(evs)), make([]time.Time, len(evs)), make([][]byte, len(evs))
	for i, ev := range evs {
		if datas[i], err = marshal(ev); err != nil {
			return rowWrite{}, err
		}
		seqs[i], types[i], times[i] = ev.Seq, int16(ev.Type), ev.Time.AsTime()
	}
	args[7], args[8], args[9] = types, times, datas
	return rowWrite{id: next.Id, sql: writeManySQL, args: append(args, seqs), ends: ends}, nil
}

// flush commits a group of writes; one outcome per write: nil (committed),
// errLostRace, or the database's error.
func (s *Store) flush(ctx context.Context, ws []rowWrite) []error {
	if slices.ContainsFunc(ws, func(w rowWrite) bool { return w.ends }) {
		return s.flushEnds(ctx, ws)
	}
	errs := make([]error, len(ws))
	if len(ws) == 1 {
		errs[0] = s.writeOne(ctx, ws[0])
		return errs
	}
	order := lockOrder(ws)
	b := &pgx.Batch{}
	for _, i := range order {
		b.Queue(ws[i].sql, ws[i].args...)
	}
	br := s.pool.SendBatch(ctx, b)
	tags, batchErr := execWrites(br, order)
	if err := br.Close(); batchErr == nil {
		batchErr = err
	}
	if batchErr != nil {
		// Nothing of the group committed: each write alone decides its fate.
		for i, w := range ws {
			errs[i] = s.writeOne(ctx, w)
		}
		return errs
	}
	for i, tag := range tags {
		if tag.RowsAffected() == 0 {
			errs[i] = errLostRace
		}
	}
	return errs
}

// execWrites reads the results of a group's writes, queued in order: each
// write's command tag, at its index, until the first error.
func execWrites(br pgx.BatchResults, order []int) ([]pgconn.CommandTag, error) {
	tags := make([]pgconn.CommandTag, len(order))
	for _, i := range order {
		tag, err := br.Exec()
		if err != nil {
			return tags, err
		}
		tags[i] = tag
	}
	return tags, nil
}

// lockOrder is the order a group's statements run in: rows are locked in
// id order, so two state processes' groups cannot deadlock on each other.
func lockOrder(ws []rowWrite) []int {
	order := make([]int, len(ws))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return strings.Compare(ws[a].id, ws[b].id) })
	return order
}

// writeOne commits one write in its own statement.
func (s *Store) writeOne(ctx context.Context, w rowWrite) error {
	tag, err := s.pool.Exec(ctx, w.sql, w.args...)
	if err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "23505" { // unique_violation: a racing writer
			return errLostRace
		}
		return err
	}
	if tag.RowsAffected() == 0 {
		return errLostRace
	}
	return nil
}

// CommitStats counts the groups committed (store.GroupCommitter).
func (s *Store) CommitStats() store.CommitStats { return s.group.Stats() }

// PauseCommits holds the groups back until resume (store.GroupCommitter).
func (s *Store) PauseCommits() (resume func()) { return s.group.Pause() }

// WaitingCommits is the number of writes queued (store.GroupCommitter).
func (s *Store) WaitingCommits() int { return s.group.Waiting() }

var _ store.GroupCommitter = (*Store)(nil)
