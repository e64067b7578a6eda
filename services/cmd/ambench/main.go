// Command ambench is agentmesh's load generator. It starts `agentmesh dev`
// as a separate process (embedded store, or Postgres from a throwaway
// cluster), with the scripted model (no latency: one tool call, then a
// final answer), submits N tasks at concurrency C through the public gRPC
// API, follows each with WatchTask, and reports tasks/s, submit→completed
// latency percentiles and the server's peak RSS (VmHWM).
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

func main() {
	var (
		bin      = flag.String("agentmesh", "bin/agentmesh", "the agentmesh binary to benchmark")
		n        = flag.Int("n", 1000, "tasks to submit")
		c        = flag.Int("c", 50, "concurrent submitters")
		warmup   = flag.Int("warmup", 50, "tasks run first and not counted")
		stores   = flag.String("store", "embedded", "embedded, postgres or both")
		capacity = flag.Int("capacity", 64, "executor capacity (AGENTMESH_CAPACITY)")
		server   = flag.String("server", "", "load an already running agentmesh at this gRPC address instead of starting one (no RSS figure)")
	)
	flag.Parse()
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
	if *server != "" {
		res, err := loadServer(*server, *n, *c, *warmup)
		if err != nil {
			fmt.Fprintf(os.Stderr, "ambench: %v\n", err)
			os.Exit(1)
		}
		fmt.Println(res)
		return
	}
	for _, kind := range kinds {
		res, err := run(kind, *bin, *n, *c, *warmup, *capacity)
		if err != nil {
			fmt.Fprintf(os.Stderr, "ambench: %s: %v\n", kind, err)
			os.Exit(1)
		}
		fmt.Println(res)
	}
}

type result struct {
	store              string
	n, c, failed       int
	elapsed            time.Duration
	p50, p95, p99, max time.Duration
	peakRSSKiB         int64
}

func (r result) String() string {
	return fmt.Sprintf("store=%-8s n=%d c=%d failed=%d  %.0f tasks/s  submit→completed p50=%s p95=%s p99=%s max=%s  server peak RSS=%.1f MiB",
		r.store, r.n, r.c, r.failed, float64(r.n)/r.elapsed.Seconds(),
		r.p50.Round(10*time.Microsecond), r.p95.Round(10*time.Microsecond), r.p99.Round(10*time.Microsecond), r.max.Round(10*time.Microsecond),
		float64(r.peakRSSKiB)/1024)
}

func freePort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

func run(kind, bin string, n, c, warmup, capacity int) (result, error) {
	dir, err := os.MkdirTemp("", "ambench-")
	if err != nil {
		return result{}, err
	}
	defer os.RemoveAll(dir)
	addr, err := freePort()
	if err != nil {
		return result{}, err
	}
	env := append(os.Environ(),
		"AGENTMESH_LISTEN="+addr,
		"AGENTMESH_DATA_DIR="+filepath.Join(dir, "data"),
		"AGENTMESH_NATS_LISTEN=off",
		"AGENTMESH_LOG_LEVEL=warn",
		"AGENTMESH_CAPACITY="+strconv.Itoa(capacity),
		"AGENTMESH_MODEL_BASE_URL=",
		"AGENTMESH_POSTGRES_URL=",
	)
	if kind == "postgres" {
		cl, err := pgtest.StartCluster(filepath.Join(dir, "pg"))
		if err != nil {
			return result{}, fmt.Errorf("postgres: %w", err)
		}
		defer cl.Stop()
		if err := cl.CreateDatabase("bench"); err != nil {
			return result{}, err
		}
		env = append(env, "AGENTMESH_POSTGRES_URL="+cl.URL("bench"))
	}
	cmd := exec.Command(bin, "dev")
	cmd.Env = env
	logf, err := os.Create(filepath.Join(dir, "server.log"))
	if err != nil {
		return result{}, err
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return result{}, fmt.Errorf("start %s: %w", bin, err)
	}
	defer func() {
		_ = cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
		}
	}()
	res, err := loadServer(addr, n, c, warmup)
	if err != nil {
		tail, _ := os.ReadFile(logf.Name())
		return result{}, fmt.Errorf("%w\n%s", err, lastLines(string(tail), 20))
	}
	res.store = kind
	res.peakRSSKiB = peakRSS(cmd.Process.Pid)
	return res, nil
}

// loadServer runs the warm-up and the measured load against addr.
func loadServer(addr string, n, c, warmup int) (result, error) {
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
	start := time.Now()
	lat, failed, err := load(tasks, n, c)
	elapsed := time.Since(start)
	if err != nil {
		return result{}, err
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
				d, ok, err := one(tasks, i)
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

func one(tasks agentmeshv1.TaskServiceClient, i int) (time.Duration, bool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	t0 := time.Now()
	resp, err := tasks.SubmitTask(ctx, &agentmeshv1.SubmitTaskRequest{Input: "bench task " + strconv.Itoa(i)})
	if err != nil {
		return 0, false, fmt.Errorf("submit: %w", err)
	}
	stream, err := tasks.WatchTask(ctx, &agentmeshv1.WatchTaskRequest{Id: resp.Task.Id, AfterSeq: resp.Task.LastEventSeq})
	if err != nil {
		return 0, false, fmt.Errorf("watch: %w", err)
	}
	for {
		ev, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return 0, false, fmt.Errorf("watch of %s ended before the task did", resp.Task.Id)
		}
		if err != nil {
			return 0, false, fmt.Errorf("watch: %w", err)
		}
		if taskstate.Terminal(ev.Status) {
			return time.Since(t0), ev.Status == taskstate.Completed, nil
		}
	}
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
