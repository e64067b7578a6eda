package e2e

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/delegation"
	"github.com/agentmesh/agentmesh/pkg/pgtest"
	"github.com/agentmesh/agentmesh/pkg/poll"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
)

// delegationScript scripts a planner and its workers (by input), a second
// model (by model name), a delegation loop, tool overrides and URI errors.
// Scenario indexes matter to RequestsOf: planner 1, worker 2.
const delegationScript = `{
  "scenarios": [
    {"model": "small", "turns": [{"content": "small model says: {{input}}"}]},
    {"match": "^plan:", "turns": [
      {"content": "Fanning out.", "tool_calls": [
        {"name": "call_agent", "arguments": {"agent": "worker", "input": "part A of {{input}}", "title": "A"}},
        {"name": "call_agent", "arguments": {"agent": "worker", "input": "part B of {{input}}", "title": "B"}},
        {"name": "call_agent", "arguments": {"skills": ["research"], "input": "part C of {{input}}", "title": "C"}}
      ]},
      {"content": "Waiting.", "tool_calls": [{"name": "wait_tasks", "arguments": {}}]},
      {"content": "combined: {{last_tool_result}}"}
    ]},
    {"match": "^part", "turns": [{"content": "done({{input}})"}]},
    {"match": "^ask-small", "turns": [
      {"tool_calls": [{"name": "call_model", "arguments": {"model": "small", "input": "what is 2+2?"}}]},
      {"tool_calls": [{"name": "wait_tasks", "arguments": {"tasks": ["{{last_tool_result}}"]}}]},
      {"content": "got: {{last_tool_result}}"}
    ]},
    {"match": "^loop", "turns": [
      {"tool_calls": [
        {"name": "call_agent", "arguments": {"agent": "looper", "input": "loop again"}},
        {"name": "wait_tasks", "arguments": {}}]},
      {"content": "spawned: {{tool_results}}"}
    ]},
    {"match": "^escalate", "turns": [
      {"tool_calls": [
        {"name": "call_agent", "arguments": {"agent": "worker", "input": "part X", "tools": ["shell"]}},
        {"name": "call_agent", "arguments": {"agent": "power", "input": "part Y", "tools": ["code_run"]}},
        {"name": "call_agent", "arguments": {"agent": "power", "input": "part Z", "tools": ["echo"]}}
      ]},
      {"content": "{{tool_results}}"}
    ]},
    {"match": "^subtask://", "turns": [
      {"tool_calls": [
        {"name": "get_task_status", "arguments": {"task": "{{input}}"}},
        {"name": "get_task_status", "arguments": {"task": "subtask://not a task!"}}
      ]},
      {"content": "{{tool_results}}"}
    ]},
    {"turns": [{"content": "final answer: {{input}}"}]}
  ]
}`

var delegationTools = []string{"call_agent", "call_model", "get_task_status", "wait_tasks", "echo"}

func (e *env) createAgentWith(t *testing.T, a *agentmeshv1.Agent) {
	t.Helper()
	e.ensureSkills(t, a.Skills...)
	if _, err := e.agents.CreateAgent(ctxT(t), &agentmeshv1.CreateAgentRequest{Agent: a}); err != nil {
		t.Fatalf("create agent %s: %v", a.Name, err)
	}
}

func (e *env) delegationAgents(t *testing.T) {
	e.createAgentWith(t, &agentmeshv1.Agent{Name: "planner", Tools: delegationTools})
	e.createAgentWith(t, &agentmeshv1.Agent{Name: "worker", Tools: []string{"echo", "current_time"}})
	e.createAgentWith(t, &agentmeshv1.Agent{Name: "researcher", Tools: []string{"echo"}, Skills: []string{"research"}})
}

func (e *env) subtasks(t *testing.T, parent string) []*agentmeshv1.Task {
	t.Helper()
	resp, err := e.tasks.ListTasks(ctxT(t), &agentmeshv1.ListTasksRequest{ParentTaskId: parent, PageSize: 100})
	if err != nil {
		t.Fatalf("list sub-tasks of %s: %v", parent, err)
	}
	return resp.Tasks
}

type waitedStatus struct {
	Task, Status, Agent, Result, Error string
}

// TestDelegationPlannerFansOut: a planner fans out to three workers in one
// turn (two by name, one by skill), waits for them without holding a slot
// and combines their answers, in the order it asked. On a capacity-1
// executor this can only finish if the waiting parent frees its slot.
func TestDelegationPlannerFansOut(t *testing.T) {
	for _, tc := range []struct {
		name     string
		capacity int
		postgres bool
	}{{"capacity-32", 0, false}, {"capacity-1", 1, false}, {"capacity-1-postgres", 1, true}} {
		t.Run(tc.name, func(t *testing.T) {
			o := opts{script: delegationScript, capacity: tc.capacity}
			if tc.postgres {
				o.postgres = pgtest.NewDatabase(t)
			}
			e := start(t, o)
			e.delegationAgents(t)
			parent := e.submit(t, &agentmeshv1.SubmitTaskRequest{Input: "plan: the report", Agent: "planner"})
			done := e.waitStatus(t, parent.Id, taskstate.Completed, 60*time.Second)

			body, ok := strings.CutPrefix(done.Result, "combined: ")
			if !ok {
				t.Fatalf("result = %q, want the combined answers", done.Result)
			}
			var got []waitedStatus
			if err := json.Unmarshal([]byte(body), &got); err != nil {
				t.Fatalf("wait_tasks result %q: %v", body, err)
			}
			want := []string{"done(part A of plan: the report)", "done(part B of plan: the report)", "done(part C of plan: the report)"}
			if len(got) != len(want) {
				t.Fatalf("wait_tasks reported %d sub-tasks, want %d: %s", len(got), len(want), body)
			}
			for i, w := range want {
				if got[i].Status != "completed" || got[i].Result != w {
					t.Errorf("sub-task %d = %+v, want completed %q", i, got[i], w)
				}
			}
			if got[2].Agent != "researcher" {
				t.Errorf("the skills call went to %q, want researcher", got[2].Agent)
			}

			// Sub-tasks are tasks: listed by parent and by tree, with their
			// place in it, and readable by their subtask:// URI.
			subs := e.subtasks(t, parent.Id)
			if len(subs) != 3 {
				t.Fatalf("%d sub-tasks listed, want 3", len(subs))
			}
			for _, s := range subs {
				if s.RootTaskId != parent.Id || s.Depth != 1 || s.Org != done.Org {
					t.Errorf("sub-task %s: root %q depth %d, want root %s depth 1", s.Id, s.RootTaskId, s.Depth, parent.Id)
				}
				byURI, err := e.tasks.GetTask(ctxT(t), &agentmeshv1.GetTaskRequest{Id: delegation.URI(s.Id)})
				if err != nil || byURI.Task.Id != s.Id {
					t.Errorf("GetTask(subtask://%s) = %v, %v", s.Id, byURI, err)
				}
			}
			if done.RootTaskId != parent.Id || done.Depth != 0 {
				t.Errorf("parent: root %q depth %d, want itself at 0", done.RootTaskId, done.Depth)
			}
			tree, err := e.tasks.ListTasks(ctxT(t), &agentmeshv1.ListTasksRequest{RootTaskId: delegation.URI(parent.Id), PageSize: 100})
			if err != nil || len(tree.Tasks) != 4 {
				t.Fatalf("tree of %s: %d tasks (%v), want 4", parent.Id, len(tree.GetTasks()), err)
			}

			// The parent went to blocked on its sub-tasks and back, and no
			// model turn was asked twice: one request per planner turn.
			sawBlocked := false
			for _, ev := range e.history(t, parent.Id) {
				if ev.Type == agentmeshv1.EventType_EVENT_TYPE_STATUS && ev.Status == taskstate.Blocked && ev.SubtaskWait != nil {
					sawBlocked = true
				}
			}
			// With one slot the children cannot run before the parent
			// waits: it must have blocked (and freed the slot) to finish.
			if tc.capacity == 1 && !sawBlocked {
				t.Errorf("the parent never blocked on its sub-tasks")
			}
			m := e.stack.ScriptedModel()
			for k := 0; k < 3; k++ {
				if n := m.RequestsOf(1, k); n != 1 {
					t.Errorf("planner turn %d asked %d times, want 1", k, n)
				}
			}
		})
	}
}

// TestDelegationCallModel: call_model runs a background call on a second
// model name; its answer comes back through wait_tasks.
func TestDelegationCallModel(t *testing.T) {
	e := start(t, opts{script: delegationScript})
	e.delegationAgents(t)
	parent := e.submit(t, &agentmeshv1.SubmitTaskRequest{Input: "ask-small something", Agent: "planner"})
	done := e.waitStatus(t, parent.Id, taskstate.Completed, 60*time.Second)
	if !strings.Contains(done.Result, "small model says: what is 2+2?") {
		t.Fatalf("result = %q, want the small model's answer", done.Result)
	}
	subs := e.subtasks(t, parent.Id)
	if len(subs) != 1 {
		t.Fatalf("%d sub-tasks, want 1", len(subs))
	}
	got, err := e.tasks.GetTask(ctxT(t), &agentmeshv1.GetTaskRequest{Id: subs[0].Id})
	if err != nil {
		t.Fatal(err)
	}
	if m := got.Task.GetAgentSpec().GetModel().GetModel(); m != "small" || len(got.Task.GetAgentSpec().GetTools()) != 0 {
		t.Errorf("call_model sub-task: model %q tools %v, want small and none", m, got.Task.GetAgentSpec().GetTools())
	}
	if got.Task.Status != taskstate.Completed {
		t.Errorf("call_model sub-task is %s", taskstate.Name(got.Task.Status))
	}
}

// TestDelegationDepthLimit: an agent that delegates to itself ends at the
// depth limit with an error the model reads. Each level waits for the one
// below it (a task that ends cancels its unfinished sub-tasks, so a level
// that did not wait would race its child).
func TestDelegationDepthLimit(t *testing.T) {
	stores(t, func(t *testing.T, o opts) { testDepthLimit(t, o) })
}

func testDepthLimit(t *testing.T, o opts) {
	o.script = delegationScript
	e := start(t, o)
	e.createAgentWith(t, &agentmeshv1.Agent{Name: "looper", Tools: delegationTools})
	root := e.submit(t, &agentmeshv1.SubmitTaskRequest{Input: "loop", Agent: "looper"})
	var tree []*agentmeshv1.Task
	want := delegation.DefaultMaxDepth + 1
	pollTree := func() []*agentmeshv1.Task {
		resp, err := e.tasks.ListTasks(ctxShort(t), &agentmeshv1.ListTasksRequest{RootTaskId: root.Id, PageSize: 100})
		if err != nil {
			t.Fatal(err)
		}
		return resp.Tasks
	}
	e.waitStatus(t, root.Id, taskstate.Completed, 60*time.Second)
	poll.Until(t, 60*time.Second, func() error {
		tree = pollTree()
		for _, x := range tree {
			if !taskstate.Terminal(x.Status) {
				return fmt.Errorf("task %s is %s", x.Id, taskstate.Name(x.Status))
			}
		}
		if len(tree) < want {
			return fmt.Errorf("%d tasks in the tree", len(tree))
		}
		return nil
	})
	if len(tree) != want {
		t.Fatalf("tree holds %d tasks, want %d (depths 0..%d)", len(tree), want, delegation.DefaultMaxDepth)
	}
	var deepest *agentmeshv1.Task
	for _, x := range tree {
		if deepest == nil || x.Depth > deepest.Depth {
			deepest = x
		}
	}
	if deepest.Depth != delegation.DefaultMaxDepth || !strings.Contains(deepest.Result, "depth limit") {
		t.Fatalf("deepest task: depth %d result %q, want depth %d and the depth limit named", deepest.Depth, deepest.Result, delegation.DefaultMaxDepth)
	}
}

// TestDelegationToolOverrides: an override may only narrow the target's
// tools to ones the parent may use; anything else is refused, naming the
// tool.
func TestDelegationToolOverrides(t *testing.T) {
	e := start(t, opts{script: delegationScript})
	e.delegationAgents(t)
	e.createAgentWith(t, &agentmeshv1.Agent{Name: "power", Tools: []string{"echo", "code_run"}})
	parent := e.submit(t, &agentmeshv1.SubmitTaskRequest{Input: "escalate", Agent: "planner"})
	done := e.waitStatus(t, parent.Id, taskstate.Completed, 60*time.Second)
	lines := strings.Split(done.Result, "\n")
	if len(lines) != 3 {
		t.Fatalf("result %q: want three tool results", done.Result)
	}
	if !strings.Contains(lines[0], "refused") || !strings.Contains(lines[0], `"shell"`) {
		t.Errorf("shell override (not the worker's) = %q, want refused naming it", lines[0])
	}
	if !strings.Contains(lines[1], "refused") || !strings.Contains(lines[1], `"code_run"`) {
		t.Errorf("code_run override (not the parent's) = %q, want refused naming it", lines[1])
	}
	if !strings.HasPrefix(lines[2], delegation.URIScheme) {
		t.Errorf("echo override (allowed) = %q, want a subtask URI", lines[2])
	}
	subs := e.subtasks(t, parent.Id)
	if len(subs) != 1 {
		t.Fatalf("%d sub-tasks, want only the allowed one", len(subs))
	}
	got, err := e.tasks.GetTask(ctxT(t), &agentmeshv1.GetTaskRequest{Id: subs[0].Id})
	if err != nil {
		t.Fatal(err)
	}
	if tools := got.Task.GetAgentSpec().GetTools(); len(tools) != 1 || tools[0] != "echo" {
		t.Errorf("narrowed sub-agent tools = %v, want [echo]", tools)
	}
}

// TestDelegationBudgetCeiling: the parent's remaining budget bounds each
// sub-task's.
func TestDelegationBudgetCeiling(t *testing.T) {
	e := start(t, opts{script: delegationScript})
	e.delegationAgents(t)
	parent := e.submit(t, &agentmeshv1.SubmitTaskRequest{Input: "plan: budgeted", Agent: "planner",
		Budget: &agentmeshv1.Budget{MaxSteps: 10, MaxTokens: 100000}})
	done := e.waitStatus(t, parent.Id, taskstate.Completed, 60*time.Second)
	subs := e.subtasks(t, parent.Id)
	if len(subs) != 3 {
		t.Fatalf("%d sub-tasks, want 3", len(subs))
	}
	for _, s := range subs {
		b := s.GetBudget()
		// One planner turn was used when it spawned them.
		if b.GetMaxSteps() != 9 || b.GetMaxTokens() <= 0 || b.GetMaxTokens() >= 100000 {
			t.Errorf("sub-task %s budget = %v, want max_steps 9 and max_tokens below the parent's 100000", s.Id, b)
		}
	}
	if done.Usage.GetTotalTokens() <= 0 {
		t.Errorf("parent usage = %v", done.Usage)
	}
}

// TestDelegationForeignAndMalformedURI: get_task_status of another org's
// task answers not found, and of a malformed URI a clear error; nothing of
// the other task leaks.
func TestDelegationForeignAndMalformedURI(t *testing.T) {
	e := start(t, opts{script: delegationScript, keysFile: tenancyKeysFile(t)})
	for _, org := range []string{"a-admin", "b-admin"} {
		if _, err := e.agents.CreateAgent(as(t, org), &agentmeshv1.CreateAgentRequest{Agent: &agentmeshv1.Agent{Name: "planner", Tools: delegationTools}}); err != nil {
			t.Fatal(err)
		}
	}
	secret, err := e.tasks.SubmitTask(as(t, "b-op"), &agentmeshv1.SubmitTaskRequest{Input: "org b secret", Agent: "planner"})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := e.tasks.SubmitTask(as(t, "a-op"), &agentmeshv1.SubmitTaskRequest{Input: delegation.URI(secret.Task.Id), Agent: "planner"})
	if err != nil {
		t.Fatal(err)
	}
	var done *agentmeshv1.Task
	poll.Until(t, 60*time.Second, func() error {
		got, err := e.tasks.GetTask(as(t, "a-op"), &agentmeshv1.GetTaskRequest{Id: resp.Task.Id})
		if err != nil {
			return err
		}
		if done = got.Task; !taskstate.Terminal(done.Status) {
			return errStatus{done.Status, taskstate.Completed}
		}
		return nil
	})
	if done.Status != taskstate.Completed {
		t.Fatalf("task %s: %s (%s)", done.Id, taskstate.Name(done.Status), done.Error)
	}
	lines := strings.Split(done.Result, "\n")
	if len(lines) != 2 {
		t.Fatalf("result %q: want two tool results", done.Result)
	}
	if !strings.Contains(lines[0], "not found") || strings.Contains(lines[0], "secret") {
		t.Errorf("another org's task = %q, want not found and nothing of it", lines[0])
	}
	if !strings.Contains(lines[1], "not a task id or subtask:// URI") {
		t.Errorf("malformed URI = %q, want a clear error", lines[1])
	}
}
