package spawner

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/pkg/poll"
	"github.com/agentmesh/agentmesh/pkg/testlog"
)

func startClient(t *testing.T) *Client {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	c, err := Start(exe, testlog.New(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// stdio returns the child's ends of three pipes and the parent's stdout
// reader; everything is closed at the end of the test.
func stdio(t *testing.T) (in, out, errw, outR *os.File) {
	t.Helper()
	var files []*os.File
	pipe := func() (*os.File, *os.File) {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, r, w)
		return r, w
	}
	in, _ = pipe()
	outR, out = pipe()
	_, errw = pipe()
	t.Cleanup(func() {
		for _, f := range files {
			_ = f.Close()
		}
	})
	return in, out, errw, outR
}

// A plain child (no namespaces) runs, its stdout reaches the caller and
// its exit status comes back.
func TestSpawnPlainChild(t *testing.T) {
	c := startClient(t)
	in, out, errw, outR := stdio(t)
	cmd := exec.Command("/bin/sh", "-c", "echo hello; exit 3")
	cmd.Dir = "/"
	cmd.Stdin, cmd.Stdout, cmd.Stderr = in, out, errw
	p, err := c.Start(context.Background(), cmd, nil)
	if err != nil {
		t.Fatal(err)
	}
	out.Close()
	b, _ := io.ReadAll(outR)
	ws, err := p.Wait()
	if err != nil || !ws.Exited() || ws.ExitStatus() != 3 {
		t.Fatalf("wait = %v, %v; want exit status 3", ws, err)
	}
	if strings.TrimSpace(string(b)) != "hello" {
		t.Errorf("stdout %q", b)
	}
}

// Kill ends a running child (its process group) and the status says so.
func TestSpawnKill(t *testing.T) {
	c := startClient(t)
	p := startSleep(t, c)
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	ws, err := p.Wait()
	if err != nil || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("wait = %v, %v; want killed by SIGKILL", ws, err)
	}
	if err := p.Kill(); err != nil { // reaped: nothing to do
		t.Errorf("kill after wait: %v", err)
	}
}

// Requests the spawner must refuse are refused with the reason, nothing
// starts, and it keeps serving.
func TestSpawnerRefusesBadRequests(t *testing.T) {
	c := startClient(t)
	cn, err := c.get(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	in, out, errw, _ := stdio(t)
	fds := []int{int(in.Fd()), int(out.Fd()), int(errw.Fd())}
	good := request{Op: opSpawn, Path: "/bin/true", Args: []string{"true"}, Dir: "/", Files: 3}
	tests := []struct {
		name string
		edit func(*request)
		fds  []int
		want string
	}{
		{"relative path", func(r *request) { r.Path = "bin/true" }, fds, "not absolute"},
		{"relative dir", func(r *request) { r.Dir = "tmp" }, fds, "not absolute"},
		{"no args", func(r *request) { r.Args = nil }, fds, "no arguments"},
		{"too few fds", func(r *request) { r.Files = 2 }, fds[:2], "descriptors"},
		{"fds not as said", func(r *request) { r.Files = 3 }, fds[:2], "descriptors"},
		{"user namespace only", func(r *request) { r.Cloneflags = syscall.CLONE_NEWUSER }, fds, "namespace flags"},
		{"mappings without namespaces", func(r *request) { r.UID = 1000 }, fds, "without namespaces"},
		{"cgroup file elsewhere", func(r *request) { r.Cgroups = []string{"/etc/passwd"} }, fds, "cgroup file"},
		{"cgroup file climbing out", func(r *request) { r.Cgroups = []string{"/sys/fs/cgroup/../../etc/cgroup.procs"} }, fds, "cgroup file"},
		{"negative uid", func(r *request) { r.Cloneflags = NamespaceFlags; r.UID = -1 }, fds, "not valid"},
		{"helper maps without namespaces", func(r *request) { r.HelperMaps = true }, fds, "without namespaces"},
		{"helper maps and a mapping", func(r *request) { r.Cloneflags = NamespaceFlags; r.HelperMaps = true; r.UID = 1000 }, fds, "helper maps with an id mapping"},
		{"helper maps and setgroups", func(r *request) { r.Cloneflags = NamespaceFlags; r.HelperMaps = true; r.Setgroups = true }, fds, "helper maps with an id mapping"},
		{"too many fds", func(r *request) { r.Files = 6 }, append(fds, fds...), "descriptors"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := good
			req.ID = uint64(1000 + i)
			tt.edit(&req)
			ch, err := cn.send(req, tt.fds)
			if err != nil {
				t.Fatal(err)
			}
			select {
			case r := <-ch:
				if r.err == nil || !strings.Contains(r.err.Error(), tt.want) {
					t.Errorf("reply %+v, want a refusal naming %q", r, tt.want)
				}
			case <-time.After(20 * time.Second):
				t.Fatal("no reply")
			}
		})
	}
	// Still serving: a good request runs.
	cmd := exec.Command("/bin/true")
	cmd.Dir = "/"
	cmd.Stdin, cmd.Stdout, cmd.Stderr = in, out, errw
	p, err := c.Start(context.Background(), cmd, nil)
	if err != nil {
		t.Fatal(err)
	}
	if ws, err := p.Wait(); err != nil || ws.ExitStatus() != 0 {
		t.Fatalf("wait = %v, %v", ws, err)
	}
	if c.Restarts() != 0 {
		t.Errorf("the spawner restarted %d times", c.Restarts())
	}
}

// The client refuses commands it cannot hand over, before sending.
func TestStartRefusesBadCommands(t *testing.T) {
	c := startClient(t)
	in, out, errw, _ := stdio(t)
	cmd := exec.Command("/bin/true")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = strings.NewReader(""), out, errw
	if _, err := c.Start(context.Background(), cmd, nil); err == nil || !strings.Contains(err.Error(), "must be files") {
		t.Errorf("a reader as stdin: %v", err)
	}
	cmd = exec.Command("/bin/true")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = in, out, errw
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWUSER}
	if _, err := c.Start(context.Background(), cmd, nil); err == nil || !strings.Contains(err.Error(), "not the sandbox's") {
		t.Errorf("other namespaces: %v", err)
	}
	cmd = exec.Command("/nonexistent/program")
	cmd.Dir = "/"
	cmd.Stdin, cmd.Stdout, cmd.Stderr = in, out, errw
	if _, err := c.Start(context.Background(), cmd, nil); !errors.Is(err, syscall.ENOENT) {
		t.Errorf("a missing program: %v, want ENOENT", err)
	}
}

// After Close nothing starts and the spawner is gone.
func TestClose(t *testing.T) {
	c := startClient(t)
	pid := c.Pid()
	c.Close()
	if _, err := c.Start(context.Background(), exec.Command("/bin/true"), nil); !errors.Is(err, ErrClosed) {
		t.Errorf("start after close: %v", err)
	}
	if err := syscall.Kill(pid, 0); err == nil {
		b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if !strings.Contains(string(b), ") Z") {
			t.Errorf("spawner %d still runs after Close", pid)
		}
	}
}

// A spawner that does not exit at end of file (here: stopped) is killed
// by Close, and its children die with it.
func TestCloseKillsStuckSpawner(t *testing.T) {
	c := startClient(t)
	p := startSleep(t, c)
	pid := c.Pid()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { c.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(60 * time.Second): // a hang detector
		t.Fatal("Close hung on a stopped spawner")
	}
	if _, err := p.Wait(); !errors.Is(err, ErrDied) {
		t.Errorf("the child's wait: %v, want ErrDied", err)
	}
	poll.Until(t, 20*time.Second, func() error {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(p.Pid) + "/stat")
		if err != nil || strings.Contains(string(b), ") Z") {
			return nil
		}
		return fmt.Errorf("the stuck spawner's child %d survived Close", p.Pid)
	})

}

// startSleep has the spawner start a long sleep (the test kills it).
func startSleep(t *testing.T, c *Client) *Proc {
	t.Helper()
	in, out, errw, _ := stdio(t)
	cmd := exec.Command("/bin/sleep", "1000")
	cmd.Dir = "/"
	cmd.Stdin, cmd.Stdout, cmd.Stderr = in, out, errw
	p, err := c.Start(context.Background(), cmd, nil)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// A child whose ids the executor's setuid helpers map (an executor that
// is not root, with subordinate ids) starts in the sandbox's namespaces
// without maps and with its namespace's capabilities kept across exec,
// and waits on its sync pipe: it runs only after the caller wrote its
// maps (here, as root, directly; the executor runs newuidmap/newgidmap)
// and released it.
func TestSpawnHelperMappedChild(t *testing.T) {
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("writing another process's uid_map needs root in CI")
		}
		t.Skip("writing another process's uid_map needs root")
	}
	c := startClient(t)
	in, out, errw, outR := stdio(t)
	syncR, syncW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer syncW.Close()
	// fd 3 is the sync pipe: one byte releases the child.
	cmd := exec.Command("/bin/sh", "-c", `head -c1 <&3 >/dev/null && cat /proc/self/uid_map && id -u && grep CapAmb /proc/self/status`)
	cmd.Dir = "/"
	cmd.Stdin, cmd.Stdout, cmd.Stderr = in, out, errw
	cmd.ExtraFiles = []*os.File{syncR}
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: NamespaceFlags, AmbientCaps: []uintptr{0}}
	p, err := c.Start(context.Background(), cmd, nil)
	syncR.Close()
	if err != nil {
		t.Fatal(err)
	}
	out.Close()
	// Unmapped until the caller maps it.
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/uid_map", p.Pid)); err != nil || len(strings.TrimSpace(string(b))) != 0 {
		t.Errorf("the child's uid_map before the caller mapped it: %q, %v; want empty", b, err)
	}
	// The child's process is still host root: mapped to 0 it is root of
	// its namespace (the agent switches to its own ids after the release:
	// sandbox's becomeRoot).
	const hostUID = 0
	for _, m := range []struct{ file, line string }{{"setgroups", "deny"}, {"gid_map", fmt.Sprintf("0 %d 1", hostUID)}, {"uid_map", fmt.Sprintf("0 %d 1", hostUID)}} {
		if err := os.WriteFile(fmt.Sprintf("/proc/%d/%s", p.Pid, m.file), []byte(m.line), 0); err != nil {
			t.Fatalf("write the child's %s: %v", m.file, err)
		}
	}
	if _, err := syncW.Write([]byte{1}); err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(outR)
	ws, err := p.Wait()
	if err != nil || !ws.Exited() || ws.ExitStatus() != 0 {
		t.Fatalf("wait = %v, %v; output %q", ws, err, b)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != 3 || strings.Join(strings.Fields(lines[0]), " ") != fmt.Sprintf("0 %d 1", hostUID) || lines[1] != "0" {
		t.Fatalf("the child printed %q; want the map written after its start, then uid 0", b)
	}
	if amb := strings.Fields(lines[2]); len(amb) != 2 || strings.Trim(amb[1], "0") == "" {
		t.Errorf("the child's ambient capabilities: %q, want the namespace's (non-zero)", lines[2])
	}
}
