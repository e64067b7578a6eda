package e2e

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/poll"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// rootlessUser is the ordinary account the rootless test runs agentmesh as.
const rootlessUser = "amtest"

// unprivileged returns the uid and gid of rootlessUser, creating the
// account (a system user without a home or a login shell) when it does
// not exist. Only root can do either; elsewhere the test skips (fails
// under CI=true, which runs as root).
func unprivileged(t *testing.T) (uid, gid uint32) {
	t.Helper()
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("the rootless test switches to an ordinary user: it needs root in CI")
		}
		t.Skip("the rootless test switches to an ordinary user: run it as root")
	}
	u, err := user.Lookup(rootlessUser)
	if err != nil {
		out, err := exec.Command("useradd", "--system", "--user-group", "--no-create-home", "--shell", "/usr/sbin/nologin", rootlessUser).CombinedOutput()
		if err != nil {
			t.Fatalf("useradd %s: %v\n%s", rootlessUser, err, out)
		}
		if u, err = user.Lookup(rootlessUser); err != nil {
			t.Fatal(err)
		}
	}
	id, _ := strconv.ParseUint(u.Uid, 10, 32)
	g, _ := strconv.ParseUint(u.Gid, 10, 32)
	if id == 0 {
		t.Fatalf("user %s is root", rootlessUser)
	}
	return uint32(id), uint32(g)
}

// TestRootlessDev is issue 7's "rootless" test: the built agentmesh binary
// runs `agentmesh dev` as an ordinary user (no capabilities, no writable
// cgroup) with its default isolation (best-effort), and completes tasks
// whose agent runs code_run, through the public API. The task records the
// isolation it got, and the start-up log names what is missing and why.
//
//   - one-uid: the user has no subordinate ids, so every task's sandbox is
//     mapped to the user's own uid: the label on the task and the log say
//     so ("one uid for all tasks") — never silently.
//   - subordinate-ids: the user has a range in /etc/subuid and /etc/subgid
//     (and newuidmap/newgidmap are installed): two concurrent tasks run as
//     two different host uids of the range, each workspace 0700 and owned
//     by its task's uid, and a process with one task's host ids can
//     neither chmod nor utime the other's workspace, even handed an open
//     descriptor of it.
func TestRootlessDev(t *testing.T) {
	uid, gid := unprivileged(t)
	built := agentmeshBinary(t)
	t.Run("one-uid", func(t *testing.T) {
		setSubIDs(t, nil)
		r := startRootlessDev(t, uid, gid, built)
		task := r.e.submit(t, &agentmeshv1.SubmitTaskRequest{Input: "compute", Agent: "coder"})
		got := r.e.waitStatus(t, task.Id, taskstate.Completed, 2*time.Minute)
		if !strings.Contains(got.Result, "answer 42") || !strings.Contains(got.Result, "uid 0") {
			t.Errorf("result %q, want code_run's output (uid 0 inside its user namespace, answer 42)", got.Result)
		}
		const label = "reduced: one uid for all tasks — add a /etc/subuid range and install uidmap"
		if !strings.HasPrefix(got.Isolation, label) {
			t.Errorf("isolation %q on the task, want it to start with %q", got.Isolation, label)
		}
		log := r.log()
		if !strings.Contains(log, "isolation reduced") || !strings.Contains(log, "MISSING: a host uid per task") || !strings.Contains(log, "/etc/subuid") {
			t.Errorf("the start-up log does not name the isolation and what is missing:\n%s", lastLines(log, 20))
		}
	})
	t.Run("subordinate-ids", func(t *testing.T) {
		for _, helper := range []string{"newuidmap", "newgidmap"} {
			if _, err := exec.LookPath(helper); err != nil {
				if os.Getenv("CI") == "true" {
					t.Fatalf("%s is not installed (Debian package uidmap; .ci/run installs it): %v", helper, err)
				}
				t.Skipf("%s is not installed (apt-get install uidmap): %v", helper, err)
			}
		}
		sub := sandboxIDRange{first: 1_300_000_000, count: 65536}
		setSubIDs(t, &sub)
		r := startRootlessDev(t, uid, gid, built)
		a := r.e.submit(t, &agentmeshv1.SubmitTaskRequest{Input: "wait", Agent: "coder"})
		b := r.e.submit(t, &agentmeshv1.SubmitTaskRequest{Input: "wait", Agent: "coder"})
		// Both tasks' programs run at once, each waiting for a file "go"
		// in its workspace.
		var progs []int
		poll.Until(t, 2*time.Minute, func() error {
			progs = progs[:0]
			for _, pid := range descendants(r.pid) {
				if _, err := os.Stat(fmt.Sprintf("/proc/%d/cwd/ready", pid)); err == nil && strings.HasPrefix(procName(pid), "python") {
					progs = append(progs, pid)
				}
			}
			if len(progs) != 2 {
				return fmt.Errorf("%d of 2 tasks' programs are running", len(progs))
			}
			return nil
		})
		pa, pb := progs[0], progs[1]
		// The agents came from the spawner (a fork server), not from a
		// fork of the whole dev process, and run below its priority.
		for _, pid := range progs {
			chain := ancestors(pid, r.pid)
			if len(chain) < 2 || !strings.HasSuffix(procCmdline(chain[len(chain)-1]), "\x00spawner") {
				var names []string
				for _, p := range chain {
					names = append(names, fmt.Sprintf("%d %q", p, procCmdline(p)))
				}
				t.Errorf("task program %d: the process under dev (%d) is not the spawner: %s", pid, r.pid, strings.Join(names, " ← "))
			}
			if n := procNice(t, pid); n < 10 {
				t.Errorf("task program %d runs at nice %d, want the agents' 10 (AGENTMESH_AGENT_NICE)", pid, n)
			}
		}
		ua, ga := hostIDs(t, pa)
		ub, _ := hostIDs(t, pb)
		t.Logf("task programs: pid %d as host uid %d, pid %d as host uid %d", pa, ua, pb, ub)
		for _, u := range []int{ua, ub} {
			if u < sub.first || u >= sub.first+sub.count {
				t.Errorf("a task runs as host uid %d, not one of the subordinate range %d-%d", u, sub.first, sub.first+sub.count-1)
			}
		}
		if ua == ub {
			t.Errorf("both tasks run as host uid %d", ua)
		}
		wsB := fmt.Sprintf("/proc/%d/cwd", pb)
		before, err := os.Stat(wsB)
		if err != nil {
			t.Fatal(err)
		}
		if st := before.Sys().(*syscall.Stat_t); int(st.Uid) != ub || before.Mode().Perm() != 0o700 {
			t.Errorf("task B's workspace is owned by uid %d with mode %v, want uid %d and 0700", st.Uid, before.Mode().Perm(), ub)
		}
		// A process with task A's host ids, handed task B's workspace (a
		// descriptor, and its path through /proc).
		fd, err := os.Open(wsB)
		if err != nil {
			t.Fatal(err)
		}
		probe := exec.Command("/usr/bin/python3", "-c", `
import os, sys
for name, f in [("fchmod", lambda: os.chmod(3, 0o777)), ("futimens", lambda: os.utime(3, (0, 0))),
                ("chmod", lambda: os.chmod(sys.argv[1], 0o777)), ("utime", lambda: os.utime(sys.argv[1], (0, 0)))]:
    try:
        f()
        print(name, "SUCCEEDED")
    except OSError as e:
        print(name, "refused:", e)
`, wsB)
		probe.ExtraFiles = []*os.File{fd}
		probe.Env = []string{"PATH=/usr/bin:/bin"}
		probe.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(ua), Gid: uint32(ga), Groups: []uint32{}}}
		out, err := probe.CombinedOutput()
		fd.Close()
		t.Logf("as task A's host uid %d on task B's workspace:\n%s", ua, out)
		if err != nil || strings.Contains(string(out), "SUCCEEDED") || strings.Count(string(out), "refused") != 4 {
			t.Errorf("task A's host uid changed task B's workspace, or the probe did not run (%v):\n%s", err, out)
		}
		if after, err := os.Stat(wsB); err != nil {
			t.Error(err)
		} else if after.Mode() != before.Mode() || !after.ModTime().Equal(before.ModTime()) {
			t.Errorf("task B's workspace changed: %v %v → %v %v", before.Mode(), before.ModTime(), after.Mode(), after.ModTime())
		}
		// Release both programs: "go" in each workspace, created with its
		// task's host ids (root's are not mapped in the task's tmpfs)
		// through a descriptor the test opened.
		for _, pid := range progs {
			u, g := hostIDs(t, pid)
			ws, err := os.Open(fmt.Sprintf("/proc/%d/cwd", pid))
			if err != nil {
				t.Fatal(err)
			}
			touch := exec.Command("/usr/bin/touch", "/proc/self/fd/3/go")
			touch.ExtraFiles = []*os.File{ws}
			touch.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(u), Gid: uint32(g), Groups: []uint32{}}}
			out, err := touch.CombinedOutput()
			ws.Close()
			if err != nil {
				t.Fatalf("release task program %d: %v: %s", pid, err, out)
			}
		}
		for _, task := range []*agentmeshv1.Task{a, b} {
			got := r.e.waitStatus(t, task.Id, taskstate.Completed, 2*time.Minute)
			if !strings.Contains(got.Result, "answer 42") || !strings.Contains(got.Result, "uid 0") {
				t.Errorf("result %q, want code_run's output (uid 0 inside its user namespace, answer 42)", got.Result)
			}
			// Without a delegated cgroup the level stays reduced, but the
			// label says the tasks have a uid each.
			if got.Isolation != "strict" && !strings.HasPrefix(got.Isolation, "reduced: a subordinate uid per task") {
				t.Errorf("isolation %q on the task, want strict or reduced with a subordinate uid per task", got.Isolation)
			}
		}
		if log := r.log(); !strings.Contains(log, "a host uid per task from the subordinate uids 1300000000-1300065535") || strings.Contains(log, "MISSING: a host uid per task") {
			t.Errorf("the start-up log does not name the subordinate ids:\n%s", lastLines(log, 20))
		}
	})
}

// rootlessDev is an `agentmesh dev` running as an ordinary user.
type rootlessDev struct {
	e       *env
	pid     int
	logPath string
}

func (r *rootlessDev) log() string {
	b, _ := os.ReadFile(r.logPath)
	return string(b)
}

// startRootlessDev runs the built binary's `agentmesh dev` as uid:gid in a
// directory of its own, with a scripted model whose agent "coder" runs
// one program with code_run: it prints its uid and 6·7 — after waiting
// for a file "go" in its workspace when the task's input is "wait".
func startRootlessDev(t *testing.T, uid, gid uint32, built string) *rootlessDev {
	t.Helper()
	// A directory the user owns, with a copy of the binary it can execute
	// (the build directory is private to root).
	dir, err := os.MkdirTemp("", "agentmesh-rootless-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	bin := filepath.Join(dir, "agentmesh")
	if err := copyFile(built, bin, 0o755); err != nil {
		t.Fatal(err)
	}
	const prog = `import os, time\nopen('ready', 'w').close()\nfor _ in range(900):\n    if os.path.exists('go'): break\n    time.sleep(0.1)\nprint('uid', os.getuid(), 'answer', 6 * 7)`
	script := `{"scenarios":[
	  {"match":"wait","turns":[
	    {"tool_calls":[{"name":"code_run","arguments":{"language":"python","timeout_seconds":110,"code":"` + prog + `"}}]},
	    {"content":"done: {{last_tool_result}}"}]},
	  {"turns":[
	    {"tool_calls":[{"name":"code_run","arguments":{"language":"python","code":"import os; print('uid', os.getuid(), 'answer', 6 * 7)"}}]},
	    {"content":"done: {{last_tool_result}}"}]}]}`
	scriptPath := filepath.Join(dir, "script.json")
	if err := os.WriteFile(scriptPath, []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{dir, bin, scriptPath} {
		if err := os.Chown(p, int(uid), int(gid)); err != nil {
			t.Fatal(err)
		}
	}
	apiAddr := freeAddr(t)
	logPath := filepath.Join(dir, "dev.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { logf.Close() })
	cmd := exec.Command(bin, "dev")
	cmd.Dir = dir
	cmd.Env = []string{
		"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + dir, "AGENTMESH_LISTEN=" + apiAddr,
		"AGENTMESH_HTTP_LISTEN=off", "AGENTMESH_NATS_LISTEN=off", "AGENTMESH_SCRIPT=" + scriptPath, "AGENTMESH_NODE=rootless",
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: gid, Groups: []uint32{}}, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("---- agentmesh dev log ----\n%s", lastLines(string(b), 40))
		}
	})

	conn, err := grpc.NewClient(apiAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	health := healthpb.NewHealthClient(conn)
	poll.Until(t, 90*time.Second, func() error {
		select {
		case <-exited:
			b, _ := os.ReadFile(logPath)
			t.Fatalf("agentmesh dev exited as an ordinary user: %v\n%s", cmd.ProcessState, lastLines(string(b), 10))
		default:
		}
		resp, err := health.Check(context.Background(), &healthpb.HealthCheckRequest{})
		if err != nil {
			return err
		}
		if resp.Status != healthpb.HealthCheckResponse_SERVING {
			return fmt.Errorf("health %v", resp.Status)
		}
		return nil
	})
	e := &env{tasks: agentmeshv1.NewTaskServiceClient(conn), agents: agentmeshv1.NewAgentServiceClient(conn), skills: agentmeshv1.NewSkillServiceClient(conn)}
	if _, err := e.agents.CreateAgent(ctxT(t), &agentmeshv1.CreateAgentRequest{Agent: &agentmeshv1.Agent{
		Name: "coder", Tools: []string{"code_run"},
	}}); err != nil {
		t.Fatalf("create agent: %v", err)
	}
	if st, err := os.Stat(filepath.Join(dir, ".agentmesh")); err != nil {
		t.Errorf("dev's data directory: %v", err)
	} else if owner := st.Sys().(*syscall.Stat_t).Uid; owner != uid {
		t.Errorf("dev's data directory is owned by uid %d, want %d (dev ran as root?)", owner, uid)
	}
	return &rootlessDev{e: e, pid: cmd.Process.Pid, logPath: logPath}
}

type sandboxIDRange struct{ first, count int }

// setSubIDs gives rootlessUser the subordinate range r in /etc/subuid and
// /etc/subgid (nil: none), for the test; the files are restored after it.
func setSubIDs(t *testing.T, r *sandboxIDRange) {
	t.Helper()
	for _, path := range []string{"/etc/subuid", "/etc/subgid"} {
		orig, err := os.ReadFile(path)
		existed := err == nil
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		var keep []string
		for _, line := range strings.Split(string(orig), "\n") {
			if line != "" && !strings.HasPrefix(line, rootlessUser+":") {
				keep = append(keep, line)
			}
		}
		if r != nil {
			keep = append(keep, fmt.Sprintf("%s:%d:%d", rootlessUser, r.first, r.count))
		}
		content := strings.Join(keep, "\n")
		if content != "" {
			content += "\n"
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if existed {
				_ = os.WriteFile(path, orig, 0o644)
			} else {
				_ = os.Remove(path)
			}
		})
	}
}

// descendants lists the pids of the processes below pid.
func descendants(pid int) []int {
	parent := map[int]int{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if p, err := strconv.Atoi(e.Name()); err == nil {
			parent[p] = ppid(p)
		}
	}
	var out []int
	for p := range parent {
		for q := parent[p]; q > 1; q = parent[q] {
			if q == pid {
				out = append(out, p)
				break
			}
		}
	}
	return out
}

// ancestors are pid, its parent, …, up to the child of top (top not
// included); nil if top is not an ancestor.
func ancestors(pid, top int) []int {
	var out []int
	for p := pid; p > 1; p = ppid(p) {
		if p == top {
			return out
		}
		out = append(out, p)
	}
	return nil
}

// ppid is the parent of pid (0 when it is gone).
func ppid(pid int) int {
	// pid (comm) state ppid ...: comm may hold spaces and parentheses.
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i > 0 {
		if f := strings.Fields(s[i+1:]); len(f) > 1 {
			p, _ := strconv.Atoi(f[1])
			return p
		}
	}
	return 0
}

// procCmdline is a process's arguments, NUL-separated.
func procCmdline(pid int) string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return strings.TrimRight(string(b), "\x00")
}

// procNice is a process's nice value (/proc/PID/stat, field 19).
func procNice(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	// After the comm: state is field 3, nice field 19.
	n, err := strconv.Atoi(f[19-3])
	if err != nil {
		t.Fatalf("nice of %d: %v", pid, err)
	}
	return n
}

func procName(pid int) string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	return strings.TrimSpace(string(b))
}

// hostIDs are the real uid and gid of a process, as the host sees them.
func hostIDs(t *testing.T, pid int) (uid, gid int) {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	uid, gid = -1, -1
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 1 {
			switch f[0] {
			case "Uid:":
				uid, _ = strconv.Atoi(f[1])
			case "Gid:":
				gid, _ = strconv.Atoi(f[1])
			}
		}
	}
	return uid, gid
}

func copyFile(from, to string, mode os.FileMode) error {
	src, err := os.Open(from)
	if err != nil {
		return err
	}
	defer src.Close()
	dst, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(dst, src); err != nil {
		dst.Close()
		return err
	}
	return dst.Close()
}
