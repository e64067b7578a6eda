// Command ambench is agentmesh's load generator. In one run it measures:
//
//   - the spawn ceiling of the machine: a tiny static child (./nopchild,
//     built on the spot) spawned 8 at a time, in spawns/s — the most tasks/s
//     any design with one process per task could reach here; and the
//     same child in the strict sandbox's envelope (the task's cgroups and
//     workspace, the spawner, the namespaces, a uid of its own), the most
//     tasks/s a fresh sandboxed child per task allows here;
//
//   - throughput: it starts `agentmesh dev` as a separate process (embedded
//     store, or Postgres from a throwaway cluster) with the scripted model
//     (no latency: one tool call, then a final answer), submits N tasks at
//     concurrency C through the public gRPC API, follows each with
//     WatchTask, and reports tasks/s, the ratio to the spawn ceiling,
//     submit→completed percentiles, the server's peak RSS (VmHWM) and the
//     peak PSS of the server and of all its children (smaps_rollup);
//
//   - the concurrency-1 submit→completed p50 (-c1 tasks one at a time);
//     with -phases, the p50/p90 of each gap between those tasks' events
//     (where the time goes: submit, queue, dispatch, the child's first
//     model turn, each step's checkpoint, the completion, the watcher);
//
//   - with -reuse (on by default), throughput and concurrency 1 again with
//     AGENTMESH_CHILD_REUSE=agent (a child serves the next task of the same
//     org and agent);
//
//   - in flight (-inflight tasks, 10,000 by default, a slow model:
//     -latency): a second server with capacity for all of them; SubmitTask
//     and GetTask p50/p99 while they are in flight, how many still were
//     (the share of GetTask answers not yet ended: a ramp-up slower than
//     the model's latency sees the first end before the last go in), the
//     CPU per task of the ramp-up and of the ends, and the peak PSS of the
//     server and the children.
//
// With -trace grpc or -trace http/protobuf every server it starts exports
// its spans over that protocol to an OTLP receiver in ambench's process
// (which only counts them), for the cost of tracing against a run without.
//
//	go run ./services/cmd/ambench -agentmesh bin/agentmesh -n 2000 -c 50 -store both
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/pgtest"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// main is long on purpose: the bench's phases in the order it prints them, read top-down.
func main() {
	var (
		bin      = flag.String("agentmesh", "bin/agentmesh", "the agentmesh binary to benchmark")
		n        = flag.Int("n", 1000, "tasks to submit")
		c        = flag.Int("c", 50, "concurrent submitters")
		warmup   = flag.Int("warmup", 50, "tasks run first and not counted")
		stores   = flag.String("store", "embedded", "embedded, postgres or both")
		capacity = flag.Int("capacity", 64, "executor capacity (AGENTMESH_CAPACITY)")
		server   = flag.String("server", "", "load an already running agentmesh at this gRPC address instead of starting one (no RSS figure)")
		spawnN   = flag.Int("spawn", 2000, "spawns of the tiny static child for the spawn ceiling (0: skip)")
		spawnPar = flag.Int("spawn-par", 8, "spawns at once for the spawn ceiling")
		c1       = flag.Int("c1", 200, "tasks run one at a time for the concurrency-1 latency (0: skip)")
		inflight = flag.Int("inflight", 10000, "tasks in flight at once, with a slow model, for the API latency and memory figures (issue 32's target is at 10,000; 0: skip)")
		latency  = flag.Duration("latency", 10*time.Second, "the slow model's latency in the in-flight phase")
		getFor   = flag.Duration("get-for", 5*time.Second, "how long GetTask/SubmitTask are measured with the tasks in flight")
		profile  = flag.String("profile", "", "write a CPU profile of the server taken during the throughput load to this file (and of the reuse run to FILE.reuse)")
		profSecs = flag.Int("profile-seconds", 10, "length of the CPU profile")
		infProf  = flag.String("inflight-profile", "", "write a CPU profile of the server taken while GetTask/SubmitTask are measured with the tasks in flight (the -get-for window) to this file")
		schedN   = flag.Int("sched", 5000, "dispatches of the scheduler-alone benchmark (go test -bench Dispatch/queued=0 ./services/scheduler/, run 3 times; 0: skip)")
		reuse    = flag.Bool("reuse", true, "run the throughput and concurrency-1 phases again with AGENTMESH_CHILD_REUSE=agent (a child serves the next task of the same agent)")
	)
	doors := flag.Bool("doors", false, "measure the HTTP door only, then exit: REST against gRPC SubmitTask latency under the same load (-n submits through each, -c submitters split between them, at once), and the memory and CPU of -sse idle SSE streams")
	sseN := flag.Int("sse", 10000, "with -doors: idle SSE event streams held open on one router (0: skip)")
	flag.StringVar(&sseProfile, "sse-profile", "", "with -doors: write the server's heap profile, taken with the SSE streams open, to this file")
	flag.BoolVar(&showPhases, "phases", false, "after the concurrency-1 phase, print the p50/p90 of each gap between a task's events (the event times) and the client's own gaps")
	traceProto := flag.String("trace", "", "grpc or http/protobuf: the servers export their spans over OTLP to a receiver in this process, which counts them (empty: tracing off, as by default)")
	flag.Parse()
	if *traceProto != "" {
		stop, err := traceTo(*traceProto)
		if err != nil {
			fmt.Fprintf(os.Stderr, "ambench: -trace: %v\n", err)
			os.Exit(2)
		}
		defer stop()
	}
	if *n <= 0 || *c <= 0 {
		fmt.Fprintln(os.Stderr, "ambench: -n and -c must be positive")
		os.Exit(2)
	}
	var kinds []string
	switch *stores {
	case "embedded", "postgres":
		kinds = []string{*stores}
	case "both":
		kinds = []string{"embedded", "postgres"}
	default:
		fmt.Fprintf(os.Stderr, "ambench: -store: want embedded, postgres or both, got %q\n", *stores)
		os.Exit(2)
	}
	fmt.Printf("ambench: %d tasks, concurrency %d, %d CPUs, %s/%s\n", *n, *c, runtime.NumCPU(), runtime.GOOS, runtime.GOARCH)
	if *doors {
		if err := runDoors(*bin, *n, *c, *warmup, *sseN); err != nil {
			fmt.Fprintf(os.Stderr, "ambench: doors: %v\n", err)
			os.Exit(1)
		}
		return
	}
	if *server != "" {
		res, err := loadServer(*server, 0, *n, *c, *warmup)
		if err != nil {
			fmt.Fprintf(os.Stderr, "ambench: %v\n", err)
			os.Exit(1)
		}
		fmt.Println(res)
		return
	}
	ceiling, sandboxed := 0.0, 0.0
	var sandboxCPU cpuTimes // per sandboxed spawn of the tiny child
	if *spawnN > 0 {
		dir, err := os.MkdirTemp("", "ambench-nop-")
		var nop string
		if err == nil {
			if nop, err = buildNop(dir); err == nil {
				ceiling, err = spawnCeiling(nop, *spawnN, *spawnPar)
			}
		}
		if err != nil {
			os.RemoveAll(dir)
			fmt.Fprintf(os.Stderr, "ambench: spawn ceiling: %v\n", err)
			os.Exit(1)
		}
		fmt.Printf("spawn ceiling: %.0f spawns/s (a tiny static child, %d at a time, %d spawns)\n", ceiling, *spawnPar, *spawnN)
		// The same child in the strict sandbox's envelope: the bound a
		// fresh sandboxed child per task puts on throughput here.
		if sandboxed, sandboxCPU, err = sandboxCeiling(nop, *spawnN/2, *spawnPar); err != nil {
			fmt.Printf("sandboxed spawn ceiling: not measured (%v)\n", err)
		} else {
			fmt.Printf("sandboxed spawn ceiling: %.0f spawns/s (%.0f%% of the spawn ceiling: the same child with the strict sandbox's envelope — cgroups, workspace, spawner, namespaces, a uid of its own — %d at a time, %d spawns; the most tasks/s a fresh sandboxed child per task allows here)\n",
				sandboxed, 100*sandboxed/ceiling, *spawnPar, *spawnN/2)
			fmt.Printf("  CPU per sandboxed spawn of the tiny child: spawner + child %s, its cgroups and workspace made and removed %s\n",
				msf(sandboxCPU.agents), msf(sandboxCPU.server))
		}
		os.RemoveAll(dir)
	}
	var sched *schedResult
	if *schedN > 0 {
		if r, err := schedAlone(*schedN); err != nil {
			fmt.Printf("the scheduler alone: not measured (%v)\n", err)
		} else {
			fmt.Printf("the scheduler alone: %s (BenchmarkDispatch/queued=0: embedded NATS and store, priorities and limits, work acked at once)\n", r)
			sched = &r
		}
	}
	for _, kind := range kinds {
		tg := targetFigures{store: kind, ceiling: ceiling, sandboxed: sandboxed, tinyCPU: sandboxCPU.agents, sched: sched}
		res, err := run(kind, *bin, *n, *c, *warmup, *capacity, *c1, *profile, *profSecs, false)
		if err != nil {
			fmt.Fprintf(os.Stderr, "ambench: %s: %v\n", kind, err)
			os.Exit(1)
		}
		fmt.Println(res)
		if res.cpu != "" {
			fmt.Println(res.cpu)
		}
		if ceiling > 0 {
			tps := float64(res.n) / res.elapsed.Seconds()
			fmt.Printf("  throughput: %.0f tasks/s against a spawn ceiling of %.0f/s: ratio %.1f%%", tps, ceiling, 100*tps/ceiling)
			if sandboxed > 0 {
				fmt.Printf(" (%.1f%% of the sandboxed spawn ceiling)", 100*tps/sandboxed)
			}
			fmt.Println()
		}
		if *c1 > 0 {
			fmt.Printf("  concurrency 1: submit→completed p50=%s p99=%s (%d tasks)\n", ms(res.c1p50), ms(res.c1p99), *c1)
		}
		tg.fresh = &res
		if *reuse {
			reuseProfile := ""
			if *profile != "" {
				reuseProfile = *profile + ".reuse"
			}
			rr, err := run(kind, *bin, *n, *c, *warmup, *capacity, *c1, reuseProfile, *profSecs, true)
			if err != nil {
				fmt.Fprintf(os.Stderr, "ambench: %s: with reuse: %v\n", kind, err)
				os.Exit(1)
			}
			tps := float64(rr.n) / rr.elapsed.Seconds()
			fmt.Printf("  with AGENTMESH_CHILD_REUSE=agent: %.0f tasks/s", tps)
			if ceiling > 0 {
				fmt.Printf(" (ratio %.1f%%)", 100*tps/ceiling)
			}
			fmt.Printf(", submit→completed p50=%s p99=%s, failed=%d", ms(rr.p50), ms(rr.p99), rr.failed)
			if *c1 > 0 {
				fmt.Printf("; concurrency 1 p50=%s p99=%s", ms(rr.c1p50), ms(rr.c1p99))
			}
			fmt.Println()
			if rr.cpu != "" {
				fmt.Println("  " + rr.cpu)
			}
			tg.reuse = &rr
		}
		if *inflight > 0 {
			ir, err := runInflight(kind, *bin, *inflight, *c, *latency, *getFor, *infProf)
			if err != nil {
				fmt.Fprintf(os.Stderr, "ambench: %s: in flight: %v\n", kind, err)
				os.Exit(1)
			}
			fmt.Println(ir)
			tg.inflight = &ir
		}
		tg.print(os.Stdout, *c1 > 0)
	}
}

// showPhases is -phases.
var showPhases bool

type result struct {
	store              string
	n, c, failed       int
	elapsed            time.Duration
	p50, p95, p99, max time.Duration
	peakRSSKiB         int64
	peakPSSKiB         int64 // server, sampled during the load
	kidsPSSKiB         int64 // all children together, sampled
	c1p50, c1p99       time.Duration
	cpu                string   // where the CPU went (cpuSplit), if measured
	cpuUsed            cpuTimes // the same, in all over the measured load
}

func (r result) String() string {
	return fmt.Sprintf("store=%-8s n=%d c=%d failed=%d  %.0f tasks/s  submit→completed p50=%s p95=%s p99=%s max=%s  server peak RSS=%.1f MiB, peak PSS server %.1f MiB, children %.1f MiB",
		r.store, r.n, r.c, r.failed, float64(r.n)/r.elapsed.Seconds(),
		r.p50.Round(10*time.Microsecond), r.p95.Round(10*time.Microsecond), r.p99.Round(10*time.Microsecond), r.max.Round(10*time.Microsecond),
		float64(r.peakRSSKiB)/1024, float64(r.peakPSSKiB)/1024, float64(r.kidsPSSKiB)/1024)
}

func freePort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// srv is an agentmesh dev process started by ambench.
type srv struct {
	addr  string
	http  string // the HTTP listener (REST, SSE)
	debug string // pprof address, if asked for
	cmd   *exec.Cmd
	log   string
	stop  func()
}

// startServer starts `bin dev` for a store kind in dir/name, with extra
// environment; with Postgres, on a fresh throwaway cluster.
func startServer(kind, bin, dir, name string, extra ...string) (*srv, error) {
	addr, err := freePort()
	if err != nil {
		return nil, err
	}
	httpAddr, err := freePort()
	if err != nil {
		return nil, err
	}
	base := filepath.Join(dir, name)
	if err := os.MkdirAll(base, 0o755); err != nil {
		return nil, err
	}
	env := append(os.Environ(),
		"AGENTMESH_LISTEN="+addr,
		"AGENTMESH_HTTP_LISTEN="+httpAddr,
		"AGENTMESH_DATA_DIR="+filepath.Join(base, "data"),
		"AGENTMESH_NATS_LISTEN=off",
		"AGENTMESH_LOG_LEVEL=warn",
		"AGENTMESH_MODEL_BASE_URL=",
		"AGENTMESH_POSTGRES_URL=",
		"AGENTMESH_SCRIPT=",
	)
	var stops []func()
	stopAll := func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	if kind == "postgres" {
		cl, err := pgtest.StartCluster(filepath.Join(base, "pg"))
		if err != nil {
			return nil, fmt.Errorf("postgres: %w", err)
		}
		stops = append(stops, cl.Stop)
		if err := cl.CreateDatabase("bench"); err != nil {
			stopAll()
			return nil, err
		}
		env = append(env, "AGENTMESH_POSTGRES_URL="+cl.URL("bench"))
	}
	env = append(env, extra...)
	s := &srv{addr: addr, http: httpAddr, log: filepath.Join(base, "server.log")}
	for _, kv := range extra {
		if v, ok := strings.CutPrefix(kv, "AGENTMESH_DEBUG_LISTEN="); ok {
			s.debug = v
		}
	}
	cmd := exec.Command(bin, "dev")
	cmd.Env = env
	logf, err := os.Create(s.log)
	if err != nil {
		stopAll()
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		stopAll()
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	s.cmd = cmd
	stops = append(stops, func() {
		_ = cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
		}
		logf.Close()
	})
	s.stop = stopAll
	return s, nil
}

func (s *srv) fail(err error) error {
	tail, _ := os.ReadFile(s.log)
	return fmt.Errorf("%w\n%s", err, lastLines(string(tail), 20))
}

// run takes the bench's flags as they are (a command's one call site), not a struct.
func run(kind, bin string, n, c, warmup, capacity, c1 int, profile string, profSecs int, reuse bool) (result, error) {
	dir, err := os.MkdirTemp("", "ambench-")
	if err != nil {
		return result{}, err
	}
	defer os.RemoveAll(dir)
	extra := []string{"AGENTMESH_CAPACITY=" + strconv.Itoa(capacity)}
	if reuse {
		extra = append(extra, "AGENTMESH_CHILD_REUSE=agent")
	}
	if profile != "" {
		dbg, err := freePort()
		if err != nil {
			return result{}, err
		}
		extra = append(extra, "AGENTMESH_DEBUG_LISTEN="+dbg)
	}
	s, err := startServer(kind, bin, dir, "throughput", extra...)
	if err != nil {
		return result{}, err
	}
	defer s.stop()
	mem := sampleMem(s.cmd.Process.Pid, 500*time.Millisecond)
	var profErr chan error
	if profile != "" {
		profErr = make(chan error, 1)
		go func() {
			time.Sleep(time.Duration(warmup)*20*time.Millisecond + time.Second)
			profErr <- fetchProfile(s.debug, profile, profSecs)
		}()
	}
	res, err := loadServer(s.addr, s.cmd.Process.Pid, n, c, warmup)
	srvKiB, kidsKiB, _, _ := mem.Stop()
	if err != nil {
		return result{}, s.fail(err)
	}
	if profErr != nil {
		if err := <-profErr; err != nil {
			fmt.Fprintf(os.Stderr, "ambench: profile: %v\n", err)
		} else {
			fmt.Printf("  CPU profile of the server during the load: %s (go tool pprof -top %s %s)\n", profile, bin, profile)
		}
	}
	if c1 > 0 {
		conn, err := grpc.NewClient(s.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return result{}, err
		}
		tc := agentmeshv1.NewTaskServiceClient(conn)
		lat, runs, err := loadC1(tc, c1)
		if err != nil {
			conn.Close()
			return result{}, s.fail(fmt.Errorf("concurrency 1: %w", err))
		}
		res.c1p50, res.c1p99 = percentile(lat, 0.50), percentile(lat, 0.99)
		if showPhases {
			if err := phases(tc, runs); err != nil {
				fmt.Fprintf(os.Stderr, "ambench: phases: %v\n", err)
			}
		}
		conn.Close()
	}
	res.store = kind
	res.peakRSSKiB = peakRSS(s.cmd.Process.Pid)
	res.peakPSSKiB, res.kidsPSSKiB = srvKiB, kidsKiB
	return res, nil
}

// runInflight starts a server with the slow model and capacity for all
// the tasks, and runs the in-flight phase on it.
// runInflight: seven parameters, the in-flight phase's flags from its one call site.
func runInflight(kind, bin string, n, c int, latency, getFor time.Duration, profile string) (inflightResult, error) {
	dir, err := os.MkdirTemp("", "ambench-inflight-")
	if err != nil {
		return inflightResult{}, err
	}
	defer os.RemoveAll(dir)
	script, err := writeSlowScript(dir, latency)
	if err != nil {
		return inflightResult{}, err
	}
	extra := []string{"AGENTMESH_CAPACITY=" + strconv.Itoa(n+100), "AGENTMESH_SCRIPT=" + script}
	if profile != "" {
		dbg, err := freePort()
		if err != nil {
			return inflightResult{}, err
		}
		extra = append(extra, "AGENTMESH_DEBUG_LISTEN="+dbg)
	}
	s, err := startServer(kind, bin, dir, "inflight", extra...)
	if err != nil {
		return inflightResult{}, err
	}
	defer s.stop()
	var prof func() error
	if profile != "" {
		secs := max(int(getFor.Round(time.Second)/time.Second), 1)
		prof = func() error { return fetchProfile(s.debug, profile, secs) }
	}
	res, err := inflight(s.addr, s.cmd.Process.Pid, n, c, latency, getFor, prof)
	if err != nil {
		return res, s.fail(err)
	}
	if profile != "" {
		fmt.Printf("  CPU profile of the server with the tasks in flight: %s (go tool pprof -top %s %s)\n", profile, bin, profile)
	}
	return res, nil
}

// fetchProfile saves a CPU profile of seconds from a pprof endpoint.
func fetchProfile(addr, path string, seconds int) error {
	return fetchPprof(fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", addr, seconds), path, time.Duration(seconds+30)*time.Second)
}

// fetchPprof saves what a pprof URL answers to path.
func fetchPprof(url, path string, timeout time.Duration) error {
	cl := &http.Client{Timeout: timeout}
	resp, err := cl.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("pprof: %s", resp.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// loadServer runs the warm-up and the measured load against addr; with
// the server's pid (0: not ours) it also says where the CPU went.
func loadServer(addr string, pid, n, c, warmup int) (result, error) {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return result{}, err
	}
	defer conn.Close()
	if err := waitHealthy(conn, 60*time.Second); err != nil {
		return result{}, fmt.Errorf("server not healthy: %w", err)
	}
	tasks := agentmeshv1.NewTaskServiceClient(conn)

	if warmup > 0 {
		if _, _, err := load(tasks, warmup, c); err != nil {
			return result{}, fmt.Errorf("warm-up: %w", err)
		}
	}
	var cpu0 cpuTimes
	if pid > 0 {
		cpu0 = readCPU(pid)
	}
	start := time.Now()
	lat, failed, err := load(tasks, n, c)
	elapsed := time.Since(start)
	if err != nil {
		return result{}, err
	}
	var split string
	var used cpuTimes
	if pid > 0 {
		used = readCPU(pid).sub(cpu0)
		split = cpuSplit(used, n, elapsed)
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	pct := func(p float64) time.Duration {
		if len(lat) == 0 {
			return 0
		}
		return lat[min(len(lat)-1, int(p*float64(len(lat))))]
	}
	return result{
		store: "external", n: n, c: c, failed: failed, elapsed: elapsed,
		p50: pct(0.50), p95: pct(0.95), p99: pct(0.99), max: lat[len(lat)-1],
		cpu: split, cpuUsed: used,
	}, nil
}

// load submits n tasks from c goroutines; each follows its task with
// WatchTask to the end and records submit→completed.
func load(tasks agentmeshv1.TaskServiceClient, n, c int) ([]time.Duration, int, error) {
	var next atomic.Int64
	var failed atomic.Int64
	lat := make([]time.Duration, n)
	errs := make(chan error, c)
	var wg sync.WaitGroup
	for w := 0; w < c; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				d, ok, _, err := one(tasks, i)
				if err != nil {
					errs <- err
					return
				}
				if !ok {
					failed.Add(1)
				}
				lat[i] = d
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return nil, 0, err
	}
	return lat, int(failed.Load()), nil
}

// one submits task i and follows it to its end; it returns
// submit→terminal, whether it completed, and the client's clock readings.
func one(tasks agentmeshv1.TaskServiceClient, i int) (time.Duration, bool, c1Task, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	t0 := time.Now()
	resp, err := tasks.SubmitTask(ctx, &agentmeshv1.SubmitTaskRequest{Input: "bench task " + strconv.Itoa(i)})
	if err != nil {
		return 0, false, c1Task{}, fmt.Errorf("submit: %w", err)
	}
	rec := c1Task{id: resp.Task.Id, submit: t0, accepted: time.Now()}
	stream, err := tasks.WatchTask(ctx, &agentmeshv1.WatchTaskRequest{Id: resp.Task.Id, AfterSeq: resp.Task.LastEventSeq})
	if err != nil {
		return 0, false, rec, fmt.Errorf("watch: %w", err)
	}
	for {
		ev, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return 0, false, rec, fmt.Errorf("watch of %s ended before the task did", resp.Task.Id)
		}
		if err != nil {
			return 0, false, rec, fmt.Errorf("watch: %w", err)
		}
		if taskstate.Terminal(ev.Status) {
			rec.ended = time.Now()
			return rec.ended.Sub(t0), ev.Status == taskstate.Completed, rec, nil
		}
	}
}

// loadC1 runs n tasks one at a time and returns their latencies and the
// client's clock readings of each.
func loadC1(tasks agentmeshv1.TaskServiceClient, n int) ([]time.Duration, []c1Task, error) {
	lat := make([]time.Duration, 0, n)
	runs := make([]c1Task, 0, n)
	for i := 0; i < n; i++ {
		d, _, rec, err := one(tasks, i)
		if err != nil {
			return nil, nil, err
		}
		lat = append(lat, d)
		runs = append(runs, rec)
	}
	return lat, runs, nil
}

func waitHealthy(conn *grpc.ClientConn, timeout time.Duration) error {
	h := healthpb.NewHealthClient(conn)
	deadline := time.Now().Add(timeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		resp, err := h.Check(ctx, &healthpb.HealthCheckRequest{})
		cancel()
		if err == nil && resp.Status == healthpb.HealthCheckResponse_SERVING {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("after %v: %v", timeout, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// peakRSS reads VmHWM (peak resident set) of pid in KiB.
func peakRSS(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "VmHWM:") {
			f := strings.Fields(line)
			if len(f) >= 2 {
				v, _ := strconv.ParseInt(f[1], 10, 64)
				return v
			}
		}
	}
	return 0
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
