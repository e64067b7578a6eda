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
	ir := inflightResult{n: 1000, submitP99: 12 * time.Millisecond, getP99: 8 * time.Millisecond, totalKiB: 500 << 10, gets: 100, waiting: 100}
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
		"12ms / 8ms (1000 submitted, ≈ 1000 in flight while measured; the target is at 10,000)  [target ≤ 20 ms: NOT met]",
		"[target ≥ 5,000: —]",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	// 10,000 submitted, all in flight while measured (every GetTask saw a
	// task not yet ended): met; half of them ended already: not met, the
	// figure says how many were held.
	ir = inflightResult{n: 10000, submitP99: 12 * time.Millisecond, getP99: 8 * time.Millisecond, totalKiB: 2 << 20, gets: 400, waiting: 400}
	for _, c := range []struct {
		waiting int
		want    []string
	}{
		{400, []string{"(10000 submitted, ≈ 10000 in flight while measured; the target is at 10,000)  [target ≤ 20 ms: met]",
			"2048 MiB (10000 submitted, ≈ 10000 in flight while measured; the target is at 10,000)  [target ≤ 3 GiB: met]"}},
		{200, []string{"(10000 submitted, ≈ 5000 in flight while measured; the target is at 10,000)  [target ≤ 20 ms: NOT met]",
			"[target ≤ 3 GiB: NOT met]"}},
	} {
		ir.waiting = c.waiting
		b.Reset()
		tg.print(&b, true)
		for _, want := range c.want {
			if !strings.Contains(b.String(), want) {
				t.Errorf("with %d of %d answers in flight, the table lacks %q:\n%s", c.waiting, ir.gets, want, b.String())
			}
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
