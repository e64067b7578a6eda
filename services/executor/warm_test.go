package executor

// The warm pool (warm.go): every sandbox wall test again with the agent
// taken from the pool, one task per warm child, refill, off, shutdown and
// kill -9 of the executor.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/poll"
	"github.com/agentmesh/agentmesh/services/executor/sandbox"
)

// warmTest makes takeChild take the agent from a warm pool (TestWarmChildWalls).
var warmTest bool

// attachWarmPool gives s a warm pool of two children (closed when the
// test ends, before its spawner).
func attachWarmPool(t *testing.T, s *Service) *warmPool {
	t.Helper()
	s.cfg.Capacity = 4
	w := newWarmPool(s, 2, func() int { return 0 })
	s.mu.Lock()
	s.warm = w
	s.mu.Unlock()
	t.Cleanup(w.close)
	return w
}

// takeChild is the agent child a test's task runs in: a fresh spawn, or
// with warmTest a warm child of the pool — created now, after the test's
// own set-up — checked to be confined before it is claimed.
func takeChild(t *testing.T, ctx context.Context, s *Service, name string) *process {
	t.Helper()
	if !warmTest {
		p, err := s.spawn(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	if s.warm == nil {
		attachWarmPool(t, s)
	}
	waitWarmConfined(t, s.warm)
	hits := s.warm.hits.Load()
	p, err := s.startChildFor(ctx, &agentmeshv1.Task{Id: name})
	if err != nil {
		t.Fatal(err)
	}
	if !p.warm || s.warm.hits.Load() != hits+1 {
		p.cleanup()
		t.Fatalf("the task did not get a warm child (warm %v, hits %d → %d)", p.warm, hits, s.warm.hits.Load())
	}
	return p
}

// waitWarmConfined waits until the child take would hand out is idle and
// inside its walls — seccomp filter installed, its namespace's root mapped
// to its own host uid alone, in its task cgroups — while it has been sent
// nothing.
func waitWarmConfined(t *testing.T, w *warmPool) {
	t.Helper()
	poll.Until(t, 60*time.Second, func() error {
		w.mu.Lock()
		var p *process
		if n := len(w.idle); n > 0 {
			p = w.idle[n-1]
		}
		w.mu.Unlock()
		if p == nil {
			return errors.New("no idle warm child yet")
		}
		return confined(p)
	})
}

// confined checks an idle warm child's walls from the host's side.
func confined(p *process) error {
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.pid))
	if err != nil {
		return err
	}
	if !strings.Contains(string(status), "\nSeccomp:\t2\n") {
		return fmt.Errorf("warm child %d has no seccomp filter yet", p.pid)
	}
	if !strings.Contains(string(status), "\nNoNewPrivs:\t1\n") {
		return fmt.Errorf("warm child %d lacks no_new_privs", p.pid)
	}
	m, err := os.ReadFile(fmt.Sprintf("/proc/%d/uid_map", p.pid))
	if err != nil {
		return err
	}
	if f := strings.Fields(string(m)); len(f) != 3 || f[0] != "0" || f[1] != strconv.Itoa(p.sb.UID()) || f[2] != "1" {
		return fmt.Errorf("warm child %d uid map %q, want its own uid %d alone", p.pid, m, p.sb.UID())
	}
	cg, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", p.pid))
	if err != nil {
		return err
	}
	for _, dir := range p.sb.Cgroups() {
		if !strings.Contains(string(cg), filepath.Base(dir)) {
			return fmt.Errorf("warm child %d is not in its cgroup %s: %q", p.pid, dir, cg)
		}
	}
	return nil
}

// Every wall test of sandbox_walls_test.go and sandbox_escape_test.go, with
// the task's agent a warm child (taken from the pool, confined before its
// Start frame). Left out: TestSandboxEscapeSessionKeyring — its key is in
// one locked thread's session keyring and a warm child is forked from the
// pool's goroutine, never that thread, so it could not fail here (the
// keyring wall is the same Enter step either way).
func TestWarmChildWalls(t *testing.T) {
	for _, tc := range []struct {
		name string
		fn   func(*testing.T)
	}{
		{"EscapeWrite", TestSandboxEscapeWrite},
		{"EscapeReadSecret", TestSandboxEscapeReadSecret},
		{"EscapeProcEnviron", TestSandboxEscapeProcEnviron},
		{"EscapeNetwork", TestSandboxEscapeNetwork},
		{"EscapeMountUnsharePtrace", TestSandboxEscapeMountUnsharePtrace},
		{"ForkBomb", TestSandboxForkBomb},
		{"MemoryHog", TestSandboxMemoryHog},
		{"AgentOOM", TestSandboxAgentOOM},
		{"CPULoop", TestSandboxCPULoop},
		{"DaemonGone", TestSandboxDaemonGone},
		{"EscapeUnixSockets", TestSandboxEscapeUnixSockets},
		{"EscapeInheritedFDs", TestSandboxEscapeInheritedFDs},
		{"EscapeOtherWorkspace", TestSandboxEscapeOtherWorkspace},
		{"DiskQuota", TestSandboxDiskQuota},
		{"SocketFamilies", TestSandboxSocketFamilies},
		{"FIFO", TestSandboxFIFO},
		{"CPUShare", TestSandboxCPUShare},
		{"SessionAndDev", TestSandboxSessionAndDev},
	} {
		t.Run(tc.name, func(t *testing.T) {
			warmTest = true
			defer func() { warmTest = false }()
			tc.fn(t)
		})
	}
}

// idlePids lists the pool's idle children.
func idlePids(w *warmPool) []int {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []int
	for _, p := range w.idle {
		out = append(out, p.pid)
	}
	return out
}

// A warm child serves exactly one task: after its Final it exits, it is
// never back in the pool, the next task gets another child, and the pool
// grows back to its size.
func TestWarmChildServesOneTask(t *testing.T) {
	s := sandboxService(t, sandbox.Config{})
	warmTest = true
	defer func() { warmTest = false }()
	a := spawnAgent(t, context.Background(), s, "escape", 20)
	w := s.warm
	if r := a.do(call{"shell", jsonArgs("command", "echo one")}); r.isErr || !strings.Contains(r.out, "one") {
		t.Fatalf("shell: %q", r.out)
	}
	if st := a.finish(); st != "exited with status 0" {
		t.Fatalf("the warm child %s after its task, want exited with status 0", st)
	}
	if !processEnded(a.p.pid) {
		t.Fatalf("the warm child %d still runs after its task", a.p.pid)
	}
	// The pool refills to its size, without the used child.
	poll.Until(t, 60*time.Second, func() error {
		if ids := idlePids(w); len(ids) != 2 {
			return fmt.Errorf("%d idle warm children, want 2", len(ids))
		}
		return nil
	})
	if slices.Contains(idlePids(w), a.p.pid) {
		t.Fatalf("the used child %d is back in the pool", a.p.pid)
	}
	if st := w.stats(); st.Spawned < 3 || st.Hits != 1 {
		t.Errorf("stats %+v: want 3 spawned (2 + 1 refill) and 1 hit", st)
	}
	b := spawnAgent(t, context.Background(), s, "escape", 20)
	if b.p.pid == a.p.pid || b.p.sb.Stage() == a.p.sb.Stage() || b.p.sb.UID() == a.p.sb.UID() {
		t.Fatalf("the second task got the first one's child, sandbox or uid (pid %d, %s, uid %d)", b.p.pid, b.p.sb.Stage(), b.p.sb.UID())
	}
	if st := b.finish(); st != "exited with status 0" {
		t.Errorf("the second warm child %s", st)
	}
}

// A claimed warm child dies with its task's context (wall time,
// cancellation), as a child spawned under it does.
func TestWarmChildKilledWithItsTask(t *testing.T) {
	s := sandboxService(t, sandbox.Config{})
	w := attachWarmPool(t, s)
	waitWarmConfined(t, w)
	ctx, cancel := context.WithCancel(context.Background())
	p, err := s.startChildFor(ctx, &agentmeshv1.Task{Id: "killed"})
	if err != nil {
		t.Fatal(err)
	}
	defer p.cleanup()
	if !p.warm {
		t.Fatal("not a warm child")
	}
	cancel()
	done := make(chan struct{})
	go func() { _, _ = p.h.wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second): // a hang detector
		t.Fatal("the warm child outlived its task's context")
	}
}

// With the pool off every task spawns its own child.
func TestWarmPoolOff(t *testing.T) {
	s := sandboxService(t, sandbox.Config{})
	s.cfg.Capacity, s.cfg.WarmPool = 4, -1
	if n := warmSize(s.cfg); n != 0 {
		t.Fatalf("warmSize = %d with the pool off", n)
	}
	a := spawnAgent(t, context.Background(), s, "escape", 20)
	if a.p.warm {
		t.Fatal("a warm child with the pool off")
	}
	if st := a.finish(); st != "exited with status 0" {
		t.Errorf("the child %s", st)
	}
}

// Idle warm children and running tasks together stay within Capacity.
func TestWarmPoolWithinCapacity(t *testing.T) {
	s := sandboxService(t, sandbox.Config{})
	s.cfg.Capacity = 3
	running := 2
	w := newWarmPool(s, 3, func() int { return running })
	t.Cleanup(w.close)
	poll.Until(t, 60*time.Second, func() error {
		if n := len(idlePids(w)); n != 1 {
			return fmt.Errorf("%d idle, want 1", n)
		}
		return nil
	})
	w.mu.Lock()
	starting := w.starting
	w.mu.Unlock()
	if starting != 0 || w.reserve() {
		t.Fatalf("the pool would grow past the capacity (starting %d)", starting)
	}
}

// Closing the pool (what Run does at shutdown) kills every idle warm
// child and removes its cgroups and staging directory.
func TestWarmPoolCloseLeavesNothing(t *testing.T) {
	s := sandboxService(t, sandbox.Config{})
	w := attachWarmPool(t, s)
	poll.Until(t, 60*time.Second, func() error {
		if n := len(idlePids(w)); n != 2 {
			return fmt.Errorf("%d idle, want 2", n)
		}
		return nil
	})
	w.mu.Lock()
	idle := slices.Clone(w.idle)
	w.mu.Unlock()
	var paths []string
	for _, p := range idle {
		paths = append(append(paths, p.sb.Stage()), p.sb.Cgroups()...)
	}
	for _, p := range paths {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("%s before close: %v", p, err)
		}
	}
	w.close()
	for _, p := range idle {
		if !processEnded(p.pid) {
			t.Errorf("warm child %d outlived the pool", p.pid)
		}
	}
	for _, p := range paths {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("%s survived the pool's close", p)
		}
	}
	if n := len(idlePids(w)); n != 0 || w.reserve() {
		t.Errorf("a closed pool holds %d children or would spawn", n)
	}
}

const envWarmDeathHelper = "AGENTMESH_TEST_WARM_DEATH_HELPER"

// kill -9 of an executor with a full warm pool: its warm children die with
// it, and what stays on the host (their staging directories and cgroups)
// is removed by the next executor's sweep.
func TestWarmPoolExecutorKilledSwept(t *testing.T) {
	sandboxService(t, sandbox.Config{}) // skips (or fails in CI) without strict isolation
	root := t.TempDir()
	for _, d := range []string{root, filepath.Dir(root)} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^TestWarmDeathHelper$", "-test.v")
	cmd.Env = append(os.Environ(), envWarmDeathHelper+"="+root)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	cmd.WaitDelay = 10 * time.Second
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	var pids []int
	var paths []string
	sc := bufio.NewScanner(out)
	for len(pids) < 2 && sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "WARM ")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		pid, _ := strconv.Atoi(f[0])
		pids = append(pids, pid)
		paths = append(paths, f[1:]...)
	}
	if len(pids) != 2 || len(paths) < 4 {
		t.Fatalf("the helper reported warm children %v, paths %v", pids, paths)
	}
	go func() { _, _ = bufio.NewReader(out).WriteTo(os.Stderr) }()
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	poll.Until(t, 20*time.Second, func() error {
		for _, pid := range pids {
			if !processEnded(pid) {
				return fmt.Errorf("warm child %d outlived the executor", pid)
			}
		}
		return nil
	})
	for _, p := range paths {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("expected a leftover %s before the sweep: %v", p, err)
		}
	}
	if _, err := sandbox.New(sandbox.Config{Level: sandbox.Strict, Node: "warmsweep", WorkspaceRoot: root}); err != nil {
		t.Fatal(err)
	}
	for _, p := range paths {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("%s survived the next executor's sweep", p)
		}
	}
}

// TestWarmDeathHelper is the executor the test above kills.
func TestWarmDeathHelper(t *testing.T) {
	root := os.Getenv(envWarmDeathHelper)
	if root == "" {
		t.Skip("helper of TestWarmPoolExecutorKilledSwept")
	}
	s := sandboxService(t, sandbox.Config{Node: "warmsweep", WorkspaceRoot: root})
	w := attachWarmPool(t, s)
	poll.Until(t, 60*time.Second, func() error {
		if n := len(idlePids(w)); n != 2 {
			return fmt.Errorf("%d idle, want 2", n)
		}
		return nil
	})
	w.mu.Lock()
	for _, p := range w.idle {
		fmt.Printf("WARM %d %s %s\n", p.pid, p.sb.Stage(), strings.Join(p.sb.Cgroups(), " "))
	}
	w.mu.Unlock()
	select {} // until killed
}

// cpuWeight reads the weight of the task cgroup of p (cpu.shares, or
// cgroup v2's cpu.weight).
func cpuWeight(t *testing.T, p *process) string {
	t.Helper()
	for _, dir := range p.sb.Cgroups() {
		for _, f := range []string{"cpu.shares", "cpu.weight"} {
			if b, err := os.ReadFile(filepath.Join(dir, f)); err == nil {
				return f + "=" + strings.TrimSpace(string(b))
			}
		}
	}
	t.Fatalf("no cpu weight file in the cgroups %v", p.sb.Cgroups())
	return ""
}

// Warm children wait in the background (the lowest CPU weight: a child
// starting for a later task does not take the CPU from one running a task
// now), a claimed one runs at the default weight, as a spawned one, and
// goes back to the background for its exit.
func TestWarmChildInTheBackgroundUntilClaimed(t *testing.T) {
	s := sandboxService(t, sandbox.Config{})
	w := attachWarmPool(t, s)
	waitWarmConfined(t, w)
	w.mu.Lock()
	idle := slices.Clone(w.idle)
	w.mu.Unlock()
	for _, p := range idle {
		if got := cpuWeight(t, p); got != "cpu.shares=2" && got != "cpu.weight=1" {
			t.Errorf("idle warm child %d: %s, want the background weight (cpu.shares=2 or cpu.weight=1)", p.pid, got)
		}
	}
	p, err := s.startChildFor(context.Background(), &agentmeshv1.Task{Id: "claimed"})
	if err != nil {
		t.Fatal(err)
	}
	defer p.cleanup()
	if !p.warm {
		t.Fatal("not a warm child")
	}
	if got := cpuWeight(t, p); got != "cpu.shares=1024" && got != "cpu.weight=100" {
		t.Errorf("claimed warm child %d: %s, want the default weight (cpu.shares=1024 or cpu.weight=100)", p.pid, got)
	}
	// Its task's answer recorded, the child exits in the background
	// (the attempt's teardown, attempt.end).
	p.background()
	if got := cpuWeight(t, p); got != "cpu.shares=2" && got != "cpu.weight=1" {
		t.Errorf("child %d after its answer: %s, want the background weight", p.pid, got)
	}
}
