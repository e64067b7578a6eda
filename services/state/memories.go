package state

// Long-term memories (seed 003): the executor's remember stores a text
// with its embedding and provenance; recall (and the API's search) ranks
// an org's memories by cosine similarity, exactly, in an in-memory index
// per org (vecindex) that is brought up to date from the store's change
// feed before each use — a cursor check when nothing changed — so every
// state process sees every process's writes. Memories are data: nothing
// here reads their text for anything but returning it.

import (
	"context"
	"crypto/sha256"
	"encoding/base32"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	busv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/bus/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/memory"
	"github.com/agentmesh/agentmesh/services/state/store"
	"github.com/agentmesh/agentmesh/services/state/vecindex"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// orgIndex is one org's search index and where it stands in the org's
// change feed.
type orgIndex struct {
	mu     sync.Mutex // held while syncing
	x      *vecindex.Index
	cursor string
	loaded bool
	synced time.Time
}

// changesPage is how many changes one read of the feed takes.
const changesPage = 1000

// index returns org's index, brought up to date with the store.
func (s *Service) index(ctx context.Context, org string) (*vecindex.Index, error) {
	k := s.keep
	k.indexesMu.Lock()
	oi := k.indexes[org]
	if oi == nil {
		oi = &orgIndex{x: vecindex.New()}
		k.indexes[org] = oi
	}
	k.indexesMu.Unlock()
	oi.mu.Lock()
	defer oi.mu.Unlock()
	now := k.now()
	if oi.loaded && now.Sub(oi.synced) > rebuildAfter {
		oi.x, oi.cursor, oi.loaded = vecindex.New(), "", false
	}
	head, err := k.store.MemoryCursor(ctx, org)
	if err != nil {
		return nil, err
	}
	if oi.loaded && head == oi.cursor {
		oi.synced = now
		return oi.x, nil
	}
	for {
		cs, next, err := k.store.MemoryChanges(ctx, org, oi.cursor, changesPage)
		if errors.Is(err, store.ErrCursorExpired) {
			oi.x, oi.cursor, oi.loaded = vecindex.New(), "", false
			continue
		}
		if err != nil {
			return nil, err
		}
		for _, c := range cs {
			s.apply(oi.x, c)
		}
		oi.cursor = next
		if len(cs) < changesPage {
			break
		}
	}
	oi.loaded, oi.synced = true, now
	return oi.x, nil
}

// apply folds one change into an index.
func (s *Service) apply(x *vecindex.Index, c store.MemoryChange) {
	if c.Record == nil {
		x.Remove(c.ID)
		return
	}
	v, err := vecindex.Decode(c.Record.GetEmbedding())
	if err == nil {
		err = x.Add(c.Record.GetMemory(), v)
	}
	if err != nil {
		s.log.Warn("memory not indexed", "org", c.Record.GetMemory().GetOrg(), "memory", c.ID, "err", err)
	}
}

// memoryID is a memory's id: derived from the org and the tool call's
// idempotency key (so a call run again finds the memory it wrote), else
// new.
func memoryID(org, idem string, now time.Time) string {
	if idem == "" {
		return "m" + strings.ToLower(store.NewID(now))
	}
	sum := sha256.Sum256([]byte(org + "\x00" + idem))
	return "m" + strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(sum[:])[:26])
}

// embedding checks and normalises a request's embedding.
func embedding(field string, v []float32) ([]float32, error) {
	if len(v) > memory.MaxDimensions {
		return nil, bus.FieldError(field, "%d dimensions; at most %d", len(v), memory.MaxDimensions)
	}
	u, err := vecindex.Normalize(v)
	if err != nil {
		return nil, bus.FieldError(field, "%v", err)
	}
	return u, nil
}

func (s *Service) remember(ctx context.Context, op *busv1.MemoryOp) (*busv1.RememberResponse, error) {
	req := op.GetRemember()
	switch {
	case req == nil:
		return nil, bus.FieldError("remember", "a remember request is required")
	case op.GetOrigin().GetTaskId() == "":
		return nil, bus.FieldError("origin.task_id", "remember is a tool's: it needs the task that calls it")
	case req.GetEmbeddingModel() == "":
		return nil, bus.FieldError("embedding_model", "the embedding model is required")
	}
	o, err := s.originOf(ctx, op.GetOrg(), op.GetOrigin())
	if err != nil {
		return nil, err
	}
	sc, sid, err := o.target(memory.ToolRemember, req.GetScope(), "", true)
	if err != nil {
		return nil, err
	}
	if len(req.GetText()) > memory.MaxTextBytes {
		return nil, &bus.Error{Code: bus.CodeResourceExhausted, Field: "text",
			Message: "text is " + strconv.Itoa(len(req.GetText())) + " bytes; at most 8192 (8 KiB)"}
	}
	if err := memory.CheckText(req.GetText()); err != nil {
		return nil, bus.FieldError("text", "%v", err)
	}
	tags, err := memory.CheckTags(req.GetTags())
	if err != nil {
		return nil, bus.FieldError("tags", "%v", err)
	}
	vec, err := embedding("embedding", req.GetEmbedding())
	if err != nil {
		return nil, err
	}
	x, err := s.index(ctx, op.GetOrg())
	if err != nil {
		return nil, err
	}
	if d := x.Dimensions(req.GetEmbeddingModel()); d != 0 && d != len(vec) {
		return nil, bus.FieldError("embedding", "%d dimensions; the org's memories of model %q have %d", len(vec), req.GetEmbeddingModel(), d)
	}
	now := s.keep.now()
	m := &agentmeshv1.Memory{
		Id: memoryID(op.GetOrg(), o.idem, now), Org: op.GetOrg(), Scope: string(sc), ScopeId: sid,
		Text: req.GetText(), Tags: tags, Provenance: o.prov, CreatedAt: timestamppb.New(now),
		EmbeddingModel: req.GetEmbeddingModel(), Dimensions: int32(len(vec)),
	}
	out, created, err := s.keep.store.PutMemory(ctx, &busv1.MemoryRecord{Memory: m, Embedding: vecindex.Encode(vec)})
	if err != nil {
		return nil, err
	}
	resp := &busv1.RememberResponse{Memory: out.GetMemory(), Created: created}
	if created && s.keep.cfg.MaxPerScope > 0 {
		n, err := s.prune(ctx, op.GetOrg(), pruning{scope: string(sc), scopeID: sid, maxItems: s.keep.cfg.MaxPerScope})
		if err != nil {
			s.log.Warn("memory retention after remember", "org", op.GetOrg(), "err", err)
		}
		resp.Pruned = n
	}
	return resp, nil
}

// scopeSet is the (scope, scope id) pairs a search may see (nil: all);
// an empty scope id stands for every one of the scope (API callers). It
// is a few pairs, compared in order: the filter runs once per memory.
type scopeSet [][2]string

func (ss scopeSet) has(m *agentmeshv1.Memory) bool {
	if ss == nil {
		return true
	}
	for _, p := range ss {
		if m.Scope == p[0] && (p[1] == "" || m.ScopeId == p[1]) {
			return true
		}
	}
	return false
}

// searchScopes is what a search may see: for a tool, the scopes its
// agent may read (or the one it names) of its own task; for the API, the
// scope it names, else all.
func searchScopes(o origin, scope, scopeID string) (scopeSet, error) {
	if o.task != nil {
		if scope != "" {
			sc, sid, err := o.target(memory.ToolRecall, scope, "", false)
			if err != nil {
				return nil, err
			}
			return scopeSet{{string(sc), sid}}, nil
		}
		ss := scopeSet{}
		for _, sc := range o.policy.Read {
			ss = append(ss, [2]string{string(sc), memory.ScopeID(sc, o.task)})
		}
		if len(ss) == 0 {
			return nil, &bus.Error{Code: bus.CodePermissionDenied, Field: "scope", Message: o.policy.Denied(memory.ToolRecall, memory.Access{All: true})}
		}
		return ss, nil
	}
	if scope == "" {
		if scopeID != "" {
			return nil, bus.FieldError("scope_id", "a scope_id needs its scope")
		}
		return nil, nil
	}
	sc, err := memory.ParseScope(scope)
	if err != nil {
		return nil, bus.FieldError("scope", "%v", err)
	}
	if scopeID != "" || sc == memory.ScopeOrg {
		if err := memory.CheckScopeID(sc, scopeID); err != nil {
			return nil, bus.FieldError("scope_id", "%v", err)
		}
	}
	return scopeSet{{string(sc), scopeID}}, nil
}

func (s *Service) searchMemories(ctx context.Context, op *busv1.MemoryOp) (*agentmeshv1.SearchMemoriesResponse, error) {
	req := op.GetSearch()
	switch {
	case req == nil:
		return nil, bus.FieldError("search", "a search request is required")
	case req.GetEmbeddingModel() == "":
		return nil, bus.FieldError("embedding_model", "the embedding model is required")
	case req.GetK() < 0 || req.GetK() > memory.MaxK:
		return nil, bus.FieldError("k", "1 to %d (0 means %d)", memory.MaxK, memory.DefaultK)
	}
	o, err := s.originOf(ctx, op.GetOrg(), op.GetOrigin())
	if err != nil {
		return nil, err
	}
	scopes, err := searchScopes(o, req.GetScope(), req.GetScopeId())
	if err != nil {
		return nil, err
	}
	tags, err := memory.CheckTags(req.GetTags())
	if err != nil {
		return nil, bus.FieldError("tags", "%v", err)
	}
	q, err := embedding("embedding", req.GetEmbedding())
	if err != nil {
		return nil, err
	}
	k := int(req.GetK())
	if k == 0 {
		k = memory.DefaultK
	}
	x, err := s.index(ctx, op.GetOrg())
	if err != nil {
		return nil, err
	}
	keep := func(m *agentmeshv1.Memory) bool {
		if !scopes.has(m) {
			return false
		}
		for _, t := range tags {
			if !slices.Contains(m.GetTags(), t) {
				return false
			}
		}
		return true
	}
	hits, compared, err := x.Search(req.GetEmbeddingModel(), q, k, keep)
	if err != nil {
		return nil, bus.FieldError("embedding", "%v", err)
	}
	resp := &agentmeshv1.SearchMemoriesResponse{Searched: int64(compared)}
	for _, h := range hits {
		resp.Hits = append(resp.Hits, &agentmeshv1.MemoryHit{Memory: h.Memory, Score: h.Score})
	}
	return resp, nil
}

// apiOnly refuses a memory operation a tool's task asks for (only the
// API lists, reads one, deletes and prunes).
func apiOnly(op *busv1.MemoryOp, name string) error {
	if op.GetOrigin().GetTaskId() != "" {
		return &bus.Error{Code: bus.CodePermissionDenied, Message: name + " is for API callers, not tools"}
	}
	return checkOrg(op.GetOrg())
}

func (s *Service) getMemory(ctx context.Context, op *busv1.MemoryOp) (*agentmeshv1.GetMemoryResponse, error) {
	if err := apiOnly(op, "reading a memory by id"); err != nil {
		return nil, err
	}
	if op.GetGet().GetId() == "" {
		return nil, bus.FieldError("id", "a memory id is required")
	}
	rec, err := s.keep.store.GetMemory(ctx, op.GetOrg(), op.GetGet().GetId())
	if err != nil {
		return nil, err
	}
	return &agentmeshv1.GetMemoryResponse{Memory: rec.GetMemory()}, nil
}

func (s *Service) listMemories(ctx context.Context, op *busv1.MemoryOp) (*agentmeshv1.ListMemoriesResponse, error) {
	if err := apiOnly(op, "listing memories"); err != nil {
		return nil, err
	}
	req := op.GetList()
	q := store.MemoryQuery{Org: op.GetOrg(), ScopeID: req.GetScopeId(), Tag: req.GetTag(), PageSize: int(req.GetPageSize()), PageToken: req.GetPageToken()}
	if req.GetScope() != "" {
		sc, err := memory.ParseScope(req.GetScope())
		if err != nil {
			return nil, bus.FieldError("scope", "%v", err)
		}
		q.Scope = string(sc)
	} else if req.GetScopeId() != "" {
		return nil, bus.FieldError("scope_id", "a scope_id needs its scope")
	}
	ms, next, err := s.keep.store.ListMemories(ctx, q)
	if err != nil {
		return nil, err
	}
	return &agentmeshv1.ListMemoriesResponse{Memories: ms, NextPageToken: next}, nil
}

func (s *Service) deleteMemory(ctx context.Context, op *busv1.MemoryOp) (*agentmeshv1.DeleteMemoryResponse, error) {
	if err := apiOnly(op, "deleting a memory"); err != nil {
		return nil, err
	}
	id := op.GetDelete().GetId()
	if id == "" {
		return nil, bus.FieldError("id", "a memory id is required")
	}
	gone, err := s.keep.store.DeleteMemories(ctx, op.GetOrg(), []string{id})
	if err != nil {
		return nil, err
	}
	if len(gone) == 0 {
		return nil, bus.Errorf(bus.CodeNotFound, "memory %q not found", id)
	}
	// The audit record of this request (bus.Auditor) names who asked; the
	// log says what went.
	s.log.Info("memory deleted", "org", op.GetOrg(), "memory", id, "by", op.GetOrigin().GetKeyName(),
		"scope", gone[0].GetScope(), "scope_id", gone[0].GetScopeId(), "written_by_task", gone[0].GetProvenance().GetTaskId())
	return &agentmeshv1.DeleteMemoryResponse{Memory: gone[0]}, nil
}

// pruning is a retention run over one org's memories.
type pruning struct {
	// scope and scopeID limit it ("" = all).
	scope, scopeID string
	maxAge         time.Duration
	maxItems       int
	dryRun         bool
}

func (s *Service) pruneMemories(ctx context.Context, op *busv1.MemoryOp) (*agentmeshv1.PruneMemoriesResponse, error) {
	if err := apiOnly(op, "pruning memories"); err != nil {
		return nil, err
	}
	req := op.GetPrune()
	p := pruning{maxAge: req.GetMaxAge().AsDuration(), maxItems: int(req.GetMaxItems()), dryRun: req.GetDryRun()}
	switch {
	case p.maxAge < 0:
		return nil, bus.FieldError("max_age", "must not be negative")
	case p.maxItems < 0:
		return nil, bus.FieldError("max_items", "must not be negative")
	case p.maxAge == 0 && p.maxItems == 0:
		return nil, bus.FieldError("max_age", "give max_age, max_items or both")
	}
	if req.GetScope() != "" {
		sc, err := memory.ParseScope(req.GetScope())
		if err != nil {
			return nil, bus.FieldError("scope", "%v", err)
		}
		p.scope, p.scopeID = string(sc), req.GetScopeId()
	} else if req.GetScopeId() != "" {
		return nil, bus.FieldError("scope_id", "a scope_id needs its scope")
	}
	n, err := s.prune(ctx, op.GetOrg(), p)
	if err != nil {
		return nil, err
	}
	if !p.dryRun && n > 0 {
		s.log.Info("memories pruned", "org", op.GetOrg(), "deleted", n, "by", op.GetOrigin().GetKeyName(), "scope", p.scope, "scope_id", p.scopeID)
	}
	return &agentmeshv1.PruneMemoriesResponse{Deleted: n}, nil
}

// prune deletes (or counts, dry) what p says of org's memories.
func (s *Service) prune(ctx context.Context, org string, p pruning) (int64, error) {
	x, err := s.index(ctx, org)
	if err != nil {
		return 0, err
	}
	cutoff := time.Time{}
	if p.maxAge > 0 {
		cutoff = s.keep.now().Add(-p.maxAge)
	}
	byScope := map[[2]string][]*agentmeshv1.Memory{}
	x.Each(func(m *agentmeshv1.Memory) bool {
		if (p.scope == "" || m.GetScope() == p.scope) && (p.scopeID == "" || m.GetScopeId() == p.scopeID) {
			key := [2]string{m.GetScope(), m.GetScopeId()}
			byScope[key] = append(byScope[key], m)
		}
		return true
	})
	var doomed []string
	for _, ms := range byScope {
		slices.SortFunc(ms, func(a, b *agentmeshv1.Memory) int { // newest first
			if c := b.GetCreatedAt().AsTime().Compare(a.GetCreatedAt().AsTime()); c != 0 {
				return c
			}
			return strings.Compare(b.GetId(), a.GetId())
		})
		for i, m := range ms {
			if (p.maxItems > 0 && i >= p.maxItems) || (!cutoff.IsZero() && m.GetCreatedAt().AsTime().Before(cutoff)) {
				doomed = append(doomed, m.GetId())
			}
		}
	}
	if p.dryRun {
		return int64(len(doomed)), nil
	}
	var n int64
	for len(doomed) > 0 {
		batch := doomed[:min(len(doomed), 500)]
		doomed = doomed[len(batch):]
		gone, err := s.keep.store.DeleteMemories(ctx, org, batch)
		n += int64(len(gone))
		if err != nil {
			return n, err
		}
	}
	return n, nil
}
