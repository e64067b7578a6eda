package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
)

// The scheduler alone (issue 32's "≥ 5,000 dispatches/s with priorities
// and limits"): ambench runs the scheduler's own benchmark,
// BenchmarkDispatch/queued=0 of services/scheduler (a real NATS server and
// the real state service on the embedded store in one test process,
// priorities mixed, agent and org limits set and evaluated on every pick,
// executors replaced by a consumer that acks the work at once; `make
// bench-scheduler` runs it with the other scheduler benchmarks), with
// `go test` from the module ambench runs in, and reads its tasks/s. It is
// the same whatever -store says: it is measured once per run.

// schedPackage is the package whose benchmark is run.
const schedPackage = "github.com/agentmesh/agentmesh/services/scheduler"

// schedRuns is how many times the benchmark is run; the median is kept.
const schedRuns = 3

// schedResult is the scheduler benchmark's figure: the median and the
// range of its runs.
type schedResult struct {
	n              int // dispatches per run
	median, lo, hi float64
	// cpu is the median CPU of the whole test process per dispatch, in
	// ms (0: not reported).
	cpu float64
}

func (r schedResult) String() string {
	s := fmt.Sprintf("%.0f dispatches/s (median of %d runs of %d: %.0f–%.0f)", r.median, schedRuns, r.n, r.lo, r.hi)
	if r.cpu > 0 {
		s += fmt.Sprintf(", %.3f ms of CPU per dispatch", r.cpu)
	}
	return s
}

// schedAlone runs the dispatch benchmark with n dispatches, schedRuns
// times.
func schedAlone(n int) (schedResult, error) {
	cmd := exec.Command("go", "test", "-run", "^$", "-bench", "^BenchmarkDispatch$/^queued=0$",
		"-benchtime", strconv.Itoa(n)+"x", "-count", strconv.Itoa(schedRuns), "-timeout", "20m", schedPackage)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return schedResult{}, fmt.Errorf("go test -bench Dispatch %s: %w\n%s", schedPackage, err, out)
	}
	rates := dispatchMetric(string(out), "tasks/s")
	if len(rates) == 0 {
		return schedResult{}, errors.New("the scheduler benchmark printed no tasks/s:\n" + string(out))
	}
	slices.Sort(rates)
	r := schedResult{n: n, median: rates[len(rates)/2], lo: rates[0], hi: rates[len(rates)-1]}
	if cpu := dispatchMetric(string(out), "cpu-ms/dispatch"); len(cpu) > 0 {
		slices.Sort(cpu)
		r.cpu = cpu[len(cpu)/2]
	}
	return r, nil
}

// dispatchMetric reads the metric unit of each BenchmarkDispatch/queued=0
// line of go test's output.
func dispatchMetric(out, unit string) []float64 {
	re := regexp.MustCompile(`(?m)^BenchmarkDispatch/queued=0\S*\s.*?\s([0-9.]+) ` + regexp.QuoteMeta(unit) + `(\s|$)`)
	var xs []float64
	for _, m := range re.FindAllStringSubmatch(out, -1) {
		if x, err := strconv.ParseFloat(m[1], 64); err == nil {
			xs = append(xs, x)
		}
	}
	return xs
}

// schedRow is the table's row of the scheduler alone.
func (t targetFigures) schedRow() targetRow {
	row := targetRow{"the scheduler alone, dispatches/s", "not measured (-sched 0)", "≥ 5,000", ""}
	if t.sched != nil {
		row.now, row.met = t.sched.String(), yesNo(t.sched.median >= 5000)
	}
	return row
}
