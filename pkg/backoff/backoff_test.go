package backoff

import (
	"context"
	"testing"
	"time"
)

func TestSleep(t *testing.T) {
	if !Sleep(context.Background(), time.Millisecond) {
		t.Error("Sleep with a live context: false, want true (all of d passed)")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if Sleep(ctx, time.Hour) {
		t.Error("Sleep with an ended context: true, want false at once")
	}
	if Sleep(ctx, 0) {
		t.Error("Sleep(0) with an ended context: true, want false")
	}
}

func TestDelay(t *testing.T) {
	b := Backoff{Initial: 50 * time.Millisecond, Max: time.Second}
	for _, tt := range []struct {
		n    int
		want time.Duration
	}{{1, 50 * time.Millisecond}, {2, 100 * time.Millisecond}, {3, 200 * time.Millisecond}, {6, time.Second}, {1 << 30, time.Second}} {
		if got := b.Delay(tt.n); got != tt.want {
			t.Errorf("Delay(%d) = %v, want %v", tt.n, got, tt.want)
		}
	}
	if got := (Backoff{}).Delay(1); got != 10*time.Millisecond {
		t.Errorf("zero Backoff: Delay(1) = %v, want 10ms", got)
	}
	for range 100 {
		if got := b.Jittered(2); got < 100*time.Millisecond || got > 150*time.Millisecond {
			t.Fatalf("Jittered(2) = %v, want 100ms to 150ms", got)
		}
	}
}
