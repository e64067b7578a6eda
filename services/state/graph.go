package state

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	busv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/bus/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/subjects"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"github.com/agentmesh/agentmesh/pkg/telemetry"
	"github.com/agentmesh/agentmesh/services/state/store"
	"google.golang.org/protobuf/proto"
)

// maxAncestors bounds the walk that looks for a cycle an UpdateTask of
// depends_on would close.
const maxAncestors = 100000

func checkNewTask(t *agentmeshv1.Task, field string) error {
	switch {
	case t == nil:
		return bus.FieldError(field, "a task is required")
	case t.Agent == "":
		return bus.FieldError(field+".agent", "an agent is required")
	case !subjects.ValidToken(t.Agent):
		return bus.FieldError(field+".agent", "%q is not a valid agent name", t.Agent)
	}
	return nil
}

// createTasks records a graph atomically.
func (s *Service) createTasks(ctx context.Context, req *busv1.CreateTasksRequest) (*busv1.CreateTasksResponse, error) {
	specs := make(map[string]*agentmeshv1.Agent, len(req.Agents))
	for _, a := range req.Agents {
		specs[a.GetName()] = a
	}
	for i, t := range req.Tasks {
		if err := checkNewTask(t, fmt.Sprintf("tasks[%d]", i)); err != nil {
			return nil, err
		}
		if t.AgentSpec == nil {
			t.AgentSpec = specs[t.Agent]
		}
		s.placeInTree(ctx, t)
		if t.Traceparent == "" {
			t.Traceparent = telemetry.Traceparent(ctx)
		}
	}
	tasks, events, err := s.store.CreateTasks(ctx, req.Tasks, req.Refs)
	if err != nil {
		return nil, fmt.Errorf("create graph: %w", err)
	}
	var all []*agentmeshv1.TaskEvent
	for i, evs := range events {
		for _, ev := range evs {
			observe(tasks[i], ev)
		}
		all = append(all, evs...)
	}
	if len(tasks) > 0 {
		// One call's tasks: the router gives them all its trace.
		s.publishTaskEvents(ctx, tasks[0], all...)
	}
	for i, t := range tasks {
		c := proto.Clone(s.spawned(ctx, s.recheckParents(ctx, t))).(*agentmeshv1.Task)
		c.AgentSpec = nil
		tasks[i] = c
	}
	return &busv1.CreateTasksResponse{Tasks: tasks}, nil
}

// recheckParents resolves, for a task just created blocked, the parents
// that finished while it was being created. Together with the resolver
// (which looks for dependents after a parent's terminal event) this means
// no parent's end is missed: either the resolver's look-up comes after the
// dependent's commit and finds it, or the parent's end came before this
// re-read and is resolved here. Resolving twice is harmless.
func (s *Service) recheckParents(ctx context.Context, t *agentmeshv1.Task) *agentmeshv1.Task {
	if t.Status != taskstate.Blocked || len(t.WaitingOn) == 0 {
		return t
	}
	for _, pid := range slices.Clone(t.WaitingOn) {
		p, err := s.store.GetTask(ctx, pid)
		if err != nil || !taskstate.Terminal(p.Status) {
			continue
		}
		next, ev, err := s.store.ResolveDependency(ctx, t.Id, store.ResultOf(p))
		if err != nil {
			s.log.WarnContext(ctx, "resolve a parent that finished during create", "task_id", t.Id, "parent", pid, "err", err)
			continue
		}
		if ev != nil {
			observe(next, ev)
			s.publishTaskEvents(ctx, next, ev)
		}
		t = next
	}
	return t
}

func (s *Service) resolveDependency(ctx context.Context, req *busv1.ResolveDependencyRequest) (*busv1.ResolveDependencyResponse, error) {
	if req.TaskId == "" {
		return nil, bus.FieldError("task_id", "a task id is required")
	}
	t, ev, err := s.store.ResolveDependency(ctx, req.TaskId, req.Parent)
	if err != nil {
		return nil, fmt.Errorf("resolve dependency of %s: %w", req.TaskId, err)
	}
	if ev != nil {
		observe(t, ev)
		s.publishTaskEvents(ctx, t, ev)
	}
	return &busv1.ResolveDependencyResponse{Task: t, Event: ev}, nil
}

func (s *Service) updateTask(ctx context.Context, req *busv1.UpdateTaskRequest) (*busv1.UpdateTaskResponse, error) {
	cur, err := s.taskOf(ctx, req.Id, req.Org)
	if err != nil {
		return nil, err
	}
	upd := req.GetUpdate()
	// The cycle check only matters while depends_on may still change (else
	// the store answers failed_precondition naming the field).
	mayChange := cur.Status == taskstate.Queued || taskstate.BlockedOn(cur) == agentmeshv1.BlockedOn_BLOCKED_ON_DEPENDENCIES
	if upd != nil && mayChange && slices.Contains(upd.Mask, taskstate.FieldDependsOn) {
		if err := s.checkNoCycle(ctx, cur, upd.DependsOn); err != nil {
			return nil, err
		}
	}
	t, ev, err := s.store.UpdateTask(ctx, req.Id, upd)
	if err != nil {
		return nil, fmt.Errorf("update task %s: %w", req.Id, err)
	}
	observe(t, ev)
	s.publishTaskEvents(ctx, t, ev)
	return &busv1.UpdateTaskResponse{Task: s.recheckParents(ctx, t)}, nil
}

// checkNoCycle refuses new parents of t that depend, directly or through
// others, on t, naming the cycle.
func (s *Service) checkNoCycle(ctx context.Context, t *agentmeshv1.Task, parents []string) error {
	dependent := map[string]string{} // task → a task that depends on it
	var queue []string
	for _, p := range parents {
		if p == t.Id {
			return &bus.Error{Code: bus.CodeInvalidArgument, Field: "depends_on", Message: "dependency cycle: a task cannot depend on itself"}
		}
		if _, ok := dependent[p]; !ok {
			dependent[p] = t.Id
			queue = append(queue, p)
		}
	}
	for len(queue) > 0 {
		if len(dependent) > maxAncestors {
			return bus.FieldError("depends_on", "the new parents have more than %d ancestors", maxAncestors)
		}
		id := queue[0]
		queue = queue[1:]
		p, err := s.store.GetTask(ctx, id)
		if errors.Is(err, bus.ErrNotFound) {
			continue // LoadParents names an unknown direct parent
		}
		if err != nil {
			return err
		}
		for _, gp := range p.DependsOn {
			if gp == t.Id {
				path := []string{t.Id}
				for x := id; x != t.Id; x = dependent[x] {
					path = append(path, x)
				}
				// path is t ← id ← ... ← new parent; print it as dependencies.
				out := []string{t.Id}
				for i := len(path) - 1; i >= 1; i-- {
					out = append(out, path[i])
				}
				out = append(out, t.Id)
				return &bus.Error{Code: bus.CodeInvalidArgument, Field: "depends_on", Message: "dependency cycle: " + strings.Join(out, " → ")}
			}
			if _, ok := dependent[gp]; !ok {
				dependent[gp] = id
				queue = append(queue, gp)
			}
		}
	}
	return nil
}

// waiters refuses to delete a task that blocked tasks still wait on (the
// resolver has not passed its outcome on yet).
func (s *Service) waiters(ctx context.Context, id string) error {
	ws, _, err := s.store.ListTasks(ctx, store.TaskQuery{WaitingOn: id, PageSize: 1})
	if err != nil {
		return err
	}
	if len(ws) > 0 {
		return bus.Errorf(bus.CodeFailedPrecondition, "task %s is still awaited by task %s; retry once its outcome has been passed on", id, ws[0].Id)
	}
	return nil
}

func (s *Service) deleteTask(ctx context.Context, req *busv1.DeleteTaskRequest) (*busv1.DeleteTaskResponse, error) {
	t, err := s.taskOf(ctx, req.Id, req.Org)
	if err != nil {
		return nil, err
	}
	if err := store.CheckDelete(t); err != nil {
		return nil, err
	}
	if err := s.waiters(ctx, req.Id); err != nil {
		return nil, err
	}
	if err := s.store.DeleteTask(ctx, req.Id); err != nil {
		return nil, fmt.Errorf("delete task %s: %w", req.Id, err)
	}
	taskDeletes.Inc()
	return &busv1.DeleteTaskResponse{}, nil
}

// ---- retention ----

// retentionLoop deletes finished tasks last changed more than Retention
// ago, at start and then every RetentionInterval, until ctx ends.
func (s *Service) retentionLoop(ctx context.Context) {
	t := time.NewTicker(s.retentionEvery)
	defer t.Stop()
	for {
		if n, err := s.Purge(ctx, time.Now().Add(-s.retention)); err != nil && ctx.Err() == nil {
			s.log.Warn("retention sweep", "err", err)
		} else if n > 0 {
			s.log.Info("retention deleted finished tasks", "tasks", n, "older_than", s.retention)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Purge deletes every finished task last changed before cutoff, with its
// history, and reports how many it deleted. Several state replicas may
// purge at once: a task another deleted first is skipped.
func (s *Service) Purge(ctx context.Context, cutoff time.Time) (int, error) {
	q := store.TaskQuery{
		Statuses:      []agentmeshv1.TaskStatus{taskstate.Completed, taskstate.Failed, taskstate.Cancelled},
		UpdatedBefore: cutoff, PageSize: store.MaxPageSize,
	}
	n := 0
	for {
		tasks, _, err := s.store.ListTasks(ctx, q)
		if err != nil {
			return n, err
		}
		deleted := 0
		for _, t := range tasks {
			if ctx.Err() != nil {
				return n, nil
			}
			err := s.waiters(ctx, t.Id)
			if err == nil {
				err = s.store.DeleteTask(ctx, t.Id)
			}
			switch {
			case err == nil:
				n++
				deleted++
				taskDeletes.Inc()
			case errors.Is(err, bus.ErrNotFound):
			default:
				s.log.WarnContext(ctx, "retention: delete task", "task_id", t.Id, "err", err)
			}
		}
		// Deleted tasks leave the listing: read the first page again until
		// a page deletes nothing (the rest failed and is retried next time).
		if len(tasks) < store.MaxPageSize || deleted == 0 {
			return n, nil
		}
	}
}
