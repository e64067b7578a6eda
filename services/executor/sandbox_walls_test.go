package executor

// Escape tests of the walls added for issue 7, on the real spawn path
// (Service.spawn, the test binary as the agent child, the real tools):
// the fresh root, nothing inherited, a host uid per task, the task disk,
// the seccomp filter and the CPU share.

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/agentmesh/agentmesh/services/executor/sandbox"
	"golang.org/x/sys/unix"
)

// listenUnix listens on a 0777 pathname unix socket and counts connections.
func listenUnix(t *testing.T, path string) *atomic.Int32 {
	t.Helper()
	_ = os.Remove(path)
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close(); os.Remove(path) })
	if err := os.Chmod(path, 0o777); err != nil {
		t.Fatal(err)
	}
	var n atomic.Int32
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			n.Add(1)
			c.Close()
		}
	}()
	return &n
}

// The fresh root: no host unix socket can be named — in /tmp, /run, the
// executor's data directory or beside the workspaces — and /run, /var,
// /home, /sys and the host's /tmp do not exist.
func TestSandboxEscapeUnixSockets(t *testing.T) {
	s := sandboxService(t, sandbox.Config{})
	data := t.TempDir() // stands for the executor's data directory
	if err := os.Chmod(data, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Dir(data), 0o755); err != nil {
		t.Fatal(err)
	}
	tag := fmt.Sprintf("%d", time.Now().UnixNano())
	paths := []string{
		"/tmp/agentmesh-escape-" + tag + ".sock",
		"/run/agentmesh-escape-" + tag + ".sock",
		filepath.Join(data, "nats.sock"),
		filepath.Join(filepath.Dir(s.sb.Config().WorkspaceRoot), "agentmesh-escape-"+tag+".sock"),
	}
	var hits []*atomic.Int32
	for _, p := range paths {
		hits = append(hits, listenUnix(t, p))
	}
	a := spawnAgent(t, context.Background(), s, "escape", 20)
	code := "import socket, os\nfor p in " + pyList(paths) + `:
    try:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(2)
        s.connect(p)
        print("CONNECTED", p)
    except OSError as e:
        print("refused", p, e)
for d in ["/run", "/var", "/home", "/sys", "/root", "/mnt", "/srv", "/opt"]:
    print(d, "EXISTS" if os.path.lexists(d) else "absent")
print("root:", sorted(os.listdir("/")) if os.access("/", os.R_OK) else "unlistable")
`
	r := a.do(python(code, 20))
	sh := a.do(shell("for p in "+strings.Join(paths, " ")+"; do echo hi | nc -U -w1 $p && echo NC-CONNECTED $p; ls -la $p; done; ls /tmp; true", 20))
	a.finish()
	for i, p := range paths {
		if n := hits[i].Load(); n != 0 {
			t.Errorf("%d connections reached %s", n, p)
		}
	}
	for _, out := range []string{r.out, sh.out} {
		if strings.Contains(out, "CONNECTED") || strings.Contains(out, "EXISTS") {
			t.Errorf("the sandbox reached or saw the host:\n%s", out)
		}
	}
	if !strings.Contains(r.out, "refused /run/") || !strings.Contains(r.out, "/sys absent") {
		t.Errorf("the checks did not run:\n%s", r.out)
	}
}

func pyList(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = fmt.Sprintf("%q", s)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// leak clears close-on-exec on fd, as a careless parent of the executor
// would have left it.
func leak(t *testing.T, fd uintptr) {
	t.Helper()
	if _, err := unix.FcntlInt(fd, unix.F_SETFD, 0); err != nil {
		t.Fatal(err)
	}
}

// Nothing inherited: a connected TCP socket, a listening socket and a
// file the executor leaks (no close-on-exec) are not open in the sandbox,
// and the tools' programs start with descriptors 0-2 only.
func TestSandboxEscapeInheritedFDs(t *testing.T) {
	s := sandboxService(t, sandbox.Config{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var accepted, got atomic.Int32
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			go func() {
				buf := make([]byte, 64)
				if n, _ := c.Read(buf); n > 0 {
					got.Add(1)
				}
				c.Close()
			}()
		}
	}()
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	connFile, err := conn.(*net.TCPConn).File()
	if err != nil {
		t.Fatal(err)
	}
	defer connFile.Close()
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer listener.Close()
	lnFile, err := listener.(*net.TCPListener).File()
	if err != nil {
		t.Fatal(err)
	}
	defer lnFile.Close()
	secretPath := filepath.Join(t.TempDir(), "leaked.txt")
	if err := os.WriteFile(secretPath, []byte("leaked-file-s3cret"), 0o600); err != nil {
		t.Fatal(err)
	}
	file, err := os.OpenFile(secretPath, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	fds := []uintptr{connFile.Fd(), lnFile.Fd(), file.Fd()}
	for _, fd := range fds {
		leak(t, fd)
	}
	a := spawnAgent(t, context.Background(), s, "escape", 20)
	r := a.do(python(fmt.Sprintf(`
import os, socket
print("fds:", sorted(int(f) for f in os.listdir("/proc/self/fd")))
for fd in %s + list(range(3, 64)):
    try:
        os.fstat(fd)
    except OSError:
        continue
    print("OPEN", fd, os.readlink("/proc/self/fd/%%d" %% fd))
    try:
        os.lseek(fd, 0, 0)
        print("READ", os.read(fd, 64))
    except OSError as e:
        print("read refused", e)
    try:
        os.write(fd, b"from the sandbox")
        print("WROTE", fd)
    except OSError as e:
        print("write refused", e)
`, pyInts(fds)), 20))
	a.finish()
	if strings.Contains(r.out, "OPEN") || strings.Contains(r.out, "s3cret") || strings.Contains(r.out, "WROTE") {
		t.Errorf("a leaked descriptor reached the sandbox:\n%s", r.out)
	}
	if !strings.Contains(r.out, "fds: [0, 1, 2, 3]") { // 3: listdir's own
		t.Errorf("the program's descriptors, want 0-2 only (and listdir's):\n%s", r.out)
	}
	if b, _ := os.ReadFile(secretPath); string(b) != "leaked-file-s3cret" {
		t.Errorf("the leaked file was written: %q", b)
	}
	if n := got.Load(); n != 0 {
		t.Errorf("%d writes came through the leaked TCP connection", n)
	}
}

func pyInts(fds []uintptr) string {
	q := make([]string, len(fds))
	for i, fd := range fds {
		q[i] = fmt.Sprint(fd)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// A new session keyring: a key in the executor's session keyring cannot
// be read from the sandbox, by its id or through @s.
func TestSandboxEscapeSessionKeyring(t *testing.T) {
	s := sandboxService(t, sandbox.Config{})
	// Keyrings belong to threads: this goroutine's thread gets a session
	// keyring with a secret key, and spawns the agent (fork happens on
	// the calling thread). The thread is never unlocked: it exits with
	// the test's goroutine.
	runtime.LockOSThread()
	name, _ := unix.BytePtrFromString(fmt.Sprintf("agentmesh-test-%d", time.Now().UnixNano()))
	if _, _, e := unix.RawSyscall(unix.SYS_KEYCTL, unix.KEYCTL_JOIN_SESSION_KEYRING, uintptr(unsafe.Pointer(name)), 0); e != 0 {
		t.Fatalf("join a session keyring: %v", e)
	}
	const secret = "executor-keyring-s3cret"
	id, err := unix.AddKey("user", "agentmesh-secret", []byte(secret), unix.KEY_SPEC_SESSION_KEYRING)
	if err != nil {
		t.Fatalf("add_key: %v", err)
	}
	a := spawnAgent(t, context.Background(), s, "escape", 20)
	r := a.do(python(fmt.Sprintf(`
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
SYS_keyctl = %d
def read(k):
    buf = ctypes.create_string_buffer(4096)
    n = libc.syscall(SYS_keyctl, 11, ctypes.c_long(k), buf, 4096)
    if n < 0:
        return "refused errno %%d" %% ctypes.get_errno()
    return buf.raw[:n]
ses = libc.syscall(SYS_keyctl, 0, ctypes.c_long(-3), 0)
print("session keyring", ses, "holds", read(-3))
print("the executor's key %d:", read(%d))
print("user keyring:", read(-4), "user session:", read(-5))
`, unix.SYS_KEYCTL, id, id), 20))
	a.finish()
	if strings.Contains(r.out, secret) {
		t.Errorf("the executor's key was read in the sandbox:\n%s", r.out)
	}
	if !strings.Contains(r.out, "the executor's key") {
		t.Errorf("the check did not run:\n%s", r.out)
	}
}

// A host uid per task and nothing of another task in view: a second task
// cannot name the first's workspace, nor chmod or utime it, and the two
// run as different host uids.
func TestSandboxEscapeOtherWorkspace(t *testing.T) {
	s := sandboxService(t, sandbox.Config{})
	a := spawnAgent(t, context.Background(), s, "escape", 20)
	if r := a.do(call{"fs_write", jsonArgs("path", "mine.txt", "content", "task A's data")}); r.isErr {
		t.Fatalf("fs_write: %s", r.out)
	}
	b := spawnAgent(t, context.Background(), s, "escape", 20)
	stage := a.p.sb.Stage()
	before, err := os.Stat(stage)
	if err != nil {
		t.Fatal(err)
	}
	r := b.do(python(fmt.Sprintf(`
import os, glob
p = %q
for name, f in [("chmod", lambda: os.chmod(p, 0o777)), ("utime", lambda: os.utime(p, (0, 0))),
                ("list", lambda: os.listdir(p)), ("chmod-parent", lambda: os.chmod(os.path.dirname(p), 0o777))]:
    try:
        f()
        print(name, "SUCCEEDED")
    except OSError as e:
        print(name, "refused", e)
print("found:", glob.glob("/**/mine.txt", recursive=True)[:5])
`, stage), 20))
	sh := b.do(shell(fmt.Sprintf("chmod 777 %s; touch -d 2000-01-01 %s; ls %s; cat /proc/*/root/workspace/mine.txt; true", stage, stage, filepath.Dir(stage)), 10))
	a.finish()
	b.finish()
	for _, out := range []string{r.out, sh.out} {
		if strings.Contains(out, "SUCCEEDED") || strings.Contains(out, "task A's data") {
			t.Errorf("task B reached task A's workspace:\n%s", out)
		}
	}
	if !strings.Contains(r.out, "found: []") || !strings.Contains(r.out, "chmod refused") {
		t.Errorf("task B found task A's file, or the checks did not run:\n%s", r.out)
	}
	after, err := os.Stat(stage)
	if err == nil && (after.Mode() != before.Mode() || !after.ModTime().Equal(before.ModTime())) {
		t.Errorf("task A's workspace changed: %v %v → %v %v", before.Mode(), before.ModTime(), after.Mode(), after.ModTime())
	}
	if os.Geteuid() == 0 && a.p.sb.UID() == b.p.sb.UID() {
		t.Errorf("both tasks run as host uid %d", a.p.sb.UID())
	}
}

// The task disk: a write past AGENTMESH_TASK_DISK fails with ENOSPC in the
// tool, and nothing lands on the host's disk.
func TestSandboxDiskQuota(t *testing.T) {
	s := sandboxService(t, sandbox.Config{Disk: 16 << 20})
	a := spawnAgent(t, context.Background(), s, "escape", 20)
	r := a.do(shell("dd if=/dev/zero of=big bs=1M count=64; echo rc=$?; dd if=/dev/zero of=/tmp/big bs=1M count=8; echo tmp-rc=$?; df -k /workspace | tail -1; rm -f big /tmp/big", 30))
	py := a.do(python(`
try:
    with open("more", "wb") as f:
        f.write(b"x" * (32 << 20))
    print("WROTE 32 MiB")
except OSError as e:
    print("refused", e)
`, 30))
	if !strings.Contains(r.out, "No space left on device") || strings.Contains(r.out, "rc=0") {
		t.Errorf("a 64 MiB write into a 16 MiB task disk: %s", r.out)
	}
	if !strings.Contains(py.out, "No space left on device") {
		t.Errorf("python's write: %s", py.out)
	}
	a.finish()
	if ents, _ := os.ReadDir(a.p.sb.Stage()); len(ents) != 0 {
		t.Errorf("the task disk is on the host: %v", ents)
	}
}

// The seccomp filter: vsock and other families are refused, io_uring and
// x32 syscalls too; unix, inet and inet6 sockets still work.
func TestSandboxSocketFamilies(t *testing.T) {
	s := sandboxService(t, sandbox.Config{})
	a := spawnAgent(t, context.Background(), s, "escape", 20)
	r := a.do(python(`
import socket, ctypes
for name, fam, typ in [("vsock", 40, socket.SOCK_STREAM), ("packet", 17, socket.SOCK_RAW), ("bluetooth", 31, socket.SOCK_STREAM),
                       ("alg", 38, socket.SOCK_SEQPACKET), ("xdp", 44, socket.SOCK_RAW), ("unix", socket.AF_UNIX, socket.SOCK_STREAM),
                       ("inet", socket.AF_INET, socket.SOCK_DGRAM), ("inet6", socket.AF_INET6, socket.SOCK_STREAM)]:
    try:
        socket.socket(fam, typ).close()
        print(name, "CREATED")
    except OSError as e:
        print(name, "refused errno", e.errno)
try:
    socket.socketpair(40, socket.SOCK_STREAM)
    print("vsock pair CREATED")
except OSError as e:
    print("vsock pair refused errno", e.errno)
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
p = ctypes.create_string_buffer(256)
print("io_uring_setup", libc.syscall(425, 8, p), "errno", ctypes.get_errno())
print("x32 socket", libc.syscall(0x40000000 | 41, 40, 1, 0), "errno", ctypes.get_errno())
`, 20))
	a.finish()
	for _, want := range []string{
		"vsock refused errno 97", "packet refused errno 97", "bluetooth refused errno 97", "alg refused errno 97",
		"xdp refused errno 97", "vsock pair refused errno 97", "unix CREATED", "inet CREATED", "inet6 CREATED",
		"io_uring_setup -1 errno 38",
	} {
		if !strings.Contains(r.out, want) {
			t.Errorf("missing %q in:\n%s", want, r.out)
		}
	}
	if runtime.GOARCH == "amd64" && !strings.Contains(r.out, "x32 socket -1 errno 38") {
		t.Errorf("an x32 syscall passed the filter:\n%s", r.out)
	}
}

// fs_read and fs_write on a FIFO in the workspace return at once with an
// error (no wait for a writer until the wall time).
func TestSandboxFIFO(t *testing.T) {
	s := sandboxService(t, sandbox.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // a hang detector
	defer cancel()
	a := spawnAgent(t, ctx, s, "escape", 20)
	a.do(shell("mkfifo pipe && ls -l pipe", 10))
	if r := a.do(call{"fs_read", jsonArgs("path", "pipe")}); !r.isErr || !strings.Contains(r.out, "not a regular file") {
		t.Errorf("fs_read of a FIFO: %+v", r)
	}
	if r := a.do(call{"fs_write", jsonArgs("path", "pipe", "content", "x")}); !r.isErr {
		t.Errorf("fs_write of a FIFO: %+v", r)
	}
	a.finish()
}

// The CPU share: a busy loop is throttled by the task's cgroup CPU limit.
// The limit is small (5 ms per 100 ms period) and the loop runs until it
// has used 0.1 s of CPU, so that it exhausts its quota in some period
// however loaded the machine is.
func TestSandboxCPUShare(t *testing.T) {
	s := sandboxService(t, sandbox.Config{CPU: 0.05})
	a := spawnAgent(t, context.Background(), s, "escape", 20)
	r := a.do(python(`
import time
began = time.monotonic()
while time.process_time() < 0.1 and time.monotonic() - began < 50:
    pass
print("cpu %.2f s in %.2f s" % (time.process_time(), time.monotonic() - began))
`, 60))
	a.finish()
	if n := a.p.sb.CPUThrottled(); n <= 0 {
		t.Errorf("the task's CPU limit never throttled a busy loop (nr_throttled %d): %s", n, r.out)
	}
}

// No controlling terminal, a session of its own, a minimal /dev, a
// read-only root, a cgroup namespace.
func TestSandboxSessionAndDev(t *testing.T) {
	s := sandboxService(t, sandbox.Config{})
	a := spawnAgent(t, context.Background(), s, "escape", 20)
	r := a.do(python(`
import os
try:
    os.open("/dev/tty", os.O_RDWR)
    print("TTY OPENED")
except OSError as e:
    print("no tty", e.errno)
print("sid", os.getsid(0))
print("dev", [d for d in ["console", "tty", "null", "zero", "full", "random", "urandom", "fd", "stdin", "stdout", "stderr", "shm", "ptmx", "pts", "mem", "kmsg", "sda", "vda", "kvm", "vsock", "net", "fuse"] if os.path.lexists("/dev/" + d)])
try:
    open("/new-file", "w")
    print("ROOT WRITABLE")
except OSError as e:
    print("root read-only", e.errno)
print("env", sorted(os.environ))
print("cgroup", open("/proc/self/cgroup").read())
print("mounts", open("/proc/self/mountinfo").read())
`, 20))
	a.finish()
	// A cgroup namespace: the host's cgroup paths above the executor's own
	// do not show in /proc/self/cgroup or the mount table.
	own, _ := os.ReadFile("/proc/self/cgroup")
	for _, line := range strings.Split(strings.TrimSpace(string(own)), "\n") {
		if parts := strings.SplitN(line, ":", 3); len(parts) == 3 && len(parts[2]) > 1 && strings.Contains(r.out, parts[2]) {
			t.Errorf("the executor's cgroup path %s shows in the sandbox:\n%s", parts[2], r.out)
		}
	}
	if strings.Contains(r.out, "TTY OPENED") || strings.Contains(r.out, "ROOT WRITABLE") || !strings.Contains(r.out, "sid 1\n") {
		t.Errorf("unexpected:\n%s", r.out)
	}
	if !strings.Contains(r.out, "dev ['null', 'zero', 'full', 'random', 'urandom', 'fd', 'stdin', 'stdout', 'stderr', 'shm']") {
		t.Errorf("/dev is not the minimal one:\n%s", r.out)
	}
}
