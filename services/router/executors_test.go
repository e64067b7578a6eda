package router

import (
	"context"
	"errors"
	"testing"
	"time"

	busv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/bus/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/poll"
	"google.golang.org/protobuf/proto"
)

// A heartbeat on node vm's subject whose payload names node a lists
// neither a nor vm; a heartbeat whose two names agree lists its node.
func TestListExecutorsRefusesAHeartbeatNamingAnotherNode(t *testing.T) {
	e := start(t, Config{APIKeys: map[string]string{"p": "*:platform"}})
	forged, _ := proto.Marshal(&busv1.ExecutorHeartbeat{Node: "a", Capacity: 8})
	honest, _ := proto.Marshal(&busv1.ExecutorHeartbeat{Node: "b", Capacity: 2})
	list := agentmeshv1.NewExecutorServiceClient(e.conn)
	ctx := withKey(context.Background(), "x-api-key", "p")
	var got []*agentmeshv1.Executor
	poll.Until(t, 10*time.Second, func() error {
		// One connection, one subscription: the forged heartbeat is
		// handled before the honest one that follows it.
		_ = e.fake.nc.Publish(names.Heartbeat("vm"), forged)
		_ = e.fake.nc.Publish(names.Heartbeat("b"), honest)
		_ = e.fake.nc.Flush()
		resp, err := list.ListExecutors(ctx, &agentmeshv1.ListExecutorsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		got = resp.Executors
		if len(got) == 0 {
			return errors.New("no executor listed yet")
		}
		return nil
	})
	if len(got) != 1 || got[0].Node != "b" || got[0].Capacity != 2 {
		t.Fatalf("executors %v, want only node b (the forged heartbeat of a on vm's subject refused)", got)
	}
}
