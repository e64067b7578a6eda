package scheduler

import (
	"errors"
	"testing"
	"time"

	busv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/bus/v1"
	"github.com/agentmesh/agentmesh/pkg/poll"
	"google.golang.org/protobuf/proto"
)

// A heartbeat on node vm's subject whose payload names node a registers
// neither a nor vm, and counts no capacity; a heartbeat whose two names
// agree registers its node.
func TestHeartbeatNamingAnotherNodeIsRefused(t *testing.T) {
	s, nc, _ := setup(t, Config{})
	runScheduler(t, s)
	forged, _ := proto.Marshal(&busv1.ExecutorHeartbeat{Node: "a", Capacity: 8})
	honest, _ := proto.Marshal(&busv1.ExecutorHeartbeat{Node: "b", Capacity: 2})
	poll.Until(t, 10*time.Second, func() error {
		// One connection, one subscription: the forged heartbeat is
		// handled before the honest one that follows it.
		_ = nc.Publish(names.Heartbeat("vm"), forged)
		_ = nc.Publish(names.Heartbeat("b"), honest)
		_ = nc.Flush()
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.m.nodes["b"] == nil {
			return errors.New("node b not registered yet")
		}
		return nil
	})
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.m.nodes) != 1 || s.m.nodes["b"].capacity != 2 {
		for name, n := range s.m.nodes {
			t.Errorf("node %q registered with capacity %d", name, n.capacity)
		}
		t.Fatal("want only node b (the forged heartbeat of a on vm's subject refused)")
	}
}
