package router

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/poll"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// openWatches opens perTask watch streams on each task from seq 0 and
// waits until each has caught up to seq 2 (created, queued). The returned
// channel gets, per stream, the seqs it received after that and how it
// ended.
func openWatches(tb testing.TB, e *env, ctx context.Context, tasks []*agentmeshv1.Task, perTask int) chan watchEnd {
	tb.Helper()
	ends := make(chan watchEnd, len(tasks)*perTask)
	var ready sync.WaitGroup
	for _, task := range tasks {
		for range perTask {
			stream, err := e.tasks.WatchTask(ctx, &agentmeshv1.WatchTaskRequest{Id: task.Id})
			if err != nil {
				tb.Fatal(err)
			}
			ready.Add(1)
			go func() {
				var got []int64
				caughtUp := false
				for {
					r, err := stream.Recv()
					if err != nil {
						if !caughtUp {
							ready.Done()
						}
						if err == io.EOF {
							err = nil
						}
						ends <- watchEnd{task: task.Id, seqs: got, err: err}
						return
					}
					got = append(got, r.Event.Seq)
					if r.Event.Seq == 2 && !caughtUp {
						caughtUp = true
						ready.Done()
					}
				}
			}()
		}
	}
	done := make(chan struct{})
	go func() { ready.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		tb.Fatal("watches did not catch up within 2 minutes")
	}
	return ends
}

type watchEnd struct {
	task string
	seqs []int64
	err  error
}

// Many watchers of many tasks, fed from the hub's one subscription: every
// one of them sees every event once, in order, including the terminal one,
// and ends. Bounded (2,000 streams) so it runs in CI; the 10,000-stream
// figure and the memory per idle watcher come from BenchmarkIdleWatchers.
func TestManyWatchersSeeTheTerminalEvent(t *testing.T) {
	const tasksN, perTask = 200, 10
	// One client connection carries every stream; one org holds them all.
	e := start(t, Config{WatchRefetch: time.Hour, MaxWatchesPerOrg: tasksN * perTask, MaxStreamsPerConn: tasksN * perTask})
	var tasks []*agentmeshv1.Task
	for range tasksN {
		tasks = append(tasks, e.fake.AddTask(&agentmeshv1.Task{Agent: "helper", Input: "x"}))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ends := openWatches(t, e, ctx, tasks, perTask)
	// The hub's two, the request-reply inbox and the executors'
	// heartbeats (ListExecutors), however many watches.
	if n := e.svc.nc.NumSubscriptions(); n > 4 {
		t.Errorf("%d NATS subscriptions for %d watches, want at most 4", n, tasksN*perTask)
	}
	t.Logf("history: %d reads asked for, %d batch requests", e.fake.count("history"), e.fake.count("history.batch"))

	for _, task := range tasks {
		e.fake.Record(task.Id, statusEv(taskstate.Assigned), true)
		e.fake.Record(task.Id, stepEv("thinking"), true)
		e.fake.Record(task.Id, statusEv(taskstate.Completed), true)
	}
	want := "1,2,3,4,5"
	for i := range tasksN * perTask {
		var end watchEnd
		select {
		case end = <-ends:
		case <-ctx.Done():
			t.Fatalf("only %d of %d watches ended", i, tasksN*perTask)
		}
		if end.err != nil {
			t.Fatalf("watch of %s ended with %v", end.task, end.err)
		}
		var b []byte
		for j, s := range end.seqs {
			if j > 0 {
				b = append(b, ',')
			}
			b = fmt.Append(b, s)
		}
		if string(b) != want {
			t.Fatalf("watch of %s got seqs %s, want %s", end.task, b, want)
		}
	}
	poll.Until(t, 10*time.Second, func() error {
		e.svc.hub.mu.Lock()
		defer e.svc.hub.mu.Unlock()
		if n := len(e.svc.hub.watchers); n != 0 {
			return fmt.Errorf("hub holds watchers of %d tasks", n)
		}
		return nil
	})
}

// BenchmarkIdleWatchers opens 10,000 watch streams (1,000 tasks × 10) on
// one router and reports what each idle one costs the router process: the
// growth of its heap and stacks (the streams' client runs in a child
// process, so its share is not counted) and its goroutines. Then every task
// completes and every stream must see it.
//
//	go test -run '^$' -bench IdleWatchers -benchtime 1x ./services/router/
func BenchmarkIdleWatchers(b *testing.B) {
	const tasksN, perTask = 1000, 10
	for range b.N {
		e := start(b, Config{MaxWatchesPerOrg: 1 << 20, MaxStreamsPerConn: 1 << 20})
		var ids []string
		for range tasksN {
			ids = append(ids, e.fake.AddTask(&agentmeshv1.Task{Agent: "helper", Input: "x"}).Id)
		}
		before := memInUse()
		gBefore := runtime.NumGoroutine()
		cmd := exec.Command(os.Args[0], "-test.run=^TestWatchClientHelper$", "-test.v")
		cmd.Env = append(os.Environ(), envWatchClient+"="+e.svc.Addr(), envWatchTasks+"="+strings.Join(ids, ","),
			envWatchPerTask+"="+strconv.Itoa(perTask))
		cmd.Stderr = os.Stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			b.Fatal(err)
		}
		t0 := time.Now()
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		lines := bufio.NewScanner(out)
		expect := func(word string) {
			for lines.Scan() {
				if strings.HasPrefix(lines.Text(), word) {
					return
				}
				if strings.HasPrefix(lines.Text(), "FAIL") {
					b.Fatalf("client: %s", lines.Text())
				}
			}
			b.Fatalf("client ended before %s", word)
		}
		expect("READY")
		opened := time.Since(t0)
		after := memInUse()
		n := tasksN * perTask
		b.ReportMetric(float64(after-before)/float64(n), "B/watcher")
		b.ReportMetric(float64(runtime.NumGoroutine()-gBefore)/float64(n), "goroutines/watcher")
		b.ReportMetric(float64(opened.Milliseconds()), "ms-to-open-all")
		b.ReportMetric(float64(e.fake.count("history.batch")), "history-batches")
		b.ReportMetric(float64(e.fake.count("history")), "history-reads")
		t0 = time.Now()
		for _, id := range ids {
			e.fake.Record(id, statusEv(taskstate.Completed), true)
		}
		expect("DONE")
		b.ReportMetric(float64(time.Since(t0).Milliseconds()), "ms-to-terminal-all")
		if err := cmd.Wait(); err != nil {
			b.Fatalf("client: %v", err)
		}
		e.stop(b)
	}
}

const (
	envWatchClient  = "AGENTMESH_WATCH_CLIENT"
	envWatchTasks   = "AGENTMESH_WATCH_TASKS"
	envWatchPerTask = "AGENTMESH_WATCH_PER_TASK"
)

// TestWatchClientHelper is BenchmarkIdleWatchers's client, in a process of
// its own; it does nothing unless started by the benchmark.
func TestWatchClientHelper(t *testing.T) {
	addr := os.Getenv(envWatchClient)
	if addr == "" {
		t.Skip("the client of BenchmarkIdleWatchers; started by it")
	}
	perTask, _ := strconv.Atoi(os.Getenv(envWatchPerTask))
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	e := &env{conn: conn, tasks: agentmeshv1.NewTaskServiceClient(conn)}
	var tasks []*agentmeshv1.Task
	for _, id := range strings.Split(os.Getenv(envWatchTasks), ",") {
		tasks = append(tasks, &agentmeshv1.Task{Id: id})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	ends := openWatches(t, e, ctx, tasks, perTask)
	fmt.Println("READY")
	for range len(tasks) * perTask {
		if end := <-ends; end.err != nil || len(end.seqs) != 3 {
			fmt.Printf("FAIL watch of %s: seqs %v err %v\n", end.task, end.seqs, end.err)
			t.FailNow()
		}
	}
	fmt.Println("DONE")
}

func memInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse + m.StackInuse
}
