// Package backoff is how agentmesh waits between tries: a sleep that ends
// early with its context, and the growing delays of a retry loop
// (exponential, capped, optionally jittered). The services, the stack, the
// bus helpers (bus.Retry, bus.WaitStream) and the scripted model use it
// instead of each writing its own timer and select.
package backoff

import (
	"context"
	"math/rand/v2"
	"time"
)

// Backoff is exponential from Initial, doubling up to Max, at most Tries
// tries (0: until the context ends; the caller counts).
type Backoff struct {
	Initial time.Duration
	Max     time.Duration
	Tries   int
}

// Delay is the wait before try n+1 (n ≥ 1), without jitter: Initial (10ms
// when unset) doubled n-1 times, at most Max (0: no cap).
func (b Backoff) Delay(n int) time.Duration {
	d := b.Initial
	if d <= 0 {
		d = 10 * time.Millisecond
	}
	for i := 1; i < n && (b.Max <= 0 || d < b.Max); i++ {
		d *= 2
	}
	if b.Max > 0 && d > b.Max {
		d = b.Max
	}
	return d
}

// Jittered is Delay(n) plus up to half of it, at random, so that callers
// that failed together do not retry together.
func (b Backoff) Jittered(n int) time.Duration {
	d := b.Delay(n)
	return d + time.Duration(rand.Int64N(int64(d)/2+1))
}

// Sleep waits d, or less when ctx ends first; it reports whether all of d
// passed (false: ctx ended).
func Sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
