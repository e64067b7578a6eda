package main

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// Where the machine's CPU goes during the throughput load: the server's
// own threads, the processes below it (the spawner and the agent children,
// with what they reaped), this load generator, and the rest of the machine
// (the kernel's own threads — e.g. tearing down the children's namespaces —
// and whatever else runs on it). From /proc, in clock ticks.

// clockTick is USER_HZ, 100 on Linux.
const clockTick = 10 * time.Millisecond

type cpuTimes struct {
	server, agents, bench, busy time.Duration
}

func (a cpuTimes) sub(b cpuTimes) cpuTimes {
	return cpuTimes{server: a.server - b.server, agents: a.agents - b.agents, bench: a.bench - b.bench, busy: a.busy - b.busy}
}

// procTimes returns utime+stime and cutime+cstime of pid.
func procTimes(pid string) (own, reaped time.Duration, ok bool) {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return 0, 0, false
	}
	s := string(b)
	// After "pid (comm) ": state ppid pgrp session tty tpgid flags minflt
	// cminflt majflt cmajflt utime stime cutime cstime ...
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 15 {
		return 0, 0, false
	}
	n := func(i int) time.Duration {
		v, _ := strconv.ParseInt(f[i], 10, 64)
		return time.Duration(v) * clockTick
	}
	return n(11) + n(12), n(13) + n(14), true
}

// readCPU samples the CPU used so far by the server srv, its descendants
// (alive, plus what they and the server reaped) and this process, and the
// machine's busy time.
func readCPU(srv int) cpuTimes {
	var t cpuTimes
	own, reaped, _ := procTimes(strconv.Itoa(srv))
	t.server, t.agents = own, reaped
	for _, p := range descendants(srv) {
		o, r, _ := procTimes(strconv.Itoa(p))
		t.agents += o + r
	}
	t.bench, _, _ = procTimes("self")
	if b, err := os.ReadFile("/proc/stat"); err == nil {
		line, _, _ := strings.Cut(string(b), "\n")
		f := strings.Fields(line) // cpu user nice system idle iowait irq softirq steal ...
		for i := 1; i < len(f) && i <= 8; i++ {
			if i == 4 || i == 5 {
				continue // idle, iowait
			}
			v, _ := strconv.ParseInt(f[i], 10, 64)
			t.busy += time.Duration(v) * clockTick
		}
	}
	return t
}

// cpuSplit says where d's CPU went per task of n.
func cpuSplit(d cpuTimes, n int, wall time.Duration) string {
	per := func(x time.Duration) string {
		return fmt.Sprintf("%.1f ms", float64(x)/float64(time.Millisecond)/float64(n))
	}
	rest := d.busy - d.server - d.agents - d.bench
	return fmt.Sprintf("  CPU per task (the measured load): server %s, spawner + agent children %s, ambench %s, rest of the machine %s (kernel threads, other work); machine %.0f%% busy of %d cores",
		per(d.server), per(d.agents), per(d.bench), per(rest), 100*float64(d.busy)/float64(wall)/float64(runtime.NumCPU()), runtime.NumCPU())
}
