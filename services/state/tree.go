package state

// Trees of tasks. A sub-task names its parent (parent_task_id). State keeps
// the tree's record:
//
//   - when a sub-task is created, every ancestor's history gets one
//     EVENT_TYPE_SUBTASK event (status queued, the sub-task's id, agent,
//     depth and parent), so WatchTask on any ancestor shows its subtree
//     growing;
//   - task.settle (the scheduler's tree keeper, after a terminal event)
//     records the end in every ancestor (once each: the store's
//     RecordSubtask is idempotent, so a redelivered event adds nothing) —
//     the event's own_usage joins the ancestor's subtree_usage — and
//     cancels the task's unfinished sub-tasks with a reason naming the
//     ancestor that ended (taskstate.CascadeReason). Their own terminal
//     events settle them in turn, down to the leaves.
//
// A sub-task created while its parent ends is caught here: after the
// create commits, the parent is re-read and, if it has ended, the new
// sub-task is cancelled at once (the tree keeper's listing may have come
// before the commit).

import (
	"context"
	"errors"
	"fmt"

	busv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/bus/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"github.com/agentmesh/agentmesh/services/state/store"
	"google.golang.org/protobuf/proto"
)

// maxTreeDepth bounds the walk up a task's ancestors (a guard against a
// malformed record; delegation's own depth limit is far below it).
const maxTreeDepth = 64

// ancestors returns t's ancestors, the parent first, stopping at a missing
// task, another org's, a cycle or maxTreeDepth.
func (s *Service) ancestors(ctx context.Context, t *agentmeshv1.Task) ([]*agentmeshv1.Task, error) {
	var out []*agentmeshv1.Task
	seen := map[string]bool{t.Id: true}
	for id := t.ParentTaskId; id != "" && !seen[id] && len(out) < maxTreeDepth; {
		seen[id] = true
		p, err := s.store.GetTask(ctx, id)
		if errors.Is(err, bus.ErrNotFound) {
			break // deleted by retention or by hand
		}
		if err != nil {
			return out, fmt.Errorf("ancestor %s of %s: %w", id, t.Id, err)
		}
		if p.Org != t.Org {
			break
		}
		out = append(out, p)
		id = p.ParentTaskId
	}
	return out, nil
}

// subtaskEvent is what an ancestor's history says of t.
func subtaskEvent(t *agentmeshv1.Task, depth int) *agentmeshv1.SubtaskEvent {
	sub := &agentmeshv1.SubtaskEvent{
		TaskId: t.Id, Agent: t.Agent, Title: t.Title, Status: t.Status,
		Depth: int32(depth), ParentTaskId: t.ParentTaskId,
	}
	if !taskstate.Terminal(t.Status) {
		sub.Status = taskstate.Queued
		return sub
	}
	if t.Status == taskstate.Completed {
		sub.Result = t.Result
	} else {
		sub.Error = t.Error
	}
	own := &agentmeshv1.Usage{}
	store.AddUsage(own, t.Usage)
	all := proto.Clone(own).(*agentmeshv1.Usage)
	store.AddUsage(all, t.SubtreeUsage)
	sub.OwnUsage, sub.Usage = own, all
	return sub
}

// recordInAncestors appends t's SUBTASK event (its creation or its end) to
// every ancestor's history, once each, and publishes what it appended.
func (s *Service) recordInAncestors(ctx context.Context, t *agentmeshv1.Task) (int, error) {
	anc, err := s.ancestors(ctx, t)
	sub := subtaskEvent(t, len(anc))
	n := 0
	for _, a := range anc {
		got, ev, rerr := s.store.RecordSubtask(ctx, a.Id, sub)
		if rerr != nil {
			if errors.Is(rerr, bus.ErrNotFound) {
				continue
			}
			return n, fmt.Errorf("record sub-task %s in %s: %w", t.Id, a.Id, rerr)
		}
		if ev != nil {
			observe(got, ev)
			s.publishTaskEvents(ctx, got, ev)
			n++
		}
	}
	return n, err
}

// spawned records a just-created sub-task in its ancestors and, when its
// parent has already ended, cancels it (see the file comment). It returns
// the task as it now stands.
func (s *Service) spawned(ctx context.Context, t *agentmeshv1.Task) *agentmeshv1.Task {
	if t.ParentTaskId == "" {
		return t
	}
	if _, err := s.recordInAncestors(ctx, t); err != nil {
		s.log.WarnContext(ctx, "record a new sub-task in its ancestors", "task_id", t.Id, "err", err)
	}
	p, err := s.store.GetTask(ctx, t.ParentTaskId)
	if err != nil || !taskstate.Terminal(p.Status) || p.Org != t.Org {
		return t
	}
	if next := s.cancelOrphan(ctx, t.Id, p); next != nil {
		return next
	}
	return t
}

// cancelOrphan cancels the unfinished sub-task id of parent, which ended.
// It returns the cancelled task, or nil when it was not cancelled (it had
// ended meanwhile, or the write failed: logged).
func (s *Service) cancelOrphan(ctx context.Context, id string, parent *agentmeshv1.Task) *agentmeshv1.Task {
	t, ev, err := s.store.Transition(ctx, store.Transition{TaskID: id, To: taskstate.Cancelled, Reason: taskstate.CascadeReason(parent)})
	if err != nil {
		if !errors.Is(err, bus.ErrFailedPrecondition) && !errors.Is(err, bus.ErrNotFound) {
			s.log.WarnContext(ctx, "cancel the sub-task of an ended task", "task_id", id, "parent", parent.Id, "err", err)
		}
		return nil
	}
	observe(t, ev)
	s.publishTaskEvents(ctx, t, ev)
	return t
}

// settleTask serves task.settle (see the file comment).
func (s *Service) settleTask(ctx context.Context, req *busv1.SettleTaskRequest) (*busv1.SettleTaskResponse, error) {
	if req.TaskId == "" {
		return nil, bus.FieldError("task_id", "a task id is required")
	}
	t, err := s.store.GetTask(ctx, req.TaskId)
	if err != nil {
		return nil, err
	}
	if !taskstate.Terminal(t.Status) {
		return nil, bus.Errorf(bus.CodeFailedPrecondition, "task %s is %s: only an ended task is settled", t.Id, taskstate.Name(t.Status))
	}
	resp := &busv1.SettleTaskResponse{}
	n, err := s.recordInAncestors(ctx, t)
	resp.Recorded = int32(n)
	if err != nil {
		return nil, err
	}
	q := store.TaskQuery{Org: t.Org, ParentTaskID: t.Id, PageSize: store.MaxPageSize,
		Statuses: []agentmeshv1.TaskStatus{taskstate.Created, taskstate.Queued, taskstate.Assigned, taskstate.Running, taskstate.Blocked}}
	for {
		kids, next, err := s.store.ListTasks(ctx, q)
		if err != nil {
			return nil, fmt.Errorf("sub-tasks of %s: %w", t.Id, err)
		}
		for _, k := range kids {
			if c := s.cancelOrphan(ctx, k.Id, t); c != nil {
				resp.Cancelled = append(resp.Cancelled, c.Id)
			}
		}
		if next == "" {
			return resp, nil
		}
		q.PageToken = next
	}
}
