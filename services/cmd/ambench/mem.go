package main

import (
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// pssKiB reads a process's proportional set size (Pss in
// /proc/<pid>/smaps_rollup), in KiB; 0 if it is gone.
func pssKiB(pid int) int64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/smaps_rollup")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "Pss:") {
			f := strings.Fields(line)
			if len(f) >= 2 {
				v, _ := strconv.ParseInt(f[1], 10, 64)
				return v
			}
		}
	}
	return 0
}

// descendants lists every live process below pid (children, their
// children, ...), from /proc's parent links.
func descendants(pid int) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	kids := map[int][]int{}
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) < 2 {
			continue
		}
		pp, _ := strconv.Atoi(f[1])
		kids[pp] = append(kids[pp], p)
	}
	var out []int
	queue := []int{pid}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, k := range kids[p] {
			out = append(out, k)
			queue = append(queue, k)
		}
	}
	return out
}

// memSampler samples the PSS of a server and of all its descendants until
// stopped, keeping the peaks (of the server, of the children together, of
// both together in one sample).
type memSampler struct {
	pid      int
	stop     chan struct{}
	done     chan struct{}
	mu       sync.Mutex
	server   int64
	children int64
	total    int64
	maxKids  int
}

func sampleMem(pid int, every time.Duration) *memSampler {
	m := &memSampler{pid: pid, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(m.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			m.sample()
			select {
			case <-m.stop:
				return
			case <-t.C:
			}
		}
	}()
	return m
}

func (m *memSampler) sample() {
	srv := pssKiB(m.pid)
	var kids int64
	ds := descendants(m.pid)
	for _, d := range ds {
		kids += pssKiB(d)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.server = max(m.server, srv)
	m.children = max(m.children, kids)
	m.total = max(m.total, srv+kids)
	m.maxKids = max(m.maxKids, len(ds))
}

// Stop ends sampling and returns the peaks in KiB and the most processes
// seen below the server at once.
func (m *memSampler) Stop() (server, children, total int64, procs int) {
	close(m.stop)
	<-m.done
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.server, m.children, m.total, m.maxKids
}
