package executor

// Escape tests of the agent sandbox, on the real spawn path: Service.spawn
// starts this test binary as the agent child (see main_test.go), which
// confines itself in child.Main and runs the real local tools (shell,
// code_run, fs_*) as a scripted model asks. Each test names the protection
// it checks; removing it makes the test fail.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	childv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/child/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/poll"
	"github.com/agentmesh/agentmesh/pkg/testlog"
	"github.com/agentmesh/agentmesh/services/executor/childproto"
	"github.com/agentmesh/agentmesh/services/executor/sandbox"
	"github.com/agentmesh/agentmesh/services/executor/spawner"
)

// sandboxService is an executor with just what spawn needs, and a strict
// sandbox; without one the test fails under CI=true and is skipped
// elsewhere.
func sandboxService(t *testing.T, cfg sandbox.Config) *Service {
	t.Helper()
	cfg.Level = sandbox.Strict
	sb, err := sandbox.New(cfg)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("strict isolation is required in CI: %v", err)
		}
		t.Skipf("strict isolation unavailable on this host: %v", err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	s := &Service{cfg: Config{ChildCommand: []string{exe}}, sb: sb, log: testlog.New(t)}
	s.spawner = testSpawner(t, exe)
	return s
}

// testSpawner starts the spawner these tests spawn through, unless
// AGENTMESH_SPAWNER=direct asks for the executor's own fork (the default
// path is the spawner's).
func testSpawner(t testing.TB, exe string) *spawner.Client {
	t.Helper()
	mode, err := parseSpawner(os.Getenv("AGENTMESH_SPAWNER"))
	if err != nil {
		t.Fatal(err)
	}
	if mode == SpawnerDirect {
		return nil
	}
	sp, err := spawner.Start(exe, testlog.New(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sp.Close)
	return sp
}

// parentPid reads pid's parent from /proc (0 if it cannot).
func parentPid(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 2 {
		return 0
	}
	n, _ := strconv.Atoi(f[1])
	return n
}

// call is one tool call the scripted model makes.
type call struct{ name, args string }

// result is what the tool returned.
type result struct {
	out   string
	isErr bool
}

// agent is a sandboxed child the test talks to as the executor would.
type agent struct {
	t *testing.T
	p *process
	w *childproto.Writer
	r *childproto.Reader
}

// spawnAgent starts the child through Service.spawn and sends it Start.
func spawnAgent(t *testing.T, ctx context.Context, s *Service, input string, maxSteps int) *agent {
	t.Helper()
	p := takeChild(t, ctx, s, "escape-"+strings.ToLower(strings.ReplaceAll(t.Name(), "/", "-")))
	t.Cleanup(p.cleanup)
	// The path under test: the spawner's child, or the executor's own.
	want := os.Getpid()
	if s.spawner != nil {
		want = s.spawner.Pid()
	}
	if got := parentPid(p.pid); got != want {
		t.Fatalf("the agent's parent is pid %d, want %d (spawner %v)", got, want, s.spawner != nil)
	}
	a := &agent{t: t, p: p, w: childproto.NewWriter(p.stdin), r: childproto.NewReader(p.stdout)}
	start := &childv1.Start{
		TaskId: "escape", Attempt: 1, Input: input, MaxSteps: int32(maxSteps), Workspace: p.dir,
		Tools: []string{"shell", "code_run", "fs_read", "fs_write", "fs_list"},
	}
	if err := a.w.Write(&childv1.Frame{Kind: &childv1.Frame_Start{Start: start}}); err != nil {
		t.Fatalf("send start: %v (stderr %q)", err, p.stderr.String())
	}
	return a
}

// do has the model make one tool call and returns the tool's result.
func (a *agent) do(c call) result {
	a.t.Helper()
	for {
		f, err := readFrame(a.r)
		if err != nil {
			a.t.Fatalf("%s: read from the agent: %v (stderr %q)", c.name, err, a.p.stderr.String())
		}
		switch k := f.Kind.(type) {
		case *childv1.Frame_ModelRequest:
			msg := &childv1.Message{Role: "assistant", ToolCalls: []*agentmeshv1.ToolCall{{Id: fmt.Sprintf("c%d", k.ModelRequest.Id), Name: c.name, Arguments: c.args}}}
			a.send(&childv1.Frame{Kind: &childv1.Frame_ModelResponse{ModelResponse: &childv1.ModelResponse{Id: k.ModelRequest.Id, Message: msg}}})
		case *childv1.Frame_Step:
			st := k.Step.GetStep()
			a.send(&childv1.Frame{Kind: &childv1.Frame_StepAck{StepAck: &childv1.StepAck{Index: st.Index}}})
			if st.Kind == agentmeshv1.StepKind_STEP_KIND_TOOL_RESULT {
				a.t.Logf("%s %s →\n%s", c.name, c.args, st.Content)
				return result{out: st.Content, isErr: st.IsError}
			}
		case *childv1.Frame_Failure:
			a.t.Fatalf("%s: the agent failed: %s", c.name, k.Failure.Reason)
		default:
			a.t.Fatalf("%s: unexpected %s frame", c.name, childproto.Kind(f))
		}
	}
}

// finish has the model give its final answer and waits for the child.
func (a *agent) finish() string {
	a.t.Helper()
	for {
		f, err := readFrame(a.r)
		if err != nil {
			a.t.Fatalf("finish: read from the agent: %v (stderr %q)", err, a.p.stderr.String())
		}
		switch k := f.Kind.(type) {
		case *childv1.Frame_ModelRequest:
			msg := &childv1.Message{Role: "assistant", Content: "done"}
			a.send(&childv1.Frame{Kind: &childv1.Frame_ModelResponse{ModelResponse: &childv1.ModelResponse{Id: k.ModelRequest.Id, Message: msg}}})
		case *childv1.Frame_Step:
			a.send(&childv1.Frame{Kind: &childv1.Frame_StepAck{StepAck: &childv1.StepAck{Index: k.Step.GetStep().Index}}})
		case *childv1.Frame_Final:
			return a.p.wait(true)
		default:
			a.t.Fatalf("finish: unexpected %s frame", childproto.Kind(f))
		}
	}
}

func (a *agent) send(f *childv1.Frame) {
	a.t.Helper()
	if err := a.w.Write(f); err != nil {
		a.t.Fatalf("write to the agent: %v", err)
	}
}

func jsonArgs(kv ...any) string {
	var b strings.Builder
	b.WriteByte('{')
	for i := 0; i+1 < len(kv); i += 2 {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%q:", kv[i])
		switch v := kv[i+1].(type) {
		case string:
			b.WriteString(strconv.Quote(v))
		default:
			fmt.Fprint(&b, v)
		}
	}
	b.WriteByte('}')
	return b.String()
}

func shell(cmd string, timeout int) call {
	return call{"shell", jsonArgs("command", cmd, "timeout_seconds", timeout)}
}

func python(code string, timeout int) call {
	return call{"code_run", jsonArgs("language", "python", "code", code, "timeout_seconds", timeout)}
}

// outsideDir is a directory outside the workspace that the sandbox's uid
// could write and read (mode 0777/0644): only the sandbox stops it.
func outsideDir(t *testing.T) (dir, secret string) {
	dir = t.TempDir()
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Dir(dir), 0o755); err != nil {
		t.Fatal(err)
	}
	secret = "top-secret-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	if err := os.WriteFile(filepath.Join(dir, "secret.txt"), []byte(secret), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir, secret
}

// Landlock (and the fs tools' own checks): nothing is written outside the
// workspace, by an absolute path, "..", or a planted symlink.
func TestSandboxEscapeWrite(t *testing.T) {
	s := sandboxService(t, sandbox.Config{})
	out, _ := outsideDir(t)
	a := spawnAgent(t, context.Background(), s, "escape", 20)
	a.do(shell("ln -s "+out+" link", 10))
	rel, err := filepath.Rel(a.p.dir, filepath.Join(out, "dotdot.txt"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		call call
		want string
	}{
		{call{"fs_write", jsonArgs("path", filepath.Join(out, "abs.txt"), "content", "x")}, "absolute"},
		{call{"fs_write", jsonArgs("path", rel, "content", "x")}, "climbs out"},
		{call{"fs_write", jsonArgs("path", "link/link.txt", "content", "x")}, "leads outside the workspace"},
	} {
		if r := a.do(c.call); !r.isErr || !strings.Contains(r.out, c.want) {
			t.Errorf("%s: got %q, want an error saying %q", c.call.args, r.out, c.want)
		}
	}
	a.do(shell(fmt.Sprintf("echo x > %s/sh-abs.txt; echo x > %s; echo x > link/sh-link.txt; cp /etc/hostname link/sh-cp.txt; ln -s /etc/passwd link/sh-ln; mkdir link/sh-dir", out, rel), 10))
	a.do(python(fmt.Sprintf(`
for p in [%q, %q, "link/py-link.txt"]:
    try:
        open(p, "w").write("x")
        print("WROTE", p)
    except OSError as e:
        print("refused", p, e)
`, filepath.Join(out, "py-abs.txt"), rel), 10))
	// The tools still work inside.
	if r := a.do(call{"fs_write", jsonArgs("path", "sub/ok.txt", "content", "fine")}); r.isErr {
		t.Errorf("fs_write inside the workspace: %s", r.out)
	}
	if r := a.do(shell("cat sub/ok.txt && echo more >> sub/ok.txt", 10)); !strings.Contains(r.out, "fine") {
		t.Errorf("shell in the workspace: %s", r.out)
	}
	a.finish()
	ents, _ := os.ReadDir(out)
	for _, e := range ents {
		if e.Name() != "secret.txt" {
			t.Errorf("the sandbox wrote %s outside its workspace", filepath.Join(out, e.Name()))
		}
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(a.p.sb.Stage()), "dotdot.txt")); err == nil {
		t.Error("the sandbox wrote beside its workspace")
	}
}

// Landlock: a secret outside the workspace cannot be read, directly or
// through a symlink planted in the workspace.
func TestSandboxEscapeReadSecret(t *testing.T) {
	s := sandboxService(t, sandbox.Config{})
	out, secret := outsideDir(t)
	a := spawnAgent(t, context.Background(), s, "escape", 20)
	a.do(shell("ln -s "+filepath.Join(out, "secret.txt")+" planted", 10))
	file := filepath.Join(out, "secret.txt")
	var results []result
	results = append(results,
		a.do(call{"fs_read", jsonArgs("path", file)}),
		a.do(call{"fs_read", jsonArgs("path", "planted")}),
		a.do(call{"fs_list", jsonArgs("path", "..")}),
		a.do(shell(fmt.Sprintf("cat %s; cat planted; ls -la %s; grep -r top-secret %s /tmp", file, out, out), 10)),
		a.do(python(fmt.Sprintf(`
import os
for p in [%q, "planted"]:
    try:
        print(open(p).read())
    except OSError as e:
        print("refused", e)
`, file), 10)),
	)
	for _, r := range results {
		if strings.Contains(r.out, secret) {
			t.Errorf("the secret leaked: %q", r.out)
		}
	}
	if !results[0].isErr || !results[1].isErr || !results[2].isErr {
		t.Errorf("the fs tools did not refuse: %+v", results[:3])
	}
	a.finish()
}

// A fresh /proc in the PID namespace (and a clean environment): the
// executor's environment is out of reach.
func TestSandboxEscapeProcEnviron(t *testing.T) {
	const secret = "executor-env-s3cret"
	t.Setenv("AGENTMESH_ESCAPE_TEST_SECRET", secret)
	s := sandboxService(t, sandbox.Config{})
	a := spawnAgent(t, context.Background(), s, "escape", 20)
	pid := os.Getpid()
	r := a.do(shell(fmt.Sprintf(`echo procs: $(ls -d /proc/[0-9]* | wc -l); cat /proc/1/environ; cat /proc/%d/environ; for f in /proc/[0-9]*/environ; do tr '\0' '\n' < $f; done; env; grep -r %s /proc/*/environ`, pid, secret), 10))
	if strings.Contains(r.out, secret) {
		t.Errorf("the executor's environment leaked: %q", r.out)
	}
	py := a.do(python(fmt.Sprintf(`
import os
print("environ:", dict(os.environ))
for p in ["/proc/1/environ", "/proc/%d/environ", "/proc/1/mem"]:
    try:
        print(p, open(p, "rb").read(200))
    except OSError as e:
        print(p, "refused", e)
`, pid), 10))
	if strings.Contains(py.out, secret) {
		t.Errorf("the executor's environment leaked: %q", py.out)
	}
	// Only the task's processes are visible: the agent, sh, ls (and
	// what the shell forks), not the host's hundreds.
	var n int
	if i := strings.Index(r.out, "procs: "); i >= 0 {
		fmt.Sscan(r.out[i+len("procs: "):], &n)
	}
	if n == 0 || n > 8 {
		t.Errorf("the sandbox sees %d processes in /proc, want only its own (<= 8)", n)
	}
	a.finish()
}

// The network namespace: nothing reaches a listener on the host's
// loopback, by TCP or UDP.
func TestSandboxEscapeNetwork(t *testing.T) {
	s := sandboxService(t, sandbox.Config{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var tcpHits, udpHits atomic.Int32
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			tcpHits.Add(1)
			c.Close()
		}
	}()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	go func() {
		buf := make([]byte, 1500)
		for {
			if _, _, err := pc.ReadFrom(buf); err != nil {
				return
			}
			udpHits.Add(1)
		}
	}()
	tcpPort, udpPort := ln.Addr().(*net.TCPAddr).Port, pc.LocalAddr().(*net.UDPAddr).Port
	a := spawnAgent(t, context.Background(), s, "escape", 20)
	r := a.do(python(fmt.Sprintf(`
import socket
for host in ["127.0.0.1", "localhost", "::1"]:
    try:
        socket.create_connection((host, %d), timeout=2).close()
        print("TCP CONNECTED", host)
    except OSError as e:
        print("tcp refused", host, e)
    for fam, addr in [(socket.AF_INET, ("127.0.0.1", %d)), (socket.AF_INET6, ("::1", %d))]:
        try:
            s = socket.socket(fam, socket.SOCK_DGRAM)
            s.sendto(b"hello", addr)
            print("UDP SENT", addr)
        except OSError as e:
            print("udp refused", addr, e)
`, tcpPort, udpPort, udpPort), 20))
	a.do(shell(fmt.Sprintf("echo hi > /dev/tcp/127.0.0.1/%d; echo hi | nc -w1 127.0.0.1 %d; echo hi | nc -u -w1 127.0.0.1 %d; true", tcpPort, tcpPort, udpPort), 10))
	a.finish()
	time.Sleep(200 * time.Millisecond)
	if n := tcpHits.Load(); n != 0 {
		t.Errorf("%d TCP connections reached the host's listener", n)
	}
	if n := udpHits.Load(); n != 0 {
		t.Errorf("%d UDP datagrams reached the host's listener", n)
	}
	if strings.Contains(r.out, "CONNECTED") || strings.Contains(r.out, "UDP SENT") {
		t.Errorf("the sandbox has a network: %s", r.out)
	}
}

// No capabilities for what the tools run, Landlock, no nested namespaces,
// a non-dumpable agent: mount, unshare and ptrace fail.
func TestSandboxEscapeMountUnsharePtrace(t *testing.T) {
	s := sandboxService(t, sandbox.Config{})
	a := spawnAgent(t, context.Background(), s, "escape", 20)
	r := a.do(python(`
import ctypes, os, subprocess
libc = ctypes.CDLL(None, use_errno=True)
def check(name, rc):
    print(name, "SUCCEEDED" if rc == 0 else "refused: " + os.strerror(ctypes.get_errno()))
os.makedirs("m", exist_ok=True)
check("mount tmpfs", libc.mount(b"none", b"m", b"tmpfs", 0, None))
check("mount proc", libc.mount(b"proc", b"m", b"proc", 0, None))
check("bind mount", libc.mount(b"/", b"m", None, 4096, None))
check("ptrace attach to the agent", libc.ptrace(16, 1, None, None))
child = subprocess.Popen(["sleep", "5"])
check("setns into the agent's ns", libc.setns(os.open("/proc/1/ns/mnt", os.O_RDONLY), 0) if os.path.exists("/proc/1/ns/mnt") else -1)
child.kill()
for flag, name in [(0x10000000, "user"), (0x00020000, "mount"), (0x40000000, "net"), (0x20000000, "pid"), (0x08000000, "ipc"), (0x04000000, "uts"), (0x02000000, "cgroup")]:
    check("unshare " + name, libc.unshare(flag))
`, 20))
	sh := a.do(shell(`mount -t tmpfs none m && echo MOUNT SUCCEEDED; unshare -U true && echo UNSHARE-U SUCCEEDED; unshare -r true && echo UNSHARE-R SUCCEEDED; unshare -n true && echo UNSHARE-N SUCCEEDED; chroot / true && echo CHROOT SUCCEEDED; true`, 10))
	for _, out := range []string{r.out, sh.out} {
		if strings.Contains(out, "SUCCEEDED") {
			t.Errorf("an escape primitive succeeded:\n%s", out)
		}
	}
	if !strings.Contains(r.out, "ptrace attach to the agent refused") || !strings.Contains(r.out, "unshare user refused") {
		t.Errorf("the checks did not run:\n%s", r.out)
	}
	a.finish()
}

// The cgroup pids limit stops a fork bomb; the agent survives it and its
// tools work again afterwards.
func TestSandboxForkBomb(t *testing.T) {
	s := sandboxService(t, sandbox.Config{Pids: 64})
	a := spawnAgent(t, context.Background(), s, "escape", 20)
	r := a.do(shell(`b() { b | b & }; b; sleep 4; echo bombed`, 3))
	if !r.isErr {
		t.Logf("the bomb ended by itself: %s", r.out)
	}
	if hits := a.p.sb.PidsLimitHits(); hits == 0 {
		t.Error("the pids limit was never hit: is it enforced?")
	}
	if n := len(a.p.sb.Procs()); n > 64 {
		t.Errorf("%d processes in the task", n)
	}
	// Afterwards: the bomb is gone and the tools work.
	var after result
	for i := 0; i < 20; i++ {
		if after = a.do(shell("echo alive", 10)); strings.Contains(after.out, "alive") {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !strings.Contains(after.out, "alive") {
		t.Errorf("the tools do not work after the fork bomb: %s", after.out)
	}
	if st := a.finish(); st != "exited with status 0" {
		t.Errorf("the agent %s", st)
	}
}

// The tools' memory cgroup kills a 1 GiB allocation; the tool reports it
// as resource exhaustion and the agent carries on.
func TestSandboxMemoryHog(t *testing.T) {
	s := sandboxService(t, sandbox.Config{})
	a := spawnAgent(t, context.Background(), s, "escape", 20)
	began := time.Now()
	r := a.do(python(`b = b"x" * (1 << 30); print("allocated", len(b))`, 60))
	if !r.isErr || !strings.Contains(r.out, "resource exhausted") || !strings.Contains(r.out, "memory limit of 128 MiB exceeded") {
		t.Errorf("the hog: got %q, want a resource exhaustion error naming the 128 MiB limit", r.out)
	}
	if strings.Contains(r.out, "allocated") {
		t.Error("the hog allocated 1 GiB")
	}
	if d := time.Since(began); d > 20*time.Second {
		t.Errorf("the hog ran %s", d)
	}
	if a.p.sb.ToolOOMKills() == 0 {
		t.Error("no OOM kill recorded in the tools' cgroup")
	}
	if r := a.do(shell("echo still here", 10)); !strings.Contains(r.out, "still here") {
		t.Errorf("the agent is gone after the hog: %s", r.out)
	}
	a.finish()
	if a.p.sb.OOMKilled() {
		t.Error("OOMKilled() = true: the agent process itself was not killed")
	}
}

// The task's memory cgroup kills an agent process that outgrows it, and
// the executor can tell (Task.OOMKilled), so the task fails as resource
// exhaustion and is not retried.
func TestSandboxAgentOOM(t *testing.T) {
	s := sandboxService(t, sandbox.Config{Memory: 32 << 20})
	p := takeChild(t, context.Background(), s, "agent-oom")
	defer p.cleanup()
	// A Start frame of 15 MiB: the agent holds it twice or more.
	start := &childv1.Start{TaskId: "oom", Attempt: 1, Input: strings.Repeat("x", 15<<20), MaxSteps: 1}
	_ = childproto.NewWriter(p.stdin).Write(&childv1.Frame{Kind: &childv1.Frame_Start{Start: start}})
	go func() { _, _ = io.Copy(io.Discard, p.stdout) }()
	// It may ask for its model turn: no answer comes; the kill ends it.
	done := make(chan error, 1)
	var ws syscall.WaitStatus
	go func() {
		var err error
		ws, err = p.h.wait()
		done <- err
	}()
	var err error
	select {
	case err = <-done:
	case <-time.After(30 * time.Second):
		_ = p.h.kill()
		t.Fatal("the agent was not killed")
	}
	if !p.sb.OOMKilled() {
		t.Fatalf("OOMKilled() = false; the agent ended with %v (stderr %q)", err, p.stderr.String())
	}
	if err != nil || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Errorf("the agent ended with %s, want SIGKILL", describeExit(ws, err))
	}
	if err := p.sb.MemoryError(); !errors.Is(err, sandbox.ErrResourceExhausted) || !strings.Contains(err.Error(), "32 MiB") {
		t.Errorf("MemoryError() = %v", err)
	}
}

// The tools' wall-time (and CPU-time) limit kills an endless loop; the
// task's wall limit (the spawn context) kills the whole tree.
func TestSandboxCPULoop(t *testing.T) {
	s := sandboxService(t, sandbox.Config{})
	a := spawnAgent(t, context.Background(), s, "escape", 20)
	began := time.Now()
	r := a.do(python("while True:\n    pass\n", 2))
	if d := time.Since(began); d > 60*time.Second { // the loop never ends by itself
		t.Errorf("the loop ran %s with a 2 s limit", d)
	}
	if !r.isErr || !(strings.Contains(r.out, "wall-time limit of 2s exceeded") || strings.Contains(r.out, "CPU-time limit of 2s exceeded")) {
		t.Errorf("got %q, want the wall-time limit named", r.out)
	}
	a.finish()

	// The task's own wall limit: the context given to spawn.
	// Long enough for the loops to start even on a loaded machine; the
	// limit's end is what is tested.
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	b := spawnAgent(t, ctx, s, "escape", 20)
	go func() {
		// The model asks for a loop with a long limit; the reply never
		// comes back before the task's wall limit.
		f, err := readFrame(b.r)
		if err != nil || f.GetModelRequest() == nil {
			return
		}
		msg := &childv1.Message{Role: "assistant", ToolCalls: []*agentmeshv1.ToolCall{{Id: "loop", Name: "shell", Arguments: jsonArgs("command", "while :; do :; done & while :; do :; done", "timeout_seconds", 300)}}}
		_ = b.w.Write(&childv1.Frame{Kind: &childv1.Frame_ModelResponse{ModelResponse: &childv1.ModelResponse{Id: f.GetModelRequest().Id, Message: msg}}})
		for {
			f, err := readFrame(b.r)
			if err != nil {
				return
			}
			if st := f.GetStep(); st != nil {
				_ = b.w.Write(&childv1.Frame{Kind: &childv1.Frame_StepAck{StepAck: &childv1.StepAck{Index: st.GetStep().Index}}})
			}
		}
	}()
	poll.Until(t, 12*time.Second, func() error {
		if n := len(b.p.sb.Procs()); n < 3 {
			return fmt.Errorf("%d processes in the task, want the agent and its loops", n)
		}
		return nil
	})
	began = time.Now()
	done := make(chan error, 1)
	go func() { _, err := b.p.h.wait(); done <- err }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the task outlived its wall limit")
	}
	if p := b.p.sb.Procs(); len(p) != 0 {
		t.Errorf("processes left after the wall limit: %v", p)
	}
	t.Logf("killed %s after the limit", time.Since(began).Round(time.Millisecond))
}

// The PID namespace: a daemonised grandchild is gone when the task ends.
func TestSandboxDaemonGone(t *testing.T) {
	s := sandboxService(t, sandbox.Config{})
	a := spawnAgent(t, context.Background(), s, "escape", 20)
	// Three daemons (double fork, own session), each detached before the
	// tool call returns — the parent waits on a pipe until the grandchild
	// is in its new session — so the tool's own clean-up of its process
	// group cannot be what ends them.
	a.do(python(`
import os
for n in (1001, 1002, 1003):
    r, w = os.pipe()
    if os.fork() == 0:
        os.close(r)
        os.setsid()
        if os.fork() == 0:
            os.write(w, b"x")
            os.close(w)
            os.execvp("sleep", ["sleep", str(n)])
        os._exit(0)
    os.close(w)
    os.read(r, 1)
    os.close(r)
print("daemonised")
`, 10))
	// The daemons detach asynchronously (the python grandchild may not have
	// exec'd sleep yet): wait until all three are there.
	var daemons []int
	poll.Until(t, 20*time.Second, func() error {
		daemons = daemons[:0]
		for _, pid := range a.p.sb.Procs() {
			b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
			if strings.HasPrefix(string(b), "sleep\x00100") {
				daemons = append(daemons, pid)
			}
		}
		if len(daemons) != 3 {
			return fmt.Errorf("found %d daemons (%v), want 3", len(daemons), daemons)
		}
		return nil
	})
	a.finish()                                   // the agent exits: its PID namespace ends
	deadline := time.Now().Add(20 * time.Second) // a hang detector, not a speed check
	for _, pid := range daemons {
		for {
			err := syscall.Kill(pid, 0)
			b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
			if errors.Is(err, syscall.ESRCH) || !strings.HasPrefix(string(b), "sleep\x00100") {
				break
			}
			if time.Now().After(deadline) {
				t.Errorf("daemon %d survived the task", pid)
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}
