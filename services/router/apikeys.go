package router

import (
	"context"
	"crypto/sha256"
	"sync"
	"sync/atomic"
	"time"

	busv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/bus/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/subjects"
	"github.com/nats-io/nats.go/jetstream"
)

// Keys kept by the state service (created through KeyService) are loaded
// by every router when it starts and followed from then on: a key event
// (<p>.evt.<org>.key.<id>: created, revoked, rotated) changes this
// router's copy within milliseconds of its commit, with bus.Follow's
// list-then-follow, so no change made while the list was read is missed. A
// router that cannot reach state at start tries again every second and
// meanwhile accepts only its configured keys.
//
// They are found by their hash in a map, not by the constant-time scan of
// the configured keys: their secrets are 256 random bits, so the time a
// map takes to miss tells nothing that helps to guess one.

// storedKeys is the copy of the keys kept by state: id → the entries of
// its live secrets (the current one, and the one a rotation replaced while
// its grace lasts), replaced whole on each change.
type storedKeys struct {
	mu     sync.Mutex // serialises writers
	byID   map[string][]APIKey
	byHash atomic.Pointer[map[[sha256.Size]byte]APIKey]
	loaded atomic.Bool
}

func (sk *storedKeys) lookup(sum [sha256.Size]byte) (APIKey, bool) {
	m := sk.byHash.Load()
	if m == nil {
		return APIKey{}, false
	}
	k, ok := (*m)[sum]
	return k, ok
}

// change replaces the entries of the ids in set (nil entries: the key is
// gone), or all of them when all is set.
func (sk *storedKeys) change(set map[string][]APIKey, all bool) {
	sk.mu.Lock()
	defer sk.mu.Unlock()
	if all || sk.byID == nil {
		sk.byID = map[string][]APIKey{}
	}
	for id, entries := range set {
		if entries == nil {
			delete(sk.byID, id)
			continue
		}
		sk.byID[id] = entries
	}
	byHash := make(map[[sha256.Size]byte]APIKey, len(sk.byID))
	for _, entries := range sk.byID {
		for _, k := range entries {
			byHash[k.SHA256] = k
		}
	}
	sk.byHash.Store(&byHash)
}

// entriesOf turns a record into the entries of its live secrets; nil for a
// revoked key.
func entriesOf(rec *busv1.KeyRecord) []APIKey {
	k := rec.GetKey()
	if k == nil || k.RevokedAt != nil || len(rec.Sha256) != sha256.Size {
		return nil
	}
	base := APIKey{Name: k.Name, Org: k.Org, Role: Role(k.Role), ID: k.Id}
	if k.ExpiresAt != nil {
		base.ExpiresAt = k.ExpiresAt.AsTime()
	}
	cur := base
	copy(cur.SHA256[:], rec.Sha256)
	out := []APIKey{cur}
	if len(rec.PreviousSha256) == sha256.Size && k.PreviousExpiresAt != nil {
		prev := base
		copy(prev.SHA256[:], rec.PreviousSha256)
		if until := k.PreviousExpiresAt.AsTime(); prev.ExpiresAt.IsZero() || until.Before(prev.ExpiresAt) {
			prev.ExpiresAt = until
		}
		out = append(out, prev)
	}
	return out
}

// followKeys loads the keys kept by state and follows their changes until
// ctx ends.
func (s *Service) followKeys(ctx context.Context) {
	f := bus.Follow{
		Stream:  s.names.EventsStream(),
		Filters: []string{s.names.KeyEvents()},
		List:    s.loadKeys,
		Handle:  s.onKeyEvent,
		Failed: func(err error) {
			s.log.Warn("router: the keys kept by the state service are not loaded yet; trying again", "err", err)
		},
	}
	f.Run(ctx, s.js, func(ctx context.Context) { <-ctx.Done() })
}

// loadKeys reads every live key kept by state.
func (s *Service) loadKeys(ctx context.Context, _ uint64) error {
	all := map[string][]APIKey{}
	token := ""
	for {
		var resp busv1.ListKeysResponse
		if err := bus.Request(ctx, s.nc, s.names.State(subjects.StateListKeys),
			&busv1.ListKeysRequest{AnyOrg: true, PageSize: 1000, PageToken: token}, &resp); err != nil {
			return err
		}
		for _, rec := range resp.Records {
			if e := entriesOf(rec); e != nil {
				all[rec.Key.Id] = e
			}
		}
		if token = resp.NextPageToken; token == "" {
			break
		}
	}
	s.keys.stored.change(all, true)
	if !s.keys.stored.loaded.Swap(true) {
		s.log.Info("router: keys kept by the state service loaded", "keys", len(all))
	}
	return nil
}

// onKeyEvent applies one key change: a revocation at once, a creation or
// rotation by reading the key (its hash is not in the event).
func (s *Service) onKeyEvent(m jetstream.Msg) {
	var ev agentmeshv1.KeyEvent
	if err := bus.DecodeEvent(m.Data(), &ev); err != nil || ev.GetKey().GetId() == "" {
		s.log.Warn("router: undecodable key event set aside", "subject", m.Subject(), "err", err)
		return
	}
	id := ev.Key.Id
	if ev.Action == "revoked" || ev.Key.RevokedAt != nil {
		s.keys.stored.change(map[string][]APIKey{id: nil}, false)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var resp busv1.KeyResponse
	err := bus.Retry(ctx, bus.Backoff{Initial: 50 * time.Millisecond, Max: time.Second}, func(ctx context.Context) error {
		return bus.Request(ctx, s.nc, s.names.State(subjects.StateGetKey), &busv1.GetKeyRequest{Id: id, AnyOrg: true}, &resp)
	})
	if err != nil {
		// Left as it was; the next load (a reconnect of the follow) reads it.
		s.log.Warn("router: a changed key could not be read", "key", id, "err", err)
		return
	}
	s.keys.stored.change(map[string][]APIKey{id: entriesOf(resp.Record)}, false)
}

// KeysLoaded reports whether the keys kept by state have been loaded.
func (s *Service) KeysLoaded() bool { return s.keys.stored.loaded.Load() }
