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
// cgroup) with its default isolation (best-effort), and completes a task
// whose agent runs code_run, through the public API. The task records the
// isolation it got, and the start-up log names what is missing and why.
func TestRootlessDev(t *testing.T) {
	uid, gid := unprivileged(t)
	built := agentmeshBinary(t)
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
	script := `{"scenarios":[{"turns":[
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
	defer logf.Close()
	cmd := exec.Command(bin, "dev")
	cmd.Dir = dir
	cmd.Env = []string{
		"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + dir, "AGENTMESH_LISTEN=" + apiAddr,
		"AGENTMESH_NATS_LISTEN=off", "AGENTMESH_SCRIPT=" + scriptPath, "AGENTMESH_NODE=rootless",
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
	defer conn.Close()
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
	e := &env{tasks: agentmeshv1.NewTaskServiceClient(conn), agents: agentmeshv1.NewAgentServiceClient(conn)}
	if _, err := e.agents.CreateAgent(ctxT(t), &agentmeshv1.CreateAgentRequest{Agent: &agentmeshv1.Agent{
		Name: "coder", Tools: []string{"code_run"},
	}}); err != nil {
		t.Fatalf("create agent: %v", err)
	}
	task := e.submit(t, &agentmeshv1.SubmitTaskRequest{Input: "compute", Agent: "coder"})
	got := e.waitStatus(t, task.Id, taskstate.Completed, 2*time.Minute)
	if !strings.Contains(got.Result, "answer 42") || !strings.Contains(got.Result, "uid 0") {
		t.Errorf("result %q, want code_run's output (uid 0 inside its user namespace, answer 42)", got.Result)
	}
	// As an ordinary user on this kind of host there is no uid per task
	// (and, without a delegated cgroup, no cgroup limits): reduced, and
	// said so — never silently none.
	if got.Isolation != "reduced" && got.Isolation != "strict" {
		t.Errorf("isolation %q on the task, want reduced (or strict)", got.Isolation)
	}
	b, _ := os.ReadFile(logPath)
	if !strings.Contains(string(b), "isolation "+got.Isolation) || !strings.Contains(string(b), "MISSING: a host uid per task") {
		t.Errorf("the start-up log does not name the isolation and what is missing:\n%s", lastLines(string(b), 20))
	}
	if st, err := os.Stat(filepath.Join(dir, ".agentmesh")); err != nil {
		t.Errorf("dev's data directory: %v", err)
	} else if owner := st.Sys().(*syscall.Stat_t).Uid; owner != uid {
		t.Errorf("dev's data directory is owned by uid %d, want %d (dev ran as root?)", owner, uid)
	}
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
