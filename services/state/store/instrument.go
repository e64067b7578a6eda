package store

import (
	"context"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/metrics"
)

// Instrument wraps s so every call's latency is observed as
// agentmesh_store_seconds{op,code}.
func Instrument(s Store) Store {
	if _, ok := s.(instrumented); ok {
		return s
	}
	return instrumented{s}
}

type instrumented struct{ s Store }

func observe(op string, start time.Time, err error) {
	code := "ok"
	if err != nil {
		code = bus.CodeOf(err)
	}
	metrics.Since(metrics.Store, start, op, code)
}

func (i instrumented) CreateTask(ctx context.Context, t *agentmeshv1.Task) (out *agentmeshv1.Task, evs []*agentmeshv1.TaskEvent, created bool, err error) {
	defer func(start time.Time) { observe("create_task", start, err) }(time.Now())
	return i.s.CreateTask(ctx, t)
}

func (i instrumented) GetTask(ctx context.Context, id string) (t *agentmeshv1.Task, err error) {
	defer func(start time.Time) { observe("get_task", start, err) }(time.Now())
	return i.s.GetTask(ctx, id)
}

func (i instrumented) ListTasks(ctx context.Context, q TaskQuery) (ts []*agentmeshv1.Task, next string, err error) {
	defer func(start time.Time) { observe("list_tasks", start, err) }(time.Now())
	return i.s.ListTasks(ctx, q)
}

func (i instrumented) Transition(ctx context.Context, tr Transition) (t *agentmeshv1.Task, ev *agentmeshv1.TaskEvent, err error) {
	defer func(start time.Time) { observe("transition", start, err) }(time.Now())
	return i.s.Transition(ctx, tr)
}

func (i instrumented) AppendStep(ctx context.Context, id string, attempt int32, step *agentmeshv1.Step) (t *agentmeshv1.Task, ev *agentmeshv1.TaskEvent, err error) {
	defer func(start time.Time) { observe("append_step", start, err) }(time.Now())
	return i.s.AppendStep(ctx, id, attempt, step)
}

func (i instrumented) Checkpoint(ctx context.Context, id string, attempt int32, steps []*agentmeshv1.Step, tr *Transition) (t *agentmeshv1.Task, evs []*agentmeshv1.TaskEvent, err error) {
	defer func(start time.Time) { observe("checkpoint", start, err) }(time.Now())
	return i.s.Checkpoint(ctx, id, attempt, steps, tr)
}

func (i instrumented) History(ctx context.Context, id string, after int64, limit int) (evs []*agentmeshv1.TaskEvent, err error) {
	defer func(start time.Time) { observe("history", start, err) }(time.Now())
	return i.s.History(ctx, id, after, limit)
}

func (i instrumented) Usage(ctx context.Context, org, agent string, from, to time.Time) (u *agentmeshv1.Usage, n int64, err error) {
	defer func(start time.Time) { observe("usage", start, err) }(time.Now())
	return i.s.Usage(ctx, org, agent, from, to)
}

func (i instrumented) PutAgent(ctx context.Context, a *agentmeshv1.Agent, create bool, v int64) (out *agentmeshv1.Agent, err error) {
	defer func(start time.Time) { observe("put_agent", start, err) }(time.Now())
	return i.s.PutAgent(ctx, a, create, v)
}

func (i instrumented) GetAgent(ctx context.Context, org, name string) (a *agentmeshv1.Agent, err error) {
	defer func(start time.Time) { observe("get_agent", start, err) }(time.Now())
	return i.s.GetAgent(ctx, org, name)
}

func (i instrumented) ListAgents(ctx context.Context, q AgentQuery) (as []*agentmeshv1.Agent, next string, err error) {
	defer func(start time.Time) { observe("list_agents", start, err) }(time.Now())
	return i.s.ListAgents(ctx, q)
}

func (i instrumented) DeleteAgent(ctx context.Context, org, name string) (err error) {
	defer func(start time.Time) { observe("delete_agent", start, err) }(time.Now())
	return i.s.DeleteAgent(ctx, org, name)
}

func (i instrumented) CreateTasks(ctx context.Context, ts []*agentmeshv1.Task, refs []string) (out []*agentmeshv1.Task, evs [][]*agentmeshv1.TaskEvent, err error) {
	defer func(start time.Time) { observe("create_tasks", start, err) }(time.Now())
	return i.s.CreateTasks(ctx, ts, refs)
}

func (i instrumented) ResolveDependency(ctx context.Context, id string, p *agentmeshv1.DependencyResult) (t *agentmeshv1.Task, ev *agentmeshv1.TaskEvent, err error) {
	defer func(start time.Time) { observe("resolve_dependency", start, err) }(time.Now())
	return i.s.ResolveDependency(ctx, id, p)
}

func (i instrumented) UpdateTask(ctx context.Context, id string, u *agentmeshv1.TaskUpdate) (t *agentmeshv1.Task, ev *agentmeshv1.TaskEvent, err error) {
	defer func(start time.Time) { observe("update_task", start, err) }(time.Now())
	return i.s.UpdateTask(ctx, id, u)
}

func (i instrumented) DeleteTask(ctx context.Context, id string) (err error) {
	defer func(start time.Time) { observe("delete_task", start, err) }(time.Now())
	return i.s.DeleteTask(ctx, id)
}

func (i instrumented) ScanTasks(ctx context.Context, q TaskQuery, fn func(*agentmeshv1.Task) bool) (err error) {
	defer func(start time.Time) { observe("scan_tasks", start, err) }(time.Now())
	return i.s.ScanTasks(ctx, q, fn)
}

func (i instrumented) Close() error { return i.s.Close() }

func (i instrumented) WaitSubtasks(ctx context.Context, id string, attempt int32, node string, w *agentmeshv1.SubtaskWait) (t *agentmeshv1.Task, ev *agentmeshv1.TaskEvent, err error) {
	defer func(start time.Time) { observe("wait_subtasks", start, err) }(time.Now())
	return i.s.WaitSubtasks(ctx, id, attempt, node, w)
}

func (i instrumented) ReleaseSubtaskWait(ctx context.Context, id string) (t *agentmeshv1.Task, ev *agentmeshv1.TaskEvent, err error) {
	defer func(start time.Time) { observe("release_subtask_wait", start, err) }(time.Now())
	return i.s.ReleaseSubtaskWait(ctx, id)
}

func (i instrumented) RecordSubtask(ctx context.Context, id string, sub *agentmeshv1.SubtaskEvent) (t *agentmeshv1.Task, ev *agentmeshv1.TaskEvent, err error) {
	defer func(start time.Time) { observe("record_subtask", start, err) }(time.Now())
	return i.s.RecordSubtask(ctx, id, sub)
}

func (i instrumented) Unfollowed(ctx context.Context, id string) (unfollowed, exact bool, err error) {
	defer func(start time.Time) { observe("unfollowed", start, err) }(time.Now())
	return i.s.Unfollowed(ctx, id)
}
