package scheduler

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	busv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/bus/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/subjects"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
)

// The scheduler's benchmarks run it alone against a real NATS server and
// the real state service (embedded store); executors are replaced by a
// consumer that acks work at once. Nothing here is asserted; figures go to
// docs/benchmarks.md. Run with a fixed count, e.g.
//
//	go test -run '^$' -bench 'Dispatch|SlotFree' -benchtime 5000x ./services/scheduler/
//	AGENTMESH_BENCH_DEPTH=100000 go test -run '^$' -bench 'Dispatch/queued=deep' -benchtime 5000x -timeout 30m ./services/scheduler/

const benchAgents, benchOrgs = 100, 10

// createMany creates n queued tasks spread over the bench agents, orgs and
// priorities, 32 at a time.
func createMany(b testing.TB, nc *nats.Conn, n int) {
	b.Helper()
	var next atomic.Int64
	var wg sync.WaitGroup
	var failed atomic.Value
	for range 32 {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				task := &agentmeshv1.Task{
					Org: "org-" + strconv.Itoa(i%benchOrgs), Agent: fmt.Sprintf("agent-%03d", i%benchAgents), Input: "x",
					Priority: agentmeshv1.Priority(1 + i%5),
				}
				if err := bus.Request(context.Background(), nc, names.State(subjects.StateCreateTask), &busv1.CreateTaskRequest{Task: task}, &busv1.CreateTaskResponse{}); err != nil {
					failed.Store(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err, ok := failed.Load().(error); ok {
		b.Fatal(err)
	}
}

func benchAgentsPut(b testing.TB, nc *nats.Conn) {
	for i := range benchAgents {
		err := bus.Request(context.Background(), nc, names.State(subjects.StatePutAgent), &busv1.PutAgentRequest{
			Agent: &agentmeshv1.Agent{Name: fmt.Sprintf("agent-%03d", i), MaxConcurrency: 1 << 20}, Create: true,
		}, &busv1.PutAgentResponse{})
		if err != nil {
			b.Fatal(err)
		}
	}
}

func heartbeat(nc *nats.Conn, node string, capacity int) {
	data, _ := proto.Marshal(&busv1.ExecutorHeartbeat{Node: node, Capacity: int32(capacity), Ttl: durationpb.New(time.Hour)})
	_ = nc.Publish(names.Heartbeat(node), data)
	_ = nc.Flush()
}

// ackConsumer acks every work item at once and calls got for each.
func ackConsumer(b testing.TB, js jetstream.JetStream, got func(*busv1.WorkItem, time.Time)) {
	cons, err := js.CreateOrUpdateConsumer(context.Background(), names.WorkStream(), jetstream.ConsumerConfig{
		Durable: subjects.ConsumerExecutors, FilterSubject: names.WorkAll(), AckPolicy: jetstream.AckExplicitPolicy,
		MaxAckPending: 1 << 20,
	})
	if err != nil {
		b.Fatal(err)
	}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		at := time.Now()
		var w busv1.WorkItem
		_ = proto.Unmarshal(m.Data(), &w)
		_ = m.Ack()
		got(&w, at)
	}, jetstream.PullMaxMessages(1000))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(cc.Stop)
}

// BenchmarkDispatch measures queued → assigned → work published with
// priorities, agent limits and org limits on (set, not binding): b.N tasks
// are dispatched out of a queue that also holds `queued` more tasks over
// 100 agents and 10 orgs, which stay queued (executor capacity is exactly
// b.N).
func BenchmarkDispatch(b *testing.B) {
	deep := 100_000
	if v, err := strconv.Atoi(os.Getenv("AGENTMESH_BENCH_DEPTH")); err == nil && v > 0 {
		deep = v
	}
	for _, depth := range []struct {
		name string
		n    int
	}{{"queued=0", 0}, {"queued=deep", deep}} {
		b.Run(depth.name, func(b *testing.B) {
			if depth.n > 0 && os.Getenv("AGENTMESH_BENCH_DEPTH") == "" {
				b.Skip("set AGENTMESH_BENCH_DEPTH (e.g. 100000) to run the deep-queue case: it creates that many tasks first")
			}
			s, nc, js := setup(b, Config{OrgLimit: 1 << 20, Workers: benchWorkers()})
			benchAgentsPut(b, nc)
			runScheduler(b, s)
			createMany(b, nc, depth.n+b.N)
			var got atomic.Int64
			done := make(chan struct{})
			ackConsumer(b, js, func(*busv1.WorkItem, time.Time) {
				if got.Add(1) == int64(b.N) {
					close(done)
				}
			})
			// Wait until the leader holds every task waiting.
			for waiting(s) < depth.n+b.N {
				time.Sleep(10 * time.Millisecond)
			}
			runtime.GC()
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			stop := profileDispatch(b)
			cpu0 := processCPU()
			b.ResetTimer()
			heartbeat(nc, "bench", b.N)
			<-done
			b.StopTimer()
			cpu := processCPU() - cpu0
			stop()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "tasks/s")
			// CPU of the whole process (NATS server, state, scheduler, the
			// acking consumer) per dispatch: far steadier than tasks/s on
			// a shared machine.
			b.ReportMetric(float64(cpu.Microseconds())/1000/float64(b.N), "cpu-ms/dispatch")
			// The whole test process: NATS server, state service and its
			// store's index, and the scheduler.
			b.ReportMetric(float64(ms.HeapInuse)/(1<<20), "heap-MiB-all")
		})
	}
}

// BenchmarkSlotFreeToPublish measures the time from a slot freeing (the
// state's commit of a task's completion, the event's time) to the next
// task's work arriving at the executor, with capacity 1 and a queue of
// waiting tasks. Percentiles are reported.
func BenchmarkSlotFreeToPublish(b *testing.B) {
	s, nc, js := setup(b, Config{})
	benchAgentsPut(b, nc)
	runScheduler(b, s)
	createMany(b, nc, b.N+1)
	for waiting(s) < b.N+1 {
		time.Sleep(10 * time.Millisecond)
	}
	var mu sync.Mutex
	var freed time.Time
	lat := make([]time.Duration, 0, b.N)
	done := make(chan struct{})
	ackConsumer(b, js, func(w *busv1.WorkItem, at time.Time) {
		mu.Lock()
		if !freed.IsZero() {
			lat = append(lat, at.Sub(freed))
		}
		n := len(lat)
		mu.Unlock()
		if n >= b.N {
			select {
			case <-done:
			default:
				close(done)
			}
			return
		}
		// Run it to its end at once: assigned → running → completed.
		ctx := context.Background()
		move := func(from, to agentmeshv1.TaskStatus) *busv1.TransitionResponse {
			var tr busv1.TransitionResponse
			if err := bus.Request(ctx, nc, names.State(intentOp(from, to)), &busv1.TransitionRequest{
				TaskId: w.Task.Id, From: from, To: to, Attempt: w.Attempt, Node: "bench",
			}, &tr); err != nil {
				b.Error(err)
			}
			return &tr
		}
		move(taskstate.Assigned, taskstate.Running)
		tr := move(taskstate.Running, taskstate.Completed)
		mu.Lock()
		freed = tr.GetEvent().GetTime().AsTime()
		mu.Unlock()
	})
	b.ResetTimer()
	heartbeat(nc, "bench", 1)
	<-done
	b.StopTimer()
	mu.Lock()
	defer mu.Unlock()
	slices.Sort(lat)
	if len(lat) > 0 {
		b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
		b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
	}
}

// BenchmarkModelMemory measures what the leader's queue model holds per
// queued task (ids and keys only), at 100,000 tasks over 100 agents and 10
// orgs, and the cost of one pick from it.
func BenchmarkModelMemory(b *testing.B) {
	const n = 100_000
	now := time.Now()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	m := newModel(time.Minute, noLimit, noLimit)
	m.heartbeat("n", 1<<30, false, nil, time.Hour, now)
	for i := range n {
		m.apply(update{
			id: fmt.Sprintf("01JTASK%019d", i), org: "org-" + strconv.Itoa(i%benchOrgs), agent: fmt.Sprintf("agent-%03d", i%benchAgents),
			prio: agentmeshv1.Priority(1 + i%5), status: taskstate.Queued, seq: 2, at: now.Add(time.Duration(i) * time.Microsecond),
		}, now)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	perTask := (float64(after.HeapAlloc) - float64(before.HeapAlloc)) / n
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		e := m.next(now)
		if e == nil {
			b.StopTimer()
			m.heartbeat("n", 1<<30, false, nil, time.Hour, now)
			b.StartTimer()
			continue
		}
		m.apply(update{id: e.id, org: e.org, agent: e.agent, status: taskstate.Queued, seq: e.seq + 1, at: now}, now)
	}
	b.StopTimer()
	b.ReportMetric(perTask, "bytes/queued-task")
	runtime.KeepAlive(m)
}

// profileDispatch starts a CPU profile of the timed part of a dispatch
// benchmark (not the set-up, which creates the tasks) into the file
// AGENTMESH_BENCH_CPUPROFILE names, when it is set; the returned func
// stops it.
func profileDispatch(b *testing.B) (stop func()) {
	path := os.Getenv("AGENTMESH_BENCH_CPUPROFILE")
	if path == "" {
		return func() {}
	}
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		b.Fatal(err)
	}
	return func() {
		pprof.StopCPUProfile()
		_ = f.Close()
	}
}

// processCPU is the CPU this process used so far, user and system.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func benchWorkers() int {
	n, _ := strconv.Atoi(os.Getenv("AGENTMESH_BENCH_WORKERS"))
	return n
}

// BenchmarkStateCeiling is the ceiling the scheduler dispatches under: 64
// clients moving queued tasks to assigned in the state service directly
// and publishing a work item each (what one dispatch costs on the bus),
// with no scheduler at all.
func BenchmarkStateCeiling(b *testing.B) {
	_, nc, js := setup(b, Config{})
	createMany(b, nc, b.N)
	var ids []string
	for token := ""; ; {
		var resp busv1.ListTasksResponse
		if err := bus.Request(context.Background(), nc, names.State(subjects.StateListTasks), &busv1.ListTasksRequest{PageSize: 1000, PageToken: token}, &resp); err != nil {
			b.Fatal(err)
		}
		for _, t := range resp.Tasks {
			ids = append(ids, t.Id)
		}
		if token = resp.NextPageToken; token == "" {
			break
		}
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	for range 64 {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= len(ids) {
					return
				}
				var tr busv1.TransitionResponse
				if err := bus.Request(context.Background(), nc, names.State(subjects.StateDispatch), &busv1.TransitionRequest{
					TaskId: ids[i], From: taskstate.Queued, To: taskstate.Assigned, NextAttempt: true,
				}, &tr); err != nil {
					b.Error(err)
					return
				}
				data, _ := proto.Marshal(&busv1.WorkItem{Task: tr.Task, Attempt: tr.Task.Attempt})
				if _, err := js.Publish(context.Background(), names.Work(tr.Task.Agent), data); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(float64(len(ids))/b.Elapsed().Seconds(), "tasks/s")
}
