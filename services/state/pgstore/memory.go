package pgstore

// What agents keep (store.WorkingState, store.Memories, store.Threads;
// migration 00080_memory.sql).

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	busv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/bus/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/services/state/store"
	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/proto"
)

var _ store.Remembering = (*Store)(nil)

// ---- working state ----

// PutState implements store.WorkingState: an upsert that changes a row
// only for a higher revision (or over an expired entry).
func (s *Store) PutState(ctx context.Context, rec *busv1.StateRecord) (bool, error) {
	e := rec.GetEntry()
	data, err := marshal(rec)
	if err != nil {
		return false, err
	}
	tag, err := s.pool.Exec(ctx, `
INSERT INTO working_state (org, scope, scope_id, key, revision, expires_at, data) VALUES ($1, $2, $3, $4, $5, $6, $7)
ON CONFLICT (org, scope, scope_id, key) DO UPDATE
  SET revision = EXCLUDED.revision, expires_at = EXCLUDED.expires_at, data = EXCLUDED.data
  WHERE working_state.revision < EXCLUDED.revision OR working_state.expires_at <= $8`,
		e.GetOrg(), e.GetScope(), e.GetScopeId(), e.GetKey(), e.GetRevision(), e.GetExpiresAt().AsTime(), data, s.now())
	if err != nil {
		return false, dbError("put state", err)
	}
	return tag.RowsAffected() == 1, nil
}

func decodeStateRecord(b []byte) (*busv1.StateRecord, error) {
	r := &busv1.StateRecord{}
	if err := proto.Unmarshal(b, r); err != nil {
		return nil, dbError("decode state entry", err)
	}
	return r, nil
}

// GetState implements store.WorkingState.
func (s *Store) GetState(ctx context.Context, k store.StateKey, now time.Time) (*busv1.StateRecord, error) {
	var data []byte
	err := s.pool.QueryRow(ctx, `SELECT data FROM working_state WHERE org = $1 AND scope = $2 AND scope_id = $3 AND key = $4 AND expires_at > $5`,
		k.Org, k.Scope, k.ScopeID, k.Key, now).Scan(&data)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, bus.Errorf(bus.CodeNotFound, "state key %q not found", k.Key)
	}
	if err != nil {
		return nil, dbError("get state", err)
	}
	return decodeStateRecord(data)
}

// DeleteState implements store.WorkingState.
func (s *Store) DeleteState(ctx context.Context, k store.StateKey, upTo int64) (bool, error) {
	tag, err := s.pool.Exec(ctx, `DELETE FROM working_state WHERE org = $1 AND scope = $2 AND scope_id = $3 AND key = $4 AND ($5 = 0 OR revision <= $5)`,
		k.Org, k.Scope, k.ScopeID, k.Key, upTo)
	if err != nil {
		return false, dbError("delete state", err)
	}
	return tag.RowsAffected() > 0, nil
}

// ListState implements store.WorkingState.
func (s *Store) ListState(ctx context.Context, q store.StateQuery) ([]*busv1.StateRecord, string, error) {
	after, err := store.DecodeToken(q.PageToken)
	if err != nil {
		return nil, "", err
	}
	n := store.PageSize(q.PageSize)
	rows, err := s.pool.Query(ctx, `
SELECT key, data FROM working_state
WHERE org = $1 AND scope = $2 AND scope_id = $3 AND starts_with(key, $4) AND key COLLATE "C" > $5 AND expires_at > $6
ORDER BY key COLLATE "C" LIMIT $7`, q.Org, q.Scope, q.ScopeID, q.Prefix, after, q.Now, n+1)
	if err != nil {
		return nil, "", dbError("list state", err)
	}
	defer rows.Close()
	var out []*busv1.StateRecord
	var keys []string
	for rows.Next() {
		var key string
		var data []byte
		if err := rows.Scan(&key, &data); err != nil {
			return nil, "", dbError("list state", err)
		}
		r, err := decodeStateRecord(data)
		if err != nil {
			return nil, "", err
		}
		out, keys = append(out, r), append(keys, key)
	}
	if err := rows.Err(); err != nil {
		return nil, "", dbError("list state", err)
	}
	next := ""
	if len(out) > n {
		out = out[:n]
		next = store.EncodeToken(keys[n-1])
	}
	return out, next, nil
}

// DeleteExpiredState implements store.WorkingState.
func (s *Store) DeleteExpiredState(ctx context.Context, t time.Time) (int, error) {
	tag, err := s.pool.Exec(ctx, `DELETE FROM working_state WHERE expires_at < $1`, t)
	if err != nil {
		return 0, dbError("delete expired state", err)
	}
	return int(tag.RowsAffected()), nil
}

// ---- memories ----

// putMemorySQL takes the org's next seq (locking its counter row to the
// commit) and inserts the memory unless its id exists.
const putMemorySQL = `
WITH c AS (
  INSERT INTO memory_counters (org, seq) VALUES ($1, 1)
  ON CONFLICT (org) DO UPDATE SET seq = memory_counters.seq + 1
  RETURNING seq
)
INSERT INTO memories (org, id, seq, scope, scope_id, tags, created_at, data, embedding)
SELECT $1, $2, c.seq, $3, $4, $5, $6, $7, $8 FROM c
ON CONFLICT (org, id) DO NOTHING
RETURNING seq`

// PutMemory implements store.Memories.
func (s *Store) PutMemory(ctx context.Context, rec *busv1.MemoryRecord) (*busv1.MemoryRecord, bool, error) {
	m := rec.GetMemory()
	data, err := marshal(m)
	if err != nil {
		return nil, false, err
	}
	tags := m.GetTags()
	if tags == nil {
		tags = []string{}
	}
	var seq int64
	err = s.pool.QueryRow(ctx, putMemorySQL, m.GetOrg(), m.GetId(), m.GetScope(), m.GetScopeId(), tags,
		m.GetCreatedAt().AsTime(), data, rec.GetEmbedding()).Scan(&seq)
	if err == nil {
		return rec, true, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return nil, false, dbError("put memory", err)
	}
	old, err := s.GetMemory(ctx, m.GetOrg(), m.GetId())
	if errors.Is(err, bus.ErrNotFound) {
		return nil, false, bus.Errorf(bus.CodeFailedPrecondition, "memory %s was deleted", m.GetId())
	}
	return old, false, err
}

func decodeMemory(data []byte) (*agentmeshv1.Memory, error) {
	m := &agentmeshv1.Memory{}
	if err := proto.Unmarshal(data, m); err != nil {
		return nil, dbError("decode memory", err)
	}
	return m, nil
}

// GetMemory implements store.Memories.
func (s *Store) GetMemory(ctx context.Context, org, id string) (*busv1.MemoryRecord, error) {
	var data, emb []byte
	err := s.pool.QueryRow(ctx, `SELECT data, embedding FROM memories WHERE org = $1 AND id = $2 AND deleted_at IS NULL`, org, id).Scan(&data, &emb)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, bus.Errorf(bus.CodeNotFound, "memory %q not found", id)
	}
	if err != nil {
		return nil, dbError("get memory", err)
	}
	m, err := decodeMemory(data)
	if err != nil {
		return nil, err
	}
	return &busv1.MemoryRecord{Memory: m, Embedding: emb}, nil
}

// ListMemories implements store.Memories (newest first: by seq).
func (s *Store) ListMemories(ctx context.Context, q store.MemoryQuery) ([]*agentmeshv1.Memory, string, error) {
	tok, err := store.DecodeToken(q.PageToken)
	if err != nil {
		return nil, "", err
	}
	var before int64
	if tok != "" {
		if before, err = strconv.ParseInt(tok, 10, 64); err != nil {
			return nil, "", bus.FieldError("page_token", "malformed page token")
		}
	}
	n := store.PageSize(q.PageSize)
	rows, err := s.pool.Query(ctx, `
SELECT seq, data FROM memories
WHERE org = $1 AND deleted_at IS NULL AND ($2 = '' OR scope = $2) AND ($3 = '' OR scope_id = $3)
  AND ($4 = '' OR tags @> ARRAY[$4]) AND ($5 = 0 OR seq < $5)
ORDER BY seq DESC LIMIT $6`, q.Org, q.Scope, q.ScopeID, q.Tag, before, n+1)
	if err != nil {
		return nil, "", dbError("list memories", err)
	}
	defer rows.Close()
	var out []*agentmeshv1.Memory
	var seqs []int64
	for rows.Next() {
		var seq int64
		var data []byte
		if err := rows.Scan(&seq, &data); err != nil {
			return nil, "", dbError("list memories", err)
		}
		m, err := decodeMemory(data)
		if err != nil {
			return nil, "", err
		}
		out, seqs = append(out, m), append(seqs, seq)
	}
	if err := rows.Err(); err != nil {
		return nil, "", dbError("list memories", err)
	}
	next := ""
	if len(out) > n {
		out = out[:n]
		next = store.EncodeToken(strconv.FormatInt(seqs[n-1], 10))
	}
	return out, next, nil
}

// DeleteMemories implements store.Memories: in one transaction, the org's
// counter row is locked first (as PutMemory does), then the rows, and each
// deleted memory takes a new seq so that readers learn of the deletion.
func (s *Store) DeleteMemories(ctx context.Context, org string, ids []string) ([]*agentmeshv1.Memory, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	var out []*agentmeshv1.Memory
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var base int64
		err := tx.QueryRow(ctx, `SELECT seq FROM memory_counters WHERE org = $1 FOR UPDATE`, org).Scan(&base)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil // the org never had a memory
		}
		if err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `SELECT id, data FROM memories WHERE org = $1 AND id = ANY($2) AND deleted_at IS NULL ORDER BY id FOR UPDATE`, org, ids)
		if err != nil {
			return err
		}
		var gone []string
		var seqs []int64
		for rows.Next() {
			var id string
			var data []byte
			if err := rows.Scan(&id, &data); err != nil {
				rows.Close()
				return err
			}
			m, err := decodeMemory(data)
			if err != nil {
				rows.Close()
				return err
			}
			out, gone = append(out, m), append(gone, id)
			seqs = append(seqs, base+int64(len(gone)))
		}
		rows.Close()
		if err := rows.Err(); err != nil || len(gone) == 0 {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE memory_counters SET seq = $2 WHERE org = $1`, org, base+int64(len(gone))); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `
UPDATE memories m SET deleted_at = $4, seq = d.seq, data = NULL, embedding = NULL
FROM unnest($2::text[], $3::bigint[]) AS d(id, seq) WHERE m.org = $1 AND m.id = d.id`, org, gone, seqs, s.now())
		return err
	})
	if err != nil {
		return nil, dbError("delete memories", err)
	}
	return out, nil
}

// MemoryChanges implements store.Memories. The cursor is an org seq: the
// head read first is committed with every change up to it (seqs are taken
// under the counter's lock to the commit), so the changes up to the head
// are all visible to the second query.
func (s *Store) MemoryChanges(ctx context.Context, org, cursor string, limit int) ([]store.MemoryChange, string, error) {
	var after int64
	if cursor != "" {
		var err error
		if after, err = strconv.ParseInt(cursor, 10, 64); err != nil || after < 0 {
			return nil, "", bus.FieldError("cursor", "malformed memory change cursor %q", cursor)
		}
	}
	var head, forgotten int64
	err := s.pool.QueryRow(ctx, `SELECT coalesce((SELECT seq FROM memory_counters WHERE org = $1), 0), coalesce((SELECT seq FROM memory_forgotten WHERE org = $1), 0)`, org).Scan(&head, &forgotten)
	if err != nil {
		return nil, "", dbError("memory changes", err)
	}
	if cursor != "" && after < forgotten {
		return nil, "", store.ErrCursorExpired
	}
	if limit <= 0 {
		limit = store.MaxPageSize
	}
	rows, err := s.pool.Query(ctx, `
SELECT id, seq, data, embedding FROM memories
WHERE org = $1 AND seq > $2 AND seq <= $3 AND ($4 OR deleted_at IS NULL)
ORDER BY seq LIMIT $5`, org, after, head, cursor != "", limit)
	if err != nil {
		return nil, "", dbError("memory changes", err)
	}
	defer rows.Close()
	var out []store.MemoryChange
	last := after
	for rows.Next() {
		var id string
		var seq int64
		var data, emb []byte
		if err := rows.Scan(&id, &seq, &data, &emb); err != nil {
			return nil, "", dbError("memory changes", err)
		}
		last = seq
		c := store.MemoryChange{ID: id}
		if data != nil {
			m, err := decodeMemory(data)
			if err != nil {
				return nil, "", err
			}
			c.Record = &busv1.MemoryRecord{Memory: m, Embedding: emb}
		}
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, "", dbError("memory changes", err)
	}
	if len(out) < limit {
		last = head // everything up to the head was read
	}
	return out, strconv.FormatInt(last, 10), nil
}

// MemoryCursor implements store.Memories.
func (s *Store) MemoryCursor(ctx context.Context, org string) (string, error) {
	var head int64
	err := s.pool.QueryRow(ctx, `SELECT seq FROM memory_counters WHERE org = $1`, org).Scan(&head)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", dbError("memory cursor", err)
	}
	return strconv.FormatInt(head, 10), nil
}

// ExpireMemories implements store.Memories.
func (s *Store) ExpireMemories(ctx context.Context, createdBefore, forgetBefore time.Time) (int, error) {
	deleted := 0
	for !createdBefore.IsZero() {
		rows, err := s.pool.Query(ctx, `SELECT org, id FROM memories WHERE deleted_at IS NULL AND created_at < $1 ORDER BY org LIMIT 1000`, createdBefore)
		if err != nil {
			return deleted, dbError("expire memories", err)
		}
		byOrg := map[string][]string{}
		n := 0
		for rows.Next() {
			var org, id string
			if err := rows.Scan(&org, &id); err != nil {
				rows.Close()
				return deleted, dbError("expire memories", err)
			}
			byOrg[org] = append(byOrg[org], id)
			n++
		}
		rows.Close()
		if n == 0 {
			break
		}
		for org, ids := range byOrg {
			gone, err := s.DeleteMemories(ctx, org, ids)
			if err != nil {
				return deleted, err
			}
			deleted += len(gone)
		}
		if n < 1000 {
			break
		}
	}
	if forgetBefore.IsZero() {
		return deleted, nil
	}
	_, err := s.pool.Exec(ctx, `
WITH f AS (DELETE FROM memories WHERE deleted_at < $1 RETURNING org, seq)
INSERT INTO memory_forgotten (org, seq) SELECT org, max(seq) FROM f GROUP BY org
ON CONFLICT (org) DO UPDATE SET seq = greatest(memory_forgotten.seq, EXCLUDED.seq)`, forgetBefore)
	if err != nil {
		return deleted, dbError("forget memory deletions", err)
	}
	return deleted, nil
}

// ---- threads ----

func decodeThread(data []byte) (*agentmeshv1.Thread, error) {
	th := &agentmeshv1.Thread{}
	if err := proto.Unmarshal(data, th); err != nil {
		return nil, dbError("decode thread", err)
	}
	return th, nil
}

// GetThread implements store.Threads.
func (s *Store) GetThread(ctx context.Context, org, id string) (*agentmeshv1.Thread, error) {
	var data []byte
	err := s.pool.QueryRow(ctx, `SELECT data FROM threads WHERE org = $1 AND id = $2`, org, id).Scan(&data)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, bus.Errorf(bus.CodeNotFound, "thread %q not found", id)
	}
	if err != nil {
		return nil, dbError("get thread", err)
	}
	return decodeThread(data)
}

// PutThread implements store.Threads.
func (s *Store) PutThread(ctx context.Context, th *agentmeshv1.Thread, expected int64) (*agentmeshv1.Thread, error) {
	out := store.PlanThread(th, expected, s.now())
	data, err := marshal(out)
	if err != nil {
		return nil, err
	}
	var tag interface{ RowsAffected() int64 }
	if expected == 0 {
		tag, err = s.pool.Exec(ctx, `INSERT INTO threads (org, id, revision, updated_at, data) VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING`,
			out.Org, out.Id, out.Revision, out.UpdatedAt.AsTime(), data)
	} else {
		tag, err = s.pool.Exec(ctx, `UPDATE threads SET revision = $3, updated_at = $4, data = $5 WHERE org = $1 AND id = $2 AND revision = $6`,
			out.Org, out.Id, out.Revision, out.UpdatedAt.AsTime(), data, expected)
	}
	if err != nil {
		return nil, dbError("put thread", err)
	}
	if tag.RowsAffected() == 1 {
		return out, nil
	}
	return nil, s.threadConflict(ctx, th.GetOrg(), th.GetId(), expected)
}

// threadConflict is the error of a compare-and-set on a thread that lost.
func (s *Store) threadConflict(ctx context.Context, org, id string, expected int64) error {
	var have int64
	err := s.pool.QueryRow(ctx, `SELECT revision FROM threads WHERE org = $1 AND id = $2`, org, id).Scan(&have)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return dbError("put thread", err)
	}
	return store.RevisionConflict("thread "+id, expected, have)
}

// ListThreads implements store.Threads: by updated_at descending, then id.
func (s *Store) ListThreads(ctx context.Context, org string, pageSize int, pageToken string) ([]*agentmeshv1.Thread, string, error) {
	tok, err := store.DecodeToken(pageToken)
	if err != nil {
		return nil, "", err
	}
	var afterTime time.Time
	afterID := ""
	if tok != "" {
		ns, id, ok := strings.Cut(tok, ":")
		n, perr := strconv.ParseInt(ns, 10, 64)
		if !ok || perr != nil {
			return nil, "", bus.FieldError("page_token", "malformed page token")
		}
		afterTime, afterID = time.Unix(0, n).UTC(), id
	}
	n := store.PageSize(pageSize)
	rows, err := s.pool.Query(ctx, `
SELECT data FROM threads WHERE org = $1 AND ($2 = '' OR (updated_at, id) < ($3, $2))
ORDER BY updated_at DESC, id DESC LIMIT $4`, org, afterID, afterTime, n+1)
	if err != nil {
		return nil, "", dbError("list threads", err)
	}
	defer rows.Close()
	var out []*agentmeshv1.Thread
	for rows.Next() {
		var data []byte
		if err := rows.Scan(&data); err != nil {
			return nil, "", dbError("list threads", err)
		}
		th, err := decodeThread(data)
		if err != nil {
			return nil, "", err
		}
		out = append(out, th)
	}
	if err := rows.Err(); err != nil {
		return nil, "", dbError("list threads", err)
	}
	next := ""
	if len(out) > n {
		out = out[:n]
		last := out[n-1]
		next = store.EncodeToken(fmt.Sprintf("%d:%s", last.GetUpdatedAt().AsTime().UnixNano(), last.GetId()))
	}
	return out, next, nil
}

// DeleteThread implements store.Threads.
func (s *Store) DeleteThread(ctx context.Context, org, id string, expected int64) error {
	tag, err := s.pool.Exec(ctx, `DELETE FROM threads WHERE org = $1 AND id = $2 AND ($3 = 0 OR revision = $3)`, org, id, expected)
	if err != nil {
		return dbError("delete thread", err)
	}
	if tag.RowsAffected() == 1 {
		return nil
	}
	if _, err := s.GetThread(ctx, org, id); err != nil {
		return err
	}
	return s.threadConflict(ctx, org, id, expected)
}
