package storetest

import (
	"sync"
	"testing"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"github.com/agentmesh/agentmesh/services/state/store"
)

// treeTests are the conformance tests of store.Tree.
var treeTests = []struct {
	name string
	fn   func(t *testing.T, s store.Store)
}{
	{"RecordSubtaskOnce", testRecordSubtaskOnce},
	{"SubtreeUsageNotInOrgUsage", testSubtreeUsageNotInOrgUsage},
	{"Unfollowed", testUnfollowed},
}

func record(t *testing.T, s store.Store, holder string, sub *agentmeshv1.SubtaskEvent) (*agentmeshv1.Task, *agentmeshv1.TaskEvent) {
	t.Helper()
	got, ev, err := s.RecordSubtask(ctxT(t), holder, sub)
	if err != nil {
		t.Fatalf("RecordSubtask(%s, %s): %v", holder, sub.TaskId, err)
	}
	return got, ev
}

// Each phase of a sub-task is recorded once, whatever the retries, even
// racing ones; only the end adds the own usage to subtree_usage.
func testRecordSubtaskOnce(t *testing.T, s store.Store) {
	parent := create(t, s, newTask("o1", "planner", ""))
	child := create(t, s, newTask("o1", "worker", ""))
	spawned := &agentmeshv1.SubtaskEvent{TaskId: child.Id, Agent: "worker", Status: taskstate.Queued, ParentTaskId: parent.Id, Depth: 1}
	_, ev := record(t, s, parent.Id, spawned)
	if ev == nil || ev.Type != agentmeshv1.EventType_EVENT_TYPE_SUBTASK || ev.Status != parent.Status {
		t.Fatalf("first record: got %v, want a SUBTASK event keeping status %v", ev, parent.Status)
	}
	if _, again := record(t, s, parent.Id, spawned); again != nil {
		t.Fatalf("second record of the spawn appended %v", again)
	}
	ended := &agentmeshv1.SubtaskEvent{TaskId: child.Id, Agent: "worker", Status: taskstate.Completed, ParentTaskId: parent.Id, Depth: 1,
		Usage: &agentmeshv1.Usage{TotalTokens: 30, CostUsd: 0.3}, OwnUsage: &agentmeshv1.Usage{TotalTokens: 10, CostUsd: 0.1}}
	var wg sync.WaitGroup
	evs := make([]*agentmeshv1.TaskEvent, 4)
	for i := range evs {
		wg.Go(func() {
			_, ev, err := s.RecordSubtask(ctxT(t), parent.Id, ended)
			if err != nil {
				t.Errorf("RecordSubtask: %v", err)
			}
			evs[i] = ev
		})
	}
	wg.Wait()
	n := 0
	for _, ev := range evs {
		if ev != nil {
			n++
		}
	}
	if n != 1 {
		t.Errorf("racing records of the end appended %d events, want 1", n)
	}
	got, err := s.GetTask(ctxT(t), parent.Id)
	if err != nil {
		t.Fatal(err)
	}
	if got.SubtreeUsage.GetTotalTokens() != 10 || got.Usage.GetTotalTokens() != 0 {
		t.Errorf("after the end: subtree %v own %v, want subtree 10 tokens and no own usage", got.SubtreeUsage, got.Usage)
	}
	hist, err := s.History(ctxT(t), parent.Id, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	subs := 0
	for _, ev := range hist {
		if ev.Type == agentmeshv1.EventType_EVENT_TYPE_SUBTASK {
			subs++
		}
	}
	if subs != 2 {
		t.Errorf("history holds %d SUBTASK events, want 2", subs)
	}
	if _, _, err := s.RecordSubtask(ctxT(t), "01JNOSUCHTASKNOSUCHTASK000", spawned); err == nil {
		t.Error("RecordSubtask on an unknown holder: no error")
	}
	// A finished holder still records (its children end after it).
	done := finish(t, s, parent.Id, taskstate.Cancelled, "stop")
	late := &agentmeshv1.SubtaskEvent{TaskId: store.NewID(done.UpdatedAt.AsTime()), Status: taskstate.Cancelled, OwnUsage: &agentmeshv1.Usage{TotalTokens: 5}}
	got, ev = record(t, s, parent.Id, late)
	if ev == nil || got.Status != taskstate.Cancelled || got.SubtreeUsage.GetTotalTokens() != 15 {
		t.Errorf("record on a finished holder: event %v status %v subtree %v", ev, got.Status, got.SubtreeUsage)
	}
}

// GetUsage counts each model turn once: the subtree usage a holder shows is
// not summed again.
func testSubtreeUsageNotInOrgUsage(t *testing.T, s store.Store) {
	parent := create(t, s, newTask("o2", "planner", ""))
	child := create(t, s, newTask("o2", "worker", ""))
	move(t, s, child.Id, store.Transition{To: taskstate.Assigned, NextAttempt: true})
	move(t, s, child.Id, store.Transition{To: taskstate.Running})
	if _, _, err := s.AppendStep(ctxT(t), child.Id, 1, &agentmeshv1.Step{Index: 0, Kind: agentmeshv1.StepKind_STEP_KIND_MODEL_TURN,
		Usage: &agentmeshv1.Usage{PromptTokens: 7, CompletionTokens: 3, TotalTokens: 10, CostUsd: 0.5}}); err != nil {
		t.Fatal(err)
	}
	c := move(t, s, child.Id, store.Transition{To: taskstate.Completed, Result: "ok"})
	record(t, s, parent.Id, &agentmeshv1.SubtaskEvent{TaskId: c.Id, Status: c.Status, Usage: c.Usage, OwnUsage: c.Usage})
	u, n, err := s.Usage(ctxT(t), "o2", "", time.Time{}, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if n != 2 || u.GetTotalTokens() != 10 || u.GetCostUsd() != 0.5 {
		t.Errorf("org usage: got %v over %d tasks, want 10 tokens $0.5 over 2", u, n)
	}
}

// Unfollowed never says that nothing follows a task with a parent, an
// unfinished sub-task or a blocked dependent; a store that says it is
// exact says it of an ended task with none of these.
func testUnfollowed(t *testing.T, s store.Store) {
	ask := func(what, id string, want bool) {
		t.Helper()
		none, exact, err := s.Unfollowed(ctxT(t), id)
		if err != nil {
			t.Fatalf("Unfollowed(%s): %v", what, err)
		}
		if none && !exact {
			t.Errorf("%s: unfollowed but not exact", what)
		}
		if none && !want || exact && none != want {
			t.Errorf("%s: unfollowed=%v (exact %v), want %v", what, none, exact, want)
		}
	}
	leaf := finish(t, s, create(t, s, newTask("o3", "agent", "")).Id, taskstate.Completed, "done")
	ask("a task without parent, sub-tasks or dependents", leaf.Id, true)
	ask("an unknown task", "01JNOSUCHTASKNOSUCHTASK000", false)

	parent := create(t, s, newTask("o3", "planner", ""))
	in := newTask("o3", "worker", "")
	in.ParentTaskId = parent.Id
	kid := create(t, s, in)
	parent = finish(t, s, parent.Id, taskstate.Cancelled, "stop")
	ask("an ended parent with an unfinished sub-task", parent.Id, false)
	finish(t, s, kid.Id, taskstate.Cancelled, "parent ended")
	ask("a sub-task (its end is recorded in its parent)", kid.Id, false)
	ask("an ended parent whose sub-tasks all ended", parent.Id, true)

	first := create(t, s, newTask("o3", "agent", ""))
	dep := create(t, s, withDeps("o3", first.Id))
	first = finish(t, s, first.Id, taskstate.Completed, "first")
	ask("an ended task with a blocked dependent", first.Id, false)
	if got, _ := resolve(t, s, dep.Id, first); got.Status != taskstate.Queued {
		t.Fatalf("dependent after its parent completed: %s, want queued", taskstate.Name(got.Status))
	}
	ask("an ended task whose dependent was released", first.Id, true)
}
