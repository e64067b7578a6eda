package scheduler

// The tree keeper: when a task ends, its end is recorded in its ancestors
// and its unfinished sub-tasks are cancelled (policy: a task that ends —
// completed, failed or cancelled — leaves no sub-task running; each is
// cancelled with the reason "parent <id> ended <status>", or "ancestor <id>
// ended <status>" further down).
//
// It consumes <p>.evt.task.*.{completed,failed,cancelled} with its own
// durable consumer ("trees"; new events only) and asks state to settle
// each ended task (state.task.settle, an intent only the scheduler may
// publish; state decides everything from the record). The event is acked
// only once state has answered, so a crash or a failed request redelivers
// it; settling is idempotent (each end is recorded once per ancestor; a
// sub-task that already ended is left alone). The cancelled sub-tasks'
// own terminal events settle them in turn, so a cancel reaches the leaves.
//
// A sweep at start and every ReconcileInterval rebuilds from the record:
// every unfinished sub-task whose parent has ended (an event the consumer
// never saw) gets its parent settled.

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

type treeKeeper struct {
	endings
	names subjects.Names
	nc    *nats.Conn
}

// Six parameters: the scheduler's shared wiring (js, names, nc, log) plus the loop's interval, as newResolver.
func newTreeKeeper(ctx context.Context, js jetstream.JetStream, names subjects.Names, nc *nats.Conn, log *slog.Logger, interval time.Duration) (*treeKeeper, error) {
	cons, err := consumeEndings(ctx, js, names, subjects.ConsumerTrees,
		"scheduler: records a task's end in its ancestors and cancels its unfinished sub-tasks")
	if err != nil {
		return nil, err
	}
	k := &treeKeeper{names: names, nc: nc}
	k.endings = endings{cons: cons, log: log.With("component", "trees"), interval: interval, what: "settle an ended task",
		handle: func(ctx context.Context, ev *agentmeshv1.TaskEvent) error { return k.settle(ctx, ev.TaskId) },
		sweep:  k.Sweep}
	return k, nil
}

// settle asks state to settle an ended task.
func (k *treeKeeper) settle(ctx context.Context, id string) error {
	var resp busv1.SettleTaskResponse
	err := bus.Request(ctx, k.nc, k.names.State(subjects.StateSettleTask), &busv1.SettleTaskRequest{TaskId: id}, &resp)
	if errors.Is(err, bus.ErrNotFound) {
		return nil // deleted meanwhile
	}
	if err != nil {
		return fmt.Errorf("settle %s: %w", id, err)
	}
	if len(resp.Cancelled) > 0 {
		k.log.InfoContext(ctx, "cancelled the unfinished sub-tasks of an ended task", "task_id", id, "subtasks", len(resp.Cancelled))
	}
	return nil
}

// Sweep settles, from the record, every ended task that still has an
// unfinished sub-task, and reports how many it settled.
func (k *treeKeeper) Sweep(ctx context.Context) (int, error) {
	n := 0
	token := ""
	parents := map[string]*agentmeshv1.Task{} // this sweep's reads
	for {
		var resp busv1.ListTasksResponse
		err := bus.Request(ctx, k.nc, k.names.State(subjects.StateListTasks), &busv1.ListTasksRequest{
			Statuses: []agentmeshv1.TaskStatus{taskstate.Created, taskstate.Queued, taskstate.Assigned, taskstate.Running, taskstate.Blocked},
			PageSize: 500, PageToken: token,
		}, &resp)
		if err != nil {
			return n, err
		}
		for _, t := range resp.Tasks {
			pid := t.ParentTaskId
			if pid == "" || ctx.Err() != nil {
				continue
			}
			p, ok := parents[pid]
			if !ok {
				var gt busv1.GetTaskResponse
				err := bus.Request(ctx, k.nc, k.names.State(subjects.StateGetTask), &busv1.GetTaskRequest{Id: pid}, &gt)
				if err != nil && !errors.Is(err, bus.ErrNotFound) {
					return n, err
				}
				p = gt.Task
				parents[pid] = p
			}
			if p == nil || !taskstate.Terminal(p.Status) {
				continue
			}
			if err := k.settle(ctx, pid); err != nil {
				k.log.Warn("sweep", "err", err)
				continue
			}
			parents[pid] = nil // settled: once per sweep
			n++
		}
		if token = resp.NextPageToken; token == "" || ctx.Err() != nil {
			return n, nil
		}
	}
}
