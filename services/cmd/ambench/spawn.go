package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"
)

// buildNop builds the tiny static child (./nopchild, CGO off, stripped)
// into dir and returns its path.
func buildNop(dir string) (string, error) {
	out := filepath.Join(dir, "nopchild")
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", out, "./services/cmd/ambench/nopchild")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build the spawn child (run from the repository root): %v: %s", err, b)
	}
	return out, nil
}

// spawnCeiling starts bin n times, par at a time, each waited for, and
// returns spawns per second: the most tasks/s any design with one process
// per task could reach on this machine.
func spawnCeiling(bin string, n, par int) (float64, error) {
	rate, err := perSecond(n, par, func(int64) error { return exec.Command(bin).Run() })
	if err != nil {
		return 0, fmt.Errorf("spawn %s: %w", bin, err)
	}
	return rate, nil
}

// perSecond runs one(1) … one(n), par at a time, and returns how many ran
// per second; it stops at the first error.
func perSecond(n, par int, one func(i int64) error) (float64, error) {
	var next atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	start := time.Now()
	for range par {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := next.Add(1); i <= int64(n); i = next.Add(1) {
				if err := one(i); err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err, _ := firstErr.Load().(error); err != nil {
		return 0, err
	}
	return float64(n) / time.Since(start).Seconds(), nil
}
