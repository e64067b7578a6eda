package main

import (
	"slices"
	"testing"
)

// The server's GC target is serverGCPercent unless GOGC is in the
// environment, which is left to the runtime (even when empty or "off").
func TestGCPercent(t *testing.T) {
	for _, c := range []struct {
		env  map[string]string
		want int
	}{
		{map[string]string{}, serverGCPercent},
		{map[string]string{"GOMEMLIMIT": "1GiB"}, serverGCPercent},
		{map[string]string{"GOGC": "100"}, -1},
		{map[string]string{"GOGC": "off"}, -1},
		{map[string]string{"GOGC": ""}, -1},
	} {
		lookup := func(k string) (string, bool) { v, ok := c.env[k]; return v, ok }
		if got := gcPercent(lookup); got != c.want {
			t.Errorf("gcPercent(%v) = %d, want %d", c.env, got, c.want)
		}
	}
}

// The GC percent falls from 200 as the live heap grows past half of
// gcHeadroom, so the garbage allowed over it stays within gcHeadroom, and
// never below Go's default of 100.
func TestGCPercentFollowsTheLiveHeap(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		live uint64
		want int
	}{
		{0, 200}, {40 * mib, 200}, {256 * mib, 200}, {384 * mib, 133}, {512 * mib, 100}, {2048 * mib, 100},
	} {
		if got := gcPercentFor(c.live); got != c.want {
			t.Errorf("gcPercentFor(%d MiB) = %d, want %d", c.live/mib, got, c.want)
		}
		if c.live > 0 && c.live <= 512*mib {
			if garbage := c.live * uint64(gcPercentFor(c.live)) / 100; garbage > gcHeadroom+mib {
				t.Errorf("live %d MiB: %d MiB of garbage allowed, over the headroom", c.live/mib, garbage/mib)
			}
		}
	}
}

// The tuner sets the percent as the live heap grows and shrinks, skips
// moves under 10, and gives up — putting the process's own back — when
// the percent in force is not the one it set (the spawner sets 50).
func TestGCTuner(t *testing.T) {
	const mib = 1 << 20
	var live uint64
	inForce := 200
	var sets []int
	g := &gcTuner{live: func() uint64 { return live }, last: 200,
		set: func(p int) int { old := inForce; inForce = p; sets = append(sets, p); return old }}
	for _, l := range []uint64{40, 300, 310, 600, 100} {
		live = l * mib
		if !g.step() {
			t.Fatalf("live %d MiB: the tuner stopped", l)
		}
	}
	// 40: 200 (unchanged); 300: 170; 310: 165 (a move under 10, skipped);
	// 600: 100; 100: 200.
	if want := []int{170, 100, 200}; !slices.Equal(sets, want) {
		t.Fatalf("percents set %v, want %v", sets, want)
	}
	inForce = 50 // the process set its own
	live = 400 * mib
	if g.step() {
		t.Fatal("the tuner went on over a percent it did not set")
	}
	if inForce != 50 {
		t.Fatalf("percent in force %d after the tuner gave up, want the process's 50", inForce)
	}
}
