package main

import (
	"slices"
	"strings"
	"testing"
)

// ambench reads the scheduler benchmark's tasks/s from go test's output
// and sets it beside its target.
func TestSchedAloneFigure(t *testing.T) {
	out := `goos: linux
goarch: amd64
pkg: github.com/agentmesh/agentmesh/services/scheduler
cpu: Intel(R) Xeon(R) Processor
BenchmarkDispatch/queued=0-2         	    5000	    294167 ns/op	         0.2962 cpu-ms/dispatch	        53.95 heap-MiB-all	      3399 tasks/s
2026/11/27 12:13:35 WARN Internal subscription took too long: 2.5s component=nats-server
BenchmarkDispatch/queued=0-2         	    5000	    172805 ns/op	        66.48 heap-MiB-all	      5787 tasks/s
BenchmarkDispatch/queued=0           	    5000	    199000 ns/op	        60.1 heap-MiB-all	       5024.5 tasks/s
BenchmarkSlotFreeToPublish-2         	    5000	    1000 ns/op	        0.39 p50-ms	      9999 tasks/s
PASS
`
	if got, want := dispatchMetric(out, "tasks/s"), []float64{3399, 5787, 5024.5}; !slices.Equal(got, want) {
		t.Fatalf("rates %v, want %v", got, want)
	}
	if got, want := dispatchMetric(out, "cpu-ms/dispatch"), []float64{0.2962}; !slices.Equal(got, want) {
		t.Fatalf("CPU per dispatch %v, want %v", got, want)
	}
	var b strings.Builder
	r := schedResult{n: 5000, median: 5024.5, lo: 3399, hi: 5787, cpu: 0.2962}
	targetFigures{store: "embedded", sched: &r}.print(&b, false)
	if want := "the scheduler alone, dispatches/s                  5024 dispatches/s (median of 3 runs of 5000: 3399–5787), 0.296 ms of CPU per dispatch  [target ≥ 5,000: met]"; !strings.Contains(b.String(), want) {
		t.Errorf("table lacks %q:\n%s", want, b.String())
	}
	r.median = 4999
	b.Reset()
	targetFigures{store: "embedded", sched: &r}.print(&b, false)
	if !strings.Contains(b.String(), "[target ≥ 5,000: NOT met]") {
		t.Errorf("4,999/s is not the target:\n%s", b.String())
	}
}
