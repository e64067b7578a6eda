package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/busauth"
	"github.com/agentmesh/agentmesh/pkg/natstest"
	"github.com/agentmesh/agentmesh/pkg/pgtest"
	"github.com/agentmesh/agentmesh/pkg/poll"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// agentmeshBinary builds services/cmd/agentmesh once per test run.
func agentmeshBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "agentmesh-bin-")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "agentmesh")
		cmd := exec.Command("go", "build", "-o", binPath, "github.com/agentmesh/agentmesh/services/cmd/agentmesh")
		out, err := cmd.CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

type proc struct {
	name string
	cmd  *exec.Cmd
	log  string
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// spawn starts `agentmesh <name>` with env as its own OS process.
func spawn(t *testing.T, bin, name string, env ...string) *proc {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, name)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.TempDir(), "AGENTMESH_LOG_LEVEL=debug"}, env...)
	cmd.Stdout, cmd.Stderr = f, f
	// Killed with the test binary too (a go test killed from outside runs
	// no cleanup): no service outlives its test.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	p := &proc{name: name, cmd: cmd, log: logPath}
	t.Cleanup(func() {
		p.stop(t)
		f.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("---- %s log ----\n%s", name, lastLines(string(b), 40))
		}
	})
	return p
}

func (p *proc) stop(t *testing.T) {
	if p.cmd.ProcessState != nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = p.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		t.Errorf("%s did not stop on SIGTERM within 15s; killing", p.name)
		_ = p.cmd.Process.Kill()
		<-done
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// startBus starts a NATS server for prefix and returns the environment of
// an `agentmesh <service>` process on it: the URL, the prefix and the
// service's own creds file, written as `agentmesh bus init` writes them
// (state also gets the tap signer).
func startBus(t *testing.T, prefix string) func(service string, env ...string) []string {
	t.Helper()
	srv := natstest.StartPrefix(t, prefix)
	credsDir := t.TempDir()
	if err := srv.Auth().Write(credsDir); err != nil {
		t.Fatal(err)
	}
	return func(service string, env ...string) []string {
		env = append(env, "AGENTMESH_NATS_URL="+srv.URL(), "AGENTMESH_PREFIX="+prefix,
			"AGENTMESH_NATS_CREDS="+filepath.Join(credsDir, busauth.CredsFile(service)))
		if service == "state" {
			env = append(env, "AGENTMESH_NATS_TAP_SIGNER="+filepath.Join(credsDir, busauth.TapSignerFile))
		}
		return env
	}
}

// TestMultiProcess runs the five services as separate OS processes against
// one nats-server and one Postgres, and drives them through the gRPC API.
func TestMultiProcess(t *testing.T) {
	bin := agentmeshBinary(t)
	common := startBus(t, "mp")
	pgURL := pgtest.NewDatabase(t)
	modelAddr := freeAddr(t)
	apiAddr := freeAddr(t)

	spawn(t, bin, "scripted-model", "AGENTMESH_SCRIPTED_LISTEN="+modelAddr)
	metricsAt := map[string]string{"state": freeAddr(t), "scheduler": freeAddr(t), "router": freeAddr(t)}
	stateEnv := common("state", "AGENTMESH_POSTGRES_URL="+pgURL, "AGENTMESH_METRICS_LISTEN="+metricsAt["state"])
	state := spawn(t, bin, "state", stateEnv...)
	spawn(t, bin, "registry", common("registry")...)
	spawn(t, bin, "scheduler", common("scheduler", "AGENTMESH_METRICS_LISTEN="+metricsAt["scheduler"])...)
	spawn(t, bin, "executor", common("executor", "AGENTMESH_MODEL_BASE_URL=http://"+modelAddr+"/v1", "AGENTMESH_MODEL=scripted", "AGENTMESH_NODE=node-1")...)
	spawn(t, bin, "router", common("router", "AGENTMESH_LISTEN="+apiAddr, "AGENTMESH_METRICS_LISTEN="+metricsAt["router"])...)

	conn, err := grpc.NewClient(apiAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	health := healthpb.NewHealthClient(conn)
	poll.Until(t, 60*time.Second, func() error {
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
	// The state service may still be starting: retry the first calls.
	poll.Until(t, 60*time.Second, func() error {
		_, err := e.skills.CreateSkill(ctxShort(t), &agentmeshv1.CreateSkillRequest{Skill: &agentmeshv1.Skill{Name: "general"}})
		if status.Code(err) == codes.AlreadyExists { // an earlier try got through
			return nil
		}
		return err
	})
	poll.Until(t, 60*time.Second, func() error {
		_, err := e.agents.CreateAgent(ctxShort(t), &agentmeshv1.CreateAgentRequest{Agent: &agentmeshv1.Agent{
			Name: "assistant", Tools: []string{"echo", "current_time"}, Skills: []string{"general"},
		}})
		if status.Code(err) == codes.AlreadyExists { // an earlier try got through
			return nil
		}
		return err
	})
	first := e.submit(t, &agentmeshv1.SubmitTaskRequest{Input: "across processes"})
	done := e.waitStatus(t, first.Id, taskstate.Completed, 60*time.Second)
	if done.Node != "node-1" {
		t.Errorf("node = %q, want node-1", done.Node)
	}
	// Each service process serves its own Prometheus metrics.
	scrapeEach(t, metricsAt, map[string][]string{
		"state":     {`agentmesh_tasks_finished_total{agent="assistant",status="completed"} 1`, `agentmesh_store_seconds_count{code="ok",op="transition"}`},
		"scheduler": {`agentmesh_bus_request_seconds_count{code="ok",op="state.task.dispatch"}`},
		"router":    {`agentmesh_bus_request_seconds_count{code="ok",op="state.task.create"}`},
	})
	// A dependent released by the scheduler process's resolver.
	after := e.submit(t, &agentmeshv1.SubmitTaskRequest{Input: "after the first", DependsOn: []string{first.Id}})
	if got := e.waitStatus(t, after.Id, taskstate.Completed, 60*time.Second); len(got.DependencyResults) != 1 {
		t.Errorf("dependent: results %v, want its parent's", got.DependencyResults)
	}

	// Restart the state service: the record survives, and work goes on.
	state.stop(t)
	spawn(t, bin, "state", stateEnv...)
	poll.Until(t, 60*time.Second, func() error {
		got, err := e.tasks.GetTask(ctxShort(t), &agentmeshv1.GetTaskRequest{Id: first.Id})
		if err != nil {
			return err
		}
		if got.Task.Status != taskstate.Completed {
			return fmt.Errorf("status %s after state restart", taskstate.Name(got.Task.Status))
		}
		return nil
	})
	second := e.submit(t, &agentmeshv1.SubmitTaskRequest{Input: "after the state restart"})
	e.waitStatus(t, second.Id, taskstate.Completed, 60*time.Second)
}

// scrapeEach GETs /metrics of each service and checks it has the lines.
func scrapeEach(t *testing.T, addrs map[string]string, want map[string][]string) {
	t.Helper()
	for svc, lines := range want {
		resp, err := http.Get("http://" + addrs[svc] + "/metrics")
		if err != nil {
			t.Errorf("%s /metrics: %v", svc, err)
			continue
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		for _, l := range lines {
			if !strings.Contains(string(body), l) {
				t.Errorf("%s /metrics lacks %s", svc, l)
			}
		}
	}
}
