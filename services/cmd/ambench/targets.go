package main

import (
	"fmt"
	"io"
	"time"
)

// Issue 32's figures, printed at the end of a store's run next to their
// targets: the control plane's CPU per task, the agent child's against the
// tiny child in the same sandbox envelope, throughput as a ratio to the
// same run's sandboxed spawn ceiling, the concurrency-1 p50s and the API
// with tasks in flight. The targets are text to read, never assertions.

// targetFigures gathers one store's figures of one ambench run.
type targetFigures struct {
	store              string
	ceiling, sandboxed float64       // spawns/s, same run (0: not measured)
	tinyCPU            time.Duration // spawner + tiny child, per sandboxed spawn
	fresh, reuse       *result
	inflight           *inflightResult
	sched              *schedResult // the scheduler alone (sched.go)
}

// targetRow is one line of the table: the figure, its value now, the
// target and whether it is met ("" when not measured).
type targetRow struct{ figure, now, target, met string }

func yesNo(ok bool) string {
	if ok {
		return "met"
	}
	return "NOT met"
}

// msf prints a duration in milliseconds with two decimals.
func msf(d time.Duration) string {
	return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond))
}

// perTask is x divided over the run's n tasks.
func perTask(x time.Duration, r *result) time.Duration {
	if r == nil || r.n == 0 {
		return 0
	}
	return x / time.Duration(r.n)
}

func tps(r *result) float64 { return float64(r.n) / r.elapsed.Seconds() }

// cpuRows: the server's CPU per task (target ≤ 2 ms, fresh and reuse) and
// the spawner + children's against the tiny sandboxed child's (≤ 1.3×).
func (t targetFigures) cpuRows() []targetRow {
	var rows []targetRow
	for _, r := range []struct {
		name string
		res  *result
	}{{"fresh", t.fresh}, {"reuse", t.reuse}} {
		if r.res == nil || r.res.cpuUsed.server == 0 {
			continue
		}
		srv := perTask(r.res.cpuUsed.server, r.res)
		now := msf(srv)
		if t.store == "postgres" {
			// The cluster is ambench's child, not the server's: the
			// target counts the store, this figure does not.
			now += " (Postgres's own CPU not counted)"
		}
		rows = append(rows, targetRow{"CPU per task, server processes (" + r.name + ")", now, "≤ 2 ms", yesNo(srv <= 2*time.Millisecond)})
	}
	if t.fresh != nil && t.fresh.cpuUsed.server != 0 {
		kids := perTask(t.fresh.cpuUsed.agents, t.fresh)
		row := targetRow{"CPU per task, spawner + agent child (fresh)", msf(kids), "≤ 1.3 × the tiny child's", ""}
		if t.tinyCPU > 0 {
			ratio := float64(kids) / float64(t.tinyCPU)
			row.now += fmt.Sprintf(" = %.1f × the tiny sandboxed child's %s", ratio, msf(t.tinyCPU))
			row.met = yesNo(ratio <= 1.3)
		}
		rows = append(rows, row)
	}
	return rows
}

// rateRows: throughput fresh (≥ 80% of the sandboxed spawn ceiling) and
// with reuse (≥ 500 tasks/s), each with its ratios to the same run's
// ceilings.
func (t targetFigures) rateRows() []targetRow {
	ratios := func(x float64) string {
		s := ""
		if t.sandboxed > 0 {
			s += fmt.Sprintf(" = %.0f%% of the sandboxed spawn ceiling (%.0f/s)", 100*x/t.sandboxed, t.sandboxed)
		}
		if t.ceiling > 0 {
			s += fmt.Sprintf(", %.1f%% of the bare one (%.0f/s)", 100*x/t.ceiling, t.ceiling)
		}
		return s
	}
	var rows []targetRow
	if t.fresh != nil {
		x := tps(t.fresh)
		row := targetRow{"tasks/s, fresh child per task", fmt.Sprintf("%.0f", x) + ratios(x), "≥ 80% of the sandboxed spawn ceiling", ""}
		if t.sandboxed > 0 {
			row.met = yesNo(x >= 0.8*t.sandboxed)
		}
		rows = append(rows, row)
	}
	if t.reuse != nil {
		x := tps(t.reuse)
		rows = append(rows, targetRow{"tasks/s, AGENTMESH_CHILD_REUSE=agent", fmt.Sprintf("%.0f", x) + ratios(x), "≥ 500", yesNo(x >= 500)})
	}
	return rows
}

// latencyRows: concurrency-1 p50 (≤ 8 ms fresh, ≤ 3 ms reuse) and the
// API with tasks in flight (p99 ≤ 20 ms, ≤ 3 GiB, at 10,000 in flight).
func (t targetFigures) latencyRows(c1 bool) []targetRow {
	var rows []targetRow
	if c1 && t.fresh != nil {
		rows = append(rows, targetRow{"concurrency-1 submit → completed p50, fresh", ms(t.fresh.c1p50), "≤ 8 ms", yesNo(t.fresh.c1p50 <= 8*time.Millisecond)})
	}
	if c1 && t.reuse != nil {
		rows = append(rows, targetRow{"concurrency-1 submit → completed p50, reuse", ms(t.reuse.c1p50), "≤ 3 ms", yesNo(t.reuse.c1p50 <= 3*time.Millisecond)})
	}
	if ir := t.inflight; ir != nil {
		// The target holds 10,000 in flight at once: a ramp-up slower
		// than the model's latency sees the first end before the last go
		// in, and the figure says how many were still in flight.
		at := fmt.Sprintf(" (%d submitted, ≈ %d in flight while measured; the target is at 10,000)", ir.n, ir.inFlight())
		held := ir.inFlight() >= 10000
		ok := ir.submitP99 <= 20*time.Millisecond && ir.getP99 <= 20*time.Millisecond
		rows = append(rows,
			targetRow{"SubmitTask / GetTask p99 in flight", ms(ir.submitP99) + " / " + ms(ir.getP99) + at, "≤ 20 ms", yesNo(ok && held)},
			targetRow{"memory in all in flight, children included", fmt.Sprintf("%.0f MiB", float64(ir.totalKiB)/1024) + at, "≤ 3 GiB", yesNo(ir.totalKiB <= 3<<20 && held)})
	}
	return append(rows, t.schedRow())
}

// print writes the table.
func (t targetFigures) print(w io.Writer, c1 bool) {
	fmt.Fprintf(w, "  issue 32's figures (store=%s; targets are text, not assertions):\n", t.store)
	rows := append(append(t.cpuRows(), t.rateRows()...), t.latencyRows(c1)...)
	for _, r := range rows {
		met := r.met
		if met == "" {
			met = "—"
		}
		fmt.Fprintf(w, "    %-50s %s  [target %s: %s]\n", r.figure, r.now, r.target, met)
	}
}
