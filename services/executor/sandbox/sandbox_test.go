package sandbox_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/pkg/poll"
	"github.com/agentmesh/agentmesh/services/executor/sandbox"
	"golang.org/x/sys/unix"
)

const (
	envMode     = "SANDBOX_TEST_MODE"
	envExecutor = "SANDBOX_TEST_EXECUTOR"
	sweepNode   = "sweeptest"
)

// executorHelper plays an executor that dies with a task running: it
// starts one sandboxed child (mode sleep), prints where the task lives and
// waits to be killed.
func executorHelper(root string) int {
	sb, err := sandbox.New(sandbox.Config{Level: sandbox.Strict, Node: sweepNode, WorkspaceRoot: root})
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	task, err := sb.Prepare("sweep")
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	exe, _ := os.Executable()
	cmd, err := task.Command(context.Background(), []string{exe}, []string{envMode + "=sleep"})
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	out, _ := cmd.StdoutPipe()
	if err := task.Start(cmd); err != nil {
		fmt.Println("error", err)
		return 1
	}
	line, _ := bufio.NewReader(out).ReadString('\n')
	if strings.TrimSpace(line) != "ready" {
		fmt.Println("error: child said", line)
		return 1
	}
	fmt.Printf("task %d %s %s\n", cmd.Process.Pid, task.Stage(), strings.Join(task.Cgroups(), ","))
	time.Sleep(time.Hour)
	return 0
}

// TestMain lets the test binary be a sandboxed child: with the sandbox
// parameters set it confines itself (as child.Main does) and runs a mode.
func TestMain(m *testing.M) {
	if root, ok := os.LookupEnv(envExecutor); ok {
		os.Exit(executorHelper(root))
	}
	if root, ok := os.LookupEnv(envPoolExecutor); ok {
		os.Exit(poolExecutorHelper(root))
	}
	if mode, ok := os.LookupEnv(envMode); ok {
		sandbox.EnterOrExit()
		os.Exit(childMode(mode))
	}
	os.Exit(m.Run())
}

func childMode(mode string) int {
	switch mode {
	case "ready":
		fmt.Println("ready")
		return 0
	case "hog":
		fmt.Println("ready")
		b := make([]byte, 1<<30)
		for i := 0; i < len(b); i += 4096 {
			b[i] = 1
		}
		fmt.Println("allocated", len(b))
		return 0
	case "sleep":
		fmt.Println("ready")
		time.Sleep(time.Hour)
		return 0
	case "orphan":
		// A shell leaves a background sleep behind: it becomes this
		// process's (the sandbox's PID 1) orphan, and must be reaped
		// once it ends, by the sandbox's reaper alone.
		// The shell itself is started as the sandbox's programs are
		// (StartCmd), so the reaper leaves it to this Wait.
		sh := exec.Command("sh", "-c", "sleep 0.2 & exit 0")
		if err := sandbox.StartCmd(sh); err != nil {
			fmt.Println("sh:", err)
			return 1
		}
		err := sh.Wait()
		sandbox.Forget(sh)
		if err != nil {
			fmt.Println("sh:", err)
			return 1
		}
		fmt.Println("ready")
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			others := 0
			ents, _ := os.ReadDir("/proc")
			for _, e := range ents {
				if pid, err := strconv.Atoi(e.Name()); err == nil && pid != os.Getpid() {
					others++
				}
			}
			if others == 0 {
				fmt.Println("reaped")
				return 0
			}
			time.Sleep(20 * time.Millisecond)
		}
		fmt.Println("orphan left")
		return 1
	case "etc":
		// What a task sees of /etc (TestSandboxEtc).
		b, err := os.ReadFile("/etc/passwd")
		fmt.Printf("passwd: %q %v\n", strings.SplitN(string(b), "\n", 2)[0], err)
		if name := os.Getenv("ETC_FILE"); name != "" {
			b, err = os.ReadFile(name)
			fmt.Printf("%s: %q %v\n", name, strings.TrimSpace(string(b)), err)
		}
		_, err = os.Stat("/etc/ssl/certs/ca-certificates.crt")
		fmt.Printf("ca bundle: %v\n", err)
		_, err = os.ReadDir("/etc/ssl/private")
		fmt.Printf("ssl private readable: %v\n", err == nil)
		fmt.Printf("write passwd: %v\n", os.WriteFile("/etc/passwd", []byte("x"), 0o644) == nil)
		fmt.Printf("create in etc: %v\n", os.WriteFile("/etc/agentmesh-new", []byte("x"), 0o644) == nil)
		var sfs syscall.Statfs_t
		err = syscall.Statfs("/etc", &sfs)
		fmt.Printf("etc read-only mount: %v %v\n", sfs.Flags&unix.ST_RDONLY != 0, err)
		fmt.Println("ready")
		return 0
	case "check":
		c := sandbox.Current()
		if c == nil {
			fmt.Println("not confined")
			return 1
		}
		report := func(name string, err error) {
			if err != nil {
				fmt.Printf("%s: denied: %v\n", name, err)
			} else {
				fmt.Printf("%s: ALLOWED\n", name)
			}
		}
		fmt.Printf("pid: %d\n", os.Getpid())
		host, _ := os.Hostname()
		fmt.Printf("hostname: %s\n", host)
		report("write workspace", os.WriteFile(filepath.Join(c.Workspace, "f"), []byte("x"), 0o600))
		report("write outside", os.WriteFile(os.Getenv("OUTSIDE"), []byte("x"), 0o600))
		_, err := os.ReadFile(os.Getenv("SECRET"))
		report("read secret", err)
		_, err = os.ReadFile("/usr/bin/env")
		report("read system", err)
		ents, _ := os.ReadDir("/proc")
		n := 0
		for _, e := range ents {
			if e.Name()[0] >= '0' && e.Name()[0] <= '9' {
				n++
			}
		}
		fmt.Printf("processes: %d\n", n)
		st, _ := os.ReadFile("/proc/self/status")
		for _, l := range strings.Split(string(st), "\n") {
			if strings.HasPrefix(l, "CapInh:") || strings.HasPrefix(l, "CapAmb:") || strings.HasPrefix(l, "NoNewPrivs:") {
				fmt.Println(strings.Join(strings.Fields(l), " "))
			}
		}
		// Every thread, not only the main one: the walls are set on each.
		threads, _ := os.ReadDir("/proc/self/task")
		var noNNP, amb, noSeccomp int
		for _, th := range threads {
			st, _ := os.ReadFile("/proc/self/task/" + th.Name() + "/status")
			for _, l := range strings.Split(string(st), "\n") {
				f := strings.Fields(l)
				switch {
				case len(f) != 2:
				case f[0] == "NoNewPrivs:" && f[1] != "1":
					noNNP++
				case f[0] == "CapAmb:" && strings.Trim(f[1], "0") != "":
					amb++
				case f[0] == "Seccomp:" && f[1] != "2":
					noSeccomp++
				}
			}
		}
		fmt.Printf("several threads: %v\n", len(threads) > 1)
		fmt.Printf("threads without no_new_privs: %d, with ambient capabilities: %d, without seccomp: %d\n", noNNP, amb, noSeccomp)
		out, err := exec.Command("sh", "-c", "grep -E '^(CapEff|CapPrm)' /proc/self/status | tr -s '\t ' ' '").CombinedOutput()
		fmt.Print(string(out))
		report("exec sh", err)
		return 0
	}
	fmt.Println("unknown mode", mode)
	return 2
}

// strict returns a strict sandbox, or skips (fails under CI=true) when the
// host cannot have one.
func strict(t testing.TB, cfg sandbox.Config) *sandbox.Sandbox {
	t.Helper()
	cfg.Level = sandbox.Strict
	sb, err := sandbox.New(cfg)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("strict isolation is required in CI: %v", err)
		}
		t.Skipf("strict isolation unavailable here: %v", err)
	}
	return sb
}

// start runs this test binary as a sandboxed child in mode and waits for
// its "ready" line.
func start(t testing.TB, task *sandbox.Task, mode string, env ...string) (*exec.Cmd, *bufio.Reader) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd, err := task.Command(context.Background(), []string{exe}, append([]string{envMode + "=" + mode}, env...))
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := task.Start(cmd); err != nil {
		t.Fatal(err)
	}
	return cmd, bufio.NewReader(out)
}

func TestStrictProbe(t *testing.T) {
	sb := strict(t, sandbox.Config{})
	t.Log(sb)
	if !strings.Contains(sb.String(), "landlock ABI") {
		t.Errorf("report %q does not name landlock", sb)
	}
}

func TestConfinedChild(t *testing.T) {
	sb := strict(t, sandbox.Config{})
	task, err := sb.Prepare("check")
	if err != nil {
		t.Fatal(err)
	}
	defer task.Cleanup()
	secretDir := t.TempDir()
	secret := filepath.Join(secretDir, "secret")
	if err := os.WriteFile(secret, []byte("s3cret"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(secretDir, 0o755); err != nil {
		t.Fatal(err)
	}
	outside := filepath.Join(filepath.Dir(task.Workspace()), "agentmesh-outside-"+filepath.Base(task.Workspace()))
	defer os.Remove(outside)
	cmd, r := start(t, task, "check", "OUTSIDE="+outside, "SECRET="+secret)
	var lines []string
	for {
		l, err := r.ReadString('\n')
		if l != "" {
			lines = append(lines, strings.TrimSpace(l))
		}
		if err != nil {
			break
		}
	}
	_ = cmd.Wait()
	out := strings.Join(lines, "\n")
	t.Log(out)
	for _, want := range []string{
		"pid: 1", "hostname: sandbox", "write workspace: ALLOWED", "write outside: denied", "read secret: denied",
		"read system: ALLOWED", "processes: 1", "CapInh: 0000000000000000", "CapAmb: 0000000000000000", "NoNewPrivs: 1",
		"CapPrm: 0000000000000000", "CapEff: 0000000000000000", "exec sh: ALLOWED",
		"several threads: true", "threads without no_new_privs: 0, with ambient capabilities: 0, without seccomp: 0",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q", want)
		}
	}
	if _, err := os.Stat(outside); err == nil {
		t.Errorf("the child wrote %s outside its workspace", outside)
	}
	// The workspace is a tmpfs of the task's own mount namespace: the
	// host's staging directory stays empty.
	if ents, err := os.ReadDir(task.Stage()); err != nil || len(ents) != 0 {
		t.Errorf("staging directory %s on the host: %v entries, %v", task.Stage(), len(ents), err)
	}
	if st, err := os.Stat(task.Stage()); err != nil {
		t.Error(err)
	} else if uid := st.Sys().(*syscall.Stat_t).Uid; os.Geteuid() == 0 && int(uid) != task.UID() {
		t.Errorf("staging directory owned by host uid %d, want the task's %d", uid, task.UID())
	} else if st.Mode().Perm() != 0o700 {
		t.Errorf("staging directory mode %v, want 0700", st.Mode().Perm())
	}
	if os.Geteuid() == 0 && (task.UID() < sandbox.DefaultUIDs.First || task.UID() >= sandbox.DefaultUIDs.First+sandbox.DefaultUIDs.Count) {
		t.Errorf("task uid %d outside the default range %s", task.UID(), sandbox.DefaultUIDs)
	}
}

func TestAgentOOMKilled(t *testing.T) {
	sb := strict(t, sandbox.Config{Memory: 64 << 20, ToolMemory: 32 << 20})
	task, err := sb.Prepare("hog")
	if err != nil {
		t.Fatal(err)
	}
	defer task.Cleanup()
	cmd, r := start(t, task, "hog")
	if l, _ := r.ReadString('\n'); strings.TrimSpace(l) != "ready" {
		t.Fatalf("child said %q", l)
	}
	rest, _ := r.ReadString('\n')
	err = cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("hog ended with %v (%q), want SIGKILL", err, rest)
	}
	if !task.OOMKilled() {
		t.Fatal("OOMKilled() = false after the hog was killed")
	}
	task.Cleanup()
	if !task.OOMKilled() {
		t.Fatal("OOMKilled() = false after Cleanup")
	}
	if me := task.MemoryError(); !errors.Is(me, sandbox.ErrResourceExhausted) || !strings.Contains(me.Error(), "64 MiB") {
		t.Errorf("MemoryError() = %v", me)
	}
}

func TestNotOOMKilled(t *testing.T) {
	sb := strict(t, sandbox.Config{})
	task, err := sb.Prepare("ok")
	if err != nil {
		t.Fatal(err)
	}
	defer task.Cleanup()
	cmd, r := start(t, task, "ready")
	_, _ = r.ReadString('\n')
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	if task.OOMKilled() {
		t.Fatal("OOMKilled() = true for a child that exited normally")
	}
}

func TestKillTakesTheTree(t *testing.T) {
	sb := strict(t, sandbox.Config{})
	task, err := sb.Prepare("sleep")
	if err != nil {
		t.Fatal(err)
	}
	defer task.Cleanup()
	cmd, r := start(t, task, "sleep")
	_, _ = r.ReadString('\n')
	if n := len(task.Procs()); n != 1 {
		t.Fatalf("%d processes in the task's cgroup, want 1", n)
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if p := task.Procs(); len(p) != 0 {
		t.Fatalf("processes left after the kill: %v", p)
	}
	ws := task.Workspace()
	task.Cleanup()
	if _, err := os.Stat(ws); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("workspace left behind: %v", err)
	}
}

// TestCleanupRemovesCgroups: after the child has exited, Cleanup removes
// every cgroup of the task (the fast path: nothing left to kill); with the
// child still running, it kills it first and still removes them all.
func TestCleanupRemovesCgroups(t *testing.T) {
	sb := strict(t, sandbox.Config{})
	gone := func(t *testing.T, dirs []string) {
		t.Helper()
		if len(dirs) == 0 {
			t.Fatal("the task has no cgroups")
		}
		for _, d := range dirs {
			if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("cgroup %s left after Cleanup (stat: %v)", d, err)
			}
		}
	}
	t.Run("exited", func(t *testing.T) {
		task, err := sb.Prepare("exited")
		if err != nil {
			t.Fatal(err)
		}
		defer task.Cleanup()
		cmd, r := start(t, task, "ready")
		_, _ = io.ReadAll(r)
		if err := cmd.Wait(); err != nil {
			t.Fatal(err)
		}
		dirs := task.Cgroups()
		task.Cleanup()
		gone(t, dirs)
	})
	t.Run("running", func(t *testing.T) {
		task, err := sb.Prepare("running")
		if err != nil {
			t.Fatal(err)
		}
		defer task.Cleanup()
		cmd, r := start(t, task, "sleep")
		if line, _ := r.ReadString('\n'); line != "ready\n" {
			t.Fatalf("child said %q", line)
		}
		dirs := task.Cgroups()
		task.Cleanup()
		waited := make(chan error, 1)
		go func() { waited <- cmd.Wait() }()
		select {
		case err := <-waited:
			if err == nil {
				t.Error("the running child exited cleanly: want it killed by Cleanup")
			}
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			t.Fatal("the running child outlived Cleanup")
		}
		gone(t, dirs)
	})
}

// TestTaskCgroupLimits: a task's cgroups carry the configured limits —
// memory (and swap, when the kernel accounts it: no swap beyond the
// limit) and the CPU quota over the 100 ms period.
func TestTaskCgroupLimits(t *testing.T) {
	const mem = 200 << 20
	sb := strict(t, sandbox.Config{Memory: mem, CPU: 0.5})
	task, err := sb.Prepare("limits")
	if err != nil {
		t.Fatal(err)
	}
	defer task.Cleanup()
	read := func(dir, name string) (string, bool) {
		b, err := os.ReadFile(filepath.Join(dir, name))
		return strings.TrimSpace(string(b)), err == nil
	}
	var sawMem, sawCPU bool
	for _, dir := range task.Cgroups() {
		if v, ok := read(dir, "memory.limit_in_bytes"); ok { // v1
			sawMem = true
			if v != strconv.Itoa(mem) {
				t.Errorf("memory.limit_in_bytes = %s, want %d", v, mem)
			}
			if sw, ok := read(dir, "memory.memsw.limit_in_bytes"); ok && sw != strconv.Itoa(mem) {
				t.Errorf("memory.memsw.limit_in_bytes = %s, want %d (no swap beyond the limit)", sw, mem)
			}
		}
		if v, ok := read(dir, "memory.max"); ok { // v2
			sawMem = true
			if v != strconv.Itoa(mem) {
				t.Errorf("memory.max = %s, want %d", v, mem)
			}
			if sw, ok := read(dir, "memory.swap.max"); ok && sw != "0" {
				t.Errorf("memory.swap.max = %s, want 0", sw)
			}
		}
		if q, ok := read(dir, "cpu.cfs_quota_us"); ok { // v1
			sawCPU = true
			p, _ := read(dir, "cpu.cfs_period_us")
			if q != "50000" || p != "100000" {
				t.Errorf("cpu quota/period = %s/%s µs, want 50000/100000", q, p)
			}
		}
		if v, ok := read(dir, "cpu.max"); ok { // v2
			sawCPU = true
			if v != "50000 100000" {
				t.Errorf("cpu.max = %q, want \"50000 100000\"", v)
			}
		}
	}
	if !sawMem || !sawCPU {
		t.Fatalf("no memory (%v) or CPU (%v) limit found in %v", sawMem, sawCPU, task.Cgroups())
	}
}

// TestSandboxEtc: a task's /etc has the generated user list, the host's
// public files (the CA bundle, a release or protocols file), nothing private, and cannot
// be written — with the executor's snapshot (as root, here) as with the
// per-entry binds.
func TestSandboxEtc(t *testing.T) {
	// A world-readable host file among the entries the sandbox gets, to
	// compare: the first this host has.
	var etcFile, content string
	for _, name := range []string{"/etc/debian_version", "/etc/protocols", "/etc/services", "/etc/nsswitch.conf"} {
		if st, err := os.Lstat(name); err == nil && st.Mode().IsRegular() && st.Mode().Perm()&0o004 != 0 {
			b, err := os.ReadFile(name)
			if err == nil {
				etcFile, content = name, strings.TrimSpace(string(b))
				break
			}
		}
	}
	sb := strict(t, sandbox.Config{})
	task, err := sb.Prepare("etc")
	if err != nil {
		t.Fatal(err)
	}
	defer task.Cleanup()
	cmd, r := start(t, task, "etc", "ETC_FILE="+etcFile)
	out, _ := io.ReadAll(r)
	_ = cmd.Wait()
	got := string(out)
	t.Log(got)
	want := []string{
		`passwd: "root:x:0:0:sandbox:/workspace:/bin/sh" <nil>`,
		"ssl private readable: false",
		"write passwd: false",
		"create in etc: false",
		"etc read-only mount: true <nil>",
		"ready",
	}
	if etcFile != "" {
		want = append(want, fmt.Sprintf("%s: %q <nil>", etcFile, content))
	}
	if _, err := os.Stat("/etc/ssl/certs/ca-certificates.crt"); err == nil {
		want = append(want, "ca bundle: <nil>")
	}
	for _, w := range want {
		if !strings.Contains(got, w+"\n") {
			t.Errorf("missing %q", w)
		}
	}
}

// TestOrphanReaped: a process a tool leaves behind is reaped by the
// sandbox's PID 1 when it ends (no zombie counts against the pids limit).
func TestOrphanReaped(t *testing.T) {
	sb := strict(t, sandbox.Config{})
	task, err := sb.Prepare("orphan")
	if err != nil {
		t.Fatal(err)
	}
	defer task.Cleanup()
	cmd, r := start(t, task, "orphan")
	out, _ := io.ReadAll(r)
	_ = cmd.Wait()
	if got := string(out); got != "ready\nreaped\n" {
		t.Errorf("child printed %q, want the orphan reaped", got)
	}
}

func TestNone(t *testing.T) {
	sb, err := sandbox.New(sandbox.Config{Level: sandbox.None})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(sb.String(), "UNSANDBOXED") {
		t.Errorf("none is not labelled: %q", sb)
	}
	task, err := sb.Prepare("none")
	if err != nil {
		t.Fatal(err)
	}
	defer task.Cleanup()
	if !task.Unsandboxed() {
		t.Error("Unsandboxed() = false")
	}
	cmd, err := task.Command(context.Background(), []string{"sh", "-c", "pwd"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := task.Start(cmd); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
}

func TestParseLevel(t *testing.T) {
	for in, want := range map[string]sandbox.Level{"": sandbox.Strict, "strict": sandbox.Strict, "NONE": sandbox.None} {
		if got, err := sandbox.ParseLevel(in); err != nil || got != want {
			t.Errorf("ParseLevel(%q) = %q, %v", in, got, err)
		}
	}
	if _, err := sandbox.ParseLevel("loose"); err == nil {
		t.Error("ParseLevel(loose) did not fail")
	}
}

// BenchmarkSpawn is the cost of one sandboxed child: workspace and cgroups,
// namespaces, the child's confinement, until it is ready; then its exit
// and the teardown. "none" is the same child unsandboxed, for comparison.
func BenchmarkSpawn(b *testing.B) {
	none, err := sandbox.New(sandbox.Config{Level: sandbox.None})
	if err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name string
		sb   func() *sandbox.Sandbox
	}{
		{"strict", func() *sandbox.Sandbox { return strict(b, sandbox.Config{}) }},
		{"none", func() *sandbox.Sandbox { return none }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			sb := bc.sb()
			// The phases of one child: Prepare (workspace, cgroups),
			// start until the child says ready, its exit, and Cleanup
			// (kill leftovers, counters, rmdirs, workspace removal).
			var prepare, ready, exit, cleanup time.Duration
			for b.Loop() {
				began := time.Now()
				task, err := sb.Prepare("bench")
				if err != nil {
					b.Fatal(err)
				}
				prepared := time.Now()
				prepare += prepared.Sub(began)
				cmd, r := start(b, task, "ready")
				if l, _ := r.ReadString('\n'); l != "ready\n" {
					b.Fatalf("child said %q", l)
				}
				isReady := time.Now()
				ready += isReady.Sub(began)
				_ = cmd.Wait()
				exited := time.Now()
				exit += exited.Sub(isReady)
				task.Cleanup()
				cleanup += time.Since(exited)
			}
			per := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(b.N) / 1000 }
			b.ReportMetric(per(ready), "ms-to-ready/op")
			b.ReportMetric(per(prepare), "ms-prepare/op")
			b.ReportMetric(per(exit), "ms-exit/op")
			b.ReportMetric(per(cleanup), "ms-cleanup/op")
		})
	}
}

// An executor killed with a task running leaves no process behind (the
// agent dies with it: Pdeathsig, and its PID namespace with it), and the
// next executor of the node sweeps the cgroups and the staging directory
// it left; a live executor's are left alone.
func TestSweepAfterExecutorDied(t *testing.T) {
	strict(t, sandbox.Config{}) // skips (or fails in CI) without strict isolation
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
	helper.Env = append(os.Environ(), envExecutor+"="+root)
	out, err := helper.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := helper.Start(); err != nil {
		t.Fatal(err)
	}
	defer helper.Process.Kill()
	line, _ := bufio.NewReader(out).ReadString('\n')
	var agent int
	var stage, cgroups string
	if _, err := fmt.Sscanf(line, "task %d %s %s", &agent, &stage, &cgroups); err != nil {
		t.Fatalf("helper said %q", line)
	}
	if err := syscall.Kill(agent, 0); err != nil {
		t.Fatalf("the agent process %d is not running: %v", agent, err)
	}
	// The executor dies without any clean-up.
	_ = helper.Process.Kill()
	_ = helper.Wait()
	poll.Until(t, 10*time.Second, func() error { // the documented bound is "at once"; this is a hang detector
		if err := syscall.Kill(agent, 0); err == nil {
			return fmt.Errorf("agent process %d still running", agent)
		}
		return nil
	})
	for _, p := range append([]string{stage}, strings.Split(cgroups, ",")...) {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("expected a leftover %s before the sweep: %v", p, err)
		}
	}
	// A live executor's directory is not swept.
	live := filepath.Join(root, fmt.Sprintf("agentmesh-%s.%d", sweepNode, os.Getppid()))
	if err := os.Mkdir(live, 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := sandbox.New(sandbox.Config{Level: sandbox.Strict, Node: sweepNode, WorkspaceRoot: root}); err != nil {
		t.Fatal(err)
	}
	for _, p := range append([]string{stage, filepath.Dir(stage)}, strings.Split(cgroups, ",")...) {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("%s survived the sweep", p)
		}
	}
	if _, err := os.Stat(live); err != nil {
		t.Errorf("a live executor's directory was swept: %v", err)
	}
}
