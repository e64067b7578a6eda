package scheduler

import (
	"context"
	"errors"
	"time"

	"github.com/agentmesh/agentmesh/pkg/backoff"
	"github.com/nats-io/nats.go/jetstream"
)

// Leadership: scheduler replicas elect one leader with a lease in a
// JetStream KV bucket (<P>_SCHEDULER, key "leader", the bucket's TTL is the
// lease). A replica becomes leader by creating the key (create fails while
// another holds it), renews it every TTL/3 with an update that must match
// the revision it last wrote (compare-and-set), and steps down — stops
// dispatching at once — when a renewal fails or none succeeded for TTL/2.
// A replica that dies stops renewing; its key expires TTL after its last
// renewal, by which time it has stopped dispatching for TTL/2 (durations
// are measured on each host's monotonic clock, so only the rate of the
// clocks matters, not their offset). Only the leader holds the in-memory
// queue and dispatches, so capacity decisions are made in one place; each
// dispatch is still a compare-and-set queued → assigned in the record, so
// even an overlap could never run one attempt twice.
//
// Why a lease rather than slot accounting with compare-and-set in KV:
// priorities and fairness are orderings over all waiting work, which a
// single decider computes in memory in microseconds; per-slot CAS would
// cost a KV round trip per dispatch, contend on the hot counters of a busy
// agent, and still leave the order to whichever replica won the race.

const leaseKey = "leader"

// lease runs the election until ctx ends. lead is called with a context
// that ends when this replica stops being leader; lead must return then.
func (s *Service) lease(ctx context.Context, kv jetstream.KeyValue, lead func(context.Context)) {
	ttl := s.cfg.LeaseTTL
	for ctx.Err() == nil {
		rev, err := kv.Create(ctx, leaseKey, []byte(s.id))
		if err != nil {
			if !errors.Is(err, jetstream.ErrKeyExists) && ctx.Err() == nil {
				s.log.Warn("leader lease: create", "err", err)
			}
			backoff.Sleep(ctx, ttl/4)
			continue
		}
		s.log.Info("leader lease acquired; this replica dispatches", "replica", s.id)
		term, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			lead(term)
		}()
		rev = s.renew(term, kv, rev)
		cancel()
		<-done
		s.leader.Store(false)
		if ctx.Err() != nil {
			// Hand over at once on a clean stop.
			dctx, dcancel := context.WithTimeout(context.Background(), 2*time.Second)
			_ = kv.Delete(dctx, leaseKey, jetstream.LastRevision(rev))
			dcancel()
			return
		}
		s.log.Warn("leader lease lost; this replica stops dispatching", "replica", s.id)
	}
}

// renew keeps the lease until it is lost or term ends, and returns the
// last revision written.
func (s *Service) renew(term context.Context, kv jetstream.KeyValue, rev uint64) uint64 {
	ttl := s.cfg.LeaseTTL
	t := time.NewTicker(ttl / 3)
	defer t.Stop()
	lastOK := time.Now()
	for {
		select {
		case <-term.Done():
			return rev
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(term, ttl/3)
		r, err := kv.Update(ctx, leaseKey, []byte(s.id), rev)
		cancel()
		switch {
		case err == nil:
			rev, lastOK = r, time.Now()
		case errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyNotFound):
			return rev // someone else holds it (wrong last sequence)
		default:
			var apiErr *jetstream.APIError
			if errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence {
				return rev
			}
			if term.Err() == nil {
				s.log.Warn("leader lease: renew", "err", err)
			}
		}
		if time.Since(lastOK) > ttl/2 {
			return rev
		}
	}
}
