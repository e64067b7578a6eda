package main

import (
	"errors"
	"os"
	"strings"
	"sync"
	"testing"
)

// perSecond runs each of 1…n once, and stops at the first error.
func TestPerSecond(t *testing.T) {
	var mu sync.Mutex
	seen := map[int64]int{}
	rate, err := perSecond(100, 8, func(i int64) error {
		mu.Lock()
		seen[i]++
		mu.Unlock()
		return nil
	})
	if err != nil || rate <= 0 {
		t.Fatalf("perSecond = %v, %v", rate, err)
	}
	for i := int64(1); i <= 100; i++ {
		if seen[i] != 1 {
			t.Errorf("one(%d) ran %d times", i, seen[i])
		}
	}
	if len(seen) != 100 {
		t.Errorf("%d distinct calls, want 100", len(seen))
	}
	boom := errors.New("boom")
	if _, err := perSecond(100, 4, func(i int64) error {
		if i == 10 {
			return boom
		}
		return nil
	}); !errors.Is(err, boom) {
		t.Errorf("perSecond with a failing call: %v, want boom", err)
	}
}

// The sandboxed ceiling starts its children in the strict sandbox and
// reports one that does not exit cleanly.
func TestSandboxCeiling(t *testing.T) {
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("strict isolation needs root in CI")
		}
		t.Skip("strict isolation needs root")
	}
	rate, cpu, err := sandboxCeiling("/bin/true", 20, 2)
	if err != nil || rate <= 0 {
		t.Fatalf("sandboxCeiling(/bin/true) = %v, %v", rate, err)
	}
	// The spawner and its children are counted (each spawn costs
	// milliseconds of CPU; 20 of them are well above the 10 ms tick).
	if cpu.agents <= 0 || cpu.server <= 0 {
		t.Errorf("CPU per sandboxed spawn: spawner + child %v, this process %v; want both > 0", cpu.agents, cpu.server)
	}
	if _, _, err := sandboxCeiling("/bin/false", 2, 1); err == nil || !strings.Contains(err.Error(), "wait status 0x100") {
		t.Errorf("sandboxCeiling(/bin/false): %v, want the child's exit status", err)
	}
}
