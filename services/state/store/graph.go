package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/taskgraph"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// MaxGraphTasks bounds one CreateTasks.
const MaxGraphTasks = 10000

// MaxDependsOn bounds the parents of one task.
const MaxDependsOn = 1000

// GetFunc reads one task; the stores pass their GetTask.
type GetFunc func(ctx context.Context, id string) (*agentmeshv1.Task, error)

// LoadParents reads the parents t depends on (its depends_on entries that
// are not in skip), checking they exist and belong to t's org. An unknown
// id and another org's id get the same not_found naming the id.
func LoadParents(ctx context.Context, get GetFunc, t *agentmeshv1.Task, skip map[string]bool) (map[string]*agentmeshv1.Task, error) {
	if len(t.DependsOn) > MaxDependsOn {
		return nil, bus.FieldError("depends_on", "at most %d parents, got %d", MaxDependsOn, len(t.DependsOn))
	}
	out := make(map[string]*agentmeshv1.Task, len(t.DependsOn))
	for _, id := range t.DependsOn {
		if skip[id] || out[id] != nil {
			continue
		}
		p, err := get(ctx, id)
		if errors.Is(err, bus.ErrNotFound) || (err == nil && p.Org != t.Org) {
			return nil, &bus.Error{Code: bus.CodeNotFound, Field: "depends_on", Message: fmt.Sprintf("task %q not found", id)}
		}
		if err != nil {
			return nil, err
		}
		out[id] = p
	}
	return out, nil
}

// ResultOf is the outcome of a finished task as its dependents see it.
func ResultOf(t *agentmeshv1.Task) *agentmeshv1.DependencyResult {
	d := &agentmeshv1.DependencyResult{TaskId: t.Id, Title: t.Title, Status: t.Status}
	if t.Status == taskstate.Completed {
		d.Result = t.Result
	} else {
		d.Error = t.Error
	}
	return d
}

// runAnyway reports whether t runs whatever its parents' outcomes.
func runAnyway(t *agentmeshv1.Task) bool {
	return t.DependencyPolicy == agentmeshv1.DependencyPolicy_DEPENDENCY_POLICY_RUN_ANYWAY
}

// satisfied reports whether a finished parent lets t go on.
func satisfied(t *agentmeshv1.Task, d *agentmeshv1.DependencyResult) bool {
	return d.Status == taskstate.Completed || runAnyway(t)
}

// failedReason says why a parent's outcome fails its dependent.
func failedReason(d *agentmeshv1.DependencyResult) string {
	what := "failed"
	if d.Status == taskstate.Cancelled {
		what = "was cancelled"
	}
	r := fmt.Sprintf("dependency %s %s", d.TaskId, what)
	if d.Error != "" {
		r += ": " + d.Error
	}
	return r
}

// WaitingReason is the reason of a move to blocked on dependencies.
func WaitingReason(ids []string) string {
	const show = 10
	if len(ids) > show {
		return fmt.Sprintf("waiting for dependencies: %s and %d more", strings.Join(ids[:show], ", "), len(ids)-show)
	}
	return "waiting for dependencies: " + strings.Join(ids, ", ")
}

// PlanCreateDeps is PlanCreate for a task that may have parents: the
// second event moves it to queued (no parents, or all finished), blocked
// (waiting; Task.waiting_on lists them) or failed (a parent failed under
// REQUIRE_SUCCESS). parents holds every parent by id; a parent missing
// from it is one created in the same graph (not finished). id, when set,
// is the task's id (CreateTasks assigns ids before planning).
func PlanCreateDeps(t *agentmeshv1.Task, id string, parents map[string]*agentmeshv1.Task, now time.Time) (*agentmeshv1.Task, []*agentmeshv1.TaskEvent, error) {
	if len(t.DependsOn) == 0 {
		task, evs := PlanCreate(t, now)
		if id != "" {
			setID(task, evs, id)
		}
		return task, evs, nil
	}
	in := proto.Clone(t).(*agentmeshv1.Task)
	in.DependsOn = taskgraph.Dedup(in.DependsOn)
	in.WaitingOn, in.DependencyResults = nil, nil
	var failed *agentmeshv1.DependencyResult
	for _, pid := range in.DependsOn {
		p := parents[pid]
		switch {
		case p == nil || !taskstate.Terminal(p.Status):
			in.WaitingOn = append(in.WaitingOn, pid)
		default:
			d := ResultOf(p)
			in.DependencyResults = append(in.DependencyResults, d)
			if !satisfied(in, d) && failed == nil {
				failed = d
			}
		}
	}
	task, evs := PlanCreate(in, now)
	if id != "" {
		setID(task, evs, id)
	}
	if id == "" {
		id = task.Id
	}
	for _, pid := range in.DependsOn {
		if pid == id {
			return nil, nil, &bus.Error{Code: bus.CodeInvalidArgument, Field: "depends_on", Message: "dependency cycle: a task cannot depend on itself"}
		}
	}
	second := evs[1]
	switch {
	case failed != nil:
		second.Status = taskstate.Failed
		second.FailureKind = agentmeshv1.FailureKind_FAILURE_KIND_DEPENDENCY
		second.Reason = failedReason(failed)
		second.Dependency = failed
	case len(in.WaitingOn) > 0:
		second.Status = taskstate.Blocked
		second.Reason = WaitingReason(in.WaitingOn)
	default:
		second.Reason = "dependencies finished"
	}
	second.QueueTimeout = nil
	taskstate.StampStatusEvent(second, in)
	// Re-fold the two events from the input, now that the second is final.
	task = proto.Clone(in).(*agentmeshv1.Task)
	task.Id = id
	task.Status = agentmeshv1.TaskStatus_TASK_STATUS_UNSPECIFIED
	task.Attempt, task.LastEventSeq, task.StepCount = 0, 0, 0
	task.Usage = nil
	task.Result, task.Error, task.Node = "", "", ""
	task.StartedAt, task.FinishedAt = nil, nil
	if failed != nil {
		// The failing parent is recorded by the event, not twice.
		task.DependencyResults = slices.DeleteFunc(task.DependencyResults, func(d *agentmeshv1.DependencyResult) bool { return d.TaskId == failed.TaskId })
		task.WaitingOn = append(task.WaitingOn, failed.TaskId)
	}
	for _, ev := range evs {
		task = taskstate.Apply(task, ev)
	}
	return task, evs, nil
}

func setID(task *agentmeshv1.Task, evs []*agentmeshv1.TaskEvent, id string) {
	if task.RootTaskId == task.Id {
		task.RootTaskId = id // a root task is its own tree's root
	}
	task.Id = id
	for _, ev := range evs {
		ev.TaskId = id
	}
}

// PlanGraph assigns ids to a graph's tasks (parents first, so ids sort in
// dependency order), replaces "ref:" entries by ids and plans each create.
// It returns the tasks and events in request order. parents holds the
// existing tasks the graph depends on.
func PlanGraph(tasks []*agentmeshv1.Task, refs []string, parents map[string]*agentmeshv1.Task, now time.Time) ([]*agentmeshv1.Task, [][]*agentmeshv1.TaskEvent, error) {
	order, err := CheckGraph(tasks, refs)
	if err != nil {
		return nil, nil, err
	}
	ids := make(map[string]string, len(refs))
	for _, i := range order {
		ids[refs[i]] = NewID(now)
	}
	outT := make([]*agentmeshv1.Task, len(tasks))
	outE := make([][]*agentmeshv1.TaskEvent, len(tasks))
	for _, i := range order {
		t := proto.Clone(tasks[i]).(*agentmeshv1.Task)
		for k, d := range t.DependsOn {
			if ref, ok := strings.CutPrefix(d, taskgraph.RefPrefix); ok {
				t.DependsOn[k] = ids[ref]
			}
		}
		task, evs, err := PlanCreateDeps(t, ids[refs[i]], parents, now)
		if err != nil {
			return nil, nil, fmt.Errorf("task %q: %w", refs[i], err)
		}
		outT[i], outE[i] = task, evs
	}
	return outT, outE, nil
}

// CheckGraph validates refs and dependencies of a graph and returns its
// dependency order. Errors are invalid_argument naming the offender.
func CheckGraph(tasks []*agentmeshv1.Task, refs []string) ([]int, error) {
	switch {
	case len(tasks) == 0:
		return nil, bus.FieldError("tasks", "at least one task is required")
	case len(tasks) > MaxGraphTasks:
		return nil, bus.FieldError("tasks", "at most %d tasks, got %d", MaxGraphTasks, len(tasks))
	case len(refs) != len(tasks):
		return nil, bus.FieldError("refs", "one ref per task")
	}
	seen := make(map[string]bool, len(refs))
	deps := make([][]string, len(tasks))
	for i, r := range refs {
		if seen[r] {
			return nil, bus.FieldError(fmt.Sprintf("tasks[%d].ref", i), "ref %q is used twice", r)
		}
		seen[r] = true
		deps[i] = tasks[i].DependsOn
	}
	order, err := taskgraph.Order(refs, deps)
	if err != nil {
		return nil, &bus.Error{Code: bus.CodeInvalidArgument, Field: "depends_on", Message: err.Error()}
	}
	return order, nil
}

// PlanResolve records that a parent of a blocked task finished: a
// dependency event while other parents remain, a move to queued when it
// was the last (or to failed when the parent failed under
// REQUIRE_SUCCESS). A task not waiting on the parent is returned with no
// event: resolving is idempotent.
func PlanResolve(cur *agentmeshv1.Task, parent *agentmeshv1.DependencyResult, now time.Time) (*agentmeshv1.Task, *agentmeshv1.TaskEvent, error) {
	if parent == nil || parent.TaskId == "" {
		return nil, nil, bus.FieldError("parent", "the parent's outcome is required")
	}
	if !taskstate.Terminal(parent.Status) {
		return nil, nil, bus.FieldError("parent.status", "the parent has not finished (%s)", taskstate.Name(parent.Status))
	}
	if cur.Status != taskstate.Blocked || cur.PendingApproval != nil || !slices.Contains(cur.WaitingOn, parent.TaskId) {
		return cur, nil, nil
	}
	if taskstate.BlockedOn(cur) == agentmeshv1.BlockedOn_BLOCKED_ON_SUBTASKS {
		return planResolveSubtask(cur, parent, now)
	}
	ev := &agentmeshv1.TaskEvent{
		TaskId: cur.Id, Seq: cur.LastEventSeq + 1, Type: agentmeshv1.EventType_EVENT_TYPE_STATUS,
		Time: timestamppb.New(now), FromStatus: cur.Status, Attempt: cur.Attempt, Org: cur.Org,
		Dependency: proto.Clone(parent).(*agentmeshv1.DependencyResult),
	}
	rest := slices.DeleteFunc(slices.Clone(cur.WaitingOn), func(id string) bool { return id == parent.TaskId })
	switch {
	case !satisfied(cur, parent):
		ev.Status = taskstate.Failed
		ev.FailureKind = agentmeshv1.FailureKind_FAILURE_KIND_DEPENDENCY
		ev.Reason = failedReason(parent)
	case len(rest) == 0:
		ev.Status = taskstate.Queued
		ev.Reason = "dependencies finished (last: " + parent.TaskId + ")"
	default:
		ev.Type = agentmeshv1.EventType_EVENT_TYPE_DEPENDENCY
		ev.Status = cur.Status
		ev.Reason = fmt.Sprintf("dependency %s %s; %s", parent.TaskId, taskstate.Name(parent.Status), WaitingReason(rest))
	}
	if ev.Type == agentmeshv1.EventType_EVENT_TYPE_STATUS {
		if err := taskstate.Check(cur.Status, ev.Status); err != nil {
			return nil, nil, bus.Errorf(bus.CodeFailedPrecondition, "task %s: %v", cur.Id, err)
		}
		taskstate.StampStatusEvent(ev, cur)
	}
	return taskstate.Apply(cur, ev), ev, nil
}

// waitingForDeps reports whether t is blocked on parents.
func waitingForDeps(t *agentmeshv1.Task) bool {
	return t.Status == taskstate.Blocked && t.PendingApproval == nil && len(t.WaitingOn) > 0
}

// PlanUpdate validates an update against the task and returns its event:
// UPDATED, or a status event when new dependencies block a queued task or
// release a blocked one. parents holds the parents of a new depends_on.
// A field that can no longer change is failed_precondition naming it.
func PlanUpdate(cur *agentmeshv1.Task, upd *agentmeshv1.TaskUpdate, parents map[string]*agentmeshv1.Task, now time.Time) (*agentmeshv1.Task, *agentmeshv1.TaskEvent, error) {
	if upd == nil || len(upd.Mask) == 0 {
		return nil, nil, bus.FieldError("update_mask", "name at least one field: title, priority, metadata, tags, depends_on")
	}
	u := proto.Clone(upd).(*agentmeshv1.TaskUpdate)
	u.Mask = taskgraph.Dedup(u.Mask)
	next := cur.Status
	for _, f := range u.Mask {
		switch f {
		case taskstate.FieldTitle, taskstate.FieldMetadata, taskstate.FieldTags:
		case taskstate.FieldPriority:
			if cur.Status != taskstate.Queued && cur.Status != taskstate.Created && !waitingForDeps(cur) {
				return nil, nil, &bus.Error{Code: bus.CodeFailedPrecondition, Field: f,
					Message: fmt.Sprintf("task %s is %s; priority orders only tasks that wait to start", cur.Id, taskstate.Name(cur.Status))}
			}
		case taskstate.FieldDependsOn:
			if cur.Status != taskstate.Queued && !waitingForDeps(cur) {
				return nil, nil, &bus.Error{Code: bus.CodeFailedPrecondition, Field: f,
					Message: fmt.Sprintf("task %s is %s; dependencies can change only before it starts", cur.Id, taskstate.Name(cur.Status))}
			}
			u.DependsOn = taskgraph.Dedup(u.DependsOn)
			u.WaitingOn, u.DependencyResults = nil, nil
			for _, pid := range u.DependsOn {
				if pid == cur.Id {
					return nil, nil, &bus.Error{Code: bus.CodeInvalidArgument, Field: f, Message: "dependency cycle: a task cannot depend on itself"}
				}
				p := parents[pid]
				if p == nil {
					return nil, nil, &bus.Error{Code: bus.CodeNotFound, Field: f, Message: fmt.Sprintf("task %q not found", pid)}
				}
				if !taskstate.Terminal(p.Status) {
					u.WaitingOn = append(u.WaitingOn, pid)
					continue
				}
				d := ResultOf(p)
				if !satisfied(cur, d) {
					return nil, nil, &bus.Error{Code: bus.CodeFailedPrecondition, Field: f, Message: failedReason(d)}
				}
				u.DependencyResults = append(u.DependencyResults, d)
			}
			switch {
			case cur.Status == taskstate.Queued && len(u.WaitingOn) > 0:
				next = taskstate.Blocked
			case waitingForDeps(cur) && len(u.WaitingOn) == 0:
				next = taskstate.Queued
			}
		default:
			return nil, nil, bus.FieldError("update_mask", "%q cannot be updated (title, priority, metadata, tags, depends_on)", f)
		}
	}
	ev := &agentmeshv1.TaskEvent{
		TaskId: cur.Id, Seq: cur.LastEventSeq + 1, Type: agentmeshv1.EventType_EVENT_TYPE_UPDATED,
		Time: timestamppb.New(now), FromStatus: cur.Status, Status: cur.Status, Attempt: cur.Attempt, Org: cur.Org,
		Reason: "updated: " + strings.Join(u.Mask, ", "), Update: u,
	}
	if next != cur.Status {
		if err := taskstate.Check(cur.Status, next); err != nil {
			return nil, nil, bus.Errorf(bus.CodeFailedPrecondition, "task %s: %v", cur.Id, err)
		}
		ev.Type, ev.Status = agentmeshv1.EventType_EVENT_TYPE_STATUS, next
		if next == taskstate.Blocked {
			ev.Reason += "; " + WaitingReason(u.WaitingOn)
		}
		taskstate.StampStatusEvent(ev, cur)
	}
	return taskstate.Apply(cur, ev), ev, nil
}

// CheckDelete allows deleting only finished tasks.
func CheckDelete(t *agentmeshv1.Task) error {
	if !taskstate.Terminal(t.Status) {
		return bus.Errorf(bus.CodeFailedPrecondition, "task %s is %s; only finished tasks can be deleted (cancel it first)", t.Id, taskstate.Name(t.Status))
	}
	return nil
}

// Graph is the part of the store that dependencies, updates and deletes
// need. Both stores implement it.
type Graph interface {
	// CreateTasks records a graph atomically (see PlanGraph): every task
	// with its two events, or none.
	CreateTasks(ctx context.Context, tasks []*agentmeshv1.Task, refs []string) ([]*agentmeshv1.Task, [][]*agentmeshv1.TaskEvent, error)
	// ResolveDependency applies PlanResolve with compare-and-set; ev is nil
	// when nothing changed.
	ResolveDependency(ctx context.Context, taskID string, parent *agentmeshv1.DependencyResult) (*agentmeshv1.Task, *agentmeshv1.TaskEvent, error)
	// UpdateTask applies PlanUpdate with compare-and-set.
	UpdateTask(ctx context.Context, taskID string, upd *agentmeshv1.TaskUpdate) (*agentmeshv1.Task, *agentmeshv1.TaskEvent, error)
	// DeleteTask removes a finished task and its history (CheckDelete).
	DeleteTask(ctx context.Context, taskID string) error
	// ScanTasks calls fn for every task matching q (ignoring paging), in
	// no particular order, until fn returns false.
	ScanTasks(ctx context.Context, q TaskQuery, fn func(*agentmeshv1.Task) bool) error
}

// matchesGraphQuery checks the filters graph.go added to TaskQuery.
func matchesGraphQuery(t *agentmeshv1.Task, q TaskQuery) bool {
	if q.Tag != "" && !slices.Contains(t.Tags, q.Tag) {
		return false
	}
	if len(q.Priorities) > 0 && !slices.Contains(q.Priorities, EffectivePriority(t.Priority)) {
		return false
	}
	if q.ParentTaskID != "" && t.ParentTaskId != q.ParentTaskID {
		return false
	}
	if q.RootTaskID != "" && t.RootTaskId != q.RootTaskID {
		return false
	}
	if q.WaitingOn != "" && (t.Status != taskstate.Blocked || !slices.Contains(t.WaitingOn, q.WaitingOn)) {
		return false
	}
	if !q.UpdatedAfter.IsZero() && !t.UpdatedAt.AsTime().After(q.UpdatedAfter) {
		return false
	}
	if !q.LiveOrFinishedAfter.IsZero() && taskstate.Terminal(t.Status) &&
		(t.FinishedAt == nil || t.FinishedAt.AsTime().Before(q.LiveOrFinishedAfter)) {
		return false
	}
	return true
}

// EffectivePriority maps unspecified to normal.
func EffectivePriority(p agentmeshv1.Priority) agentmeshv1.Priority {
	if p == agentmeshv1.Priority_PRIORITY_UNSPECIFIED {
		return agentmeshv1.Priority_PRIORITY_NORMAL
	}
	return p
}

// WriteFunc is a store's compare-and-set loop: it applies plan, which
// turns the task's current state into the next and its event.
type WriteFunc func(ctx context.Context, id string, plan func(cur *agentmeshv1.Task) (*agentmeshv1.Task, *agentmeshv1.TaskEvent, error)) (*agentmeshv1.Task, *agentmeshv1.TaskEvent, error)

// errUnchanged stops a write whose plan changes nothing.
var errUnchanged = errors.New("unchanged")

// ResolveWith is Graph.ResolveDependency over a store's write loop: it
// plans with PlanResolve and, when the parent's end changes nothing (the
// task no longer waits on it), returns the task as it is and no event.
func ResolveWith(ctx context.Context, write WriteFunc, now func() time.Time, taskID string, parent *agentmeshv1.DependencyResult) (*agentmeshv1.Task, *agentmeshv1.TaskEvent, error) {
	var unchanged *agentmeshv1.Task
	t, ev, err := write(ctx, taskID, func(cur *agentmeshv1.Task) (*agentmeshv1.Task, *agentmeshv1.TaskEvent, error) {
		next, ev, err := PlanResolve(cur, parent, now())
		if err == nil && ev == nil {
			unchanged = next
			return nil, nil, errUnchanged
		}
		return next, ev, err
	})
	if errors.Is(err, errUnchanged) {
		return unchanged, nil, nil
	}
	return t, ev, err
}
