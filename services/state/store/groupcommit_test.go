package store

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/pkg/poll"
)

// Writes queued while a commit is held back go out as one group, each
// caller answered with its own outcome.
func TestGroupCommitOutcomesPerWrite(t *testing.T) {
	var mu sync.Mutex
	var groups [][]int
	g := NewGroupCommit(func(_ context.Context, ws []int) []error {
		mu.Lock()
		groups = append(groups, append([]int(nil), ws...))
		mu.Unlock()
		errs := make([]error, len(ws))
		for i, w := range ws {
			if w%3 == 0 {
				errs[i] = fmt.Errorf("write %d refused", w)
			}
		}
		return errs
	})
	resume := g.Pause()
	const n = 10
	got := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { got[i] = g.Do(context.Background(), i) })
	}
	poll.Until(t, 10*time.Second, func() error {
		if w := g.Waiting(); w != n {
			return fmt.Errorf("%d waiting", w)
		}
		return nil
	})
	resume()
	wg.Wait()
	for i, err := range got {
		if (i%3 == 0) != (err != nil) {
			t.Errorf("write %d: %v", i, err)
		}
	}
	if len(groups) != 1 || len(groups[0]) != n {
		t.Errorf("groups %v, want one of %d", groups, n)
	}
	if s := g.Stats(); s.Groups != 1 || s.Writes != n || s.Largest != n {
		t.Errorf("stats %+v", s)
	}
}

// A write whose caller gives up before its group is under way is withdrawn:
// it is never committed.
func TestGroupCommitWithdrawn(t *testing.T) {
	var flushed []string
	g := NewGroupCommit(func(_ context.Context, ws []string) []error {
		flushed = append(flushed, ws...)
		return make([]error, len(ws))
	})
	resume := g.Pause()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Do(ctx, "given up") }()
	poll.Until(t, 10*time.Second, func() error {
		if g.Waiting() != 1 {
			return errors.New("not queued yet")
		}
		return nil
	})
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Do: %v, want context.Canceled", err)
	}
	resume()
	if err := g.Do(context.Background(), "kept"); err != nil {
		t.Fatal(err)
	}
	if len(flushed) != 1 || flushed[0] != "kept" {
		t.Errorf("flushed %v, want only the kept write", flushed)
	}
}
