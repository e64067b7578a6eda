package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/poll"
	"github.com/agentmesh/agentmesh/pkg/scriptedmodel"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// TestSchedulerFailoverAndExecutorDrain runs two scheduler processes,
// kills the leader with SIGKILL while an agent capped at max_concurrency 2
// has work queued, running and finishing, then sends SIGTERM to one of the
// two executors while it runs tasks. Nothing is lost (every task
// completes), the cap is never exceeded (the running intervals in the
// history never overlap more than 2 deep), and the draining executor exits
// after its tasks finish or are handed back.
func TestSchedulerFailoverAndExecutorDrain(t *testing.T) {
	const tasks, limit = 24, 2
	bin := agentmeshBinary(t)
	common := startBus(t, "sf")
	scriptPath := filepath.Join(t.TempDir(), "script.json")
	script := `{"scenarios":[{"turns":[{"delay_ms":400,"content":"done: {{input}}"}]}]}`
	if err := os.WriteFile(scriptPath, []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	sc, err := scriptedmodel.LoadScript(scriptPath)
	if err != nil {
		t.Fatal(err)
	}
	model := scriptedmodel.New(sc)
	modelURL, err := model.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = model.Close() })

	apiAddr := freeAddr(t)
	spawn(t, bin, "state", common("state")...)
	spawn(t, bin, "registry", common("registry")...)
	schedEnv := common("scheduler", "AGENTMESH_SCHEDULER_LEASE=1s")
	scheds := []*proc{spawn(t, bin, "scheduler", schedEnv...), spawn(t, bin, "scheduler", schedEnv...)}
	// Three orgs, and the platform key that defines the shared agent they all use.
	spawn(t, bin, "router", common("router", "AGENTMESH_LISTEN="+apiAddr, "AGENTMESH_API_KEYS=ka=alpha,kb=beta,kc=gamma,kp=*:platform")...)
	execEnv := func(node string) []string {
		return common("executor", "AGENTMESH_MODEL_BASE_URL="+modelURL, "AGENTMESH_MODEL=scripted",
			"AGENTMESH_NODE="+node, "AGENTMESH_CAPACITY=4", "AGENTMESH_DRAIN_GRACE=20s")
	}
	exec1 := spawn(t, bin, "executor", execEnv("node-1")...)
	spawn(t, bin, "executor", execEnv("node-2")...)

	// Three orgs submit: each replica would break ties between them its own
	// way, so two leaders at once would over-dispatch.
	var orgs []*env
	for _, key := range []string{"ka", "kb", "kc", "kp"} {
		conn, err := grpc.NewClient(apiAddr, grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
				return invoker(metadata.AppendToOutgoingContext(ctx, "x-api-key", key), method, req, reply, cc, opts...)
			}))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		orgs = append(orgs, &env{conn: conn, tasks: agentmeshv1.NewTaskServiceClient(conn), agents: agentmeshv1.NewAgentServiceClient(conn), skills: agentmeshv1.NewSkillServiceClient(conn)})
	}
	platform := orgs[3]
	orgs = orgs[:3]
	owner := map[string]*env{}
	poll.Until(t, 60*time.Second, func() error {
		_, err := platform.agents.CreateAgent(ctxShort(t), &agentmeshv1.CreateAgentRequest{Agent: &agentmeshv1.Agent{
			Name: "capped", MaxConcurrency: limit,
		}})
		if status.Code(err) == codes.AlreadyExists {
			return nil
		}
		return err
	})
	var ids []string
	for i := range tasks {
		o := orgs[i%len(orgs)]
		id := o.submit(t, &agentmeshv1.SubmitTaskRequest{Input: fmt.Sprintf("task %d", i), Agent: "capped"}).Id
		ids = append(ids, id)
		owner[id] = o
	}

	// Kill the leader once a few tasks are done and the rest still wait.
	poll.Until(t, 60*time.Second, func() error {
		if n := countStatus(t, owner, ids, taskstate.Completed); n < 3 {
			return fmt.Errorf("%d tasks completed", n)
		}
		return nil
	})
	leader := -1
	for i, p := range scheds {
		b, _ := os.ReadFile(p.log)
		if strings.Contains(string(b), "leader lease acquired") {
			leader = i
		}
	}
	if leader < 0 {
		t.Fatal("no scheduler log says it leads")
	}
	if err := scheds[leader].cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = scheds[leader].cmd.Wait()
	if n := countStatus(t, owner, ids, taskstate.Completed); n >= tasks-limit {
		t.Fatalf("%d of %d tasks already completed at the kill; the test needs queued work", n, tasks)
	}

	// SIGTERM an executor while it runs tasks: it drains.
	poll.Until(t, 60*time.Second, func() error {
		for _, id := range ids {
			resp, err := owner[id].tasks.GetTask(ctxShort(t), &agentmeshv1.GetTaskRequest{Id: id})
			if err == nil && resp.Task.Status == taskstate.Running && resp.Task.Node == "node-1" {
				return nil
			}
		}
		return fmt.Errorf("nothing running on node-1")
	})
	if err := exec1.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = exec1.cmd.Wait(); close(exited) }()

	for _, id := range ids {
		owner[id].waitStatus(t, id, taskstate.Completed, 120*time.Second)
	}
	select {
	case <-exited:
	case <-time.After(60 * time.Second):
		t.Fatal("the SIGTERMed executor did not exit")
	}
	b, _ := os.ReadFile(exec1.log)
	if !strings.Contains(string(b), "executor draining") && !strings.Contains(string(b), "executor stopped") {
		t.Errorf("executor log shows no drain")
	}

	survivor, _ := os.ReadFile(scheds[1-leader].log)
	if !strings.Contains(string(survivor), "leader lease acquired") {
		t.Errorf("the surviving scheduler never took the lease")
	}

	var iv []span
	for _, id := range ids {
		iv = append(iv, runningSpans(t, owner[id], id)...)
	}
	if got := deepest(iv); got > limit {
		t.Fatalf("up to %d tasks of the agent ran at once across the failover, want at most %d", got, limit)
	}
}

func countStatus(t *testing.T, owner map[string]*env, ids []string, want agentmeshv1.TaskStatus) int {
	n := 0
	for _, id := range ids {
		resp, err := owner[id].tasks.GetTask(ctxShort(t), &agentmeshv1.GetTaskRequest{Id: id})
		if err == nil && resp.Task.Status == want {
			n++
		}
	}
	return n
}

type span struct{ start, end time.Time }

// runningSpans returns the task's running intervals from its history.
func runningSpans(t *testing.T, e *env, id string) []span {
	var out []span
	var open *span
	for _, ev := range e.history(t, id) {
		if ev.Type != agentmeshv1.EventType_EVENT_TYPE_STATUS {
			continue
		}
		if ev.Status == taskstate.Running {
			open = &span{start: ev.Time.AsTime()}
		} else if open != nil {
			open.end = ev.Time.AsTime()
			out = append(out, *open)
			open = nil
		}
	}
	return out
}

// deepest is the most spans open at one instant.
func deepest(iv []span) int {
	type pt struct {
		at time.Time
		d  int
	}
	var pts []pt
	for _, s := range iv {
		pts = append(pts, pt{s.start, 1}, pt{s.end, -1})
	}
	sort.Slice(pts, func(i, j int) bool {
		if pts[i].at.Equal(pts[j].at) {
			return pts[i].d < pts[j].d
		}
		return pts[i].at.Before(pts[j].at)
	})
	n, top := 0, 0
	for _, p := range pts {
		n += p.d
		top = max(top, n)
	}
	return top
}
