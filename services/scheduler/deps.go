package scheduler

// The dependency resolver: it releases (or fails) the tasks that wait on a
// parent when the parent ends.
//
// It consumes <p>.evt.task.*.{completed,failed,cancelled} with its own
// durable consumer ("resolver"; new events only). For each terminal event
// it lists the org's blocked tasks still waiting on that task
// (state.task.list with waiting_on) and asks state to resolve each
// (state.task.resolve), acking the event only when all are done, so a
// crash or a failed request redelivers it. Resolving is idempotent in
// state: a task no longer waiting on the parent is left alone.
//
// A sweep at start and every ReconcileInterval rebuilds from the record:
// every task blocked on dependencies whose parent has ended (an event the
// consumer never saw, e.g. before it existed) is resolved. A parent that
// ends while its dependent is being created is handled by state itself
// (it re-reads the parents after the create commits).

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	busv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/bus/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/subjects"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

type resolver struct {
	endings
	names subjects.Names
	nc    *nats.Conn
}

// Six parameters: the scheduler's shared wiring (js, names, nc, log) plus the loop's interval, as newTreeKeeper.
func newResolver(ctx context.Context, js jetstream.JetStream, names subjects.Names, nc *nats.Conn, log *slog.Logger, interval time.Duration) (*resolver, error) {
	cons, err := consumeEndings(ctx, js, names, subjects.ConsumerResolver,
		"scheduler: releases or fails the tasks that depend on a task that ended")
	if err != nil {
		return nil, err
	}
	r := &resolver{names: names, nc: nc}
	r.endings = endings{cons: cons, log: log.With("component", "resolver"), interval: interval, what: "release dependents",
		handle: func(ctx context.Context, ev *agentmeshv1.TaskEvent) error { _, err := r.release(ctx, ev); return err },
		sweep:  r.Sweep}
	return r, nil
}

// outcome is the parent's result as its dependents get it: from the record
// when it is there (it has the title), else from the event.
func (r *resolver) outcome(ctx context.Context, ev *agentmeshv1.TaskEvent) *agentmeshv1.DependencyResult {
	var gt busv1.GetTaskResponse
	if err := bus.Request(ctx, r.nc, r.names.State(subjects.StateGetTask), &busv1.GetTaskRequest{Id: ev.TaskId}, &gt); err == nil && taskstate.Terminal(gt.Task.GetStatus()) {
		return resultOf(gt.Task)
	}
	d := &agentmeshv1.DependencyResult{TaskId: ev.TaskId, Status: ev.Status}
	if ev.Status == taskstate.Completed {
		d.Result = ev.Result
	} else {
		d.Error = ev.Reason
	}
	return d
}

func resultOf(t *agentmeshv1.Task) *agentmeshv1.DependencyResult {
	d := &agentmeshv1.DependencyResult{TaskId: t.Id, Title: t.Title, Status: t.Status}
	if t.Status == taskstate.Completed {
		d.Result = t.Result
	} else {
		d.Error = t.Error
	}
	return d
}

// release resolves every task of the parent's org still waiting on it.
func (r *resolver) release(ctx context.Context, ev *agentmeshv1.TaskEvent) (int, error) {
	var parent *agentmeshv1.DependencyResult
	n := 0
	token := ""
	for {
		var resp busv1.ListTasksResponse
		err := bus.Request(ctx, r.nc, r.names.State(subjects.StateListTasks), &busv1.ListTasksRequest{
			Org: ev.Org, WaitingOn: ev.TaskId, PageSize: 500, PageToken: token,
		}, &resp)
		if err != nil {
			return n, err
		}
		for _, t := range resp.Tasks {
			if parent == nil {
				parent = r.outcome(ctx, ev)
			}
			if err := r.resolve(ctx, t.Id, parent); err != nil {
				return n, err
			}
			n++
		}
		if token = resp.NextPageToken; token == "" {
			return n, nil
		}
	}
}

func (r *resolver) resolve(ctx context.Context, taskID string, parent *agentmeshv1.DependencyResult) error {
	var resp busv1.ResolveDependencyResponse
	err := bus.Request(ctx, r.nc, r.names.State(subjects.StateResolveDependency), &busv1.ResolveDependencyRequest{TaskId: taskID, Parent: parent}, &resp)
	if errors.Is(err, bus.ErrNotFound) {
		return nil // deleted meanwhile
	}
	if err != nil {
		return fmt.Errorf("resolve %s after %s: %w", taskID, parent.TaskId, err)
	}
	if ev := resp.GetEvent(); ev != nil {
		r.log.DebugContext(ctx, "dependency resolved", "task_id", taskID, "parent", parent.TaskId, "status", taskstate.Name(ev.Status))
	}
	return nil
}

// Sweep resolves, from the record, every blocked task whose parent has
// ended, and reports how many resolutions it made.
func (r *resolver) Sweep(ctx context.Context) (int, error) {
	n := 0
	token := ""
	parents := map[string]*agentmeshv1.Task{} // this sweep's reads
	for {
		var resp busv1.ListTasksResponse
		err := bus.Request(ctx, r.nc, r.names.State(subjects.StateListTasks), &busv1.ListTasksRequest{
			Statuses: []agentmeshv1.TaskStatus{taskstate.Blocked}, PageSize: 500, PageToken: token,
		}, &resp)
		if err != nil {
			return n, err
		}
		for _, t := range resp.Tasks {
			for _, pid := range t.WaitingOn {
				if ctx.Err() != nil {
					return n, nil
				}
				p, ok := parents[pid]
				if !ok {
					var gt busv1.GetTaskResponse
					err := bus.Request(ctx, r.nc, r.names.State(subjects.StateGetTask), &busv1.GetTaskRequest{Id: pid}, &gt)
					if err != nil && !errors.Is(err, bus.ErrNotFound) {
						return n, err
					}
					p = gt.Task
					parents[pid] = p
				}
				if p == nil || !taskstate.Terminal(p.Status) {
					continue
				}
				if err := r.resolve(ctx, t.Id, resultOf(p)); err != nil {
					r.log.Warn("sweep", "err", err)
					continue
				}
				n++
			}
		}
		if token = resp.NextPageToken; token == "" || ctx.Err() != nil {
			return n, nil
		}
	}
}
