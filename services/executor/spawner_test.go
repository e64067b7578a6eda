package executor

// The spawner (fork server): its death fails only the spawns in flight and
// the executor restarts it; the executor's death takes the spawner and
// every child with it; and what a spawn costs either way (benchmark).

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/pkg/poll"
	"github.com/agentmesh/agentmesh/pkg/testlog"
	"github.com/agentmesh/agentmesh/services/executor/sandbox"
	"github.com/agentmesh/agentmesh/services/executor/spawner"
)

func forkServerService(t *testing.T) *Service {
	t.Helper()
	if mode, _ := parseSpawner(os.Getenv("AGENTMESH_SPAWNER")); mode == SpawnerDirect {
		t.Skip("AGENTMESH_SPAWNER=direct: no spawner to kill")
	}
	s := sandboxService(t, sandbox.Config{})
	if s.spawner == nil {
		t.Fatal("no spawner")
	}
	return s
}

// Killing the spawner kills the children it started (their parent-death
// signal), fails the spawn in flight with ErrDied, and the executor
// restarts it: the next task runs.
func TestSpawnerKilledMidFlight(t *testing.T) {
	s := forkServerService(t)
	first := s.spawner.Pid()
	a := spawnAgent(t, context.Background(), s, "escape", 20)
	if r := a.do(call{"shell", jsonArgs("command", "echo before")}); r.isErr || !strings.Contains(r.out, "before") {
		t.Fatalf("shell before the kill: %q", r.out)
	}

	// A spawn in flight: the spawner is stopped, so it cannot answer.
	if err := syscall.Kill(first, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	type res struct {
		p   *process
		err error
	}
	inflight := make(chan res, 1)
	go func() {
		p, err := s.spawn(context.Background(), "inflight")
		inflight <- res{p, err}
	}()
	poll.Until(t, 20*time.Second, func() error {
		if n := s.spawner.InFlight(); n != 1 {
			return fmt.Errorf("%d spawns in flight, want 1", n)
		}
		return nil
	})
	if err := syscall.Kill(first, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	r := <-inflight
	if r.err == nil {
		r.p.cleanup()
		t.Fatal("the spawn in flight succeeded although its spawner was killed")
	}
	if !errors.Is(r.err, spawner.ErrDied) {
		t.Errorf("the spawn in flight failed with %v, want ErrDied", r.err)
	}
	// The running agent died with its spawner.
	if st := a.p.wait(false); !strings.Contains(st, "spawner process died") {
		t.Errorf("the running agent %s, want it to have died with the spawner", st)
	}
	poll.Until(t, 20*time.Second, func() error {
		if !processEnded(a.p.pid) {
			return fmt.Errorf("agent %d still runs after its spawner was killed", a.p.pid)
		}
		return nil
	})

	// Restarted: the next task runs.
	poll.Until(t, 20*time.Second, func() error {
		if pid := s.spawner.Pid(); pid == 0 || pid == first {
			return fmt.Errorf("spawner pid %d (the killed one was %d)", pid, first)
		}
		return nil
	})
	if s.spawner.Restarts() != 1 {
		t.Errorf("restarts = %d, want 1", s.spawner.Restarts())
	}
	b := spawnAgent(t, context.Background(), s, "escape", 20)
	if r := b.do(call{"shell", jsonArgs("command", "echo after")}); r.isErr || !strings.Contains(r.out, "after") {
		t.Fatalf("shell after the restart: %q", r.out)
	}
	if st := b.finish(); st != "exited with status 0" {
		t.Errorf("the agent after the restart %s", st)
	}
}

// envDeathHelper makes TestExecutorDeathHelper act as an executor that
// the test below kills.
const envDeathHelper = "AGENTMESH_TEST_EXECUTOR_DEATH_HELPER"

// An executor killed with SIGKILL (no clean-up of its own) takes its
// spawner, its agent children and what they started (a daemon in its own
// session) with it.
func TestExecutorKilledTakesSpawnerAndChildren(t *testing.T) {
	forkServerService(t) // skips where strict isolation is unavailable
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^TestExecutorDeathHelper$", "-test.v")
	cmd.Env = append(os.Environ(), envDeathHelper+"=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	cmd.WaitDelay = 10 * time.Second // a survivor holding our pipes must not hang the test
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	pids := map[string]int{}
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "PIDS "); ok {
			for _, kv := range strings.Fields(rest) {
				k, v, _ := strings.Cut(kv, "=")
				pids[k], _ = strconv.Atoi(v)
			}
			break
		}
	}
	for _, k := range []string{"spawner", "agent", "daemon"} {
		if pids[k] <= 0 {
			t.Fatalf("the helper executor did not report its %s's pid (got %v)", k, pids)
		}
		if processEnded(pids[k]) {
			t.Fatalf("the %s (pid %d) is not running before the kill", k, pids[k])
		}
	}
	go func() { _, _ = bufio.NewReader(out).WriteTo(os.Stderr) }()
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	poll.Until(t, 20*time.Second, func() error {
		for k, pid := range pids {
			if !processEnded(pid) {
				return fmt.Errorf("the %s (pid %d) outlived the executor", k, pid)
			}
		}
		return nil
	})
}

// TestExecutorDeathHelper is the executor the test above kills; it runs
// only as that test's child process.
func TestExecutorDeathHelper(t *testing.T) {
	if os.Getenv(envDeathHelper) != "1" {
		t.Skip("helper of TestExecutorKilledTakesSpawnerAndChildren")
	}
	s := forkServerService(t)
	a := spawnAgent(t, context.Background(), s, "escape", 20)
	a.do(python(`
import os
r, w = os.pipe()
if os.fork() == 0:
    os.close(r)
    os.setsid()
    if os.fork() == 0:
        os.write(w, b"x")
        os.close(w)
        os.execvp("sleep", ["sleep", "1007"])
    os._exit(0)
os.close(w)
os.read(r, 1)
print("daemonised")
`, 10))
	var daemon int
	poll.Until(t, 20*time.Second, func() error {
		for _, pid := range a.p.sb.Procs() {
			b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
			if strings.HasPrefix(string(b), "sleep\x001007") {
				daemon = pid
				return nil
			}
		}
		return errors.New("no daemon yet")
	})
	fmt.Printf("PIDS spawner=%d agent=%d daemon=%d\n", s.spawner.Pid(), a.p.pid, daemon)
	select {} // until killed
}

// BenchmarkSpawn is the cost of one sandboxed agent process (start, exit,
// clean-up) with the executor's own fork (direct) and through the spawner
// (fork-server), with the executor's heap small or holding 1 GiB (a busy
// executor: a fork copies the page tables of all of it). It reports the
// executor's page tables (VmPTE) and the spawner's resident memory.
//
//	go test -run '^$' -bench BenchmarkSpawn -benchtime 40x ./services/executor/
func BenchmarkSpawn(b *testing.B) {
	for _, heap := range []int{0, 1 << 30} {
		for _, mode := range []string{SpawnerDirect, SpawnerForkServer} {
			b.Run(fmt.Sprintf("%s/heap=%dMiB", mode, heap>>20), func(b *testing.B) {
				b.Setenv("AGENTMESH_SPAWNER", mode)
				ballast := make([]byte, heap)
				for i := 0; i < len(ballast); i += 4096 {
					ballast[i] = 1
				}
				s := sandboxServiceB(b)
				if bin := os.Getenv("AGENTMESH_BENCH_CHILD"); bin != "" {
					s.cfg.ChildCommand = []string{bin} // e.g. bin/agentmesh-agent, the child a deployment runs
				}
				cpu0 := procCPU(os.Getpid(), s.spawner)
				b.ResetTimer()
				for i := 0; b.Loop(); i++ {
					p, err := s.spawn(context.Background(), "bench")
					if err != nil {
						b.Fatal(err)
					}
					if st := p.wait(true); !strings.HasPrefix(st, "exited with status") {
						b.Fatalf("the agent %s (%s)", st, p.stderr.String())
					}
					p.cleanup()
				}
				b.StopTimer()
				// The CPU of a spawn, everything counted: the children (reaped
				// by the spawner, or by this process without one), the
				// spawner and this process (the executor's side).
				b.ReportMetric(float64(procCPU(os.Getpid(), s.spawner)-cpu0)/float64(b.N)/float64(time.Millisecond), "cpu-ms/op")
				b.ReportMetric(float64(procStatus(os.Getpid(), "VmPTE")), "executor-pte-kB")
				if s.spawner != nil {
					pid := s.spawner.Pid()
					b.ReportMetric(float64(procStatus(pid, "RssAnon")), "spawner-anon-kB")
					b.ReportMetric(float64(procStatus(pid, "VmPTE")), "spawner-pte-kB")
					b.ReportMetric(float64(procStatus(pid, "Threads")), "spawner-threads")
				}
				runtime.KeepAlive(ballast)
			})
		}
	}
}

// procCPU is the CPU time of process pid, of its reaped children and of
// the spawner's (from /proc/PID/stat: utime stime cutime cstime).
func procCPU(pid int, sp *spawner.Client) time.Duration {
	read := func(pid int) time.Duration {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return 0
		}
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) < 15 {
			return 0
		}
		var ticks int64
		for _, i := range []int{11, 12, 13, 14} { // fields 14-17 of stat, after pid and comm
			n, _ := strconv.ParseInt(f[i], 10, 64)
			ticks += n
		}
		return time.Duration(ticks) * 10 * time.Millisecond // USER_HZ 100
	}
	d := read(pid)
	if sp != nil {
		d += read(sp.Pid())
	}
	return d
}

// sandboxServiceB is sandboxService for a benchmark.
func sandboxServiceB(b *testing.B) *Service {
	b.Helper()
	sb, err := sandbox.New(sandbox.Config{Level: sandbox.Strict})
	if err != nil {
		b.Skipf("strict isolation unavailable on this host: %v", err)
	}
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	s := &Service{cfg: Config{ChildCommand: []string{exe}}, sb: sb, log: testlog.New(b)}
	s.spawner = testSpawner(b, exe)
	return s
}

// procStatus reads a number (kB) field of /proc/pid/status (0 if it cannot).
func procStatus(pid int, key string) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, key+":"); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return n
		}
	}
	return 0
}
