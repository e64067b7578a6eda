package executor

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	busv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/bus/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/natstest"
	"github.com/agentmesh/agentmesh/pkg/subjects"
	"github.com/agentmesh/agentmesh/pkg/testlog"
	"github.com/nats-io/nats.go/micro"
)

// A state service that answers every checkpoint, one at a time, 4 s after
// it arrives — slower than a try's first wait — still gets the checkpoint
// recorded, after a copy or two: each try waits longer than the last, so
// a later try is answered. With a fixed 3 s wait every try was given up
// before its answer and sent again, the copies queued behind one another,
// and no try was ever answered (5,000 tasks on a 45 s model, issue 32).
func TestSlowStateStillRecordsTheCheckpoint(t *testing.T) {
	srv := natstest.Start(t)
	names := subjects.Must("am")
	var got atomic.Int64
	svc, err := micro.AddService(natstest.ConnectAs(t, srv, subjects.ServiceState), micro.Config{Name: "slowstate", Version: "0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Stop() })
	slow := func(ctx context.Context, req *busv1.AppendStepRequest) (*busv1.AppendStepResponse, error) {
		got.Add(1)
		time.Sleep(4 * time.Second)
		return &busv1.AppendStepResponse{}, nil
	}
	if err := svc.AddEndpoint("step", bus.Handler(testlog.New(t), func() *busv1.AppendStepRequest { return &busv1.AppendStepRequest{} }, slow),
		micro.WithEndpointSubject(names.State(subjects.StateAppendStep))); err != nil {
		t.Fatal(err)
	}
	s := &Service{log: testlog.New(t), nc: natstest.ConnectAs(t, srv, subjects.ServiceExecutor), names: names}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	step := &agentmeshv1.Step{Index: 0, Kind: agentmeshv1.StepKind_STEP_KIND_MODEL_TURN}
	if err := s.appendSteps(ctx, "01TASK", 1, step); err != nil {
		t.Fatalf("checkpoint against a state answering in 4 s: %v (%d copies sent)", err, got.Load())
	}
	if n := got.Load(); n > 3 {
		t.Errorf("%d copies of one checkpoint reached state, want at most 3", n)
	}
}
