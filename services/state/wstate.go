package state

// Working state (seed 001's get_state / set_state(persist)): JSON values
// under keys of a scope, hot in the state service's in-memory KV bucket,
// each with its TTL, and also written to the record (the store) when
// persisted. A read tries the hot bucket, then the record (and warms the
// hot copy). A write is a compare-and-set on the hot key's last sequence
// (the serialisation point; the entry's own revision grows by one per
// write and is what if_revision compares), then, for a persisted entry,
// an upsert of the record that keeps the highest revision — so concurrent
// writers converge. A tool call run again (same idempotency key) returns
// the entry it wrote instead of writing twice.

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"time"

	busv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/bus/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/memory"
	"github.com/agentmesh/agentmesh/services/state/store"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// maxStateTries bounds a write's compare-and-set loop.
const maxStateTries = 16

// scopedKey is what each state request (get, set, delete) names: a key in
// a scope.
type scopedKey interface {
	GetScope() string
	GetScopeId() string
	GetKey() string
}

// stateKeyOf resolves an op's target entry: req's key in its scope, as
// tool (writing or not) from the op's origin.
func (s *Service) stateKeyOf(ctx context.Context, op *busv1.StateOp, tool string, req scopedKey, write bool) (store.StateKey, origin, error) {
	o, err := s.originOf(ctx, op.GetOrg(), op.GetOrigin())
	if err != nil {
		return store.StateKey{}, o, err
	}
	sc, sid, err := o.target(tool, req.GetScope(), req.GetScopeId(), write)
	if err != nil {
		return store.StateKey{}, o, err
	}
	key := req.GetKey()
	if err := memory.CheckKey(key); err != nil {
		return store.StateKey{}, o, bus.FieldError("key", "%v", err)
	}
	return store.StateKey{Org: op.GetOrg(), Scope: string(sc), ScopeID: sid, Key: key}, o, nil
}

// current returns the entry (nil when there is none or it expired) and the
// hot key's last sequence; warm copies an entry found only in the record
// back into the hot bucket.
func (s *Service) current(ctx context.Context, k store.StateKey, warm bool) (*busv1.StateRecord, uint64, error) {
	hk := hotKey(k)
	data, seq, found, err := s.keep.hot.get(ctx, hk)
	if err != nil {
		return nil, 0, err
	}
	now := s.keep.now()
	if found {
		rec := &busv1.StateRecord{}
		if err := proto.Unmarshal(data, rec); err != nil {
			return nil, 0, store.Internal("decode state entry", err)
		}
		if !rec.GetEntry().GetExpiresAt().AsTime().After(now) {
			return nil, seq, nil // expired; the server removes it within a second
		}
		return rec, seq, nil
	}
	rec, err := s.keep.store.GetState(ctx, k, now)
	if errors.Is(err, bus.ErrNotFound) {
		return nil, seq, nil
	}
	if err != nil {
		return nil, 0, err
	}
	if warm {
		if b, err := proto.Marshal(rec); err == nil {
			if nseq, err := s.keep.hot.put(ctx, hk, b, seq, rec.GetEntry().GetExpiresAt().AsTime().Sub(now)); err == nil {
				seq = nseq
			}
		}
	}
	return rec, seq, nil
}

func notFoundKey(k store.StateKey) error {
	return bus.Errorf(bus.CodeNotFound, "state key %q not found in scope %s", k.Key, k.Scope)
}

func (s *Service) getState(ctx context.Context, op *busv1.StateOp) (*agentmeshv1.GetStateResponse, error) {
	req := op.GetGet()
	if req == nil {
		return nil, bus.FieldError("get", "a get request is required")
	}
	k, _, err := s.stateKeyOf(ctx, op, memory.ToolStateGet, req, false)
	if err != nil {
		return nil, err
	}
	rec, _, err := s.current(ctx, k, true)
	if err != nil {
		return nil, err
	}
	if rec == nil {
		return nil, notFoundKey(k)
	}
	return &agentmeshv1.GetStateResponse{Entry: rec.GetEntry()}, nil
}

func (s *Service) setState(ctx context.Context, op *busv1.StateOp) (*agentmeshv1.SetStateResponse, error) {
	req := op.GetSet()
	if req == nil {
		return nil, bus.FieldError("set", "a set request is required")
	}
	k, o, err := s.stateKeyOf(ctx, op, memory.ToolStateSet, req, true)
	if err != nil {
		return nil, err
	}
	if req.GetValue() == nil {
		return nil, bus.FieldError("value", "a value is required (any JSON value)")
	}
	if b, err := protojson.Marshal(req.GetValue()); err != nil {
		return nil, bus.FieldError("value", "not a JSON value: %v", err)
	} else if len(b) > memory.MaxValueBytes {
		return nil, &bus.Error{Code: bus.CodeResourceExhausted, Field: "value", Message: "value is " + strconv.Itoa(len(b)) + " bytes as JSON; at most 65536 (64 KiB)"}
	}
	ttl, err := memory.TTL(req.GetTtl().AsDuration())
	if err != nil {
		return nil, bus.FieldError("ttl", "%v", err)
	}
	for range maxStateTries {
		e, err := s.trySet(ctx, k, o, req, ttl)
		if errors.Is(err, errHotConflict) {
			continue
		}
		if err != nil {
			return nil, err
		}
		return &agentmeshv1.SetStateResponse{Entry: e}, nil
	}
	return nil, &bus.Error{Code: bus.CodeConflict, Message: "state key " + k.Key + ": too many concurrent writers; retry"}
}

// trySet is one try of a write: errHotConflict when another writer came
// between the read and the write.
func (s *Service) trySet(ctx context.Context, k store.StateKey, o origin, req *agentmeshv1.SetStateRequest, ttl time.Duration) (*agentmeshv1.StateEntry, error) {
	cur, seq, err := s.current(ctx, k, false)
	if err != nil {
		return nil, err
	}
	if cur != nil && o.idem != "" && cur.GetIdempotencyKey() == o.idem {
		// This tool call wrote it already (a run after a crash): answer
		// it, and make sure a persisted entry reached the record.
		if cur.GetEntry().GetPersisted() {
			if _, err := s.keep.store.PutState(ctx, cur); err != nil {
				return nil, err
			}
		}
		return cur.GetEntry(), nil
	}
	have := cur.GetEntry().GetRevision()
	if req.IfRevision != nil && req.GetIfRevision() != have {
		return nil, store.RevisionConflict("state key "+k.Key, req.GetIfRevision(), have)
	}
	now := s.keep.now()
	e := &agentmeshv1.StateEntry{
		Org: k.Org, Scope: k.Scope, ScopeId: k.ScopeID, Key: k.Key, Value: req.GetValue(),
		Revision: have + 1, ExpiresAt: timestamppb.New(now.Add(ttl)),
		Persisted:  req.GetPersist() || cur.GetEntry().GetPersisted(),
		Provenance: o.prov, CreatedAt: timestamppb.New(now), UpdatedAt: timestamppb.New(now),
	}
	if cur != nil {
		e.CreatedAt = cur.GetEntry().GetCreatedAt()
	}
	rec := &busv1.StateRecord{Entry: e, IdempotencyKey: o.idem}
	data, err := proto.Marshal(rec)
	if err != nil {
		return nil, store.Internal("marshal state entry", err)
	}
	if _, err := s.keep.hot.put(ctx, hotKey(k), data, seq, ttl); err != nil {
		return nil, err
	}
	if e.GetPersisted() {
		if _, err := s.keep.store.PutState(ctx, rec); err != nil {
			return nil, err
		}
	}
	return e, nil
}

func (s *Service) deleteState(ctx context.Context, op *busv1.StateOp) (*agentmeshv1.DeleteStateResponse, error) {
	req := op.GetDelete()
	if req == nil {
		return nil, bus.FieldError("delete", "a delete request is required")
	}
	k, _, err := s.stateKeyOf(ctx, op, memory.ToolStateDelete, req, true)
	if err != nil {
		return nil, err
	}
	for range maxStateTries {
		cur, seq, err := s.current(ctx, k, false)
		if err != nil {
			return nil, err
		}
		if cur == nil {
			return nil, notFoundKey(k)
		}
		if req.IfRevision != nil && req.GetIfRevision() != cur.GetEntry().GetRevision() {
			return nil, store.RevisionConflict("state key "+k.Key, req.GetIfRevision(), cur.GetEntry().GetRevision())
		}
		if err := s.keep.hot.del(ctx, hotKey(k), seq); errors.Is(err, errHotConflict) {
			continue
		} else if err != nil {
			return nil, err
		}
		if _, err := s.keep.store.DeleteState(ctx, k, cur.GetEntry().GetRevision()); err != nil {
			return nil, err
		}
		return &agentmeshv1.DeleteStateResponse{Entry: cur.GetEntry()}, nil
	}
	return nil, &bus.Error{Code: bus.CodeConflict, Message: "state key " + k.Key + ": too many concurrent writers; retry"}
}

// maxListedState bounds the entries of one scope a list reads.
const maxListedState = 10000

func (s *Service) listState(ctx context.Context, op *busv1.StateOp) (*agentmeshv1.ListStateResponse, error) {
	req := op.GetList()
	if req == nil {
		return nil, bus.FieldError("list", "a list request is required")
	}
	o, err := s.originOf(ctx, op.GetOrg(), op.GetOrigin())
	if err != nil {
		return nil, err
	}
	sc, sid, err := o.target("state listing", req.GetScope(), req.GetScopeId(), false)
	if err != nil {
		return nil, err
	}
	after, err := store.DecodeToken(req.GetPageToken())
	if err != nil {
		return nil, err
	}
	now := s.keep.now()
	byKey := map[string]*agentmeshv1.StateEntry{}
	take := func(e *agentmeshv1.StateEntry) {
		if e.GetExpiresAt().AsTime().After(now) && hasPrefix(e.GetKey(), req.GetPrefix()) && e.GetKey() > after {
			if cur := byKey[e.GetKey()]; cur == nil || cur.GetRevision() < e.GetRevision() {
				byKey[e.GetKey()] = e
			}
		}
	}
	err = s.keep.hot.scan(ctx, hotScope(op.GetOrg(), string(sc), sid)+".>", func(_ string, data []byte) {
		rec := &busv1.StateRecord{}
		if proto.Unmarshal(data, rec) == nil {
			take(rec.GetEntry())
		}
	})
	if err != nil {
		return nil, err
	}
	q := store.StateQuery{Org: op.GetOrg(), Scope: string(sc), ScopeID: sid, Prefix: req.GetPrefix(), Now: now, PageSize: store.MaxPageSize, PageToken: req.GetPageToken()}
	for len(byKey) <= maxListedState {
		recs, next, err := s.keep.store.ListState(ctx, q)
		if err != nil {
			return nil, err
		}
		for _, r := range recs {
			take(r.GetEntry())
		}
		if q.PageToken = next; next == "" {
			break
		}
	}
	keys := make([]string, 0, len(byKey))
	for key := range byKey {
		keys = append(keys, key)
	}
	slices.Sort(keys)
	resp := &agentmeshv1.ListStateResponse{}
	n := store.PageSize(int(req.GetPageSize()))
	for i, key := range keys {
		if i == n {
			resp.NextPageToken = store.EncodeToken(keys[n-1])
			break
		}
		resp.Entries = append(resp.Entries, byKey[key])
	}
	return resp, nil
}

func hasPrefix(s, p string) bool { return len(s) >= len(p) && s[:len(p)] == p }
