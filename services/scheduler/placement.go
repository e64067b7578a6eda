package scheduler

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
)

// Placement: executors pull work from one shared work-queue consumer, so
// work lands on whichever live executor has a free slot; the scheduler
// gates how much work is out there. It knows the live executors from their
// heartbeats (<p>.exec.heartbeat.<node>: capacity, running, labels,
// draining, ttl) and publishes work only while the placeable nodes (heard
// from within their ttl, not draining) have free slots: Σ(capacity −
// tasks running there) − tasks dispatched but not yet started. Work beyond
// that waits in the scheduler's queue, in priority order, not in the
// stream's FIFO.
//
// A node silent for longer than its ttl is lost: nothing more is counted on
// it, and each attempt running there is failed with kind EXECUTOR_LOST —
// which the retry policy turns into a new queued attempt. If the node comes
// back, its old attempts are stale: state refuses their writes and the
// executor kills their children (fencing). A node the leader has never
// heard from counts as lost once the leader has led for NodeTTL.

// onHeartbeat records an executor's heartbeat; one whose payload names
// another node than its subject is refused (bus.HeartbeatReader).
func (s *Service) onHeartbeat(m *nats.Msg) {
	hb, err := s.heartbeats.Read(m)
	if err != nil {
		return
	}
	ttl := hb.Ttl.AsDuration()
	if ttl <= 0 {
		ttl = s.cfg.NodeTTL
	}
	s.mu.Lock()
	changed := s.m.heartbeat(hb.Node, int(hb.Capacity), hb.Draining, hb.Labels, ttl, time.Now())
	s.mu.Unlock()
	if changed {
		s.log.Info("executor seen", "node", hb.Node, "capacity", hb.Capacity, "running", hb.Running, "draining", hb.Draining)
		s.wake()
	}
}

func nodeCheckInterval(ttl time.Duration) time.Duration {
	return max(ttl/5, 50*time.Millisecond)
}

// checkNodes marks silent nodes lost and fails their running attempts.
// Only silence the scheduler could have heard counts: while its own
// connection is down it judges nothing, and after it came back (a NATS
// restart, a partition of its own) each node's silence counts from then,
// so a bus blip longer than NodeTTL does not fail every live attempt —
// and throw away the model answers they hold.
func (s *Service) checkNodes(ctx context.Context) {
	if s.nc.Status() != nats.CONNECTED {
		return
	}
	now := time.Now()
	var jobs []job
	s.mu.Lock()
	if r := s.nc.Stats().Reconnects; r != s.reconnects {
		s.reconnects, s.hearing = r, now
	}
	lost, orphans := s.m.lostNodes(now, s.leadSince, s.hearing, s.cfg.NodeTTL)
	for _, e := range orphans {
		if s.fencing[e.id] {
			continue
		}
		s.fencing[e.id] = true
		jobs = append(jobs, job{kind: jobFence, task: e.id, attempt: e.attempt, node: e.node,
			reason: fmt.Sprintf("executor node %s lost: no heartbeat", e.node)})
	}
	s.mu.Unlock()
	for _, n := range lost {
		s.log.Warn("executor node lost: no heartbeat within its ttl; no more work placed there", "node", n)
	}
	for _, j := range jobs {
		select {
		case s.jobs <- j:
		case <-ctx.Done():
			return
		}
	}
}
