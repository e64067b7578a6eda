package main

import (
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// The GC target follows the live heap. serverGCPercent (200) lets the heap
// grow to three times the live data between collections, which is cheap
// while the live data is tens of MiB (a node running tasks) and costs
// gigabytes when it is not: a node holding 10,000 tasks that wait for their
// model keeps ~80 KiB live for each (docs/benchmarks.md, "10,000 tasks in
// flight"), ~0.8 GiB, and at 200 its heap would reach ~2.4 GiB. So the
// garbage allowed over the live heap is at most gcHeadroom — the percent
// falls from 200 as the live heap grows past half of it — and never less
// than Go's own default (100: twice the live data).

// gcHeadroom bounds the garbage the server lets pile up before a collection
// while its live heap is smaller than that.
const gcHeadroom = 512 << 20

// gcPercentFor is the GC percent for a live heap of live bytes.
func gcPercentFor(live uint64) int {
	if live == 0 {
		return serverGCPercent
	}
	return int(max(100, min(serverGCPercent, 100*gcHeadroom/live)))
}

// gcTuner sets the GC percent for the live heap it reads (runtime/metrics'
// /gc/heap/live:bytes), every interval.
type gcTuner struct {
	live func() uint64
	set  func(int) int // debug.SetGCPercent
	last int           // the percent last set here
}

// step reads the live heap and sets the percent when it moved by 10 or
// more (or to a bound). It reports false when the percent in force is not
// the one it last set — the process set its own (the spawner does): it
// puts that back and tuning stops.
func (g *gcTuner) step() bool {
	p := gcPercentFor(g.live())
	if p == g.last || (abs(p-g.last) < 10 && p != 100 && p != serverGCPercent) {
		return true
	}
	if old := g.set(p); old != g.last {
		g.set(old)
		return false
	}
	g.last = p
	return true
}

func abs(x int) int { return max(x, -x) }

// liveHeap reads the heap the last collection found live.
func liveHeap() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return s[0].Value.Uint64()
}

// tuneGC runs a gcTuner every second for the life of the process, from
// the percent start (set by main).
func tuneGC(start int) {
	g := &gcTuner{live: liveHeap, set: debug.SetGCPercent, last: start}
	go func() {
		for range time.Tick(time.Second) {
			if !g.step() {
				return
			}
		}
	}()
}
