package executor

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	childv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/child/v1"
	"github.com/agentmesh/agentmesh/services/executor/childproto"
)

// smapsKiB reads a field (Pss, Rss, Anonymous…) of a process's
// /proc/PID/smaps_rollup in KiB (0 if it cannot).
func smapsKiB(pid int, field string) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			f := strings.Fields(v)
			if len(f) > 0 {
				n, _ := strconv.ParseInt(f[0], 10, 64)
				return n
			}
		}
	}
	return 0
}

// BenchmarkWarmChildMemory is the memory of agent children of the real
// agentmesh-agent binary (built for the benchmark): N idle warm children
// (sandboxed, waiting for their Start frame), then the same N running —
// sent a task, waiting for their model answer, as 1,000 tasks in flight
// with a slow model are. It reports PSS and anonymous memory per child.
//
//	go test -run '^$' -bench BenchmarkWarmChildMemory -benchtime 1x ./services/executor/
//
// AGENTMESH_BENCH_AGENT names an agentmesh-agent binary to measure instead
// of building this tree's (to compare two builds back to back); its
// directory must be readable by the sandbox's uids.
func BenchmarkWarmChildMemory(b *testing.B) {
	const n = 20
	agent := os.Getenv("AGENTMESH_BENCH_AGENT")
	if agent == "" {
		dir := b.TempDir()
		agent = filepath.Join(dir, AgentBinary)
		build := exec.Command("go", "build", "-tags", "grpcnotrace,agentmesh_nogrpc", "-o", agent, "github.com/agentmesh/agentmesh/services/cmd/agentmesh-agent")
		build.Env = append(os.Environ(), "CGO_ENABLED=0") // as make build
		if out, err := build.CombinedOutput(); err != nil {
			b.Fatalf("build the agent: %v\n%s", err, out)
		}
		if err := os.Chmod(dir, 0o755); err != nil {
			b.Fatal(err)
		}
	}
	for range b.N {
		s := sandboxServiceB(b)
		s.cfg.ChildCommand = []string{agent}
		s.cfg.Capacity = n
		w := newWarmPool(s, n, func() int { return 0 })
		var idle []*process
		func() {
			defer w.close()
			deadline := time.Now().Add(2 * time.Minute)
			for len(idlePids(w)) < n && time.Now().Before(deadline) {
				time.Sleep(50 * time.Millisecond)
			}
			for range n {
				if p := w.take(); p != nil {
					idle = append(idle, p)
				}
			}
		}()
		if len(idle) != n {
			b.Fatalf("%d warm children, want %d", len(idle), n)
		}
		// Let them settle (their runtime's start-up garbage).
		time.Sleep(500 * time.Millisecond)
		sum := func(field string) float64 {
			var t int64
			for _, p := range idle {
				t += smapsKiB(p.pid, field)
			}
			return float64(t) / n / 1024
		}
		b.ReportMetric(sum("Pss"), "idle-PSS-MiB/child")
		b.ReportMetric(sum("Anonymous"), "idle-anon-MiB/child")
		b.ReportMetric(sum("Rss"), "idle-RSS-MiB/child")
		// Running: each gets a task and asks for its first model turn.
		for _, p := range idle {
			start := &childv1.Start{TaskId: "mem", Attempt: 1, Input: "what time is it?", MaxSteps: 4, Tools: []string{"current_time", "fs_read", "shell"}}
			if err := childproto.NewWriter(p.stdin).Write(&childv1.Frame{Kind: &childv1.Frame_Start{Start: start}}); err != nil {
				b.Fatal(err)
			}
			f, err := readFrame(childproto.NewReader(p.stdout))
			if err != nil || f.GetModelRequest() == nil {
				b.Fatalf("want a model request, got %v, %v (stderr %q)", f, err, p.stderr.String())
			}
		}
		time.Sleep(500 * time.Millisecond)
		b.ReportMetric(sum("Pss"), "running-PSS-MiB/child")
		b.ReportMetric(sum("Anonymous"), "running-anon-MiB/child")
		b.ReportMetric(float64(procStatus(idle[0].pid, "Threads")), "threads/child")
		for _, p := range idle {
			p.cleanup()
		}
	}
}
