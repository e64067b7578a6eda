package kvstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	busv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/bus/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/services/state/store"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"
)

// ---- working state ----

// stateScopeKey is the key prefix of one scope's entries.
func stateScopeKey(org, scope, scopeID string) string {
	return keyPart(org) + "." + keyPart(scope) + "." + keyPart(scopeID)
}

func stateKey(k store.StateKey) string {
	return stateScopeKey(k.Org, k.Scope, k.ScopeID) + "." + k.Key
}

func decodeState(e jetstream.KeyValueEntry) (*busv1.StateRecord, error) {
	r := &busv1.StateRecord{}
	if err := proto.Unmarshal(e.Value(), r); err != nil {
		return nil, store.Internal("decode state entry", err)
	}
	return r, nil
}

func live(r *busv1.StateRecord, now time.Time) bool {
	return r.GetEntry().GetExpiresAt().AsTime().After(now)
}

func stateNotFound(k string) error { return bus.Errorf(bus.CodeNotFound, "state key %q not found", k) }

// PutState implements store.WorkingState with compare-and-set on the KV
// revision, retried when another writer came between the read and the
// write.
func (s *Store) PutState(ctx context.Context, rec *busv1.StateRecord) (bool, error) {
	key := stateKey(store.KeyOf(rec.GetEntry()))
	data, err := proto.Marshal(rec)
	if err != nil {
		return false, store.Internal("marshal state entry", err)
	}
	for range maxRetries {
		e, err := s.wstateKV.Get(ctx, key)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
			if _, err = s.wstateKV.Create(ctx, key, data); errors.Is(err, jetstream.ErrKeyExists) {
				continue
			}
		case err != nil:
			return false, kvError("put state", err)
		default:
			cur, derr := decodeState(e)
			if derr != nil {
				return false, derr
			}
			if live(cur, s.now()) && cur.GetEntry().GetRevision() >= rec.GetEntry().GetRevision() {
				return false, nil
			}
			if _, err = s.wstateKV.Update(ctx, key, data, e.Revision()); errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
				continue
			}
		}
		if err != nil {
			return false, kvError("put state", err)
		}
		return true, nil
	}
	return false, &bus.Error{Code: bus.CodeConflict, Message: "put state: too many concurrent writers"}
}

// GetState implements store.WorkingState.
func (s *Store) GetState(ctx context.Context, k store.StateKey, now time.Time) (*busv1.StateRecord, error) {
	e, err := s.wstateKV.Get(ctx, stateKey(k))
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrInvalidKey) {
		return nil, stateNotFound(k.Key)
	}
	if err != nil {
		return nil, kvError("get state", err)
	}
	r, err := decodeState(e)
	if err != nil {
		return nil, err
	}
	if !live(r, now) {
		return nil, stateNotFound(k.Key)
	}
	return r, nil
}

// DeleteState implements store.WorkingState.
func (s *Store) DeleteState(ctx context.Context, k store.StateKey, upTo int64) (bool, error) {
	key := stateKey(k)
	for range maxRetries {
		e, err := s.wstateKV.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrInvalidKey) {
			return false, nil
		}
		if err != nil {
			return false, kvError("delete state", err)
		}
		r, err := decodeState(e)
		if err != nil {
			return false, err
		}
		if upTo > 0 && r.GetEntry().GetRevision() > upTo {
			return false, nil
		}
		err = s.wstateKV.Delete(ctx, key, jetstream.LastRevision(e.Revision()))
		if errors.Is(err, jetstream.ErrKeyRevisionMismatch) || wrongLast(err) {
			continue
		}
		if err != nil {
			return false, kvError("delete state", err)
		}
		return true, nil
	}
	return false, &bus.Error{Code: bus.CodeConflict, Message: "delete state: too many concurrent writers"}
}

// wrongLast reports a publish refused for its expected last sequence.
func wrongLast(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}

// ListState implements store.WorkingState: the scope's keys, sorted, then
// the live entries among them.
func (s *Store) ListState(ctx context.Context, q store.StateQuery) ([]*busv1.StateRecord, string, error) {
	after, err := store.DecodeToken(q.PageToken)
	if err != nil {
		return nil, "", err
	}
	prefix := stateScopeKey(q.Org, q.Scope, q.ScopeID) + "."
	keys, err := s.listKeys(ctx, s.wstateKV, prefix+">")
	if err != nil {
		return nil, "", kvError("list state", err)
	}
	var names []string
	for _, k := range keys {
		name := strings.TrimPrefix(k, prefix)
		if strings.HasPrefix(name, q.Prefix) && name > after {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	n := store.PageSize(q.PageSize)
	var out []*busv1.StateRecord
	for i, name := range names {
		r, err := s.GetState(ctx, store.StateKey{Org: q.Org, Scope: q.Scope, ScopeID: q.ScopeID, Key: name}, q.Now)
		if errors.Is(err, bus.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, "", err
		}
		if len(out) == n {
			return out, store.EncodeToken(names[i-1]), nil
		}
		out = append(out, r)
	}
	return out, "", nil
}

// listKeys lists a bucket's keys matching filter (none: an empty list).
func (s *Store) listKeys(ctx context.Context, kv jetstream.KeyValue, filter string) ([]string, error) {
	lister, err := kv.ListKeysFiltered(ctx, filter)
	if err != nil {
		if errors.Is(err, jetstream.ErrNoKeysFound) {
			return nil, nil
		}
		return nil, err
	}
	var keys []string
	for k := range lister.Keys() {
		keys = append(keys, k)
	}
	return keys, nil
}

// DeleteExpiredState implements store.WorkingState (a scan: the embedded
// store is for one machine's scale).
func (s *Store) DeleteExpiredState(ctx context.Context, t time.Time) (int, error) {
	keys, err := s.listKeys(ctx, s.wstateKV, ">")
	if err != nil {
		return 0, kvError("delete expired state", err)
	}
	n := 0
	for _, k := range keys {
		e, err := s.wstateKV.Get(ctx, k)
		if err != nil {
			continue
		}
		r, err := decodeState(e)
		if err != nil || r.GetEntry().GetExpiresAt().AsTime().After(t) {
			continue
		}
		if err := s.wstateKV.Delete(ctx, k, jetstream.LastRevision(e.Revision())); err == nil {
			n++
		}
	}
	return n, nil
}

// ---- threads ----

func threadKey(org, id string) string { return keyPart(org) + "." + keyPart(id) }

func (s *Store) getThread(ctx context.Context, org, id string) (*agentmeshv1.Thread, uint64, error) {
	e, err := s.threadKV.Get(ctx, threadKey(org, id))
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrInvalidKey) {
		return nil, 0, bus.Errorf(bus.CodeNotFound, "thread %q not found", id)
	}
	if err != nil {
		return nil, 0, kvError("get thread", err)
	}
	th := &agentmeshv1.Thread{}
	if err := proto.Unmarshal(e.Value(), th); err != nil {
		return nil, 0, store.Internal("decode thread", err)
	}
	return th, e.Revision(), nil
}

// GetThread implements store.Threads.
func (s *Store) GetThread(ctx context.Context, org, id string) (*agentmeshv1.Thread, error) {
	th, _, err := s.getThread(ctx, org, id)
	return th, err
}

// PutThread implements store.Threads: the thread's revision is checked
// against expected, and the write made with compare-and-set on the KV
// revision read.
func (s *Store) PutThread(ctx context.Context, th *agentmeshv1.Thread, expected int64) (*agentmeshv1.Thread, error) {
	out := store.PlanThread(th, expected, s.now())
	data, err := proto.Marshal(out)
	if err != nil {
		return nil, store.Internal("marshal thread", err)
	}
	key := threadKey(th.GetOrg(), th.GetId())
	if expected == 0 {
		_, err := s.threadKV.Create(ctx, key, data)
		if errors.Is(err, jetstream.ErrKeyExists) {
			cur, _, gerr := s.getThread(ctx, th.GetOrg(), th.GetId())
			return nil, conflictOr(gerr, store.RevisionConflict("thread "+th.GetId(), 0, cur.GetRevision()))
		}
		if err != nil {
			return nil, kvError("put thread", err)
		}
		return out, nil
	}
	cur, rev, err := s.getThread(ctx, th.GetOrg(), th.GetId())
	if errors.Is(err, bus.ErrNotFound) {
		return nil, store.RevisionConflict("thread "+th.GetId(), expected, 0)
	}
	if err != nil {
		return nil, err
	}
	if cur.GetRevision() != expected {
		return nil, store.RevisionConflict("thread "+th.GetId(), expected, cur.GetRevision())
	}
	if _, err := s.threadKV.Update(ctx, key, data, rev); err != nil {
		if errors.Is(err, jetstream.ErrKeyRevisionMismatch) || wrongLast(err) {
			now, _, _ := s.getThread(ctx, th.GetOrg(), th.GetId())
			return nil, store.RevisionConflict("thread "+th.GetId(), expected, now.GetRevision())
		}
		return nil, kvError("put thread", err)
	}
	return out, nil
}

// conflictOr is conflict unless the read that was to describe it failed.
func conflictOr(readErr, conflict error) error {
	if readErr != nil && !errors.Is(readErr, bus.ErrNotFound) {
		return readErr
	}
	return conflict
}

// ListThreads implements store.Threads: the org's threads read and
// sorted (updated_at descending, then id descending).
func (s *Store) ListThreads(ctx context.Context, org string, pageSize int, pageToken string) ([]*agentmeshv1.Thread, string, error) {
	tok, err := store.DecodeToken(pageToken)
	if err != nil {
		return nil, "", err
	}
	var afterNS int64
	afterID := ""
	if tok != "" {
		ns, id, ok := strings.Cut(tok, ":")
		n, perr := strconv.ParseInt(ns, 10, 64)
		if !ok || perr != nil {
			return nil, "", bus.FieldError("page_token", "malformed page token")
		}
		afterNS, afterID = n, id
	}
	keys, err := s.listKeys(ctx, s.threadKV, keyPart(org)+".>")
	if err != nil {
		return nil, "", kvError("list threads", err)
	}
	var all []*agentmeshv1.Thread
	for _, k := range keys {
		_, idPart, _ := strings.Cut(k, ".")
		id, ok := decodePart(idPart)
		if !ok {
			continue
		}
		th, _, err := s.getThread(ctx, org, id)
		if err != nil {
			continue
		}
		ns := th.GetUpdatedAt().AsTime().UnixNano()
		if afterID == "" || ns < afterNS || (ns == afterNS && th.GetId() < afterID) {
			all = append(all, th)
		}
	}
	slices.SortFunc(all, func(a, b *agentmeshv1.Thread) int {
		if c := b.GetUpdatedAt().AsTime().Compare(a.GetUpdatedAt().AsTime()); c != 0 {
			return c
		}
		return strings.Compare(b.GetId(), a.GetId())
	})
	n := store.PageSize(pageSize)
	if len(all) <= n {
		return all, "", nil
	}
	last := all[n-1]
	return all[:n], store.EncodeToken(fmt.Sprintf("%d:%s", last.GetUpdatedAt().AsTime().UnixNano(), last.GetId())), nil
}

// DeleteThread implements store.Threads.
func (s *Store) DeleteThread(ctx context.Context, org, id string, expected int64) error {
	cur, rev, err := s.getThread(ctx, org, id)
	if err != nil {
		return err
	}
	if expected != 0 && cur.GetRevision() != expected {
		return store.RevisionConflict("thread "+id, expected, cur.GetRevision())
	}
	if err := s.threadKV.Delete(ctx, threadKey(org, id), jetstream.LastRevision(rev)); err != nil {
		if errors.Is(err, jetstream.ErrKeyRevisionMismatch) || wrongLast(err) {
			now, _, _ := s.getThread(ctx, org, id)
			return store.RevisionConflict("thread "+id, expected, now.GetRevision())
		}
		return kvError("delete thread", err)
	}
	return nil
}
