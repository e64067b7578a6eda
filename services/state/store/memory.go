package store

import (
	"context"
	"strconv"
	"time"

	busv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/bus/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// What agents keep (issue 30, docs/memory.md) is recorded through three
// small interfaces beside Store, which both stores implement and the
// conformance suite checks on both: the persisted copy of working state
// (the hot copy is the state service's own bucket), long-term memories,
// and threads. Everything is keyed by org first: nothing is ever read
// across orgs.

// WorkingState keeps the working-state entries written with persist.
// Entries are identified by (org, scope, scope id, key); an expired entry
// is not found.
type WorkingState interface {
	// PutState writes rec unless the record holds the same key at a
	// revision as high or higher (then it writes nothing and returns
	// false): concurrent writers converge on the highest revision.
	PutState(ctx context.Context, rec *busv1.StateRecord) (written bool, err error)
	// GetState returns the entry, or not_found (absent or expired at now).
	GetState(ctx context.Context, k StateKey, now time.Time) (*busv1.StateRecord, error)
	// DeleteState removes the entry if its revision is at most upTo (0:
	// whatever its revision); it reports whether one was removed.
	DeleteState(ctx context.Context, k StateKey, upTo int64) (bool, error)
	// ListState returns the live entries of one scope whose key starts
	// with q.Prefix, by key, one page.
	ListState(ctx context.Context, q StateQuery) ([]*busv1.StateRecord, string, error)
	// DeleteExpiredState removes the entries expired before t.
	DeleteExpiredState(ctx context.Context, t time.Time) (int, error)
}

// StateKey names one working-state entry.
type StateKey struct {
	Org, Scope, ScopeID, Key string
}

// KeyOf is the key of an entry.
func KeyOf(e *agentmeshv1.StateEntry) StateKey {
	return StateKey{Org: e.GetOrg(), Scope: e.GetScope(), ScopeID: e.GetScopeId(), Key: e.GetKey()}
}

// StateQuery lists one scope's entries.
type StateQuery struct {
	Org, Scope, ScopeID string
	Prefix              string
	Now                 time.Time
	PageSize            int
	// PageToken is the last key of the previous page.
	PageToken string
}

// Memories keeps long-term memories and their embeddings. The state
// service searches them in memory (an index per org and model, kept
// current from MemoryChanges); the stores only keep them and say what
// changed.
type Memories interface {
	// PutMemory records rec unless the org has a memory with its id:
	// then it returns that one and created=false (a tool call run again
	// writes nothing twice).
	PutMemory(ctx context.Context, rec *busv1.MemoryRecord) (out *busv1.MemoryRecord, created bool, err error)
	// GetMemory returns one memory with its embedding, or not_found.
	GetMemory(ctx context.Context, org, id string) (*busv1.MemoryRecord, error)
	// ListMemories returns memories newest first, filtered, one page
	// (without embeddings).
	ListMemories(ctx context.Context, q MemoryQuery) ([]*agentmeshv1.Memory, string, error)
	// DeleteMemories deletes the org's memories of these ids and returns
	// those it deleted (ids not found are skipped). A deletion is kept as
	// a change (MemoryChanges) until ExpireMemories forgets it.
	DeleteMemories(ctx context.Context, org string, ids []string) ([]*agentmeshv1.Memory, error)
	// MemoryChanges returns what changed in the org's memories after
	// cursor, oldest first, at most limit, and the cursor after them
	// (cursor itself when nothing changed). Cursor "" returns every live
	// memory (no deletions). A cursor older than the deletions the store
	// still remembers is refused with failed_precondition
	// (ErrCursorExpired): read from "" again.
	MemoryChanges(ctx context.Context, org, cursor string, limit int) ([]MemoryChange, string, error)
	// MemoryCursor is the cursor of the org's newest change ("" when it
	// never had a memory): a reader holding it has seen everything.
	MemoryCursor(ctx context.Context, org string) (string, error)
	// ExpireMemories deletes the memories (of every org) created before
	// createdBefore (zero: none) and forgets deletions made before
	// forgetBefore; it returns how many memories it deleted.
	ExpireMemories(ctx context.Context, createdBefore, forgetBefore time.Time) (int, error)
}

// MemoryChange is one change of an org's memories.
type MemoryChange struct {
	// ID of the memory; Record is nil when it was deleted.
	ID     string
	Record *busv1.MemoryRecord
}

// MemoryQuery filters ListMemories. Zero fields do not filter.
type MemoryQuery struct {
	Org, Scope, ScopeID, Tag string
	PageSize                 int
	PageToken                string
}

// ErrCursorExpired: a MemoryChanges cursor older than the deletions the
// store remembers.
var ErrCursorExpired = &bus.Error{Code: bus.CodeFailedPrecondition, Message: "memory change cursor expired: read every memory again"}

// Threads keeps threads (conversations of tasks), changed by
// compare-and-set on their revision.
type Threads interface {
	// GetThread returns org's thread id, or not_found.
	GetThread(ctx context.Context, org, id string) (*agentmeshv1.Thread, error)
	// PutThread writes th when the stored thread's revision is expected
	// (0: it must not exist), with revision expected+1 and its times set,
	// and returns it; conflict when the revision differs (another writer
	// won: read it again).
	PutThread(ctx context.Context, th *agentmeshv1.Thread, expected int64) (*agentmeshv1.Thread, error)
	// ListThreads returns org's threads, most recently changed first.
	ListThreads(ctx context.Context, org string, pageSize int, pageToken string) ([]*agentmeshv1.Thread, string, error)
	// DeleteThread deletes the thread when its revision is expected (0:
	// whatever it is); not_found when absent, conflict when it moved.
	DeleteThread(ctx context.Context, org, id string, expected int64) error
}

// Remembering is a store that keeps working state, memories and threads:
// both stores are.
type Remembering interface {
	WorkingState
	Memories
	Threads
}

// RevisionConflict is the conflict error of a compare-and-set on a
// revision.
func RevisionConflict(what string, want, have int64) error {
	if want == 0 {
		return &bus.Error{Code: bus.CodeConflict, Message: what + " already exists (revision " + itoa(have) + ")"}
	}
	if have == 0 {
		return &bus.Error{Code: bus.CodeConflict, Message: what + " does not exist (expected revision " + itoa(want) + ")"}
	}
	return &bus.Error{Code: bus.CodeConflict, Message: what + " is at revision " + itoa(have) + ", not " + itoa(want)}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// PlanThread is th as PutThread stores it over a thread at revision
// expected: the next revision, updated now (created now when new), times
// to the microsecond (what Postgres keeps, so page tokens match).
func PlanThread(th *agentmeshv1.Thread, expected int64, now time.Time) *agentmeshv1.Thread {
	out := proto.Clone(th).(*agentmeshv1.Thread)
	ts := timestamppb.New(now.Truncate(time.Microsecond))
	out.Revision = expected + 1
	out.UpdatedAt = ts
	if expected == 0 || out.CreatedAt == nil {
		out.CreatedAt = ts
	}
	return out
}
