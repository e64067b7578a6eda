package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// inflightResult is the in-flight phase: n tasks whose model answers after
// latency, all running at once (capacity n), and the API's latency and
// the memory of server and children meanwhile.
type inflightResult struct {
	n                    int
	latency              time.Duration
	rampP50, rampP99     time.Duration // SubmitTask while the n go in
	submitP50, submitP99 time.Duration // SubmitTask with n in flight
	getP50, getP99       time.Duration // GetTask with n in flight
	submits, gets        int
	rampFor              time.Duration // the n submitted in this long
	rampCPU, endCPU      cpuTimes      // CPU over the ramp-up; from the window's end to the last end
	endFor               time.Duration // from the window's end to the last task's end
	waiting              int           // GetTask answers not yet ended (of gets)
	serverKiB, kidsKiB   int64
	totalKiB             int64
	procs                int
	completed, failed    int
}

func (r inflightResult) String() string {
	mib := func(k int64) string { return fmt.Sprintf("%.0f MiB", float64(k)/1024) }
	return fmt.Sprintf("  in flight: %d tasks, model latency %s: SubmitTask p50=%s p99=%s (%d calls), GetTask p50=%s p99=%s (%d calls); "+
		"ramp-up SubmitTask p50=%s p99=%s, the %d submitted in %s (%.0f/s)\n"+
		"  still in flight while measured: %.0f%% of the GetTask answers (≈ %d tasks)\n"+
		"  CPU per task: ramp-up server %s, spawner + children %s; the ends (the answers, a child for each, %s) server %s, spawner + children %s\n"+
		"  peak PSS: server %s, children %s (%d processes at most), together %s; %d completed, %d failed",
		r.n, r.latency, ms(r.submitP50), ms(r.submitP99), r.submits, ms(r.getP50), ms(r.getP99), r.gets,
		ms(r.rampP50), ms(r.rampP99), r.n, r.rampFor.Round(100*time.Millisecond), float64(r.n)/r.rampFor.Seconds(),
		100*r.waitingShare(), r.inFlight(),
		msf(r.rampCPU.server/time.Duration(r.n)), msf(r.rampCPU.agents/time.Duration(r.n)), r.endFor.Round(100*time.Millisecond),
		msf(r.endCPU.server/time.Duration(r.n)), msf(r.endCPU.agents/time.Duration(r.n)), mib(r.serverKiB), mib(r.kidsKiB), r.procs, mib(r.totalKiB), r.completed, r.failed)
}

// waitingShare is the share of the GetTask answers, taken of random tasks
// of the n while the API was measured, whose task had not ended.
func (r inflightResult) waitingShare() float64 {
	if r.gets == 0 {
		return 0
	}
	return float64(r.waiting) / float64(r.gets)
}

// inFlight estimates how many of the n were in flight while the API was
// measured: a ramp-up longer than the model's latency sees the first
// tasks end before the last go in.
func (r inflightResult) inFlight() int { return int(r.waitingShare()*float64(r.n) + 0.5) }

func ms(d time.Duration) string { return d.Round(10 * time.Microsecond).String() }

func percentile(lat []time.Duration, p float64) time.Duration {
	if len(lat) == 0 {
		return 0
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	return lat[min(len(lat)-1, int(p*float64(len(lat))))]
}

// writeSlowScript writes a scripted-model script whose every answer takes
// latency.
func writeSlowScript(dir string, latency time.Duration) (string, error) {
	p := filepath.Join(dir, "slow-script.json")
	s := `{"model": "scripted", "scenarios": [{"turns": [{"content": "a slow answer", "delay_ms": ` + strconv.FormatInt(latency.Milliseconds(), 10) + `}]}]}`
	return p, os.WriteFile(p, []byte(s), 0o644)
}

// inflight loads a server started with the slow script and capacity n.
// prof, when not nil, takes the server's CPU profile during the
// measurement window (it runs while GetTask/SubmitTask are measured).
// Seven parameters and ~160 lines: the phase's flags from its one call
// site, and its steps (the ramp-up, the measured window, the ends) in the
// order they run, sharing the counters and clients the result reports.
func inflight(addr string, pid int, n, c int, latency, getFor time.Duration, prof func() error) (inflightResult, error) {
	res := inflightResult{n: n, latency: latency}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return res, err
	}
	defer conn.Close()
	if err := waitHealthy(conn, 60*time.Second); err != nil {
		return res, fmt.Errorf("server not healthy: %w", err)
	}
	tasks := agentmeshv1.NewTaskServiceClient(conn)
	mem := sampleMem(pid, 250*time.Millisecond)
	stopped := false
	defer func() {
		if !stopped {
			mem.Stop()
		}
	}()

	submit := func(i int) (string, time.Duration, error) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		t0 := time.Now()
		resp, err := tasks.SubmitTask(ctx, &agentmeshv1.SubmitTaskRequest{Input: "in flight " + strconv.Itoa(i)})
		if err != nil {
			return "", 0, fmt.Errorf("submit: %w", err)
		}
		return resp.Task.Id, time.Since(t0), nil
	}

	// Ramp-up: n tasks from c submitters.
	cpu0 := readCPU(pid)
	rampStart := time.Now()
	ids := make([]string, n)
	ramp := make([]time.Duration, n)
	var wg sync.WaitGroup
	errs := make(chan error, c)
	next := make(chan int)
	for range c {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				id, d, err := submit(i)
				if err != nil {
					errs <- err
					return
				}
				ids[i], ramp[i] = id, d
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return res, err
	}
	res.rampFor = time.Since(rampStart)
	res.rampCPU = readCPU(pid).sub(cpu0)
	res.rampP50, res.rampP99 = percentile(ramp, 0.50), percentile(ramp, 0.99)

	// With n in flight: GetTask from 8 readers and SubmitTask from 2
	// writers for getFor (well within the model's latency).
	var (
		mu      sync.Mutex
		gets    []time.Duration
		waiting int
		submits []time.Duration
		extra   []string
	)
	deadline := time.Now().Add(getFor)
	var profErr chan error
	if prof != nil {
		profErr = make(chan error, 1)
		go func() { profErr <- prof() }()
	}
	errs = make(chan error, 10)
	for r := range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; time.Now().Before(deadline); i++ {
				if r < 2 {
					id, d, err := submit(n + r*100000 + i)
					if err != nil {
						errs <- err
						return
					}
					mu.Lock()
					submits, extra = append(submits, d), append(extra, id)
					mu.Unlock()
					continue
				}
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				t0 := time.Now()
				resp, err := tasks.GetTask(ctx, &agentmeshv1.GetTaskRequest{Id: ids[rand.IntN(n)]})
				d := time.Since(t0)
				cancel()
				if err != nil {
					errs <- fmt.Errorf("get: %w", err)
					return
				}
				mu.Lock()
				gets = append(gets, d)
				if !taskstate.Terminal(resp.Task.Status) {
					waiting++
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	if profErr != nil {
		if err := <-profErr; err != nil {
			return res, fmt.Errorf("profile: %w", err)
		}
	}
	if err := <-errs; err != nil {
		return res, err
	}
	res.submits, res.gets, res.waiting = len(submits), len(gets), waiting
	res.submitP50, res.submitP99 = percentile(submits, 0.50), percentile(submits, 0.99)
	res.getP50, res.getP99 = percentile(gets, 0.50), percentile(gets, 0.99)

	// Every task ends (the model answers after latency, then a child
	// takes each answer). The tasks are read in the order they went in
	// (about the order they end); the wait fails when one does not end
	// within stall of the one before it: 10,000 ends take minutes on a
	// small machine.
	all := append(ids, extra...)
	cpu1, ended := readCPU(pid), time.Now()
	stall := 3*latency + 2*time.Minute
	end := time.Now().Add(stall)
	for _, id := range all {
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			resp, err := tasks.GetTask(ctx, &agentmeshv1.GetTaskRequest{Id: id})
			cancel()
			if err == nil && taskstate.Terminal(resp.Task.Status) {
				end = time.Now().Add(stall)
				if resp.Task.Status == taskstate.Completed {
					res.completed++
				} else {
					res.failed++
				}
				break
			}
			if time.Now().After(end) {
				return res, fmt.Errorf("task %s did not end within %s of the one before it (%d completed, %d failed; %v)", id, stall, res.completed, res.failed, err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	res.endCPU, res.endFor = readCPU(pid).sub(cpu1), time.Since(ended)
	res.serverKiB, res.kidsKiB, res.totalKiB, res.procs = mem.Stop()
	stopped = true
	return res, nil
}
