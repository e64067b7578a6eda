package main

import (
	"strings"
	"testing"
	"time"
)

// The targets table sets each figure beside its target, with the ratios
// to the same run's ceilings, and says which are met.
func TestTargetsTable(t *testing.T) {
	fresh := result{n: 100, elapsed: 2 * time.Second, c1p50: 7 * time.Millisecond,
		cpuUsed: cpuTimes{server: 300 * time.Millisecond, agents: 2 * time.Second}}
	reuse := result{n: 100, elapsed: time.Second / 5, c1p50: 4 * time.Millisecond,
		cpuUsed: cpuTimes{server: 150 * time.Millisecond, agents: 100 * time.Millisecond}}
	ir := inflightResult{n: 1000, submitP99: 12 * time.Millisecond, getP99: 8 * time.Millisecond, totalKiB: 500 << 10}
	tg := targetFigures{store: "embedded", ceiling: 1000, sandboxed: 250, tinyCPU: 10 * time.Millisecond,
		fresh: &fresh, reuse: &reuse, inflight: &ir}
	var b strings.Builder
	tg.print(&b, true)
	out := b.String()
	for _, want := range []string{
		"CPU per task, server processes (fresh)             3.00 ms  [target ≤ 2 ms: NOT met]",
		"CPU per task, server processes (reuse)             1.50 ms  [target ≤ 2 ms: met]",
		"20.00 ms = 2.0 × the tiny sandboxed child's 10.00 ms  [target ≤ 1.3 × the tiny child's: NOT met]",
		"tasks/s, fresh child per task                      50 = 20% of the sandboxed spawn ceiling (250/s), 5.0% of the bare one (1000/s)  [target ≥ 80% of the sandboxed spawn ceiling: NOT met]",
		"tasks/s, AGENTMESH_CHILD_REUSE=agent               500 = 200% of the sandboxed spawn ceiling (250/s), 50.0% of the bare one (1000/s)  [target ≥ 500: met]",
		"concurrency-1 submit → completed p50, fresh        7ms  [target ≤ 8 ms: met]",
		"concurrency-1 submit → completed p50, reuse        4ms  [target ≤ 3 ms: NOT met]",
		// 1,000 in flight is not the target's 10,000: not met, whatever the latency.
		"12ms / 8ms (1000 in flight; the target is at 10,000)  [target ≤ 20 ms: NOT met]",
		"[target ≥ 5,000: —]",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	// On Postgres the server's figure leaves the database out: it says so.
	tg.store = "postgres"
	b.Reset()
	tg.print(&b, true)
	if want := "3.00 ms (Postgres's own CPU not counted)  [target ≤ 2 ms: NOT met]"; !strings.Contains(b.String(), want) {
		t.Errorf("table on Postgres lacks %q:\n%s", want, b.String())
	}
}
