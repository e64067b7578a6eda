package sandbox_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/pkg/poll"
	"github.com/agentmesh/agentmesh/services/executor/sandbox"
)

const (
	envPoolExecutor = "SANDBOX_TEST_POOL_EXECUTOR"
	poolSweepNode   = "poolsweeptest"
)

// runToEnd runs a task's child in mode until it exits.
func runToEnd(t *testing.T, task *sandbox.Task, mode string) {
	t.Helper()
	cmd, r := start(t, task, mode)
	_, _ = io.ReadAll(r)
	_ = cmd.Wait()
}

// A pooled cgroup set is handed to one task at a time: a set is pooled
// only once its task is cleaned up, so a task prepared while another
// lives never gets that one's cgroups; the next task prepared after it
// gets them (and the uid they were given to), and the pool is then empty.
// The set's name, which its tasks see, does not carry the first task's id.
func TestCgroupPoolOneTaskAtATime(t *testing.T) {
	sb := strict(t, sandbox.Config{CgroupPool: 2})
	defer sb.Close()
	const firstID = "tenant-one-task"
	a, err := sb.Prepare(firstID)
	if err != nil {
		t.Fatal(err)
	}
	runToEnd(t, a, "ready")
	dirsA, uidA, stageA := a.Cgroups(), a.UID(), a.Stage()
	b, err := sb.Prepare("b") // a has ended but is not cleaned up: its set is still a's
	if err != nil {
		t.Fatal(err)
	}
	defer b.Cleanup()
	for _, d := range b.Cgroups() {
		if slices.Contains(dirsA, d) {
			t.Fatalf("task b got %s, a cgroup of task a, which has not been cleaned up", d)
		}
	}
	a.Cleanup()
	if n := sb.Pooled(); n != 1 {
		t.Fatalf("after a's Cleanup the pool holds %d sets, want 1", n)
	}
	for _, d := range dirsA {
		if _, err := os.Stat(d); err != nil {
			t.Fatalf("a pooled cgroup %s is gone: %v", d, err)
		}
	}
	c, err := sb.Prepare("c")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Cleanup()
	if !slices.Equal(c.Cgroups(), dirsA) || c.UID() != uidA || c.Stage() != stageA {
		t.Fatalf("task c got cgroups %v uid %d stage %s, want the pooled %v uid %d stage %s",
			c.Cgroups(), c.UID(), c.Stage(), dirsA, uidA, stageA)
	}
	if b.Stage() == stageA || b.UID() == uidA && os.Geteuid() == 0 {
		t.Errorf("task b, prepared while a lived, got a's stage %s or uid %d", b.Stage(), b.UID())
	}
	if n := sb.Pooled(); n != 0 {
		t.Fatalf("after c took the set the pool holds %d, want 0", n)
	}
	for _, d := range c.Cgroups() {
		if strings.Contains(d, firstID) {
			t.Errorf("task c's cgroup %s names the task that held it before", d)
		}
	}
	d, err := sb.Prepare("d") // c holds the set: d gets new cgroups
	if err != nil {
		t.Fatal(err)
	}
	defer d.Cleanup()
	for _, dir := range d.Cgroups() {
		if slices.Contains(dirsA, dir) {
			t.Fatalf("task d got %s, which task c holds", dir)
		}
	}
	if d.Stage() == stageA {
		t.Fatalf("task d got the stage %s, which task c holds", stageA)
	}
	// c's child runs in the set it was handed.
	cmd, r := start(t, c, "sleep")
	if line, _ := r.ReadString('\n'); line != "ready\n" {
		t.Fatalf("child said %q", line)
	}
	procs := c.Procs()
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if len(procs) != 1 || procs[0] != cmd.Process.Pid {
		t.Errorf("task c's cgroups held %v, want its child %d", procs, cmd.Process.Pid)
	}
}

// A set handed again carries the new task's limits and weight: the
// background weight an earlier task was given (SetBackground, as the warm
// pool does) is undone, the memory limit is the configured one, the
// tools' cgroup.procs belongs to the new task's uid, and the CPU-throttle
// count starts at zero.
func TestCgroupPoolResetsTheSet(t *testing.T) {
	const mem = 200 << 20
	sb := strict(t, sandbox.Config{CgroupPool: 1, Memory: mem})
	defer sb.Close()
	a, err := sb.Prepare("a")
	if err != nil {
		t.Fatal(err)
	}
	if err := a.SetBackground(true); err != nil {
		t.Fatal(err)
	}
	runToEnd(t, a, "ready")
	dirs := a.Cgroups()
	a.Cleanup()
	b, err := sb.Prepare("b")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Cleanup()
	if !slices.Equal(b.Cgroups(), dirs) {
		t.Fatalf("task b got %v, not the pooled %v", b.Cgroups(), dirs)
	}
	read := func(dir, name string) (string, bool) {
		v, err := os.ReadFile(filepath.Join(dir, name))
		return strings.TrimSpace(string(v)), err == nil
	}
	var sawWeight, sawMem bool
	for _, dir := range dirs {
		if v, ok := read(dir, "cpu.shares"); ok {
			sawWeight = true
			if v != strconv.Itoa(sandbox.DefaultCPUShares) {
				t.Errorf("%s cpu.shares = %s, want the foreground %d", dir, v, sandbox.DefaultCPUShares)
			}
		}
		if v, ok := read(dir, "cpu.weight"); ok {
			sawWeight = true
			if v != "100" {
				t.Errorf("%s cpu.weight = %s, want the foreground 100", dir, v)
			}
		}
		for _, name := range []string{"memory.limit_in_bytes", "memory.max"} {
			if v, ok := read(dir, name); ok {
				sawMem = true
				if v != strconv.Itoa(mem) {
					t.Errorf("%s %s = %s, want %d", dir, name, v, mem)
				}
			}
		}
		if v, ok := read(dir, "cpu.cfs_quota_us"); ok && v != "50000" {
			t.Errorf("%s cpu.cfs_quota_us = %s, want the default 50000 (0.5 cores)", dir, v)
		}
		if os.Geteuid() == 0 {
			if fi, err := os.Stat(filepath.Join(dir, "tools", "cgroup.procs")); err == nil {
				if uid := fi.Sys().(*syscall.Stat_t).Uid; int(uid) != b.UID() {
					t.Errorf("%s/tools/cgroup.procs belongs to uid %d, want task b's %d", dir, uid, b.UID())
				}
			}
		}
	}
	if fi, err := os.Stat(b.Stage()); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("task b's stage %s: %v, want mode 0700", b.Stage(), err)
	} else if os.Geteuid() == 0 && int(fi.Sys().(*syscall.Stat_t).Uid) != b.UID() {
		t.Errorf("task b's stage belongs to uid %d, want %d", fi.Sys().(*syscall.Stat_t).Uid, b.UID())
	}
	if !sawWeight || !sawMem {
		t.Fatalf("no CPU weight (%v) or memory limit (%v) in %v", sawWeight, sawMem, dirs)
	}
	if n := b.CPUThrottled(); n != 0 {
		t.Errorf("task b starts with %d throttled periods, want 0", n)
	}
}

// A set that is not as new is never pooled but removed with its staging
// directory, as without a pool: one whose child still runs at Cleanup
// (killed first), one whose agent was OOM-killed.
func TestCgroupPoolSkipsSpentSets(t *testing.T) {
	sb := strict(t, sandbox.Config{CgroupPool: 4, Memory: 32 << 20})
	defer sb.Close()
	gone := func(what string, dirs []string) {
		t.Helper()
		if n := sb.Pooled(); n != 0 {
			t.Errorf("%s: the pool holds %d sets, want 0", what, n)
		}
		for _, d := range dirs {
			if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("%s: %s left after Cleanup (stat: %v)", what, d, err)
			}
		}
	}
	running, err := sb.Prepare("running")
	if err != nil {
		t.Fatal(err)
	}
	cmd, r := start(t, running, "sleep")
	if line, _ := r.ReadString('\n'); line != "ready\n" {
		t.Fatalf("child said %q", line)
	}
	dirs := append(running.Cgroups(), running.Stage())
	running.Cleanup()
	_ = cmd.Wait()
	gone("a running child", dirs)

	hog, err := sb.Prepare("hog")
	if err != nil {
		t.Fatal(err)
	}
	runToEnd(t, hog, "hog")
	if !hog.OOMKilled() {
		t.Fatal("the hog was not OOM-killed at 32 MiB")
	}
	dirs = append(hog.Cgroups(), hog.Stage())
	hog.Cleanup()
	gone("an OOM-killed agent", dirs)
	if !hog.OOMKilled() {
		t.Error("after Cleanup the task no longer reports its OOM kill")
	}
}

// poolExecutorHelper plays an executor that dies with a set in its pool:
// one task runs to its end and is cleaned up, and the helper prints the
// pooled set's cgroups and staging directory and waits to be killed.
func poolExecutorHelper(root string) int {
	sb, err := sandbox.New(sandbox.Config{Level: sandbox.Strict, Node: poolSweepNode, WorkspaceRoot: root, CgroupPool: 2})
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	task, err := sb.Prepare("pooled")
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	dirs := append(task.Cgroups(), task.Stage())
	task.Cleanup()
	if sb.Pooled() != 1 {
		fmt.Println("error: the set was not pooled")
		return 1
	}
	fmt.Printf("pooled %s\n", strings.Join(dirs, ","))
	time.Sleep(time.Hour)
	return 0
}

// The pool of an executor that died (its cgroup sets and their staging
// directories) is swept with the rest of its instance by the next
// executor of the node.
func TestCgroupPoolSweptAfterExecutorDied(t *testing.T) {
	strict(t, sandbox.Config{}).Close() // skips (or fails in CI) without strict isolation
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
	helper := exec.Command(exe)
	helper.Env = append(os.Environ(), envPoolExecutor+"="+root)
	out, err := helper.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := helper.Start(); err != nil {
		t.Fatal(err)
	}
	defer helper.Process.Kill()
	line, _ := bufio.NewReader(out).ReadString('\n')
	dirs, ok := strings.CutPrefix(strings.TrimSpace(line), "pooled ")
	if !ok || dirs == "" {
		t.Fatalf("helper said %q", line)
	}
	_ = helper.Process.Kill()
	_ = helper.Wait()
	for _, d := range strings.Split(dirs, ",") {
		if _, err := os.Stat(d); err != nil {
			t.Fatalf("expected the pooled %s before the sweep: %v", d, err)
		}
	}
	sb, err := sandbox.New(sandbox.Config{Level: sandbox.Strict, Node: poolSweepNode, WorkspaceRoot: root})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	poll.Until(t, 10*time.Second, func() error { // the sweep is done by New; this is a hang detector
		for _, d := range strings.Split(dirs, ",") {
			if _, err := os.Stat(d); err == nil {
				return fmt.Errorf("the dead executor's pooled %s survived the sweep", d)
			}
		}
		return nil
	})
}
