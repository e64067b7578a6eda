package executor_test

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/poll"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"github.com/agentmesh/agentmesh/services/executor"
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

func TestParseChildReuse(t *testing.T) {
	for in, want := range map[string]bool{"": false, "off": false, "agent": true, " agent ": true} {
		if got, err := executor.ParseChildReuse(in); err != nil || got != want {
			t.Errorf("ParseChildReuse(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	if _, err := executor.ParseChildReuse("org"); err == nil {
		t.Error(`ParseChildReuse("org") accepted`)
	}
}

// descendantsOf counts the live processes below pid.
func descendantsOf(t *testing.T, pid int) int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	parent := map[int]int{}
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) < 2 || f[0] == "Z" {
			continue
		}
		pp, _ := strconv.Atoi(f[1])
		parent[p] = pp
	}
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

// Reuse together with the warm pool under load: every task completes,
// children are reused, and parked, warm and running stay within the
// capacity.
func TestChildReuseWithWarmPoolUnderLoad(t *testing.T) {
	e := newEnv(t)
	e.cfg.ChildReuse = true
	e.cfg.WarmPool = 2
	ex := e.startExecutorSvc()
	var ids []string
	for i := range 24 {
		ids = append(ids, e.submit(fmt.Sprintf("what time is it? %d", i)).Id)
	}
	for _, id := range ids {
		e.waitStatus(id, taskstate.Completed, 60*time.Second)
	}
	if st := ex.ReuseStats(); st.Hits == 0 {
		t.Errorf("reuse %+v: no task got a parked child", st)
	}
	poll.Until(t, 30*time.Second, func() error {
		if c, st := children(t), ex.ReuseStats(); len(c) > e.cfg.Capacity {
			return fmt.Errorf("%d agent processes (reuse %+v, warm %+v) above the capacity %d", len(c), st, ex.WarmStats(), e.cfg.Capacity)
		}
		return nil
	})
}
