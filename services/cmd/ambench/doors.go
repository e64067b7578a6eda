package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// The HTTP door's figures (-doors): REST against gRPC SubmitTask latency
// under the same load, and what idle SSE streams cost a router.

// runDoors runs both measurements, each on its own `agentmesh dev`.
func runDoors(bin string, n, c, warmup, sseN int) error {
	dir, err := os.MkdirTemp("", "ambench-doors-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if err := submitCompare(bin, dir, n, c, warmup); err != nil {
		return fmt.Errorf("submit: %w", err)
	}
	if sseN > 0 {
		for _, h2c := range []bool{false, true} {
			if err := sseIdle(bin, dir, sseN, h2c); err != nil {
				return fmt.Errorf("sse: %w", err)
			}
		}
	}
	return nil
}

// submitCompare: c submitters, each alternating gRPC and REST, so that
// both doors are measured under exactly the same load; n submits through
// each (after warmup through each).
func submitCompare(bin, dir string, n, c, warmup int) error {
	s, err := startServer("embedded", bin, dir, "submit", "AGENTMESH_CAPACITY=64")
	if err != nil {
		return err
	}
	defer s.stop()
	conn, err := grpc.NewClient(s.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := waitHealthy(conn, 60*time.Second); err != nil {
		return s.fail(err)
	}
	tasks := agentmeshv1.NewTaskServiceClient(conn)
	hc := &http.Client{Timeout: time.Minute, Transport: &http.Transport{MaxIdleConnsPerHost: c, MaxConnsPerHost: c}}
	url := "http://" + s.http + "/v1/tasks"
	viaGRPC := func(i int) error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, err := tasks.SubmitTask(ctx, &agentmeshv1.SubmitTaskRequest{Input: "door " + strconv.Itoa(i)})
		return err
	}
	viaREST := func(i int) error {
		resp, err := hc.Post(url, "application/json", bytes.NewReader([]byte(`{"input": "door `+strconv.Itoa(i)+`"}`)))
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("REST submit: HTTP %d %s", resp.StatusCode, b)
		}
		return nil
	}
	for i := range warmup {
		if err := viaGRPC(i); err != nil {
			return s.fail(err)
		}
		if err := viaREST(i); err != nil {
			return s.fail(err)
		}
	}
	var (
		next      atomic.Int64
		mu        sync.Mutex
		grpcLat   []time.Duration
		restLat   []time.Duration
		wg        sync.WaitGroup
		firstErr  error
		errOnce   sync.Once
		startedAt = time.Now()
	)
	for range c {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= 2*n {
					return
				}
				rest := i%2 == 1 // the doors interleave: the same load on both
				t0 := time.Now()
				var err error
				if rest {
					err = viaREST(i)
				} else {
					err = viaGRPC(i)
				}
				d := time.Since(t0)
				if err != nil {
					errOnce.Do(func() { firstErr = err })
					return
				}
				mu.Lock()
				if rest {
					restLat = append(restLat, d)
				} else {
					grpcLat = append(grpcLat, d)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return s.fail(firstErr)
	}
	wall := time.Since(startedAt)
	fmt.Printf("doors: SubmitTask under the same load (%d submitters alternating the doors, %d submits each way, %.0f submits/s together):\n",
		c, n, float64(2*n)/wall.Seconds())
	for _, d := range []struct {
		name string
		lat  []time.Duration
	}{{"gRPC", grpcLat}, {"REST", restLat}} {
		fmt.Printf("  %-4s p50=%s p90=%s p99=%s max=%s (%d calls)\n", d.name,
			ms(percentile(d.lat, 0.50)), ms(percentile(d.lat, 0.90)), ms(percentile(d.lat, 0.99)), ms(percentile(d.lat, 1)), len(d.lat))
	}
	fmt.Printf("  REST p99 - gRPC p99 = %s\n", ms(percentile(restLat, 0.99)-percentile(grpcLat, 0.99)))
	return nil
}

// idleTasks is how many tasks the idle streams follow.
const idleTasks = 16

// sseIdle opens sseN event streams on tasks that wait on a model that does
// not answer (no events: idle streams), and reports the router's memory per
// stream and its CPU while they are open. Over HTTP/1.1 each stream is a
// connection; over cleartext HTTP/2 (h2c) up to 250 share one.
func sseIdle(bin, dir string, sseN int, h2c bool) error {
	script, err := writeSlowScript(dir, 10*time.Minute)
	if err != nil {
		return err
	}
	dbg, err := freePort()
	if err != nil {
		return err
	}
	proto := "HTTP/1.1"
	if h2c {
		proto = "h2c"
	}
	s, err := startServer("embedded", bin, dir, "sse-"+proto[:3], "AGENTMESH_SCRIPT="+script, "AGENTMESH_CAPACITY="+strconv.Itoa(idleTasks),
		"AGENTMESH_MAX_WATCHES_PER_ORG="+strconv.Itoa(sseN+64), "AGENTMESH_MAX_CONNECTIONS="+strconv.Itoa(sseN+1024),
		"AGENTMESH_DEBUG_LISTEN="+dbg, "AGENTMESH_RELEASE_AFTER=0")
	if err != nil {
		return err
	}
	defer s.stop()
	cursors, err := idleTasksOf(s, idleTasks)
	if err != nil {
		return s.fail(err)
	}
	pid := s.cmd.Process.Pid
	const window = 30 * time.Second
	time.Sleep(3 * time.Second)
	idle0 := readCPU(pid)
	time.Sleep(window)
	idle := readCPU(pid).sub(idle0) // the server's own background (every service's timers)
	before := readRuntime(dbg, pid)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	opened, err := openStreams(ctx, s.http, cursors, sseN, h2c)
	if err != nil {
		return s.fail(err)
	}
	time.Sleep(5 * time.Second)
	after := readRuntime(dbg, pid)
	if sseProfile != "" {
		if err := fetchHeap(dbg, sseProfile); err != nil {
			return err
		}
	}
	cpu0 := readCPU(pid)
	time.Sleep(window)
	cpu := readCPU(pid).sub(cpu0)
	per := func(a, b int64) string { return fmt.Sprintf("%.1f KiB", float64(a-b)/1024/float64(opened)) }
	fmt.Printf("doors: %d idle SSE streams over %s on one router (%d tasks waiting on a model, keep-alive every 15 s):\n", opened, proto, len(cursors))
	fmt.Printf("  per stream: PSS %s, Go heap in use %s, goroutine stacks %s, %.1f goroutines\n",
		per(after.pssKiB*1024, before.pssKiB*1024), per(after.heap, before.heap), per(after.stack, before.stack),
		float64(after.goroutines-before.goroutines)/float64(opened))
	pct := func(d time.Duration) float64 { return 100 * float64(d) / float64(window) }
	fmt.Printf("  server PSS %.0f MiB → %.0f MiB; server CPU over %s: %.2f%% of one core with the streams open, %.2f%% before them (its services' own timers)\n",
		float64(before.pssKiB)/1024, float64(after.pssKiB)/1024, window, pct(cpu.server), pct(idle.server))
	cancel()
	return nil
}

// idleTasksOf submits k tasks and waits until each runs (its model call
// then never answers); it returns each one's id and last seq.
func idleTasksOf(s *srv, k int) (map[string]int64, error) {
	conn, err := grpc.NewClient(s.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	if err := waitHealthy(conn, 60*time.Second); err != nil {
		return nil, err
	}
	tasks := agentmeshv1.NewTaskServiceClient(conn)
	out := map[string]int64{}
	for i := range k {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		resp, err := tasks.SubmitTask(ctx, &agentmeshv1.SubmitTaskRequest{Input: "idle " + strconv.Itoa(i)})
		cancel()
		if err != nil {
			return nil, err
		}
		out[resp.GetTask().GetId()] = 0
	}
	deadline := time.Now().Add(2 * time.Minute)
	for id := range out {
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			resp, err := tasks.GetTask(ctx, &agentmeshv1.GetTaskRequest{Id: id})
			cancel()
			if err != nil {
				return nil, err
			}
			if t := resp.GetTask(); t.GetStatus() == taskstate.Running && t.GetStepCount() == 0 {
				out[id] = t.GetLastEventSeq()
				break
			}
			if time.Now().After(deadline) {
				return nil, fmt.Errorf("task %s is %s, not running", id, taskstate.Name(resp.GetTask().GetStatus()))
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return out, nil
}

// openStreams opens n event streams spread over the tasks, each from its
// task's last seq (so nothing is sent but keep-alives), and holds them
// until ctx ends; it returns once all are open.
func openStreams(ctx context.Context, addr string, cursors map[string]int64, n int, h2c bool) (int, error) {
	tr := &http.Transport{MaxConnsPerHost: 0, MaxIdleConnsPerHost: 1, DisableCompression: true}
	if h2c {
		var p http.Protocols
		p.SetUnencryptedHTTP2(true)
		tr.Protocols = &p
	}
	hc := &http.Client{Transport: tr}
	ids := make([]string, 0, len(cursors))
	for id := range cursors {
		ids = append(ids, id)
	}
	var opened atomic.Int64
	errc := make(chan error, 1)
	sem := make(chan struct{}, 64) // opening at once
	var wg sync.WaitGroup
	for i := range n {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			id := ids[i%len(ids)]
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/v1/tasks/"+id+"/events", nil)
			req.Header.Set("Last-Event-ID", strconv.FormatInt(cursors[id], 10))
			resp, err := hc.Do(req)
			if err == nil && resp.StatusCode != http.StatusOK {
				err = fmt.Errorf("HTTP %d", resp.StatusCode)
			}
			var rd *bufio.Reader
			if err == nil {
				rd = bufio.NewReaderSize(resp.Body, 64)
				_, err = rd.ReadString('\n') // "retry: ...": the stream is open
			}
			<-sem
			wg.Done()
			if err != nil {
				select {
				case errc <- fmt.Errorf("stream %d: %w", i, err):
				default:
				}
				return
			}
			opened.Add(1)
			_, _ = io.Copy(io.Discard, rd) // held until ctx ends
			resp.Body.Close()
		}()
	}
	wg.Wait()
	select {
	case err := <-errc:
		return int(opened.Load()), err
	default:
	}
	return int(opened.Load()), nil
}

// sseProfile is -sse-profile: where the server's heap profile is written
// with the streams open.
var sseProfile string

// fetchHeap writes the server's heap profile (after a GC) to path.
func fetchHeap(dbg, path string) error {
	return fetchPprof("http://"+dbg+"/debug/pprof/heap?gc=1", path, time.Minute)
}

// runtimeFigures are a server's memory and goroutines at one moment.
type runtimeFigures struct {
	pssKiB      int64
	heap, stack int64 // bytes after a GC: HeapInuse, StackInuse
	goroutines  int64
}

var memStatRe = regexp.MustCompile(`(?m)^# (HeapInuse|Stack) = (\d+)`)
var goroutinesRe = regexp.MustCompile(`goroutine profile: total (\d+)`)

// readRuntime reads the server's PSS and, from its pprof endpoint, its Go
// heap, stacks and goroutines.
func readRuntime(dbg string, pid int) runtimeFigures {
	f := runtimeFigures{pssKiB: pssKiB(pid)}
	get := func(path string) string {
		resp, err := http.Get("http://" + dbg + path)
		if err != nil {
			return ""
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	// gc=1: after a collection (which also shrinks idle stacks).
	for _, m := range memStatRe.FindAllStringSubmatch(get("/debug/pprof/heap?gc=1&debug=1"), -1) {
		v, _ := strconv.ParseInt(m[2], 10, 64)
		if m[1] == "HeapInuse" {
			f.heap = v
		} else {
			f.stack = v
		}
	}
	if m := goroutinesRe.FindStringSubmatch(get("/debug/pprof/goroutine?debug=1")); m != nil {
		f.goroutines, _ = strconv.ParseInt(m[1], 10, 64)
	}
	return f
}
