package e2e

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/poll"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
)

// waitingScript: a parent ("parent …") spawns one worker and waits for it;
// workers answer after the longest delay the scripted model allows, so the
// first one holds its process and the others stay queued.
const waitingScript = `{"scenarios":[
  {"match":"^parent","turns":[
    {"tool_calls":[{"name":"call_agent","arguments":{"agent":"worker","input":"work for {{input}}"}}]},
    {"tool_calls":[{"name":"wait_tasks","arguments":{}}]},
    {"content":"{{last_tool_result}}"}]},
  {"turns":[{"delay_ms":600000,"content":"too late"}]}]}`

// memFigure is the memory of the test process (which holds the whole
// stack: embedded NATS, the store, every service) and of its descendants
// (the agent children), after a full GC.
type memFigure struct {
	heap, stacks     int64 // Go heap in use, goroutine stacks in use (bytes)
	goroutines       int
	rssSelf, pssSelf int64 // KiB
	rssKids, pssKids int64 // KiB, summed over every descendant
	kids             int
}

func (m memFigure) goBytes() int64 { return m.heap + m.stacks }

func measureMemory() memFigure {
	runtime.GC()
	debug.FreeOSMemory()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	self := os.Getpid()
	f := memFigure{
		heap: int64(ms.HeapInuse), stacks: int64(ms.StackInuse), goroutines: runtime.NumGoroutine(),
		rssSelf: smapsKiB(self, "Rss"), pssSelf: smapsKiB(self, "Pss"),
	}
	for _, pid := range descendants(self) {
		f.kids++
		f.rssKids += smapsKiB(pid, "Rss")
		f.pssKids += smapsKiB(pid, "Pss")
	}
	return f
}

// smapsKiB reads a field (Pss, Rss…) of /proc/PID/smaps_rollup in KiB (0
// if it cannot).
func smapsKiB(pid int, field string) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			if f := strings.Fields(v); len(f) > 0 {
				n, _ := strconv.ParseInt(f[0], 10, 64)
				return n
			}
		}
	}
	return 0
}

// countStatuses counts the tasks of each status through the public API.
func countStatuses(ctx context.Context, e *env) (map[agentmeshv1.TaskStatus]int, error) {
	out := map[agentmeshv1.TaskStatus]int{}
	token := ""
	for {
		resp, err := e.tasks.ListTasks(ctx, &agentmeshv1.ListTasksRequest{PageSize: 1000, PageToken: token})
		if err != nil {
			return nil, err
		}
		for _, t := range resp.Tasks {
			out[t.Status]++
		}
		if token = resp.NextPageToken; token == "" {
			return out, nil
		}
	}
}

// waitingMemory starts a stack, measures it idle, brings it to the state
// the scenario asks for and measures again.
//
//   - delegate: n parents each spawn one worker and wait for it (n blocked
//     on sub-tasks, their n sub-tasks: one running, n-1 queued);
//   - baseline: 2n plain worker tasks (one running, 2n-1 queued): as many
//     records, none of them waiting on anything.
func waitingMemory(b *testing.B, n int, delegate bool) (idle, loaded memFigure) {
	e := start(b, opts{script: waitingScript, capacity: 8})
	defer e.stop()
	ctx := b.Context()
	for _, a := range []*agentmeshv1.Agent{
		{Name: "planner", Tools: []string{"call_agent", "wait_tasks"}},
		// One worker at a time: the executor's other slots stay free for
		// the parents, whatever the order of dispatch.
		{Name: "worker", Tools: []string{"echo"}, MaxConcurrency: 1},
	} {
		if _, err := e.agents.CreateAgent(ctx, &agentmeshv1.CreateAgentRequest{Agent: a}); err != nil {
			b.Fatal(err)
		}
	}
	// Let the warm pool fill before the idle figure.
	poll.Until(b, time.Minute, func() error {
		if k := len(descendants(os.Getpid())); k < 8 {
			return fmt.Errorf("%d agent children started, want 8 warm", k)
		}
		return nil
	})
	idle = measureMemory()
	submit := func(req *agentmeshv1.SubmitTaskRequest) {
		if _, err := e.tasks.SubmitTask(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
	for i := 0; i < n; i++ {
		if delegate {
			submit(&agentmeshv1.SubmitTaskRequest{Input: fmt.Sprintf("parent %d", i), Agent: "planner"})
		} else {
			submit(&agentmeshv1.SubmitTaskRequest{Input: fmt.Sprintf("plain %d", i), Agent: "worker"})
			submit(&agentmeshv1.SubmitTaskRequest{Input: fmt.Sprintf("plain %d'", i), Agent: "worker"})
		}
	}
	want := map[agentmeshv1.TaskStatus]int{taskstate.Running: 1, taskstate.Queued: 2*n - 1}
	if delegate {
		want = map[agentmeshv1.TaskStatus]int{taskstate.Blocked: n, taskstate.Running: 1, taskstate.Queued: n - 1}
	}
	poll.Until(b, 10*time.Minute, func() error {
		got, err := countStatuses(ctx, e)
		if err != nil {
			return err
		}
		for st, k := range want {
			if got[st] != k {
				return fmt.Errorf("%d %s, want %d (all: %v)", got[st], taskstate.Name(st), k, got)
			}
		}
		return nil
	})
	// The refills of the warm pool settle too.
	poll.Until(b, time.Minute, func() error {
		if k := len(descendants(os.Getpid())); k < 8 {
			return fmt.Errorf("%d agent children, want 8", k)
		}
		return nil
	})
	loaded = measureMemory()
	return idle, loaded
}

// BenchmarkDelegationWaitingMemory is what 1,000 parents waiting on
// sub-tasks hold beyond their records (issue 9: ≤ 50 MiB): the growth of
// the whole stack (one process: embedded NATS and store, router,
// scheduler, state, executor; plus every agent child) from idle to 1,000
// parents blocked on their sub-tasks, less the growth from idle to 2,000
// plain queued tasks (the same number of records). docs/benchmarks.md:
//
//	CI=true go test -run '^$' -bench DelegationWaitingMemory -benchtime 1x -timeout 30m ./services/e2e/
func BenchmarkDelegationWaitingMemory(b *testing.B) {
	const n = 1000
	for i := 0; i < b.N; i++ {
		bi, bl := waitingMemory(b, n, false)
		di, dl := waitingMemory(b, n, true)
		mib := func(x int64) float64 { return float64(x) / (1 << 20) }
		kib := func(x int64) float64 { return float64(x) / (1 << 10) }
		baseGo, delGo := bl.goBytes()-bi.goBytes(), dl.goBytes()-di.goBytes()
		baseRSS := (bl.rssSelf + bl.rssKids - bi.rssSelf - bi.rssKids) << 10
		delRSS := (dl.rssSelf + dl.rssKids - di.rssSelf - di.rssKids) << 10
		basePSS := (bl.pssSelf + bl.pssKids - bi.pssSelf - bi.pssKids) << 10
		delPSS := (dl.pssSelf + dl.pssKids - di.pssSelf - di.pssKids) << 10
		for _, r := range []struct {
			name string
			f    memFigure
		}{{"baseline idle", bi}, {"baseline 2,000 queued", bl}, {"delegation idle", di}, {"delegation 1,000 waiting", dl}} {
			b.Logf("%-26s heap %7.1f MiB  stacks %5.1f MiB  goroutines %5d  self RSS %7.1f MiB PSS %7.1f MiB  children %2d RSS %6.1f MiB PSS %6.1f MiB",
				r.name, mib(r.f.heap), mib(r.f.stacks), r.f.goroutines, kib(r.f.rssSelf), kib(r.f.pssSelf), r.f.kids, kib(r.f.rssKids), kib(r.f.pssKids))
		}
		b.Logf("growth: heap+stacks baseline %.1f MiB, delegation %.1f MiB; RSS %.1f / %.1f MiB; PSS %.1f / %.1f MiB",
			mib(baseGo), mib(delGo), mib(baseRSS), mib(delRSS), mib(basePSS), mib(delPSS))
		b.ReportMetric(mib(delGo-baseGo), "heap+stacks-MiB-beyond-records")
		b.ReportMetric(mib(delPSS-basePSS), "PSS-MiB-beyond-records")
		b.ReportMetric(mib(delRSS-baseRSS), "RSS-MiB-beyond-records")
		b.ReportMetric(kib(delGo-baseGo)/n, "heap+stacks-KiB/parent")
		b.ReportMetric(float64(dl.goroutines-bl.goroutines), "goroutines-beyond")
	}
}
