package state_test

import (
	"testing"

	busv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/bus/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/subjects"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
)

// startTree runs one task of agent under parent to running with one model
// turn of the given usage.
func startTree(t *testing.T, r *running, agent, parent string, tokens int64, cost float64) *agentmeshv1.Task {
	t.Helper()
	created := mustCall(t, r.nc, subjects.StateCreateTask, &busv1.CreateTaskRequest{Task: &agentmeshv1.Task{
		Org: "acme", Agent: agent, Input: "work", ParentTaskId: parent}}, &busv1.CreateTaskResponse{})
	id := created.Task.Id
	mustCall(t, r.nc, subjects.StateDispatch, &busv1.TransitionRequest{TaskId: id, From: taskstate.Queued, To: taskstate.Assigned, NextAttempt: true}, &busv1.TransitionResponse{})
	mustCall(t, r.nc, subjects.StateStart, &busv1.TransitionRequest{TaskId: id, From: taskstate.Assigned, To: taskstate.Running, Attempt: 1, Node: "n1"}, &busv1.TransitionResponse{})
	mustCall(t, r.nc, subjects.StateAppendStep, &busv1.AppendStepRequest{TaskId: id, Attempt: 1, Step: &agentmeshv1.Step{
		Kind: agentmeshv1.StepKind_STEP_KIND_MODEL_TURN, Content: "turn", Usage: &agentmeshv1.Usage{TotalTokens: tokens, CostUsd: cost}}}, &busv1.AppendStepResponse{})
	return created.Task
}

func complete(t *testing.T, r *running, id string) {
	t.Helper()
	mustCall(t, r.nc, subjects.StateComplete, &busv1.TransitionRequest{TaskId: id, From: taskstate.Running, To: taskstate.Completed, Attempt: 1, Result: "ok"}, &busv1.TransitionResponse{})
}

func settle(t *testing.T, r *running, id string) *busv1.SettleTaskResponse {
	t.Helper()
	return mustCall(t, r.nc, subjects.StateSettleTask, &busv1.SettleTaskRequest{TaskId: id}, &busv1.SettleTaskResponse{})
}

func getTask(t *testing.T, r *running, id string) *agentmeshv1.Task {
	t.Helper()
	return mustCall(t, r.nc, subjects.StateGetTask, &busv1.GetTaskRequest{Id: id}, &busv1.GetTaskResponse{}).Task
}

func subtaskEvents(t *testing.T, r *running, id string) []*agentmeshv1.SubtaskEvent {
	t.Helper()
	h := mustCall(t, r.nc, subjects.StateHistory, &busv1.HistoryRequest{TaskId: id}, &busv1.HistoryResponse{})
	var out []*agentmeshv1.SubtaskEvent
	for _, ev := range h.Events {
		if ev.Type == agentmeshv1.EventType_EVENT_TYPE_SUBTASK {
			out = append(out, ev.Subtask)
		}
	}
	return out
}

// Usage rolls up across three levels, each descendant's own usage once per
// ancestor, and a settle repeated (a redelivered terminal event) adds
// nothing; org usage counts each turn once.
func TestSubtreeUsageThreeLevelsExactlyOnce(t *testing.T) {
	r := startKV(t)
	root := startTree(t, r, "planner", "", 1, 0.001)
	child := startTree(t, r, "worker", root.Id, 10, 0.01)
	grand := startTree(t, r, "worker", child.Id, 100, 0.1)

	complete(t, r, grand.Id)
	for range 3 { // the event and two redeliveries
		settle(t, r, grand.Id)
	}
	complete(t, r, child.Id)
	if got := settle(t, r, child.Id); got.Recorded != 1 {
		t.Errorf("settle of the child recorded %d events, want 1 (in the root)", got.Recorded)
	}
	if got := settle(t, r, child.Id); got.Recorded != 0 {
		t.Errorf("a second settle of the child recorded %d events, want 0", got.Recorded)
	}
	complete(t, r, root.Id)
	settle(t, r, root.Id)

	for _, tc := range []struct {
		name           string
		id             string
		own, subtree   int64
		subtreeCostUSD float64
	}{
		{"root", root.Id, 1, 110, 0.11},
		{"child", child.Id, 10, 100, 0.1},
		{"grandchild", grand.Id, 100, 0, 0},
	} {
		got := getTask(t, r, tc.id)
		if got.Usage.GetTotalTokens() != tc.own || got.SubtreeUsage.GetTotalTokens() != tc.subtree {
			t.Errorf("%s: own %d subtree %d tokens, want %d and %d", tc.name, got.Usage.GetTotalTokens(), got.SubtreeUsage.GetTotalTokens(), tc.own, tc.subtree)
		}
		if d := got.SubtreeUsage.GetCostUsd() - tc.subtreeCostUSD; d > 1e-9 || d < -1e-9 {
			t.Errorf("%s: subtree cost %v, want %v", tc.name, got.SubtreeUsage.GetCostUsd(), tc.subtreeCostUSD)
		}
	}
	// The root's history: created and ended of the child and of the
	// grandchild (depth 2, its parent named), once each.
	subs := subtaskEvents(t, r, root.Id)
	if len(subs) != 4 {
		t.Fatalf("root has %d SUBTASK events, want 4: %v", len(subs), subs)
	}
	ends := map[string]*agentmeshv1.SubtaskEvent{}
	for _, s := range subs {
		if taskstate.Terminal(s.Status) {
			ends[s.TaskId] = s
		}
	}
	if g := ends[grand.Id]; g == nil || g.Depth != 2 || g.ParentTaskId != child.Id || g.OwnUsage.GetTotalTokens() != 100 {
		t.Errorf("root's event of the grandchild's end: %v", g)
	}
	if c := ends[child.Id]; c == nil || c.Depth != 1 || c.Usage.GetTotalTokens() != 110 || c.OwnUsage.GetTotalTokens() != 10 || c.Result != "ok" {
		t.Errorf("root's event of the child's end: %v (usage = own + subtree 110, own 10)", c)
	}
	u := mustCall(t, r.nc, subjects.StateUsage, &busv1.UsageRequest{Org: "acme"}, &busv1.UsageResponse{})
	if u.Usage.GetTotalTokens() != 111 || u.Tasks != 3 {
		t.Errorf("org usage: %d tokens over %d tasks, want 111 over 3 (each turn once)", u.Usage.GetTotalTokens(), u.Tasks)
	}
}

// A task that ends cancels its unfinished sub-tasks with a reason naming
// it, and the cascade names the ancestor further down; settling an
// unfinished task is refused.
func TestSettleCancelsOrphans(t *testing.T) {
	r := startKV(t)
	root := startTree(t, r, "planner", "", 1, 0)
	child := startTree(t, r, "worker", root.Id, 1, 0)
	grand := startTree(t, r, "worker", child.Id, 1, 0)
	done := startTree(t, r, "worker", root.Id, 1, 0)
	complete(t, r, done.Id)

	if _, err := call(t, r.nc, subjects.StateSettleTask, &busv1.SettleTaskRequest{TaskId: root.Id}, &busv1.SettleTaskResponse{}); bus.CodeOf(err) != bus.CodeFailedPrecondition {
		t.Fatalf("settle of a running task: got %v, want failed_precondition", err)
	}
	complete(t, r, root.Id)
	got := settle(t, r, root.Id)
	if len(got.Cancelled) != 1 || got.Cancelled[0] != child.Id {
		t.Fatalf("settle of the root cancelled %v, want [%s]", got.Cancelled, child.Id)
	}
	if c := getTask(t, r, child.Id); c.Status != taskstate.Cancelled || c.Error != "parent "+root.Id+" ended completed" {
		t.Errorf("child: %s %q", taskstate.Name(c.Status), c.Error)
	}
	settle(t, r, child.Id) // what the tree keeper does on the child's event
	if g := getTask(t, r, grand.Id); g.Status != taskstate.Cancelled || g.Error != "ancestor "+root.Id+" ended completed" {
		t.Errorf("grandchild: %s %q", taskstate.Name(g.Status), g.Error)
	}
	if d := getTask(t, r, done.Id); d.Status != taskstate.Completed {
		t.Errorf("a finished sub-task changed: %s", taskstate.Name(d.Status))
	}
	// A sub-task created under an ended parent is cancelled at once.
	late := mustCall(t, r.nc, subjects.StateCreateTask, &busv1.CreateTaskRequest{Task: &agentmeshv1.Task{
		Org: "acme", Agent: "worker", Input: "late", ParentTaskId: root.Id}}, &busv1.CreateTaskResponse{})
	if late.Task.Status != taskstate.Cancelled {
		t.Errorf("a sub-task created under an ended parent is %s, want cancelled", taskstate.Name(late.Task.Status))
	}
}

// Only the scheduler may settle.
func TestSettleIsTheSchedulers(t *testing.T) {
	n := subjects.Must("am")
	for _, svc := range subjects.Services {
		p, err := n.Permissions(svc)
		if err != nil {
			t.Fatal(err)
		}
		allowed := false
		for _, s := range p.Pub {
			if s == n.State(subjects.StateSettleTask) {
				allowed = true
			}
		}
		if allowed != (svc == subjects.ServiceScheduler) {
			t.Errorf("%s may publish %s: %v", svc, n.State(subjects.StateSettleTask), allowed)
		}
	}
}

// The ceiling of a new sub-task subtracts what its siblings' subtrees
// used, not only the siblings' own turns: a grandchild still running
// counts (the tree scan), and once it ended and was settled into its
// parent's subtree_usage it counts once, not twice.
func TestSpawnCeilingCountsSiblingsSubtrees(t *testing.T) {
	r := startKV(t)
	root := startTree(t, r, "planner", "", 1, 0.001)
	child := startTree(t, r, "worker", root.Id, 10, 0.01)
	grand := startTree(t, r, "worker", child.Id, 100, 0.1)
	spawn := func(call string) *agentmeshv1.Budget {
		t.Helper()
		resp := mustCall(t, r.nc, subjects.StateSpawn, &busv1.SpawnSubtaskRequest{
			ParentTaskId: root.Id, Attempt: 1, ToolCallId: call, AgentSpec: &agentmeshv1.Agent{Name: "worker"}, Input: "more",
			Ceiling: &agentmeshv1.Budget{MaxTokens: 1000, MaxCostUsd: 1},
		}, &busv1.SpawnSubtaskResponse{})
		return getTask(t, r, resp.Task.Id).Budget
	}
	check := func(what string, b *agentmeshv1.Budget) {
		t.Helper()
		// 1000 less the sibling (10) and its running or settled child (100).
		if b.GetMaxTokens() != 890 || b.GetMaxCostUsd() < 0.889 || b.GetMaxCostUsd() > 0.891 {
			t.Errorf("%s: budget %v, want max_tokens 890 and max_cost_usd 0.89", what, b)
		}
	}
	check("grandchild running", spawn("c1"))
	complete(t, r, grand.Id)
	settle(t, r, grand.Id)
	if got := getTask(t, r, child.Id).SubtreeUsage.GetTotalTokens(); got != 100 {
		t.Fatalf("the sibling's subtree usage is %d tokens after the settle, want 100", got)
	}
	check("grandchild settled", spawn("c2"))
}
