package kvstore

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	busv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/bus/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/services/state/store"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"
)

// What agents keep (issue 30), in three more buckets:
//
//	<P>_STORE_WORKING_STATE  KV: "<org>.<scope>.<scope id>.<key>" →
//	                         agentmesh.bus.v1.StateRecord (each part as in
//	                         agentKey; the key's own dots make more tokens)
//	<P>_STORE_MEMORIES       KV: "<org>.<id>" → agentmesh.bus.v1.MemoryRecord;
//	                         "/forgotten.<org>" → the highest revision of a
//	                         deletion forgotten (ExpireMemories)
//	<P>_STORE_THREADS        KV: "<org>.<id>" → agentmesh.v1.Thread
//
// An org's memory changes are the bucket's messages under "<org>.>": their
// stream sequence is the change cursor, a deletion is the key's delete
// marker (written with its expected last revision, so its sequence is
// known). An in-memory index of the memories without their embeddings,
// kept by a watcher like the task index, serves ListMemories, the
// cursor's head and the deleted ids.

const (
	workingStateBucket = "working_state"
	memoriesBucket     = "memories"
	threadsBucket      = "threads"
	// forgottenPrefix names the keys of the forgotten horizons: "/" is
	// never in a key part.
	forgottenPrefix = "/forgotten."
)

// memStore is the Store's part for working state, memories and threads.
type memStore struct {
	wstateKV, memKV, threadKV jetstream.KeyValue
	memStream                 jetstream.Stream
	memPut                    string // subject prefix of the memories bucket's keys
	mems                      *memIndex
}

// memIndex holds every org's memories without embeddings.
type memIndex struct {
	mu   sync.RWMutex
	orgs map[string]*orgMemories
}

type orgMemories struct {
	live      map[string]*indexedMemory
	deleted   map[string]deletion // id → its delete marker
	head      uint64              // the newest change's revision
	forgotten uint64
}

type indexedMemory struct {
	m   *agentmeshv1.Memory
	rev uint64
}

type deletion struct {
	rev  uint64
	time time.Time
}

func (x *memIndex) org(org string) *orgMemories {
	o := x.orgs[org]
	if o == nil {
		o = &orgMemories{live: map[string]*indexedMemory{}, deleted: map[string]deletion{}}
		x.orgs[org] = o
	}
	return o
}

// KeyPart is a KV key token for s: s itself when it is plain (A-Z a-z 0-9
// _ -), else "=" and its base64url. The state service keys its hot
// working-state bucket the same way.
func KeyPart(s string) string { return keyPart(s) }

func (s *Store) openMemory(ctx, wctx context.Context, bucket func(name, desc string) (jetstream.KeyValue, error)) error {
	var err error
	if s.wstateKV, err = bucket(workingStateBucket, "agentmesh persisted working state ((org, scope, scope id, key) → agentmesh.bus.v1.StateRecord)"); err != nil {
		return err
	}
	if s.memKV, err = bucket(memoriesBucket, "agentmesh memories ((org, id) → agentmesh.bus.v1.MemoryRecord)"); err != nil {
		return err
	}
	if s.threadKV, err = bucket(threadsBucket, "agentmesh threads ((org, id) → agentmesh.v1.Thread)"); err != nil {
		return err
	}
	if s.memStream, err = s.js.Stream(ctx, "KV_"+s.names.StoreBucket(memoriesBucket)); err != nil {
		return kvError("open memories", err)
	}
	s.memPut = "$KV." + s.names.StoreBucket(memoriesBucket) + "."
	if p := s.js.Options().APIPrefix; p != "" && p != jetstream.DefaultAPIPrefix {
		s.memPut = strings.TrimSuffix(p, ".") + "." + s.memPut
	}
	s.mems = &memIndex{orgs: map[string]*orgMemories{}}
	return watch(ctx, wctx, s, s.memKV, s.onMemory)
}

// onMemory keeps the memory index from the bucket's watcher.
func (s *Store) onMemory(e jetstream.KeyValueEntry) {
	if rest, ok := strings.CutPrefix(e.Key(), forgottenPrefix); ok {
		org, _ := decodePart(rest)
		if n, err := strconv.ParseUint(string(e.Value()), 10, 64); err == nil {
			s.mems.mu.Lock()
			o := s.mems.org(org)
			o.forgotten = max(o.forgotten, n)
			s.mems.mu.Unlock()
		}
		return
	}
	orgPart, id, ok := strings.Cut(e.Key(), ".")
	org, okOrg := decodePart(orgPart)
	if !ok || !okOrg {
		return
	}
	if e.Operation() != jetstream.KeyValuePut {
		s.memDeleted(org, id, e.Revision(), e.Created())
		return
	}
	rec := &busv1.MemoryRecord{}
	if err := proto.Unmarshal(e.Value(), rec); err != nil || rec.GetMemory() == nil {
		return
	}
	s.memAdded(rec.GetMemory(), e.Revision())
}

func (s *Store) memAdded(m *agentmeshv1.Memory, rev uint64) {
	s.mems.mu.Lock()
	defer s.mems.mu.Unlock()
	o := s.mems.org(m.GetOrg())
	o.head = max(o.head, rev)
	if cur := o.live[m.GetId()]; cur != nil && cur.rev >= rev {
		return
	}
	delete(o.deleted, m.GetId())
	o.live[m.GetId()] = &indexedMemory{m: m, rev: rev}
}

func (s *Store) memDeleted(org, id string, rev uint64, at time.Time) {
	s.mems.mu.Lock()
	defer s.mems.mu.Unlock()
	o := s.mems.org(org)
	o.head = max(o.head, rev)
	if cur := o.live[id]; cur != nil && cur.rev < rev {
		delete(o.live, id)
	}
	o.deleted[id] = deletion{rev: rev, time: at}
}

func decodePart(p string) (string, bool) {
	org, _, ok := decodeAgentKey(p + ".x")
	return org, ok
}

func memKey(org, id string) string { return keyPart(org) + "." + id }

// PutMemory implements store.Memories.
func (s *Store) PutMemory(ctx context.Context, rec *busv1.MemoryRecord) (*busv1.MemoryRecord, bool, error) {
	m := rec.GetMemory()
	s.mems.mu.RLock()
	_, wasDeleted := s.mems.org(m.GetOrg()).deleted[m.GetId()]
	s.mems.mu.RUnlock()
	if wasDeleted {
		return nil, false, bus.Errorf(bus.CodeFailedPrecondition, "memory %s was deleted", m.GetId())
	}
	data, err := proto.Marshal(rec)
	if err != nil {
		return nil, false, store.Internal("marshal memory", err)
	}
	rev, err := s.memKV.Create(ctx, memKey(m.GetOrg(), m.GetId()), data)
	if errors.Is(err, jetstream.ErrKeyExists) {
		old, err := s.GetMemory(ctx, m.GetOrg(), m.GetId())
		return old, false, err
	}
	if err != nil {
		return nil, false, kvError("put memory", err)
	}
	s.memAdded(m, rev)
	return rec, true, nil
}

// GetMemory implements store.Memories.
func (s *Store) GetMemory(ctx context.Context, org, id string) (*busv1.MemoryRecord, error) {
	e, err := s.memKV.Get(ctx, memKey(org, id))
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrInvalidKey) {
		return nil, bus.Errorf(bus.CodeNotFound, "memory %q not found", id)
	}
	if err != nil {
		return nil, kvError("get memory", err)
	}
	rec := &busv1.MemoryRecord{}
	if err := proto.Unmarshal(e.Value(), rec); err != nil {
		return nil, store.Internal("decode memory", err)
	}
	return rec, nil
}

// ListMemories implements store.Memories from the index, newest first.
func (s *Store) ListMemories(_ context.Context, q store.MemoryQuery) ([]*agentmeshv1.Memory, string, error) {
	tok, err := store.DecodeToken(q.PageToken)
	if err != nil {
		return nil, "", err
	}
	var before uint64
	if tok != "" {
		if before, err = strconv.ParseUint(tok, 10, 64); err != nil {
			return nil, "", bus.FieldError("page_token", "malformed page token")
		}
	}
	s.mems.mu.RLock()
	var hits []*indexedMemory
	for _, im := range s.mems.org(q.Org).live {
		m := im.m
		if (q.Scope == "" || m.Scope == q.Scope) && (q.ScopeID == "" || m.ScopeId == q.ScopeID) &&
			(q.Tag == "" || slices.Contains(m.Tags, q.Tag)) && (before == 0 || im.rev < before) {
			hits = append(hits, im)
		}
	}
	s.mems.mu.RUnlock()
	slices.SortFunc(hits, func(a, b *indexedMemory) int { return int64cmp(int64(b.rev), int64(a.rev)) })
	n := store.PageSize(q.PageSize)
	next := ""
	if len(hits) > n {
		hits = hits[:n]
		next = store.EncodeToken(strconv.FormatUint(hits[n-1].rev, 10))
	}
	out := make([]*agentmeshv1.Memory, len(hits))
	for i, im := range hits {
		out[i] = proto.Clone(im.m).(*agentmeshv1.Memory)
	}
	return out, next, nil
}

func int64cmp(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// DeleteMemories implements store.Memories: each memory's delete marker
// is written with its expected last revision, so its sequence (the
// change's cursor) is known.
func (s *Store) DeleteMemories(ctx context.Context, org string, ids []string) ([]*agentmeshv1.Memory, error) {
	var out []*agentmeshv1.Memory
	for _, id := range ids {
		e, err := s.memKV.Get(ctx, memKey(org, id))
		if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrInvalidKey) {
			continue
		}
		if err != nil {
			return out, kvError("delete memory", err)
		}
		rec := &busv1.MemoryRecord{}
		if err := proto.Unmarshal(e.Value(), rec); err != nil {
			return out, store.Internal("decode memory", err)
		}
		msg := nats.NewMsg(s.memPut + memKey(org, id))
		msg.Header.Set("KV-Operation", "DEL")
		ack, err := s.js.PublishMsg(ctx, msg, jetstream.WithExpectLastSequencePerSubject(e.Revision()))
		if err != nil {
			var apiErr *jetstream.APIError
			if errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence {
				continue // deleted or rewritten meanwhile: another writer's
			}
			return out, kvError("delete memory", err)
		}
		s.memDeleted(org, id, ack.Sequence, s.now())
		out = append(out, rec.GetMemory())
	}
	return out, nil
}

// MemoryChanges implements store.Memories by reading the org's messages
// of the bucket's stream after the cursor (a stream sequence).
func (s *Store) MemoryChanges(ctx context.Context, org, cursor string, limit int) ([]store.MemoryChange, string, error) {
	var after uint64
	if cursor != "" {
		var err error
		if after, err = strconv.ParseUint(cursor, 10, 64); err != nil {
			return nil, "", bus.FieldError("cursor", "malformed memory change cursor %q", cursor)
		}
	}
	s.mems.mu.RLock()
	o := s.mems.org(org)
	head, forgotten := o.head, o.forgotten
	s.mems.mu.RUnlock()
	if cursor != "" && after < forgotten {
		return nil, "", store.ErrCursorExpired
	}
	if limit <= 0 {
		limit = store.MaxPageSize
	}
	if head <= after {
		return nil, strconv.FormatUint(after, 10), nil
	}
	out, last, err := s.readMemoryChanges(ctx, org, after, head, limit, cursor == "")
	if err != nil {
		return nil, "", err
	}
	return out, strconv.FormatUint(last, 10), nil
}

// readMemoryChanges reads the org's changes after the sequence after, at
// most limit (live ones only when liveOnly), and the sequence read up to
// (head, at least, once everything stored was read).
func (s *Store) readMemoryChanges(ctx context.Context, org string, after, head uint64, limit int, liveOnly bool) ([]store.MemoryChange, uint64, error) {
	var out []store.MemoryChange
	last := after
	pending, err := bus.ReadOnce(ctx, s.memStream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{s.memPut + keyPart(org) + ".>"},
		DeliverPolicy:  jetstream.DeliverByStartSequencePolicy, OptStartSeq: after + 1,
	}, limit, func(msg jetstream.Msg) error {
		md, err := msg.Metadata()
		if err != nil {
			return store.Internal("memory changes", err)
		}
		last = md.Sequence.Stream
		if c, ok := memoryChange(msg, s.memPut); ok && (c.Record != nil || !liveOnly) {
			out = append(out, c)
		}
		return nil
	})
	var berr *bus.Error
	switch {
	case errors.As(err, &berr):
		return nil, 0, err
	case err != nil:
		return nil, 0, kvError("memory changes", err)
	}
	if pending <= limit {
		last = max(last, head)
	}
	return out, last, nil
}

// memoryChange decodes one message of the memories bucket.
func memoryChange(msg jetstream.Msg, prefix string) (store.MemoryChange, bool) {
	key := strings.TrimPrefix(msg.Subject(), prefix)
	_, id, ok := strings.Cut(key, ".")
	if !ok {
		return store.MemoryChange{}, false
	}
	if op := msg.Headers().Get("KV-Operation"); op == "DEL" || op == "PURGE" {
		return store.MemoryChange{ID: id}, true
	}
	rec := &busv1.MemoryRecord{}
	if err := proto.Unmarshal(msg.Data(), rec); err != nil {
		return store.MemoryChange{}, false
	}
	return store.MemoryChange{ID: id, Record: rec}, true
}

// MemoryCursor implements store.Memories: the index's head of the org
// (this process's writes at once, others' as the watcher sees them).
func (s *Store) MemoryCursor(_ context.Context, org string) (string, error) {
	s.mems.mu.RLock()
	defer s.mems.mu.RUnlock()
	o := s.mems.orgs[org]
	if o == nil || o.head == 0 {
		return "", nil
	}
	return strconv.FormatUint(o.head, 10), nil
}

// ExpireMemories implements store.Memories.
func (s *Store) ExpireMemories(ctx context.Context, createdBefore, forgetBefore time.Time) (int, error) {
	old := map[string][]string{}
	var forget []struct {
		org, id string
		rev     uint64
	}
	s.mems.mu.RLock()
	for org, o := range s.mems.orgs {
		for id, im := range o.live {
			if !createdBefore.IsZero() && im.m.GetCreatedAt().AsTime().Before(createdBefore) {
				old[org] = append(old[org], id)
			}
		}
		for id, d := range o.deleted {
			if !forgetBefore.IsZero() && d.time.Before(forgetBefore) {
				forget = append(forget, struct {
					org, id string
					rev     uint64
				}{org, id, d.rev})
			}
		}
	}
	s.mems.mu.RUnlock()
	deleted := 0
	for org, ids := range old {
		gone, err := s.DeleteMemories(ctx, org, ids)
		deleted += len(gone)
		if err != nil {
			return deleted, err
		}
	}
	horizon := map[string]uint64{}
	for _, f := range forget {
		if err := s.memStream.Purge(ctx, jetstream.WithPurgeSubject(s.memPut+memKey(f.org, f.id))); err != nil {
			return deleted, kvError("forget memory deletion", err)
		}
		horizon[f.org] = max(horizon[f.org], f.rev)
		s.mems.mu.Lock()
		delete(s.mems.org(f.org).deleted, f.id)
		s.mems.mu.Unlock()
	}
	for org, rev := range horizon {
		if _, err := s.memKV.Put(ctx, forgottenPrefix+keyPart(org), []byte(strconv.FormatUint(rev, 10))); err != nil {
			return deleted, kvError("forget memory deletions", err)
		}
		s.mems.mu.Lock()
		o := s.mems.org(org)
		o.forgotten = max(o.forgotten, rev)
		s.mems.mu.Unlock()
	}
	return deleted, nil
}
