package kvstore

import (
	"context"
	"errors"
	"time"

	busv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/bus/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/services/state/store"
	"github.com/nats-io/nats.go/jetstream"
)

// Key names: a key's name is unique among its org's keys created through
// the API, revoked ones included (audit records name keys by name). A
// create claims the name in <P>_STORE_KEY_NAMES — a KV create of
// hash(org, name) holding the key's id, which only one of racing creates
// wins, as idempotency keys are claimed — and then stores the key; a
// create that fails after its claim releases it. A claim with no key
// behind it for orphanAfter (its creator died in between) is reclaimed.
// Keys stored before claims existed have none: a create also looks for
// their name among the keys held (the index holds them all once open).

// keyNameKey is the key_names key of org's name.
func keyNameKey(org, name string) string { return orgTextKey(org, name) }

// createKey stores rec as a new key once its name is claimed.
func (s *Store) createKey(ctx context.Context, rec *busv1.KeyRecord) (*busv1.KeyRecord, error) {
	k := rec.GetKey()
	if s.heldKeyName(k.GetOrg(), k.GetName()) {
		return nil, store.KeyNameTaken(k.GetOrg(), k.GetName())
	}
	claim := keyNameKey(k.GetOrg(), k.GetName())
	rev, err := s.claimKeyName(ctx, claim, k.GetId())
	if err != nil {
		if errors.Is(err, bus.ErrAlreadyExists) {
			return nil, store.KeyNameTaken(k.GetOrg(), k.GetName())
		}
		return nil, err
	}
	got, err := s.keys().put(ctx, k.GetId(), rec, true, 0)
	if err != nil {
		_ = s.keyNamesKV.Delete(context.WithoutCancel(ctx), claim, jetstream.LastRevision(rev))
		return nil, err
	}
	return got, nil
}

// errNameClaimed is claimKeyName's answer for a name another key holds
// (or a create in flight is claiming).
var errNameClaimed = &bus.Error{Code: bus.CodeAlreadyExists, Message: "key name claimed"}

// claimKeyName creates the claim for id and returns its revision.
func (s *Store) claimKeyName(ctx context.Context, claim, id string) (uint64, error) {
	for range maxRetries {
		rev, err := s.keyNamesKV.Create(ctx, claim, []byte(id))
		if err == nil {
			return rev, nil
		}
		if !errors.Is(err, jetstream.ErrKeyExists) {
			return 0, kvError("claim key name", err)
		}
		e, err := s.keyNamesKV.Get(ctx, claim)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue // released meanwhile
		}
		if err != nil {
			return 0, kvError("read key name", err)
		}
		if time.Since(e.Created()) < orphanAfter {
			return 0, errNameClaimed
		}
		if _, krev, err := s.keys().read(ctx, string(e.Value())); err != nil || krev != 0 {
			if err != nil {
				return 0, err
			}
			return 0, errNameClaimed
		}
		err = s.keyNamesKV.Delete(ctx, claim, jetstream.LastRevision(e.Revision()))
		if err != nil && !errors.Is(err, jetstream.ErrKeyRevisionMismatch) && !isWrongLastSeq(err) {
			return 0, kvError("reclaim key name", err)
		}
	}
	return 0, bus.Errorf(bus.CodeConflict, "key name: too much contention, retry")
}

// heldKeyName reports whether a key of org that the index holds has
// name: how a key stored before claims existed (it has none) keeps its
// name.
func (s *Store) heldKeyName(org, name string) bool {
	found := false
	s.keyIndex.ascend("", func(_ string, r *busv1.KeyRecord) bool {
		found = r.GetKey().GetOrg() == org && r.GetKey().GetName() == name
		return !found
	})
	return found
}
