package pgstore

import (
	"context"
	"sync"

	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Ends nothing follows (store.Tree's Unfollowed), known with the end's own
// commit. A group holding a write that ends a task is sent as
//
//	BEGIN; the writes; COMMIT; one unfollowedSQL per end
//
// in one batch: the same single round trip as any group, and the
// questions run after the commit, each in its own snapshot. A sub-task or
// dependent committed before the end is seen; one committed after it
// re-reads its parent and acts on the end itself (state's spawned, the
// graph's recheck). The answers wait in endAnswers until state asks, right
// after the write returns, as it publishes the terminal event.

// unfollowedSQL: the task's own row (rewritten by the end, so its parent
// column is current), its unfinished sub-tasks (tasks_parent_task_id) and
// the blocked tasks still waiting on it (tasks_waiting_on or
// tasks_status_id, as the planner finds cheaper).
const unfollowedSQL = `
SELECT t.parent_task_id IS NULL
   AND NOT EXISTS (SELECT 1 FROM tasks c WHERE c.parent_task_id = t.id AND NOT (c.status = ANY($2::smallint[])))
   AND NOT EXISTS (SELECT 1 FROM tasks d WHERE d.status = $3 AND d.waiting_on @> ARRAY[t.id])
FROM tasks t WHERE t.id = $1`

var (
	endedStatuses = []int16{int16(taskstate.Completed), int16(taskstate.Failed), int16(taskstate.Cancelled)}
	blockedStatus = int16(taskstate.Blocked)
)

// flushEnds is flush for a group with at least one end (see above). The
// outcomes are flush's; the answers are kept for the ends that committed.
func (s *Store) flushEnds(ctx context.Context, ws []rowWrite) []error {
	errs := make([]error, len(ws))
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		for i := range errs {
			errs[i] = err
		}
		return errs
	}
	defer conn.Release()
	order := lockOrder(ws)
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	for _, i := range order {
		b.Queue(ws[i].sql, ws[i].args...)
	}
	b.Queue("COMMIT")
	var ends []int
	for _, i := range order {
		if ws[i].ends {
			ends = append(ends, i)
			b.Queue(unfollowedSQL, ws[i].id, endedStatuses, blockedStatus)
		}
	}
	br := conn.SendBatch(ctx, b)
	var tags []pgconn.CommandTag
	_, batchErr := br.Exec() // BEGIN
	if batchErr == nil {
		tags, batchErr = execWrites(br, order)
	}
	if batchErr == nil {
		_, batchErr = br.Exec() // COMMIT
	}
	if batchErr != nil {
		// Nothing of the group committed (the statements after the
		// failure were skipped, COMMIT among them): roll the open
		// transaction back so the connection goes back clean (the pool
		// drops one that is not idle), then each write alone decides its
		// fate, as flush does.
		br.Close()
		_, _ = conn.Exec(ctx, "ROLLBACK")
		for i, w := range ws {
			errs[i] = s.writeOne(ctx, w)
		}
		return errs
	}
	// Committed. A question that fails leaves its end unanswered: the
	// scheduler then settles and resolves it as any other.
	for _, i := range ends {
		var none bool
		if err := br.QueryRow().Scan(&none); err != nil {
			break
		}
		if tags[i].RowsAffected() > 0 {
			s.answers.put(ws[i].id, none)
		}
	}
	_ = br.Close()
	for i, tag := range tags {
		if tag.RowsAffected() == 0 {
			errs[i] = errLostRace
		}
	}
	return errs
}

// endAnswers holds, per task this process ended, whether nothing follows
// its end, until Unfollowed takes it.
type endAnswers struct {
	mu sync.Mutex
	m  map[string]bool
}

// endAnswersMax bounds the answers kept: state takes each right after its
// write, so only ends whose event was never published stay; past it the
// map starts over (an end without an answer is settled as before).
const endAnswersMax = 4096

func (a *endAnswers) put(id string, none bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.m == nil || len(a.m) >= endAnswersMax {
		a.m = make(map[string]bool)
	}
	a.m[id] = none
}

func (a *endAnswers) take(id string) (none, ok bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	none, ok = a.m[id]
	delete(a.m, id)
	return none, ok
}
