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

func TestDelays(t *testing.T) {
	for _, tt := range []struct {
		name string
		got  time.Duration
		want time.Duration
	}{
		{"linear first", Linear(1, 100*time.Millisecond, 2*time.Second), 100 * time.Millisecond},
		{"linear fifth", Linear(5, 100*time.Millisecond, 2*time.Second), 500 * time.Millisecond},
		{"linear capped", Linear(50, 100*time.Millisecond, 2*time.Second), 2 * time.Second},
		{"linear huge n", Linear(1<<62, time.Second, time.Minute), time.Minute},
		{"linear n<1", Linear(0, time.Second, time.Minute), time.Second},
		{"exponential first", Exponential(0, 50*time.Millisecond, time.Second), 50 * time.Millisecond},
		{"exponential third", Exponential(2, 50*time.Millisecond, time.Second), 200 * time.Millisecond},
		{"exponential capped", Exponential(10, 50*time.Millisecond, time.Second), time.Second},
		{"exponential huge n", Exponential(1<<30, time.Millisecond, time.Hour), time.Hour},
	} {
		if tt.got != tt.want {
			t.Errorf("%s: got %v, want %v", tt.name, tt.got, tt.want)
		}
	}
}
