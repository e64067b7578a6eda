package executor

import (
	"context"
	"errors"
	"testing"

	"github.com/agentmesh/agentmesh/services/executor/sandbox"
)

// A spawn waits for a free spawn slot (before its sandbox is prepared);
// when its task ends meanwhile it gives up, and once a slot is free the
// same spawn goes through.
func TestSpawnWaitsForASlot(t *testing.T) {
	s := sandboxService(t, sandbox.Config{})
	s.spawnGate = make(chan struct{}, 1)
	s.spawnGate <- struct{}{} // the one slot is taken

	ctx, cancel := context.WithCancelCause(context.Background())
	gaveUp := errors.New("the task ended")
	done := make(chan error, 1)
	go func() {
		p, err := s.spawn(ctx, "gate-waiting")
		if p != nil {
			p.cleanup()
		}
		done <- err
	}()
	cancel(gaveUp)
	if err := <-done; !errors.Is(err, gaveUp) {
		t.Fatalf("spawn with no free slot, its task ended: %v, want the task's cause", err)
	}

	<-s.spawnGate // the slot is free
	p, err := s.spawn(context.Background(), "gate-free")
	if err != nil {
		t.Fatalf("spawn with a free slot: %v", err)
	}
	defer p.cleanup()
	if len(s.spawnGate) != 0 {
		t.Errorf("%d slots still taken after the spawn returned", len(s.spawnGate))
	}
}
