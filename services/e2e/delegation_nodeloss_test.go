package e2e

import (
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/poll"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestDelegationNodeLossMidTree kills (SIGKILL) the executor process while
// a planner waits on three workers whose model turns are under way, starts
// another, and checks the tree completes there: the workers are retried,
// the planner resumes from its checkpoints, and none of the planner's
// model turns (all answered before or after the kill) is asked twice.
func TestDelegationNodeLossMidTree(t *testing.T) {
	// Scenario 0: the planner; 1: the workers, whose only turn is slow
	// enough to kill the node while they wait for it.
	script := `{"scenarios":[
	  {"match":"^plan","turns":[
	    {"content":"fan out","tool_calls":[
	      {"name":"call_agent","arguments":{"agent":"worker","input":"part A"}},
	      {"name":"call_agent","arguments":{"agent":"worker","input":"part B"}},
	      {"name":"call_agent","arguments":{"agent":"worker","input":"part C"}}]},
	    {"content":"wait","tool_calls":[{"name":"wait_tasks","arguments":{}}]},
	    {"content":"combined: {{last_tool_result}}"}]},
	  {"match":"^part","turns":[{"delay_ms":3000,"content":"done({{input}})"}]}]}`
	c := startNodeLossCluster(t, "dl", script)
	e, model := c.env, c.model
	nodeA := c.spawnExecutor("node-a")
	for _, a := range []*agentmeshv1.Agent{
		{Name: "planner", Tools: []string{"call_agent", "wait_tasks", "get_task_status"}},
		{Name: "worker", Tools: []string{"echo"}},
	} {
		poll.Until(t, 60*time.Second, func() error {
			_, err := e.agents.CreateAgent(ctxShort(t), &agentmeshv1.CreateAgentRequest{Agent: a})
			if status.Code(err) == codes.AlreadyExists {
				return nil
			}
			return err
		})
	}
	parent := e.submit(t, &agentmeshv1.SubmitTaskRequest{Input: "plan the work", Agent: "planner"})

	// The planner waits (blocked) and all three workers asked for their
	// slow turn: kill node A now.
	poll.Until(t, 60*time.Second, func() error {
		if n := model.RequestsOf(1, 0); n < 3 {
			return fmt.Errorf("%d workers asked the model", n)
		}
		got, err := e.tasks.GetTask(ctxShort(t), &agentmeshv1.GetTaskRequest{Id: parent.Id})
		if err != nil {
			return err
		}
		if got.Task.BlockedOn != agentmeshv1.BlockedOn_BLOCKED_ON_SUBTASKS {
			return fmt.Errorf("planner is %s", taskstate.Name(got.Task.Status))
		}
		return nil
	})
	if err := nodeA.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = nodeA.cmd.Wait()
	c.spawnExecutor("node-b")

	done := e.waitStatus(t, parent.Id, taskstate.Completed, 120*time.Second)
	for _, part := range []string{"done(part A)", "done(part B)", "done(part C)"} {
		if !strings.Contains(done.Result, part) {
			t.Errorf("result %q lacks %q", done.Result, part)
		}
	}
	if done.Node != "node-b" {
		t.Errorf("planner finished on %q, want node-b", done.Node)
	}
	for k := 0; k < 3; k++ {
		if n := model.RequestsOf(0, k); n != 1 {
			t.Errorf("planner turn %d asked %d times, want once", k, n)
		}
	}
	turns, results, calls := steps(e.history(t, parent.Id))
	if turns != 3 || len(calls) != 4 && len(calls) != 5 {
		t.Errorf("planner history: %d model turns, %d tool calls, %d results", turns, len(calls), len(results))
	}
}
