package storetest

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"github.com/agentmesh/agentmesh/services/state/store"
	"google.golang.org/protobuf/proto"
)

// graphTests are the conformance tests of dependencies, graphs, updates,
// deletes and scans (store.Graph).
var graphTests = []struct {
	name string
	fn   func(t *testing.T, s store.Store)
}{
	{"DependsOnAtCreate", testDependsOnAtCreate},
	{"DependsOnRefused", testDependsOnRefused},
	{"ResolveDiamond", testResolveDiamond},
	{"ResolveFailure", testResolveFailure},
	{"CreateTasksGraph", testCreateTasksGraph},
	{"CreateTasksRefusedCreatesNothing", testCreateTasksRefused},
	{"GraphFilters", testGraphFilters},
	{"UpdateTask", testUpdateTask},
	{"UpdateDependsOn", testUpdateDependsOn},
	{"DeleteTask", testDeleteTask},
	{"SubtasksOfAParent", testSubtasksOfAParent},
	{"TimingAndScan", testTimingAndScan},
}

func withDeps(org string, deps ...string) *agentmeshv1.Task {
	t := newTask(org, "agent", "")
	t.DependsOn = deps
	return t
}

// finish moves a queued task through to st (completed, failed or cancelled).
func finish(t *testing.T, s store.Store, id string, st agentmeshv1.TaskStatus, text string) *agentmeshv1.Task {
	t.Helper()
	switch st {
	case taskstate.Completed:
		move(t, s, id, store.Transition{To: taskstate.Assigned, NextAttempt: true})
		move(t, s, id, store.Transition{To: taskstate.Running})
		return move(t, s, id, store.Transition{To: taskstate.Completed, Result: text})
	case taskstate.Failed:
		return move(t, s, id, store.Transition{To: taskstate.Failed, Reason: text, FailureKind: agentmeshv1.FailureKind_FAILURE_KIND_AGENT})
	}
	return move(t, s, id, store.Transition{To: st, Reason: text})
}

func resolve(t *testing.T, s store.Store, id string, parent *agentmeshv1.Task) (*agentmeshv1.Task, *agentmeshv1.TaskEvent) {
	t.Helper()
	got, ev, err := s.ResolveDependency(ctxT(t), id, store.ResultOf(parent))
	if err != nil {
		t.Fatalf("ResolveDependency(%s, %s): %v", id, parent.Id, err)
	}
	return got, ev
}

func testDependsOnAtCreate(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	running := create(t, s, newTask("org", "agent", ""))
	done := create(t, s, newTask("org", "agent", ""))
	done = finish(t, s, done.Id, taskstate.Completed, "the answer")
	failed := create(t, s, newTask("org", "agent", ""))
	failed = finish(t, s, failed.Id, taskstate.Failed, "it broke")

	t.Run("waits for an unfinished parent", func(t *testing.T) {
		c, evs, _, err := s.CreateTask(ctx, withDeps("org", running.Id, done.Id, running.Id))
		if err != nil {
			t.Fatalf("CreateTask: %v", err)
		}
		if c.Status != taskstate.Blocked || c.BlockedOn != agentmeshv1.BlockedOn_BLOCKED_ON_DEPENDENCIES {
			t.Fatalf("status %s blocked on %v, want blocked on dependencies", taskstate.Name(c.Status), c.BlockedOn)
		}
		if !slices.Equal(c.WaitingOn, []string{running.Id}) || !slices.Equal(c.DependsOn, []string{running.Id, done.Id}) {
			t.Errorf("waiting_on %v depends_on %v, want [%s] and [%s %s]", c.WaitingOn, c.DependsOn, running.Id, running.Id, done.Id)
		}
		if len(c.DependencyResults) != 1 || c.DependencyResults[0].Result != "the answer" {
			t.Errorf("dependency results %v, want the finished parent's answer", c.DependencyResults)
		}
		if len(evs) != 2 || evs[1].Status != taskstate.Blocked || !strings.Contains(evs[1].Reason, running.Id) {
			t.Errorf("events %v, want created then blocked naming %s", evs, running.Id)
		}
		got, err := s.GetTask(ctx, c.Id)
		if err != nil || !proto.Equal(got, c) {
			t.Errorf("GetTask: %v %v, want %v", got, err, c)
		}
	})
	t.Run("queued when every parent completed", func(t *testing.T) {
		c := create(t, s, withDeps("org", done.Id))
		if c.Status != taskstate.Queued || len(c.WaitingOn) != 0 || len(c.DependencyResults) != 1 {
			t.Fatalf("got %s waiting %v results %v, want queued with the parent's result", taskstate.Name(c.Status), c.WaitingOn, c.DependencyResults)
		}
	})
	t.Run("failed when a parent failed", func(t *testing.T) {
		c := create(t, s, withDeps("org", done.Id, failed.Id))
		if c.Status != taskstate.Failed || c.FailureKind != agentmeshv1.FailureKind_FAILURE_KIND_DEPENDENCY || !strings.Contains(c.Error, failed.Id) {
			t.Fatalf("got %s %v %q, want failed (dependency) naming %s", taskstate.Name(c.Status), c.FailureKind, c.Error, failed.Id)
		}
	})
	t.Run("run anyway after a failed parent", func(t *testing.T) {
		in := withDeps("org", failed.Id)
		in.DependencyPolicy = agentmeshv1.DependencyPolicy_DEPENDENCY_POLICY_RUN_ANYWAY
		c := create(t, s, in)
		if c.Status != taskstate.Queued || len(c.DependencyResults) != 1 || c.DependencyResults[0].Error != "it broke" {
			t.Fatalf("got %s results %v, want queued with the parent's error", taskstate.Name(c.Status), c.DependencyResults)
		}
	})
}

func testDependsOnRefused(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	other := create(t, s, newTask("other-org", "agent", ""))
	for name, id := range map[string]string{"unknown": "01JUNKNOWNUNKNOWNUNKNOWN00", "other org": other.Id} {
		t.Run(name, func(t *testing.T) {
			_, _, _, err := s.CreateTask(ctx, withDeps("org", id))
			wantCode(t, "CreateTask", err, bus.ErrNotFound)
			var be *bus.Error
			if !errors.As(err, &be) || be.Field != "depends_on" || !strings.Contains(be.Message, id) {
				t.Errorf("error %v, want field depends_on naming %s", err, id)
			}
			got, _, _ := s.ListTasks(ctx, store.TaskQuery{Org: "org"})
			if len(got) != 0 {
				t.Errorf("a refused create left %d tasks", len(got))
			}
		})
	}
}

func testResolveDiamond(t *testing.T, s store.Store) {
	a := create(t, s, newTask("org", "agent", ""))
	b := create(t, s, withDeps("org", a.Id))
	c := create(t, s, withDeps("org", a.Id))
	d := create(t, s, withDeps("org", b.Id, c.Id))
	a = finish(t, s, a.Id, taskstate.Completed, "A")
	for _, x := range []*agentmeshv1.Task{b, c} {
		got, ev := resolve(t, s, x.Id, a)
		if got.Status != taskstate.Queued || ev == nil || ev.Dependency.GetTaskId() != a.Id {
			t.Fatalf("%s after its parent: %s (event %v), want queued", x.Id, taskstate.Name(got.Status), ev)
		}
	}
	// Resolving again changes nothing.
	if got, ev := resolve(t, s, b.Id, a); ev != nil || got.Status != taskstate.Queued {
		t.Fatalf("second resolve: event %v status %s, want none and queued", ev, taskstate.Name(got.Status))
	}
	// A task not waiting on the parent: nothing.
	if _, ev := resolve(t, s, d.Id, a); ev != nil {
		t.Fatalf("resolve of a non-parent recorded %v", ev)
	}
	b = finish(t, s, b.Id, taskstate.Completed, "B")
	got, ev := resolve(t, s, d.Id, b)
	if got.Status != taskstate.Blocked || ev.Type != agentmeshv1.EventType_EVENT_TYPE_DEPENDENCY || !slices.Equal(got.WaitingOn, []string{c.Id}) {
		t.Fatalf("after one of two parents: %s %v waiting %v, want blocked, a dependency event, waiting for %s", taskstate.Name(got.Status), ev.Type, got.WaitingOn, c.Id)
	}
	c = finish(t, s, c.Id, taskstate.Completed, "C")
	got, _ = resolve(t, s, d.Id, c)
	if got.Status != taskstate.Queued || len(got.DependencyResults) != 2 || got.DependencyResults[0].Result != "B" || got.DependencyResults[1].Result != "C" {
		t.Fatalf("after both parents: %s results %v, want queued with B then C", taskstate.Name(got.Status), got.DependencyResults)
	}
	// The history replays to the same task.
	hist := checkHistory(t, s, d.Id, got.LastEventSeq)
	replay := &agentmeshv1.Task{Id: d.Id, Org: d.Org, Agent: d.Agent, DependsOn: d.DependsOn, WaitingOn: d.WaitingOn, Title: d.Title, Input: d.Input, Metadata: d.Metadata, Priority: d.Priority}
	for _, ev := range hist {
		replay = taskstate.Apply(replay, ev)
	}
	if !slices.Equal(replay.WaitingOn, got.WaitingOn) || len(replay.DependencyResults) != 2 || replay.Status != got.Status {
		t.Errorf("replayed history gives %v, want %v", replay, got)
	}
}

func testResolveFailure(t *testing.T, s store.Store) {
	for _, st := range []agentmeshv1.TaskStatus{taskstate.Failed, taskstate.Cancelled} {
		t.Run(taskstate.Name(st), func(t *testing.T) {
			p := create(t, s, newTask("org", "agent", ""))
			strict := create(t, s, withDeps("org", p.Id))
			in := withDeps("org", p.Id)
			in.DependencyPolicy = agentmeshv1.DependencyPolicy_DEPENDENCY_POLICY_RUN_ANYWAY
			anyway := create(t, s, in)
			p = finish(t, s, p.Id, st, "boom")
			got, _ := resolve(t, s, strict.Id, p)
			if got.Status != taskstate.Failed || got.FailureKind != agentmeshv1.FailureKind_FAILURE_KIND_DEPENDENCY || !strings.Contains(got.Error, p.Id) {
				t.Errorf("strict dependent: %s %v %q, want failed (dependency) naming %s", taskstate.Name(got.Status), got.FailureKind, got.Error, p.Id)
			}
			got, _ = resolve(t, s, anyway.Id, p)
			if got.Status != taskstate.Queued {
				t.Errorf("run-anyway dependent: %s, want queued", taskstate.Name(got.Status))
			}
		})
	}
}

func testCreateTasksGraph(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	existing := create(t, s, newTask("org", "agent", ""))
	refs := []string{"d", "b", "c", "a"}
	tasks := []*agentmeshv1.Task{
		withDeps("org", "ref:b", "ref:c"), withDeps("org", "ref:a", existing.Id), withDeps("org", "ref:a"), newTask("org", "agent", ""),
	}
	got, evs, err := s.CreateTasks(ctx, tasks, refs)
	if err != nil {
		t.Fatalf("CreateTasks: %v", err)
	}
	if len(got) != 4 || len(evs) != 4 {
		t.Fatalf("got %d tasks and %d event lists, want 4", len(got), len(evs))
	}
	d, b, c, a := got[0], got[1], got[2], got[3]
	if a.Status != taskstate.Queued {
		t.Errorf("root: %s, want queued", taskstate.Name(a.Status))
	}
	for _, x := range []*agentmeshv1.Task{b, c, d} {
		if x.Status != taskstate.Blocked {
			t.Errorf("%s: %s, want blocked", x.Id, taskstate.Name(x.Status))
		}
	}
	if !slices.Equal(d.WaitingOn, []string{b.Id, c.Id}) || !slices.Equal(b.WaitingOn, []string{a.Id, existing.Id}) {
		t.Errorf("waiting_on: d %v b %v, want refs replaced by ids", d.WaitingOn, b.WaitingOn)
	}
	if !(a.Id < b.Id && a.Id < c.Id && b.Id < d.Id && c.Id < d.Id) {
		t.Errorf("ids %s %s %s %s do not sort parents first", a.Id, b.Id, c.Id, d.Id)
	}
	for i, x := range got {
		stored, err := s.GetTask(ctx, x.Id)
		if err != nil || !proto.Equal(stored, x) {
			t.Errorf("task %d: stored %v (%v), want %v", i, stored, err, x)
		}
		checkHistory(t, s, x.Id, 2)
	}
	waiting, _, err := s.ListTasks(ctx, store.TaskQuery{WaitingOn: a.Id})
	if err != nil || fmt.Sprint(ids(waiting)) != fmt.Sprint([]string{c.Id, b.Id}) {
		t.Errorf("waiting on the root: %v (%v), want %s %s", ids(waiting), err, c.Id, b.Id)
	}
}

func testCreateTasksRefused(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	other := create(t, s, newTask("other-org", "agent", ""))
	tests := []struct {
		name  string
		refs  []string
		tasks []*agentmeshv1.Task
		code  *bus.Error
		names string
	}{
		{"cycle", []string{"a", "b", "c"}, []*agentmeshv1.Task{withDeps("org", "ref:c"), withDeps("org", "ref:a"), withDeps("org", "ref:b")}, bus.ErrInvalidArgument, "dependency cycle"},
		{"self", []string{"a", "ok"}, []*agentmeshv1.Task{withDeps("org", "ref:a"), newTask("org", "agent", "")}, bus.ErrInvalidArgument, "a → a"},
		{"unknown ref", []string{"a", "b"}, []*agentmeshv1.Task{newTask("org", "agent", ""), withDeps("org", "ref:zz")}, bus.ErrInvalidArgument, "ref:zz"},
		{"unknown id", []string{"a", "b"}, []*agentmeshv1.Task{newTask("org", "agent", ""), withDeps("org", "01JNOSUCHTASKNOSUCHTASK000")}, bus.ErrNotFound, "01JNOSUCHTASKNOSUCHTASK000"},
		{"other org's id", []string{"a", "b"}, []*agentmeshv1.Task{newTask("org", "agent", ""), withDeps("org", other.Id)}, bus.ErrNotFound, other.Id},
		{"duplicate ref", []string{"a", "a"}, []*agentmeshv1.Task{newTask("org", "agent", ""), newTask("org", "agent", "")}, bus.ErrInvalidArgument, `"a"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := s.CreateTasks(ctx, tc.tasks, tc.refs)
			wantCode(t, "CreateTasks", err, tc.code)
			if !strings.Contains(err.Error(), tc.names) {
				t.Errorf("error %q does not name %q", err, tc.names)
			}
			got, _, _ := s.ListTasks(ctx, store.TaskQuery{Org: "org"})
			if len(got) != 0 {
				t.Errorf("a refused graph left %d tasks", len(got))
			}
		})
	}
}

func testGraphFilters(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	parent := create(t, s, newTask("org", "agent", ""))
	a := newTask("org", "agent", "")
	a.Tags, a.Priority, a.ParentTaskId = []string{"nightly", "etl"}, agentmeshv1.Priority_PRIORITY_HIGH, parent.Id
	ta := create(t, s, a)
	b := newTask("org", "agent", "")
	b.Tags, b.Priority = []string{"etl"}, agentmeshv1.Priority_PRIORITY_LOW
	tb := create(t, s, b)
	c := create(t, s, withDeps("org", tb.Id))
	tests := []struct {
		name string
		q    store.TaskQuery
		want []string
	}{
		{"tag", store.TaskQuery{Tag: "nightly"}, []string{ta.Id}},
		{"tag on two", store.TaskQuery{Tag: "etl"}, []string{tb.Id, ta.Id}},
		{"priority", store.TaskQuery{Priorities: []agentmeshv1.Priority{agentmeshv1.Priority_PRIORITY_LOW}}, []string{tb.Id}},
		{"priorities", store.TaskQuery{Priorities: []agentmeshv1.Priority{agentmeshv1.Priority_PRIORITY_HIGH, agentmeshv1.Priority_PRIORITY_NORMAL}}, []string{c.Id, ta.Id, parent.Id}},
		{"parent", store.TaskQuery{ParentTaskID: parent.Id}, []string{ta.Id}},
		{"waiting on", store.TaskQuery{WaitingOn: tb.Id}, []string{c.Id}},
		{"tag and priority", store.TaskQuery{Tag: "etl", Priorities: []agentmeshv1.Priority{agentmeshv1.Priority_PRIORITY_HIGH}}, []string{ta.Id}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, _, err := s.ListTasks(ctx, tc.q)
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(ids(got)) != fmt.Sprint(tc.want) {
				t.Errorf("got %v, want %v", ids(got), tc.want)
			}
		})
	}
}

func upd(mask ...string) *agentmeshv1.TaskUpdate { return &agentmeshv1.TaskUpdate{Mask: mask} }

func testUpdateTask(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	task := create(t, s, newTask("org", "agent", ""))
	u := upd(taskstate.FieldTitle, taskstate.FieldPriority, taskstate.FieldTags, taskstate.FieldMetadata)
	u.Title, u.Priority, u.Tags, u.Metadata = "new title", agentmeshv1.Priority_PRIORITY_CRITICAL, []string{"x"}, map[string]string{"a": "b"}
	got, ev, err := s.UpdateTask(ctx, task.Id, u)
	if err != nil {
		t.Fatalf("UpdateTask: %v", err)
	}
	if got.Title != "new title" || got.Priority != agentmeshv1.Priority_PRIORITY_CRITICAL || !slices.Equal(got.Tags, []string{"x"}) || got.Metadata["a"] != "b" || got.Metadata["k"] != "" {
		t.Errorf("updated task %v", got)
	}
	if ev.Type != agentmeshv1.EventType_EVENT_TYPE_UPDATED || got.Status != taskstate.Queued || ev.Seq != 3 {
		t.Errorf("event %v status %s, want an updated event (seq 3), still queued", ev, taskstate.Name(got.Status))
	}
	if stored, _ := s.GetTask(ctx, task.Id); !proto.Equal(stored, got) {
		t.Errorf("stored %v, want %v", stored, got)
	}
	// Only the masked field changes.
	u = upd(taskstate.FieldTitle)
	u.Title, u.Priority = "t2", agentmeshv1.Priority_PRIORITY_LOW
	if got, _, _ = s.UpdateTask(ctx, task.Id, u); got.Priority != agentmeshv1.Priority_PRIORITY_CRITICAL || got.Title != "t2" {
		t.Errorf("title-only update changed priority: %v", got)
	}
	running := taskIn(t, s, taskstate.Running)
	for _, tc := range []struct {
		name string
		u    *agentmeshv1.TaskUpdate
		id   string
		code *bus.Error
		fld  string
	}{
		{"priority of a running task", &agentmeshv1.TaskUpdate{Mask: []string{"priority"}, Priority: agentmeshv1.Priority_PRIORITY_HIGH}, running.Id, bus.ErrFailedPrecondition, "priority"},
		{"depends_on of a running task", &agentmeshv1.TaskUpdate{Mask: []string{"depends_on"}}, running.Id, bus.ErrFailedPrecondition, "depends_on"},
		{"unknown field", upd("input"), task.Id, bus.ErrInvalidArgument, "update_mask"},
		{"empty mask", upd(), task.Id, bus.ErrInvalidArgument, "update_mask"},
		{"unknown task", upd("title"), "01JNOSUCHTASKNOSUCHTASK000", bus.ErrNotFound, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := s.UpdateTask(ctx, tc.id, tc.u)
			wantCode(t, "UpdateTask", err, tc.code)
			var be *bus.Error
			if errors.As(err, &be) && be.Field != tc.fld {
				t.Errorf("field %q, want %q", be.Field, tc.fld)
			}
		})
	}
	// Title and tags of a finished task may still change.
	done := taskIn(t, s, taskstate.Completed)
	u = upd(taskstate.FieldTags)
	u.Tags = []string{"archived"}
	if got, _, err := s.UpdateTask(ctx, done.Id, u); err != nil || got.Status != taskstate.Completed || got.Tags[0] != "archived" {
		t.Errorf("tag a finished task: %v %v", got, err)
	}
}

func testUpdateDependsOn(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	p := create(t, s, newTask("org", "agent", ""))
	task := create(t, s, newTask("org", "agent", ""))
	u := upd(taskstate.FieldDependsOn)
	u.DependsOn = []string{p.Id}
	got, ev, err := s.UpdateTask(ctx, task.Id, u)
	if err != nil {
		t.Fatalf("UpdateTask: %v", err)
	}
	if got.Status != taskstate.Blocked || ev.Type != agentmeshv1.EventType_EVENT_TYPE_STATUS || !slices.Equal(got.WaitingOn, []string{p.Id}) {
		t.Fatalf("queued task given a parent: %s %v waiting %v, want blocked waiting for %s", taskstate.Name(got.Status), ev.Type, got.WaitingOn, p.Id)
	}
	u.DependsOn = nil
	got, _, err = s.UpdateTask(ctx, task.Id, u)
	if err != nil || got.Status != taskstate.Queued || len(got.WaitingOn) != 0 {
		t.Fatalf("blocked task's parents removed: %v %v, want queued", got, err)
	}
	u.DependsOn = []string{"01JNOSUCHTASKNOSUCHTASK000"}
	_, _, err = s.UpdateTask(ctx, task.Id, u)
	wantCode(t, "UpdateTask unknown parent", err, bus.ErrNotFound)
}

func testDeleteTask(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	live := create(t, s, newTask("org", "agent", ""))
	wantCode(t, "DeleteTask of a queued task", s.DeleteTask(ctx, live.Id), bus.ErrFailedPrecondition)
	task := create(t, s, newTask("org", "agent", "key-1"))
	task = finish(t, s, task.Id, taskstate.Completed, "r")
	if err := s.DeleteTask(ctx, task.Id); err != nil {
		t.Fatalf("DeleteTask: %v", err)
	}
	_, err := s.GetTask(ctx, task.Id)
	wantCode(t, "GetTask after delete", err, bus.ErrNotFound)
	_, err = s.History(ctx, task.Id, 0, 0)
	wantCode(t, "History after delete", err, bus.ErrNotFound)
	wantCode(t, "DeleteTask again", s.DeleteTask(ctx, task.Id), bus.ErrNotFound)
	got, _, _ := s.ListTasks(ctx, store.TaskQuery{})
	if fmt.Sprint(ids(got)) != fmt.Sprint([]string{live.Id}) {
		t.Errorf("listed after delete: %v, want only %s", ids(got), live.Id)
	}
	// The idempotency key is free again.
	again, _, created, err := s.CreateTask(ctx, newTask("org", "agent", "key-1"))
	if err != nil || !created || again.Id == task.Id {
		t.Errorf("create with the deleted task's key: %v created=%v %v, want a new task", again, created, err)
	}
}

// The sub-tasks of a parent (ParentTaskID, what settling a finished task
// reads) are listed newest first, a page at a time, filtered by status,
// and follow the tasks' changes and deletions; other tasks never appear.
func testSubtasksOfAParent(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	parent := create(t, s, newTask("org", "agent", ""))
	other := create(t, s, newTask("org", "agent", ""))
	var kids []string
	for range 3 {
		k := newTask("org", "agent", "")
		k.ParentTaskId = parent.Id
		kids = append(kids, create(t, s, k).Id)
		o := newTask("org", "agent", "") // another parent's, in between
		o.ParentTaskId = other.Id
		create(t, s, o)
	}
	list := func(q store.TaskQuery) []string {
		t.Helper()
		var out []string
		for {
			got, next, err := s.ListTasks(ctx, q)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, ids(got)...)
			if next == "" {
				return out
			}
			q.PageToken = next
		}
	}
	newest := []string{kids[2], kids[1], kids[0]}
	if got := list(store.TaskQuery{ParentTaskID: parent.Id, PageSize: 2}); fmt.Sprint(got) != fmt.Sprint(newest) {
		t.Errorf("sub-tasks in pages of 2: %v, want %v", got, newest)
	}
	finish(t, s, kids[1], taskstate.Completed, "r")
	active := store.TaskQuery{ParentTaskID: parent.Id, Statuses: []agentmeshv1.TaskStatus{taskstate.Queued, taskstate.Running}}
	if got := list(active); fmt.Sprint(got) != fmt.Sprint([]string{kids[2], kids[0]}) {
		t.Errorf("unfinished sub-tasks: %v, want %v", got, []string{kids[2], kids[0]})
	}
	if err := s.DeleteTask(ctx, kids[1]); err != nil {
		t.Fatalf("DeleteTask: %v", err)
	}
	if got := list(store.TaskQuery{ParentTaskID: parent.Id}); fmt.Sprint(got) != fmt.Sprint([]string{kids[2], kids[0]}) {
		t.Errorf("sub-tasks after a deletion: %v, want %v", got, []string{kids[2], kids[0]})
	}
	if got := list(store.TaskQuery{ParentTaskID: parent.Id, Org: "another"}); len(got) != 0 {
		t.Errorf("another org sees the sub-tasks %v", got)
	}
	if got := list(store.TaskQuery{ParentTaskID: kids[0]}); len(got) != 0 {
		t.Errorf("a task without sub-tasks lists %v", got)
	}
}

func testTimingAndScan(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	old := create(t, s, newTask("org", "agent", ""))
	old = finish(t, s, old.Id, taskstate.Cancelled, "x")
	mark := time.Now()
	tick(mark)
	task := create(t, s, newTask("org", "agent", ""))
	if task.QueuedAt == nil {
		t.Fatalf("queued_at not set: %v", task)
	}
	tick(task.QueuedAt.AsTime())
	done := finish(t, s, task.Id, taskstate.Completed, "r")
	if done.QueueWait.AsDuration() <= 0 || done.RunTime == nil || done.RunTime.AsDuration() < 0 {
		t.Errorf("queue wait %v run time %v, want both measured", done.QueueWait, done.RunTime)
	}
	if want := done.StartedAt.AsTime().Sub(done.QueuedAt.AsTime()); done.QueueWait.AsDuration() != want {
		t.Errorf("queue wait %v, want %v", done.QueueWait.AsDuration(), want)
	}
	live := create(t, s, newTask("org", "agent", ""))
	var seen []string
	err := s.ScanTasks(ctx, store.TaskQuery{Org: "org", LiveOrFinishedAfter: mark}, func(t *agentmeshv1.Task) bool {
		seen = append(seen, t.Id)
		return true
	})
	slices.Sort(seen)
	want := []string{done.Id, live.Id}
	slices.Sort(want)
	if err != nil || !slices.Equal(seen, want) {
		t.Errorf("scan: %v (%v), want %v (not %s, finished before the mark)", seen, err, want, old.Id)
	}
}
