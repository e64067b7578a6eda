package state_test

import (
	"errors"
	"testing"
	"time"

	busv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/bus/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/subjects"
	"google.golang.org/protobuf/types/known/timestamppb"
)

func TestUsageOverTheBus(t *testing.T) {
	r := startKV(t)
	runTask(t, r.nc, "acme")
	runTask(t, r.nc, "acme")
	runTask(t, r.nc, "other")
	got := mustCall(t, r.nc, subjects.StateUsage, &busv1.UsageRequest{Org: "acme"}, &busv1.UsageResponse{})
	if got.Tasks != 2 || got.Usage.GetTotalTokens() != 6 {
		t.Errorf("acme usage = %v", got)
	}
	got = mustCall(t, r.nc, subjects.StateUsage, &busv1.UsageRequest{Org: "acme", CreatedAfter: timestamppb.New(time.Now().Add(time.Hour))}, &busv1.UsageResponse{})
	if got.Tasks != 0 || got.Usage.GetTotalTokens() != 0 {
		t.Errorf("future usage = %v", got)
	}
	got = mustCall(t, r.nc, subjects.StateUsage, &busv1.UsageRequest{Org: "acme", Agent: "nobody"}, &busv1.UsageResponse{})
	if got.Tasks != 0 {
		t.Errorf("usage of an unknown agent = %v", got)
	}
	if _, err := call(t, r.nc, subjects.StateUsage, &busv1.UsageRequest{}, &busv1.UsageResponse{}); !errors.Is(err, bus.ErrInvalidArgument) {
		t.Errorf("no org: err = %v, want invalid_argument", err)
	}
	if _, err := call(t, r.nc, subjects.StateUsage, &busv1.UsageRequest{Org: "acme", CreatedBefore: &timestamppb.Timestamp{Nanos: -1}}, &busv1.UsageResponse{}); !errors.Is(err, bus.ErrInvalidArgument) {
		t.Errorf("bad time: err = %v, want invalid_argument", err)
	}
}
