// Package backoff is how agentmesh waits between tries: a sleep that ends
// early with its context, and the growing delays of a retry loop. The
// services, the stack and the scripted model use it instead of each
// writing its own timer and select.
package backoff

import (
	"context"
	"time"
)

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

// Linear is the wait before try n (1 for the first retry): n×step, at most
// ceiling.
func Linear(n int, step, ceiling time.Duration) time.Duration {
	if n < 1 {
		n = 1
	}
	if step > 0 && time.Duration(n) > ceiling/step {
		return ceiling
	}
	return min(time.Duration(n)*step, ceiling)
}

// Exponential is the wait before retry n (0 for the first): first×2ⁿ, at
// most ceiling.
func Exponential(n int, first, ceiling time.Duration) time.Duration {
	d := first
	if d <= 0 {
		return 0
	}
	for range max(n, 0) {
		if d >= ceiling/2 {
			return ceiling
		}
		d *= 2
	}
	return min(d, ceiling)
}
