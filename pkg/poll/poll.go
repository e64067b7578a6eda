// Package poll waits for a condition in tests, bounded, without bare sleeps.
package poll

import (
	"testing"
	"time"
)

// Until calls fn every 10ms until it returns nil or timeout passes, then
// fails the test with fn's last error.
func Until(t testing.TB, timeout time.Duration, fn func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := fn()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("condition not met after %v: %v", timeout, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
