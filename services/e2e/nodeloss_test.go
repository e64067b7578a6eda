package e2e

import (
	"context"
	"fmt"
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
	spawnExecutor func(node string) *proc
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
		spawnExecutor: func(node string) *proc {
			return spawn(t, bin, "executor", common("executor", "AGENTMESH_MODEL_BASE_URL="+modelURL, "AGENTMESH_MODEL=scripted",
				"AGENTMESH_NODE="+node, "AGENTMESH_ACK_WAIT=2s")...)
		},
	}
}
