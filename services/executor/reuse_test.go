package executor_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/poll"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
)

// With AGENTMESH_CHILD_REUSE=agent, the child of a completed task serves
// the next task of the same org and agent — after it killed what the first
// task left running and emptied its workspace — and never a task of
// another agent or org.
func TestChildReusedForTheSameAgentOnly(t *testing.T) {
	e := newEnv(t)
	e.cfg.ChildReuse = true
	e.useScript(`{"scenarios": [
	  {"match": "plant", "turns": [
	    {"content": "write", "tool_calls": [{"name": "fs_write", "arguments": {"path": "secret.txt", "content": "planted"}}]},
	    {"content": "spawn", "tool_calls": [{"name": "shell", "arguments": {"command": "sleep 300 >/dev/null 2>&1 & echo started"}}]},
	    {"content": "planted"}
	  ]},
	  {"match": "look", "turns": [
	    {"content": "list", "tool_calls": [{"name": "shell", "arguments": {"command": "ls -A /workspace /tmp; ps -e -o comm= 2>/dev/null || ls /proc | grep -c '^[0-9]'"}}]},
	    {"content": "seen: {{last_tool_result}}"}
	  ]}
	]}`)
	ex := e.startExecutorSvc()
	a := &agentmeshv1.Agent{Name: "keeper", SystemPrompt: "You keep things.", Tools: []string{"fs_write", "shell"}}

	first := e.submitAgent(a, "plant")
	if got := e.waitStatus(first.Id, taskstate.Completed, 60*time.Second); got.Result != "planted" {
		t.Fatalf("first task: %q", got.Result)
	}
	// Parked: one child left, with nothing of the first task running in it.
	var parked int
	poll.Until(t, 30*time.Second, func() error {
		c := children(t)
		if st := ex.ReuseStats(); st.Idle != 1 || len(c) != 1 {
			return fmt.Errorf("reuse %+v, agent processes %v; want one parked", st, c)
		}
		parked = c[0]
		return nil
	})
	if n := descendantsOf(t, parked); n != 0 {
		t.Errorf("the parked child still has %d processes under it (the first task's sleep)", n)
	}

	second := e.submitAgent(a, "look")
	got := e.waitStatus(second.Id, taskstate.Completed, 60*time.Second)
	t.Logf("the second task, in the reused child: %q", got.Result)
	if !strings.HasPrefix(got.Result, "seen: ") || strings.Contains(got.Result, "secret.txt") || strings.Contains(got.Result, "sleep") {
		t.Errorf("the second task saw what the first left: %q", got.Result)
	}
	if st := ex.ReuseStats(); st.Hits != 1 {
		t.Errorf("reuse %+v, want the second task to get the parked child", st)
	}
	poll.Until(t, 30*time.Second, func() error {
		if c := children(t); len(c) != 1 || c[0] != parked {
			return fmt.Errorf("agent processes %v, want the same child %d parked again", c, parked)
		}
		return nil
	})

	// Another agent, and the same agent in another org, get children of
	// their own.
	other := &agentmeshv1.Agent{Name: "other", SystemPrompt: "You keep things.", Tools: []string{"fs_write", "shell"}}
	if got := e.waitStatus(e.submitAgent(other, "plant").Id, taskstate.Completed, 60*time.Second); got.Result != "planted" {
		t.Fatalf("other agent: %q", got.Result)
	}
	if st := ex.ReuseStats(); st.Hits != 1 {
		t.Errorf("reuse %+v: another agent's task got a parked child", st)
	}
	task := &agentmeshv1.Task{Org: "globex", Title: "look", Input: "look", Agent: a.Name, AgentSpec: a, RetryPolicy: oneAttempt}
	if got := e.waitStatus(e.submitTask(task).Id, taskstate.Completed, 60*time.Second); !strings.HasPrefix(got.Result, "seen: ") {
		t.Fatalf("other org: %q", got.Result)
	}
	if st := ex.ReuseStats(); st.Hits != 1 {
		t.Errorf("reuse %+v: another org's task got a parked child", st)
	}
}

// descendantsOf counts the live processes below pid.
func descendantsOf(t *testing.T, pid int) int {
	t.Helper()
	parent := liveParents(t)
	n := 0
	for p := range parent {
		for q := parent[p]; q > 1; q = parent[q] {
			if q == pid {
				n++
				break
			}
		}
	}
	return n
}
