package e2e

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/poll"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"github.com/agentmesh/agentmesh/services/scheduler"
)

// treeDelegationScript: a planner ("tree: …") delegates in one turn to a
// quick worker, a worker that fails (its agent allows one model turn and
// its first turn calls a tool) and a worker that takes 10 minutes, then
// waits for all; "timed: …" delegates to the slow worker and waits with a
// 2-second timeout.
const treeDelegationScript = `{"scenarios":[
  {"match":"^tree:","turns":[
    {"tool_calls":[
      {"name":"call_agent","arguments":{"agent":"worker","input":"part quick"}},
      {"name":"call_agent","arguments":{"agent":"fragile","input":"doomed part"}},
      {"name":"call_agent","arguments":{"agent":"worker","input":"slow part"}}]},
    {"tool_calls":[{"name":"wait_tasks","arguments":{}}]},
    {"content":"combined: {{last_tool_result}}"}]},
  {"match":"^timed:","turns":[
    {"tool_calls":[{"name":"call_agent","arguments":{"agent":"worker","input":"slow part"}}]},
    {"tool_calls":[{"name":"wait_tasks","arguments":{"timeout_seconds":2}}]},
    {"content":"{{last_tool_result}}"}]},
  {"match":"^part","turns":[{"content":"done({{input}})"}]},
  {"match":"^doomed","turns":[
    {"tool_calls":[{"name":"echo","arguments":{"text":"one"}}]},
    {"content":"never asked"}]},
  {"match":"^slow","turns":[{"delay_ms":600000,"content":"too late"}]}]}`

func (e *env) treeAgents(t *testing.T) {
	e.createAgentWith(t, &agentmeshv1.Agent{Name: "planner", Tools: delegationTools})
	e.createAgentWith(t, &agentmeshv1.Agent{Name: "worker", Tools: []string{"echo"}})
	e.createAgentWith(t, &agentmeshv1.Agent{Name: "fragile", Tools: []string{"echo"}, Budget: &agentmeshv1.Budget{MaxSteps: 1}})
}

// Issue 9 items 9 and 6 through the public API, with a tree built by
// delegation (call_agent): the parent's WatchTask shows each sub-task's
// spawn, completion and failure inline with its id; cancelling the parent
// while it waits (blocked, no process) and one sub-task runs cancels the
// whole tree and leaves no task unfinished and no agent process.
func TestDelegationTreeWatchedAndCancelled(t *testing.T) {
	// No warm pool: every agent process runs a task. The slow worker's
	// process runs beside its model call (not after it, as by default), so
	// that one process is alive while it runs, for the cancel to end.
	e := start(t, opts{script: treeDelegationScript, noWarmPool: true, childBesideCall: true})
	e.treeAgents(t)
	before := len(agentProcesses())
	parent := e.submit(t, &agentmeshv1.SubmitTaskRequest{Input: "tree: x", Agent: "planner"})
	w := e.watchSubtasks(t, parent.Id)

	var quick, doomed, slow *agentmeshv1.Task
	poll.Until(t, 60*time.Second, func() error {
		for _, s := range e.subtasks(t, parent.Id) {
			switch s.Input {
			case "part quick":
				quick = s
			case "doomed part":
				doomed = s
			case "slow part":
				slow = s
			}
		}
		if quick == nil || doomed == nil || slow == nil {
			return errors.New("the three sub-tasks are not all spawned yet")
		}
		return nil
	})
	e.waitStatus(t, quick.Id, taskstate.Completed, 60*time.Second)
	failed := e.waitStatus(t, doomed.Id, taskstate.Failed, 60*time.Second)
	e.waitStatus(t, slow.Id, taskstate.Running, 60*time.Second)
	e.waitStatus(t, parent.Id, taskstate.Blocked, 60*time.Second)
	// A sub-task's end leaves the parent's waiting_on when the resolver
	// has seen it, just after the end itself.
	poll.Until(t, 30*time.Second, func() error {
		p := e.get(t, parent.Id)
		if p.Status != taskstate.Blocked || taskstate.BlockedOn(p) != agentmeshv1.BlockedOn_BLOCKED_ON_SUBTASKS || len(p.WaitingOn) != 1 || p.WaitingOn[0] != slow.Id {
			return fmt.Errorf("parent %s blocked on %v waiting on %v, want sub-tasks [%s]", taskstate.Name(p.Status), p.BlockedOn, p.WaitingOn, slow.Id)
		}
		return nil
	})

	// The parent's own WatchTask: spawned (all three), completed, failed.
	poll.Until(t, 30*time.Second, func() error {
		for _, s := range []*agentmeshv1.Task{quick, doomed, slow} {
			if w.has(s.Id, false) == nil {
				return fmt.Errorf("no spawn event of %s", s.Id)
			}
		}
		for _, s := range []*agentmeshv1.Task{quick, doomed} {
			if w.has(s.Id, true) == nil {
				return fmt.Errorf("no end event of %s", s.Id)
			}
		}
		return nil
	})
	if s := w.has(slow.Id, false); s.Agent != "worker" || s.ParentTaskId != parent.Id || s.Depth != 1 {
		t.Errorf("spawn of the slow worker as its parent sees it: %v", s)
	}
	if s := w.has(quick.Id, true); s.Status != taskstate.Completed || s.Result != "done(part quick)" {
		t.Errorf("completion of the quick worker as its parent sees it: %v", s)
	}
	if s := w.has(doomed.Id, true); s.Status != taskstate.Failed || s.Error == "" || s.Error != failed.Error {
		t.Errorf("failure of the fragile worker as its parent sees it: %v (the task's error %q)", s, failed.Error)
	}
	if w.has(slow.Id, true) != nil {
		t.Errorf("an end event of the slow worker, which still runs")
	}
	if n := len(agentProcesses()) - before; n < 1 {
		t.Fatalf("%d agent processes while the slow worker runs, want at least 1", n)
	}

	// Cancel the waiting parent: the tree ends and no process remains.
	if _, err := e.tasks.CancelTask(ctxT(t), &agentmeshv1.CancelTaskRequest{Id: parent.Id, Reason: "stop the tree"}); err != nil {
		t.Fatalf("cancel the parent: %v", err)
	}
	poll.Until(t, 60*time.Second, func() error {
		got := e.get(t, slow.Id)
		if got.Status != taskstate.Cancelled {
			return fmt.Errorf("slow worker is %s", taskstate.Name(got.Status))
		}
		if want := "parent " + parent.Id + " ended cancelled"; got.Error != want {
			t.Fatalf("slow worker cancelled with %q, want %q", got.Error, want)
		}
		return nil
	})
	list, err := e.tasks.ListTasks(ctxT(t), &agentmeshv1.ListTasksRequest{RootTaskId: parent.Id, Statuses: []agentmeshv1.TaskStatus{
		taskstate.Created, taskstate.Queued, taskstate.Assigned, taskstate.Running, taskstate.Blocked}})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Tasks) != 0 {
		t.Errorf("%d tasks of the tree still unfinished after its cancel", len(list.Tasks))
	}
	poll.Until(t, 60*time.Second, func() error {
		if n := len(agentProcesses()); n > before {
			return fmt.Errorf("%d agent processes still run", n-before)
		}
		return nil
	})
	for _, s := range []*agentmeshv1.Task{quick, doomed} {
		if got := e.get(t, s.Id); !taskstate.Terminal(got.Status) || got.Status == taskstate.Cancelled {
			t.Errorf("the finished sub-task %s changed: %s", s.Id, taskstate.Name(got.Status))
		}
	}
}

// A wait_tasks timeout releases the parent close to its deadline, from
// the scheduler's timer: the reconcile sweep (the only other way) runs
// every hour here. The resumed call reports the unfinished sub-task.
func TestDelegationWaitTimeoutWithoutTheSweep(t *testing.T) {
	e := start(t, opts{script: treeDelegationScript, scheduler: scheduler.Config{ReconcileInterval: time.Hour}})
	e.treeAgents(t)
	parent := e.submit(t, &agentmeshv1.SubmitTaskRequest{Input: "timed: x", Agent: "planner"})
	done := e.waitStatus(t, parent.Id, taskstate.Completed, 2*time.Minute)
	var got []waitedStatus
	if err := json.Unmarshal([]byte(done.Result), &got); err != nil || len(got) != 1 {
		t.Fatalf("result %q: want one sub-task's status (%v)", done.Result, err)
	}
	if got[0].Status == "completed" || got[0].Agent != "worker" {
		t.Errorf("the timed-out wait reports %+v, want the unfinished worker", got[0])
	}
	released := false
	for _, ev := range e.history(t, parent.Id) {
		if ev.Type == agentmeshv1.EventType_EVENT_TYPE_STATUS && ev.Status == taskstate.Queued && strings.Contains(ev.Reason, "wait_tasks timed out") {
			released = true
		}
	}
	if !released {
		t.Errorf("no re-queue by the wait's timeout in the parent's history")
	}
}
