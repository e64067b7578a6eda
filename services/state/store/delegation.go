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
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Delegation is the part of the store sub-task waits need (wait_tasks;
// docs/delegation.md). Both stores implement it over their write loop.
type Delegation interface {
	// WaitSubtasks applies PlanWait with compare-and-set: the running task
	// (at attempt) moves to blocked on the sub-tasks of w.Waiting.
	WaitSubtasks(ctx context.Context, taskID string, attempt int32, node string, w *agentmeshv1.SubtaskWait) (*agentmeshv1.Task, *agentmeshv1.TaskEvent, error)
	// ReleaseSubtaskWait applies PlanReleaseWait: a task blocked on
	// sub-tasks whose wait's deadline has passed goes back to queued; ev
	// is nil when nothing changed.
	ReleaseSubtaskWait(ctx context.Context, taskID string) (*agentmeshv1.Task, *agentmeshv1.TaskEvent, error)
}

// PlanWait moves a running task at attempt to blocked on w.Waiting.
func PlanWait(cur *agentmeshv1.Task, attempt int32, node string, w *agentmeshv1.SubtaskWait, now time.Time) (*agentmeshv1.Task, *agentmeshv1.TaskEvent, error) {
	switch {
	case w == nil || w.ToolCallId == "" || len(w.Waiting) == 0:
		return nil, nil, bus.FieldError("wait", "a tool call id and the sub-tasks waited on are required")
	case cur.Status != taskstate.Running:
		return nil, nil, bus.Errorf(bus.CodeFailedPrecondition, "task %s is %s, not running", cur.Id, taskstate.Name(cur.Status))
	case cur.Attempt != attempt:
		return nil, nil, bus.Errorf(bus.CodeFailedPrecondition, "task %s: stale attempt %d (current %d)", cur.Id, attempt, cur.Attempt)
	}
	ev := &agentmeshv1.TaskEvent{
		TaskId: cur.Id, Seq: cur.LastEventSeq + 1, Type: agentmeshv1.EventType_EVENT_TYPE_STATUS,
		Time: timestamppb.New(now), FromStatus: cur.Status, Status: taskstate.Blocked, Attempt: cur.Attempt,
		Org: cur.Org, Node: node, SubtaskWait: proto.Clone(w).(*agentmeshv1.SubtaskWait),
		Reason: waitReason(w.Waiting, w.Any),
	}
	taskstate.StampStatusEvent(ev, cur)
	return taskstate.Apply(cur, ev), ev, nil
}

func waitReason(ids []string, any bool) string {
	what := "all of"
	if any {
		what = "any of"
	}
	const show = 10
	list := strings.Join(ids, ", ")
	if len(ids) > show {
		list = fmt.Sprintf("%s and %d more", strings.Join(ids[:show], ", "), len(ids)-show)
	}
	return fmt.Sprintf("waiting for %s its sub-tasks: %s", what, list)
}

// planResolveSubtask is PlanResolve for a task blocked on its sub-tasks: a
// sub-task that failed or was cancelled does not fail it (wait_tasks
// reports it to the model); the first end releases a wait of mode any,
// the last one any wait.
func planResolveSubtask(cur *agentmeshv1.Task, child *agentmeshv1.DependencyResult, now time.Time) (*agentmeshv1.Task, *agentmeshv1.TaskEvent, error) {
	ev := &agentmeshv1.TaskEvent{
		TaskId: cur.Id, Seq: cur.LastEventSeq + 1, Type: agentmeshv1.EventType_EVENT_TYPE_STATUS,
		Time: timestamppb.New(now), FromStatus: cur.Status, Attempt: cur.Attempt, Org: cur.Org,
		Dependency: proto.Clone(child).(*agentmeshv1.DependencyResult),
	}
	rest := slices.DeleteFunc(slices.Clone(cur.WaitingOn), func(id string) bool { return id == child.TaskId })
	if cur.GetSubtaskWait().GetAny() || len(rest) == 0 {
		ev.Status = taskstate.Queued
		ev.Reason = fmt.Sprintf("sub-task %s %s: wait_tasks answered", child.TaskId, taskstate.Name(child.Status))
		taskstate.StampStatusEvent(ev, cur)
	} else {
		ev.Type = agentmeshv1.EventType_EVENT_TYPE_DEPENDENCY
		ev.Status = cur.Status
		ev.Reason = fmt.Sprintf("sub-task %s %s; %s", child.TaskId, taskstate.Name(child.Status), waitReason(rest, false))
	}
	return taskstate.Apply(cur, ev), ev, nil
}

// PlanReleaseWait releases a task blocked on sub-tasks at its wait's
// deadline; ev is nil when the task does not wait or it is not yet due.
func PlanReleaseWait(cur *agentmeshv1.Task, now time.Time) (*agentmeshv1.Task, *agentmeshv1.TaskEvent, error) {
	d := cur.GetSubtaskWait().GetDeadline()
	if taskstate.BlockedOn(cur) != agentmeshv1.BlockedOn_BLOCKED_ON_SUBTASKS || d == nil || now.Before(d.AsTime()) {
		return cur, nil, nil
	}
	ev := &agentmeshv1.TaskEvent{
		TaskId: cur.Id, Seq: cur.LastEventSeq + 1, Type: agentmeshv1.EventType_EVENT_TYPE_STATUS,
		Time: timestamppb.New(now), FromStatus: cur.Status, Status: taskstate.Queued, Attempt: cur.Attempt, Org: cur.Org,
		Reason: fmt.Sprintf("wait_tasks timed out at %s; still unfinished: %s", d.AsTime().UTC().Format(time.RFC3339), strings.Join(cur.WaitingOn, ", ")),
	}
	taskstate.StampStatusEvent(ev, cur)
	return taskstate.Apply(cur, ev), ev, nil
}

// WaitArgs are the arguments of Delegation.WaitSubtasks: task TaskID,
// running Attempt on Node, blocks on Wait.
type WaitArgs struct {
	TaskID  string
	Attempt int32
	Node    string
	Wait    *agentmeshv1.SubtaskWait
}

// WaitWith is Delegation.WaitSubtasks over a store's write loop.
func WaitWith(ctx context.Context, write WriteFunc, now func() time.Time, a WaitArgs) (*agentmeshv1.Task, *agentmeshv1.TaskEvent, error) {
	return write(ctx, a.TaskID, func(cur *agentmeshv1.Task) (*agentmeshv1.Task, *agentmeshv1.TaskEvent, error) {
		return PlanWait(cur, a.Attempt, a.Node, a.Wait, now())
	})
}

// ReleaseWaitWith is Delegation.ReleaseSubtaskWait over a store's write
// loop.
func ReleaseWaitWith(ctx context.Context, write WriteFunc, now func() time.Time, taskID string) (*agentmeshv1.Task, *agentmeshv1.TaskEvent, error) {
	var unchanged *agentmeshv1.Task
	t, ev, err := write(ctx, taskID, func(cur *agentmeshv1.Task) (*agentmeshv1.Task, *agentmeshv1.TaskEvent, error) {
		next, ev, err := PlanReleaseWait(cur, now())
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
