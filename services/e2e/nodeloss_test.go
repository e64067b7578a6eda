package e2e

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
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
	"google.golang.org/grpc/status"
)

// TestNodeLossResumesWithoutRepeatingModelTurns kills (SIGKILL) the
// executor process running a task mid-way, starts another, and checks the
// task completes there from its last checkpoint: the model turn already
// paid for is not asked again and the tool whose result was checkpointed
// does not run again.
func TestNodeLossResumesWithoutRepeatingModelTurns(t *testing.T) {
	// Turn 0 calls echo at once; turn 1 takes 3 s, long enough to kill the
	// executor while its agent waits for it.
	script := `{"scenarios":[{"turns":[
	  {"content":"echoing","tool_calls":[{"name":"echo","arguments":{"text":"{{input}}"}}]},
	  {"delay_ms":3000,"content":"final: {{last_tool_result}}"}]}]}`
	c := startNodeLossCluster(t, "nl", script)
	e, model := c.env, c.model
	nodeA := c.spawnExecutor("node-a")
	poll.Until(t, 60*time.Second, func() error {
		_, err := e.agents.CreateAgent(ctxShort(t), &agentmeshv1.CreateAgentRequest{Agent: &agentmeshv1.Agent{Name: "assistant", Tools: []string{"echo"}}})
		if status.Code(err) == codes.AlreadyExists {
			return nil
		}
		return err
	})
	task := e.submit(t, &agentmeshv1.SubmitTaskRequest{Input: "survive"})

	// Wait until node A checkpointed the tool result and its agent asked
	// for turn 1 (which the model is slow to answer), then kill node A.
	poll.Until(t, 60*time.Second, func() error {
		if model.RequestsAt(1) == 0 {
			return fmt.Errorf("turn 1 not asked yet")
		}
		return nil
	})
	_, results, _ := steps(e.history(t, task.Id))
	if len(results) != 1 {
		t.Fatalf("before the kill: %d tool results checkpointed, want 1", len(results))
	}
	if err := nodeA.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = nodeA.cmd.Wait()
	c.spawnExecutor("node-b")

	done := e.waitStatus(t, task.Id, taskstate.Completed, 90*time.Second)
	if done.Result != "final: survive" || done.Node != "node-b" || done.Attempt < 2 {
		t.Errorf("completed task: result %q node %q attempt %d; want the answer from node-b on a later attempt", done.Result, done.Node, done.Attempt)
	}
	if n := model.RequestsAt(0); n != 1 {
		t.Errorf("turn 0 was asked %d times, want once (it was checkpointed before the kill)", n)
	}
	turns, results, calls := steps(e.history(t, task.Id))
	if turns != 2 || len(results) != 1 || len(calls) != 1 {
		t.Errorf("history: %d model turns, %d tool calls, %d tool results; want 2, 1, 1 (nothing repeated)", turns, len(calls), len(results))
	}
	_ = context.Background
}

// nodeLossCluster is the four services but the executor as separate OS
// processes against one nats-server, the scripted model of script, and a
// gRPC client of the router; start executors with spawnExecutor.
type nodeLossCluster struct {
	*env
	model         *scriptedmodel.Server
	spawnExecutor func(node string, env ...string) *proc
}

func startNodeLossCluster(t *testing.T, prefix, script string) *nodeLossCluster {
	t.Helper()
	bin := agentmeshBinary(t)
	common := startBus(t, prefix)
	sc, err := scriptedmodel.ParseScript([]byte(script))
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
	spawn(t, bin, "scheduler", common("scheduler")...)
	spawn(t, bin, "router", common("router", "AGENTMESH_LISTEN="+apiAddr)...)
	conn, err := grpc.NewClient(apiAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return &nodeLossCluster{
		env:   &env{conn: conn, tasks: agentmeshv1.NewTaskServiceClient(conn), agents: agentmeshv1.NewAgentServiceClient(conn), skills: agentmeshv1.NewSkillServiceClient(conn)},
		model: model,
		spawnExecutor: func(node string, more ...string) *proc {
			env := append([]string{"AGENTMESH_MODEL_BASE_URL=" + modelURL, "AGENTMESH_MODEL=scripted", "AGENTMESH_NODE=" + node, "AGENTMESH_ACK_WAIT=2s"}, more...)
			// A measurement may set how early answers are checkpointed.
			if v, ok := os.LookupEnv("AGENTMESH_KEEP_ANSWERS_AFTER"); ok {
				env = append(env, "AGENTMESH_KEEP_ANSWERS_AFTER="+v)
			}
			return spawn(t, bin, "executor", common("executor", env...)...)
		},
	}
}

// TestExecutorKilledUnderLoad is issue 11's fault run for an executor:
// tasks stream through two executor processes, one is SIGKILLed while a
// third of them are done, and every task must still complete, each with
// its history recorded once (two model turns, one tool call, one tool
// result: nothing the killed node checkpointed is redone). What the kill
// can still cost is a model answer only the killed executor held — the
// call it interrupted, or a quick answer on its way to its agent — at
// most one per task it was running: the test holds that bound and logs
// the count. AGENTMESH_BENCH_KILL_TASKS (default 60) sets the load for
// the figure in docs/benchmarks.md, and AGENTMESH_BENCH_KILL_DELAY the
// model's latency per turn (AGENTMESH_KEEP_ANSWERS_AFTER, when set, goes to
// the executors):
//
//	AGENTMESH_BENCH_KILL_TASKS=300 AGENTMESH_BENCH_KILL_DELAY=150ms CI=true go test -run ExecutorKilledUnderLoad -v ./services/e2e/
func TestExecutorKilledUnderLoad(t *testing.T) {
	n := 60
	if s := os.Getenv("AGENTMESH_BENCH_KILL_TASKS"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 3 {
			t.Fatalf("AGENTMESH_BENCH_KILL_TASKS=%q: want a number of tasks ≥ 3", s)
		}
		n = v
	}
	// The scripted model answers at once (AGENTMESH_BENCH_KILL_DELAY sets
	// a latency per turn): quick answers are held only in memory between
	// the model and the agent's next checkpoint.
	delay := time.Duration(0)
	if s := os.Getenv("AGENTMESH_BENCH_KILL_DELAY"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d < 0 {
			t.Fatalf("AGENTMESH_BENCH_KILL_DELAY=%q: want a duration", s)
		}
		delay = d
	}
	script := fmt.Sprintf(`{"scenarios":[{"turns":[
	  {"delay_ms":%d,"content":"echoing","tool_calls":[{"name":"echo","arguments":{"text":"{{input}}"}}]},
	  {"delay_ms":%[1]d,"content":"final: {{last_tool_result}}"}]}]}`, delay.Milliseconds())
	c := startNodeLossCluster(t, "kl", script)
	e, model := c.env, c.model
	// Neither executor can take all the tasks: the killed one is always
	// running some of them.
	capacity := fmt.Sprintf("AGENTMESH_CAPACITY=%d", max(2, n/3))
	nodeA := c.spawnExecutor("node-a", capacity)
	c.spawnExecutor("node-b", capacity)
	poll.Until(t, 60*time.Second, func() error {
		_, err := e.agents.CreateAgent(ctxShort(t), &agentmeshv1.CreateAgentRequest{Agent: &agentmeshv1.Agent{Name: "assistant", Tools: []string{"echo"}}})
		if status.Code(err) == codes.AlreadyExists {
			return nil
		}
		return err
	})
	ids := make([]string, n)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := e.tasks.SubmitTask(ctxT(t), &agentmeshv1.SubmitTaskRequest{Input: fmt.Sprintf("task %d", i)})
			if err != nil {
				errs <- err
				return
			}
			ids[i] = resp.Task.Id
		}()
	}
	// Kill node A once a third of the tasks asked for their answer.
	poll.Until(t, 2*time.Minute, func() error {
		if got := model.RequestsAt(1); got < int64(n/3) {
			return fmt.Errorf("%d of %d tasks asked for their answer", got, n/3)
		}
		return nil
	})
	if err := nodeA.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = nodeA.cmd.Wait()
	killedAt := time.Now()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("submit: %v", err)
	}
	interrupted, recalled := 0, 0
	for _, id := range ids {
		done := e.waitStatus(t, id, taskstate.Completed, 3*time.Minute)
		if done.Attempt > 1 {
			interrupted++
			if done.Node == "node-a" {
				t.Errorf("task %s: attempt %d completed on the killed node", id, done.Attempt)
			}
		}
		// A call checkpointed without its result is decided again by the
		// next attempt's gate (a second TOOL_CALL of the same call), and
		// runs with the same idempotency key; a result recorded is never
		// produced again, a turn recorded never asked again.
		turns, results, calls := steps(e.history(t, id))
		if turns != 2 || len(results) != 1 || len(calls) < 1 || len(calls) > int(done.Attempt) {
			t.Errorf("task %s (attempt %d): %d model turns, %d tool calls, %d tool results recorded; want 2, 1 to %d, 1", id, done.Attempt, turns, len(calls), len(results), done.Attempt)
			continue
		}
		for _, c := range calls {
			if c.ToolCallId != results[0].ToolCallId || c.IdempotencyKey != calls[0].IdempotencyKey || c.IdempotencyKey == "" {
				t.Errorf("task %s: tool call %q (key %q) recorded beside the result of %q and the call %q (key %q): a call made anew", id, c.ToolCallId, c.IdempotencyKey, results[0].ToolCallId, calls[0].ToolCallId, calls[0].IdempotencyKey)
			}
		}
		if len(calls) > 1 {
			recalled++
		}
	}
	asked := model.Requests()
	again := asked - int64(2*n)
	// With a latency, the calls the kill cut off before the model answered
	// (no design gets those answers back) are told apart from answers the
	// executor had received and lost with it.
	inFlight := model.Abandoned()
	t.Logf("%d tasks, node-a killed with %d of them unfinished there; all completed %.1fs after the kill; model asked %d times for %d turns: %d answers asked again — %d calls cut off before the model answered, %d answers received and lost with the executor; %d tool calls decided again (checkpointed without their result)",
		n, interrupted, time.Since(killedAt).Seconds(), asked, 2*n, again, inFlight, again-inFlight, recalled)
	if again < 0 || again > int64(interrupted) {
		t.Errorf("model asked %d times for %d turns: %d asked again, want at most one per task the kill interrupted (%d)", asked, 2*n, again, interrupted)
	}
	if interrupted == 0 {
		t.Errorf("no task was interrupted by the kill: the test killed node-a too late to measure anything")
	}
}
