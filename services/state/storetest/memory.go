package storetest

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
	"time"

	busv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/bus/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/services/state/store"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// What agents keep (issue 30): working state, memories, threads.
var memoryTests = []struct {
	name string
	fn   func(t *testing.T, s store.Store)
}{
	{"WorkingStateScopes", testStateScopes},
	{"WorkingStateTTL", testStateTTL},
	{"WorkingStateRevisions", testStateRevisions},
	{"Memories", testMemories},
	{"MemoryChanges", testMemoryChanges},
	{"Threads", testThreads},
}

func remembering(_ *testing.T, s store.Store) store.Remembering { return s }

func stateRec(org, scope, scopeID, key string, rev int64, expires time.Time, v string) *busv1.StateRecord {
	return &busv1.StateRecord{Entry: &agentmeshv1.StateEntry{
		Org: org, Scope: scope, ScopeId: scopeID, Key: key, Revision: rev,
		Value: structpb.NewStringValue(v), ExpiresAt: timestamppb.New(expires), Persisted: true,
	}}
}

func putState(t *testing.T, r store.Remembering, rec *busv1.StateRecord) bool {
	t.Helper()
	ok, err := r.PutState(ctxT(t), rec)
	if err != nil {
		t.Fatalf("PutState %s: %v", rec.GetEntry().GetKey(), err)
	}
	return ok
}

func stateValue(t *testing.T, r store.Remembering, k store.StateKey, now time.Time) (string, error) {
	t.Helper()
	rec, err := r.GetState(ctxT(t), k, now)
	if err != nil {
		return "", err
	}
	return rec.GetEntry().GetValue().GetStringValue(), nil
}

func testStateScopes(t *testing.T, s store.Store) {
	r := remembering(t, s)
	now := time.Now()
	later := now.Add(time.Hour)
	for _, e := range []*busv1.StateRecord{
		stateRec("acme", "task-tree", "T1", "plan", 1, later, "acme tree T1"),
		stateRec("acme", "task-tree", "T2", "plan", 1, later, "acme tree T2"),
		stateRec("acme", "agent", "writer", "plan", 1, later, "acme agent"),
		stateRec("acme", "org", "", "plan", 1, later, "acme org"),
		stateRec("acme", "org", "", "plan.step.1", 1, later, "acme org step"),
		stateRec("acme", "org", "", "other", 1, later, "acme org other"),
		stateRec("globex", "org", "", "plan", 1, later, "globex org"),
	} {
		if !putState(t, r, e) {
			t.Fatalf("PutState %v: nothing written", e.GetEntry())
		}
	}
	for _, c := range []struct {
		k    store.StateKey
		want string
	}{
		{store.StateKey{Org: "acme", Scope: "task-tree", ScopeID: "T1", Key: "plan"}, "acme tree T1"},
		{store.StateKey{Org: "acme", Scope: "task-tree", ScopeID: "T2", Key: "plan"}, "acme tree T2"},
		{store.StateKey{Org: "acme", Scope: "agent", ScopeID: "writer", Key: "plan"}, "acme agent"},
		{store.StateKey{Org: "acme", Scope: "org", Key: "plan"}, "acme org"},
		{store.StateKey{Org: "globex", Scope: "org", Key: "plan"}, "globex org"},
	} {
		got, err := stateValue(t, r, c.k, now)
		if err != nil || got != c.want {
			t.Errorf("GetState %+v: got %q, %v; want %q", c.k, got, err, c.want)
		}
	}
	for _, k := range []store.StateKey{
		{Org: "globex", Scope: "agent", ScopeID: "writer", Key: "plan"}, // another org's
		{Org: "globex", Scope: "task-tree", ScopeID: "T1", Key: "plan"},
		{Org: "acme", Scope: "agent", ScopeID: "reader", Key: "plan"}, // another agent's
		{Org: "acme", Scope: "task-tree", ScopeID: "T3", Key: "plan"},
		{Org: "acme", Scope: "org", Key: "plan.step"},
	} {
		if _, err := stateValue(t, r, k, now); !errors.Is(err, bus.ErrNotFound) {
			t.Errorf("GetState %+v: got %v, want not_found", k, err)
		}
	}
	// One scope's entries, by key, with a prefix and pages of one.
	var keys []string
	tok := ""
	for i := 0; ; i++ {
		page, next, err := r.ListState(ctxT(t), store.StateQuery{Org: "acme", Scope: "org", Prefix: "plan", Now: now, PageSize: 1, PageToken: tok})
		if err != nil {
			t.Fatalf("ListState: %v", err)
		}
		for _, e := range page {
			keys = append(keys, e.GetEntry().GetKey())
		}
		if next == "" || i > 5 {
			break
		}
		tok = next
	}
	if fmt.Sprint(keys) != "[plan plan.step.1]" {
		t.Errorf("ListState acme/org prefix plan: got %v, want [plan plan.step.1]", keys)
	}
	page, _, err := r.ListState(ctxT(t), store.StateQuery{Org: "globex", Scope: "task-tree", ScopeID: "T1", Now: now})
	if err != nil || len(page) != 0 {
		t.Errorf("ListState of another org's tree: got %d entries, %v; want none", len(page), err)
	}
}

func testStateTTL(t *testing.T, s store.Store) {
	r := remembering(t, s)
	now := time.Now()
	k := store.StateKey{Org: "acme", Scope: "agent", ScopeID: "writer", Key: "soon"}
	putState(t, r, stateRec("acme", "agent", "writer", "soon", 5, now.Add(time.Minute), "v5"))
	putState(t, r, stateRec("acme", "agent", "writer", "later", 1, now.Add(time.Hour), "v1"))
	if got, err := stateValue(t, r, k, now); err != nil || got != "v5" {
		t.Fatalf("GetState before expiry: got %q, %v", got, err)
	}
	after := now.Add(2 * time.Minute)
	if _, err := stateValue(t, r, k, after); !errors.Is(err, bus.ErrNotFound) {
		t.Errorf("GetState after expiry: got %v, want not_found", err)
	}
	page, _, err := r.ListState(ctxT(t), store.StateQuery{Org: "acme", Scope: "agent", ScopeID: "writer", Now: after})
	if err != nil || len(page) != 1 || page[0].GetEntry().GetKey() != "later" {
		t.Errorf("ListState after one expired: got %v, %v; want [later]", page, err)
	}
	// An expired entry (by the store's own clock) does not stand in the
	// way of the key written anew from revision 1.
	putState(t, r, stateRec("acme", "agent", "writer", "soon", 6, now.Add(-time.Second), "expired"))
	if !putState(t, r, stateRec("acme", "agent", "writer", "soon", 1, after.Add(time.Hour), "fresh")) {
		t.Fatal("PutState revision 1 over an expired revision 6: nothing written")
	}
	if got, err := stateValue(t, r, k, after); err != nil || got != "fresh" {
		t.Errorf("GetState of the rewritten key: got %q, %v; want fresh", got, err)
	}
	n, err := r.DeleteExpiredState(ctxT(t), now.Add(2*time.Hour))
	if err != nil || n != 2 {
		t.Errorf("DeleteExpiredState: got %d, %v; want 2", n, err)
	}
	if _, err := stateValue(t, r, store.StateKey{Org: "acme", Scope: "agent", ScopeID: "writer", Key: "later"}, now); !errors.Is(err, bus.ErrNotFound) {
		t.Errorf("GetState of a deleted expired entry: got %v, want not_found", err)
	}
}

func testStateRevisions(t *testing.T, s store.Store) {
	r := remembering(t, s)
	now := time.Now()
	later := now.Add(time.Hour)
	k := store.StateKey{Org: "acme", Scope: "org", Key: "counter"}
	if !putState(t, r, stateRec("acme", "org", "", "counter", 2, later, "two")) {
		t.Fatal("PutState revision 2: nothing written")
	}
	if putState(t, r, stateRec("acme", "org", "", "counter", 1, later, "one")) {
		t.Error("PutState revision 1 over revision 2: written, want refused")
	}
	if putState(t, r, stateRec("acme", "org", "", "counter", 2, later, "two again")) {
		t.Error("PutState revision 2 over revision 2: written, want refused")
	}
	if got, _ := stateValue(t, r, k, now); got != "two" {
		t.Errorf("after stale writes: got %q, want two", got)
	}
	if !putState(t, r, stateRec("acme", "org", "", "counter", 3, later, "three")) {
		t.Error("PutState revision 3: nothing written")
	}
	if ok, err := r.DeleteState(ctxT(t), k, 2); err != nil || ok {
		t.Errorf("DeleteState up to 2 of revision 3: got %v, %v; want nothing deleted", ok, err)
	}
	if ok, err := r.DeleteState(ctxT(t), k, 3); err != nil || !ok {
		t.Errorf("DeleteState up to 3: got %v, %v; want deleted", ok, err)
	}
	if ok, err := r.DeleteState(ctxT(t), k, 0); err != nil || ok {
		t.Errorf("DeleteState of a deleted key: got %v, %v; want nothing deleted", ok, err)
	}
	if _, err := stateValue(t, r, k, now); !errors.Is(err, bus.ErrNotFound) {
		t.Errorf("GetState after delete: got %v, want not_found", err)
	}
}

func memRec(org, id, scope, scopeID, text string, tags []string, emb []byte, created time.Time) *busv1.MemoryRecord {
	return &busv1.MemoryRecord{Memory: &agentmeshv1.Memory{
		Id: id, Org: org, Scope: scope, ScopeId: scopeID, Text: text, Tags: tags,
		Provenance: &agentmeshv1.Provenance{TaskId: "T-" + id, Agent: "writer", AgentVersion: 3},
		CreatedAt:  timestamppb.New(created), EmbeddingModel: "m", Dimensions: int32(len(emb) / 4),
	}, Embedding: emb}
}

func putMemory(t *testing.T, r store.Remembering, rec *busv1.MemoryRecord) {
	t.Helper()
	if _, created, err := r.PutMemory(ctxT(t), rec); err != nil || !created {
		t.Fatalf("PutMemory %s: created %v, %v", rec.GetMemory().GetId(), created, err)
	}
}

func memIDs(ms []*agentmeshv1.Memory) string {
	var ids []string
	for _, m := range ms {
		ids = append(ids, m.GetId())
	}
	return fmt.Sprint(ids)
}

func testMemories(t *testing.T, s store.Store) {
	r := remembering(t, s)
	now := time.Now()
	emb := []byte{1, 2, 3, 4, 5, 6, 7, 8}
	putMemory(t, r, memRec("acme", "m1", "agent", "writer", "one", []string{"a"}, emb, now))
	putMemory(t, r, memRec("acme", "m2", "agent", "writer", "two", []string{"a", "b"}, emb, now))
	putMemory(t, r, memRec("acme", "m3", "org", "", "three", nil, emb, now))
	putMemory(t, r, memRec("acme", "m4", "task-tree", "T1", "four", []string{"b"}, emb, now))
	putMemory(t, r, memRec("globex", "m5", "agent", "writer", "five", []string{"a"}, emb, now))

	// The same id again (a tool call run twice) returns the first.
	out, created, err := r.PutMemory(ctxT(t), memRec("acme", "m1", "agent", "writer", "one again", nil, emb, now))
	if err != nil || created || out.GetMemory().GetText() != "one" {
		t.Errorf("PutMemory of an existing id: got %q created=%v, %v; want the first, not created", out.GetMemory().GetText(), created, err)
	}
	got, err := r.GetMemory(ctxT(t), "acme", "m2")
	if err != nil || got.GetMemory().GetText() != "two" || !bytes.Equal(got.GetEmbedding(), emb) ||
		got.GetMemory().GetProvenance().GetTaskId() != "T-m2" || got.GetMemory().GetProvenance().GetAgentVersion() != 3 {
		t.Errorf("GetMemory m2: got %v, %v", got, err)
	}
	if _, err := r.GetMemory(ctxT(t), "globex", "m2"); !errors.Is(err, bus.ErrNotFound) {
		t.Errorf("GetMemory of another org's memory: got %v, want not_found", err)
	}
	for _, c := range []struct {
		q    store.MemoryQuery
		want string
	}{
		{store.MemoryQuery{Org: "acme"}, "[m4 m3 m2 m1]"},
		{store.MemoryQuery{Org: "acme", Scope: "agent"}, "[m2 m1]"},
		{store.MemoryQuery{Org: "acme", Scope: "agent", ScopeID: "reader"}, "[]"},
		{store.MemoryQuery{Org: "acme", Tag: "b"}, "[m4 m2]"},
		{store.MemoryQuery{Org: "globex"}, "[m5]"},
		{store.MemoryQuery{Org: "initech"}, "[]"},
	} {
		ms, _, err := r.ListMemories(ctxT(t), c.q)
		if err != nil || memIDs(ms) != c.want {
			t.Errorf("ListMemories %+v: got %s, %v; want %s", c.q, memIDs(ms), err, c.want)
		}
	}
	var all []*agentmeshv1.Memory
	tok := ""
	for range 10 {
		ms, next, err := r.ListMemories(ctxT(t), store.MemoryQuery{Org: "acme", PageSize: 3, PageToken: tok})
		if err != nil {
			t.Fatalf("ListMemories page: %v", err)
		}
		all = append(all, ms...)
		if tok = next; tok == "" {
			break
		}
	}
	if memIDs(all) != "[m4 m3 m2 m1]" {
		t.Errorf("ListMemories in pages of 3: got %s", memIDs(all))
	}
	gone, err := r.DeleteMemories(ctxT(t), "globex", []string{"m1"})
	if err != nil || len(gone) != 0 {
		t.Errorf("DeleteMemories of another org's id: got %v, %v; want none", gone, err)
	}
	gone, err = r.DeleteMemories(ctxT(t), "acme", []string{"m1", "m3", "nope"})
	if err != nil || memIDs(gone) != "[m1 m3]" {
		t.Errorf("DeleteMemories: got %s, %v; want [m1 m3]", memIDs(gone), err)
	}
	if _, err := r.GetMemory(ctxT(t), "acme", "m1"); !errors.Is(err, bus.ErrNotFound) {
		t.Errorf("GetMemory of a deleted memory: got %v, want not_found", err)
	}
	if _, _, err := r.PutMemory(ctxT(t), memRec("acme", "m1", "agent", "writer", "one", nil, emb, now)); !errors.Is(err, bus.ErrFailedPrecondition) {
		t.Errorf("PutMemory of a deleted id: got %v, want failed_precondition", err)
	}
	if ms, _, _ := r.ListMemories(ctxT(t), store.MemoryQuery{Org: "acme"}); memIDs(ms) != "[m4 m2]" {
		t.Errorf("ListMemories after delete: got %s, want [m4 m2]", memIDs(ms))
	}
}

// changes reads every change after cursor, in pages of limit.
func changes(t *testing.T, r store.Remembering, org, cursor string, limit int) (live, deleted []string, next string) {
	t.Helper()
	for range 100 {
		cs, n, err := r.MemoryChanges(ctxT(t), org, cursor, limit)
		if err != nil {
			t.Fatalf("MemoryChanges %s after %q: %v", org, cursor, err)
		}
		for _, c := range cs {
			if c.Record == nil {
				deleted = append(deleted, c.ID)
			} else {
				live = append(live, c.ID)
			}
		}
		if len(cs) < limit {
			return live, deleted, n
		}
		cursor = n
	}
	t.Fatal("MemoryChanges never caught up")
	return nil, nil, ""
}

func testMemoryChanges(t *testing.T, s store.Store) {
	r := remembering(t, s)
	now := time.Now()
	emb := []byte{0, 0, 128, 63}
	if c, err := r.MemoryCursor(ctxT(t), "acme"); err != nil || c != "" {
		t.Fatalf("MemoryCursor of an org without memories: got %q, %v; want empty", c, err)
	}
	for i := range 5 {
		putMemory(t, r, memRec("acme", fmt.Sprintf("m%d", i), "org", "", "x", nil, emb, now.Add(-time.Duration(5-i)*time.Hour)))
	}
	putMemory(t, r, memRec("globex", "g0", "org", "", "x", nil, emb, now))
	live, deleted, c1 := changes(t, r, "acme", "", 2)
	if fmt.Sprint(live) != "[m0 m1 m2 m3 m4]" || len(deleted) != 0 {
		t.Fatalf("MemoryChanges from the start: got live %v deleted %v", live, deleted)
	}
	if head, _ := r.MemoryCursor(ctxT(t), "acme"); head != c1 {
		t.Errorf("MemoryCursor after reading everything: got %q, want the cursor %q", head, c1)
	}
	if live, deleted, c := changes(t, r, "acme", c1, 10); len(live)+len(deleted) != 0 || c != c1 {
		t.Errorf("MemoryChanges with nothing new: got %v %v, cursor %q; want none, %q", live, deleted, c, c1)
	}
	if _, err := r.DeleteMemories(ctxT(t), "acme", []string{"m1"}); err != nil {
		t.Fatal(err)
	}
	putMemory(t, r, memRec("acme", "m5", "org", "", "x", nil, emb, now))
	live, deleted, c2 := changes(t, r, "acme", c1, 10)
	if fmt.Sprint(live) != "[m5]" || fmt.Sprint(deleted) != "[m1]" {
		t.Errorf("MemoryChanges after a delete and a put: got live %v deleted %v; want [m5] [m1]", live, deleted)
	}
	if c2 == c1 {
		t.Error("cursor did not move")
	}
	// Retention: memories created before now-150m go; deletions are
	// forgotten, after which the cursor from before them has expired.
	n, err := r.ExpireMemories(ctxT(t), now.Add(-150*time.Minute), time.Time{})
	if err != nil || n != 2 {
		t.Errorf("ExpireMemories by age: got %d, %v; want 2 (m0, m2)", n, err)
	}
	if ms, _, _ := r.ListMemories(ctxT(t), store.MemoryQuery{Org: "acme"}); memIDs(ms) != "[m5 m4 m3]" {
		t.Errorf("ListMemories after expiry: got %s, want [m5 m4 m3]", memIDs(ms))
	}
	if _, err := r.ExpireMemories(ctxT(t), time.Time{}, time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := r.MemoryChanges(ctxT(t), "acme", c1, 10); !errors.Is(err, store.ErrCursorExpired) {
		t.Errorf("MemoryChanges after forgotten deletions from an older cursor: got %v, want failed_precondition (expired)", err)
	}
	live, _, _ = changes(t, r, "acme", "", 10)
	if fmt.Sprint(live) != "[m3 m4 m5]" {
		t.Errorf("MemoryChanges from the start after expiry: got %v, want [m3 m4 m5]", live)
	}
	if live, _, _ := changes(t, r, "globex", "", 10); fmt.Sprint(live) != "[g0]" {
		t.Errorf("another org's changes: got %v, want [g0]", live)
	}
}

func testThreads(t *testing.T, s store.Store) {
	r := remembering(t, s)
	th := &agentmeshv1.Thread{Id: "chat-1", Org: "acme", HeadTaskId: "T1", Agent: "writer", TaskCount: 1}
	got, err := r.PutThread(ctxT(t), th, 0)
	if err != nil || got.GetRevision() != 1 || got.GetCreatedAt() == nil {
		t.Fatalf("PutThread new: got %v, %v", got, err)
	}
	if _, err := r.PutThread(ctxT(t), th, 0); !errors.Is(err, bus.ErrConflict) {
		t.Errorf("PutThread new over an existing thread: got %v, want conflict", err)
	}
	th2 := &agentmeshv1.Thread{Id: "chat-1", Org: "acme", HeadTaskId: "T2", PreviousHeadTaskId: "T1", Agent: "writer", TaskCount: 2, CreatedAt: got.CreatedAt}
	got2, err := r.PutThread(ctxT(t), th2, 1)
	if err != nil || got2.GetRevision() != 2 {
		t.Fatalf("PutThread at revision 1: got %v, %v", got2, err)
	}
	if _, err := r.PutThread(ctxT(t), th2, 1); !errors.Is(err, bus.ErrConflict) {
		t.Errorf("PutThread with a stale revision: got %v, want conflict", err)
	}
	if _, err := r.PutThread(ctxT(t), &agentmeshv1.Thread{Id: "nope", Org: "acme"}, 4); !errors.Is(err, bus.ErrConflict) {
		t.Errorf("PutThread update of an absent thread: got %v, want conflict", err)
	}
	cur, err := r.GetThread(ctxT(t), "acme", "chat-1")
	if err != nil || cur.GetHeadTaskId() != "T2" || cur.GetRevision() != 2 || cur.GetTaskCount() != 2 {
		t.Errorf("GetThread: got %v, %v", cur, err)
	}
	if _, err := r.GetThread(ctxT(t), "globex", "chat-1"); !errors.Is(err, bus.ErrNotFound) {
		t.Errorf("GetThread of another org's thread: got %v, want not_found", err)
	}
	for i := 2; i <= 4; i++ {
		time.Sleep(2 * time.Millisecond) // distinct update times
		if _, err := r.PutThread(ctxT(t), &agentmeshv1.Thread{Id: fmt.Sprintf("chat-%d", i), Org: "acme"}, 0); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := r.PutThread(ctxT(t), &agentmeshv1.Thread{Id: "chat-9", Org: "globex"}, 0); err != nil {
		t.Fatal(err)
	}
	var ids []string
	tok := ""
	for range 10 {
		page, next, err := r.ListThreads(ctxT(t), "acme", 2, tok)
		if err != nil {
			t.Fatalf("ListThreads: %v", err)
		}
		for _, th := range page {
			ids = append(ids, th.GetId())
		}
		if tok = next; tok == "" {
			break
		}
	}
	if fmt.Sprint(ids) != "[chat-4 chat-3 chat-2 chat-1]" {
		t.Errorf("ListThreads in pages of 2: got %v, want most recent first [chat-4 chat-3 chat-2 chat-1]", ids)
	}
	if err := r.DeleteThread(ctxT(t), "globex", "chat-1", 0); !errors.Is(err, bus.ErrNotFound) {
		t.Errorf("DeleteThread of another org's thread: got %v, want not_found", err)
	}
	if err := r.DeleteThread(ctxT(t), "acme", "chat-1", 1); !errors.Is(err, bus.ErrConflict) {
		t.Errorf("DeleteThread with a stale revision: got %v, want conflict", err)
	}
	if err := r.DeleteThread(ctxT(t), "acme", "chat-1", 2); err != nil {
		t.Errorf("DeleteThread: %v", err)
	}
	if _, err := r.GetThread(ctxT(t), "acme", "chat-1"); !errors.Is(err, bus.ErrNotFound) {
		t.Errorf("GetThread after delete: got %v, want not_found", err)
	}
}
