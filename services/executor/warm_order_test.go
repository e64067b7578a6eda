package executor

import (
	"syscall"
	"testing"
)

// idleHandle is a warm child that is alive (the order of take is what is
// tested here; the real children are in warm_test.go).
type idleHandle struct{}

func (idleHandle) kill() error                       { return nil }
func (idleHandle) wait() (syscall.WaitStatus, error) { return 0, nil }
func (idleHandle) exited() bool                      { return false }

// TestWarmTakeOldestFirst: the pool hands out its oldest idle child, which
// has long finished starting, not the newest (possibly still starting, the
// refill of the previous claim).
func TestWarmTakeOldestFirst(t *testing.T) {
	w := &warmPool{kick: make(chan struct{}, 1)}
	for pid := 1; pid <= 3; pid++ {
		w.idle = append(w.idle, &process{pid: pid, h: idleHandle{}})
	}
	for want := 1; want <= 3; want++ {
		p := w.take()
		if p == nil || p.pid != want {
			t.Fatalf("take %d: got %+v, want the child with pid %d (the oldest)", want, p, want)
		}
	}
	if p := w.take(); p != nil {
		t.Fatalf("take from an empty pool: got pid %d, want nil", p.pid)
	}
	if got := w.stats(); got.Hits != 3 || got.Misses != 1 || got.Idle != 0 {
		t.Fatalf("stats %+v, want 3 hits, 1 miss, 0 idle", got)
	}
}
