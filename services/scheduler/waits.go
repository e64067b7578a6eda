package scheduler

import (
	"context"
	"errors"
	"time"

	busv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/bus/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/subjects"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
)

// expireWaits releases the tasks blocked on sub-tasks (wait_tasks) whose
// wait's deadline (timeout_seconds) has passed: state moves each back to
// queued and the resumed wait_tasks call reports what finished and what
// did not. It runs with every reconcile, so a deadline is kept within
// Config.ReconcileInterval. It reports how many tasks it released.
func (s *Service) expireWaits(ctx context.Context) (int, error) {
	n := 0
	now := time.Now()
	token := ""
	for {
		var resp busv1.ListTasksResponse
		err := bus.Request(ctx, s.nc, s.names.State(subjects.StateListTasks), &busv1.ListTasksRequest{
			Statuses: []agentmeshv1.TaskStatus{taskstate.Blocked}, PageSize: 500, PageToken: token,
		}, &resp)
		if err != nil {
			return n, err
		}
		for _, t := range resp.Tasks {
			d := t.GetSubtaskWait().GetDeadline()
			if taskstate.BlockedOn(t) != agentmeshv1.BlockedOn_BLOCKED_ON_SUBTASKS || d == nil || d.AsTime().After(now) {
				continue
			}
			var out busv1.ReleaseSubtaskWaitResponse
			err := bus.Request(ctx, s.nc, s.names.State(subjects.StateWaitExpired), &busv1.ReleaseSubtaskWaitRequest{TaskId: t.Id}, &out)
			if err != nil {
				if !errors.Is(err, bus.ErrNotFound) {
					s.log.Warn("release an expired sub-task wait", "task", t.Id, "err", err)
				}
				continue
			}
			if out.Event != nil {
				s.log.Info("sub-task wait timed out; task re-queued", "task", t.Id)
				n++
			}
		}
		if token = resp.NextPageToken; token == "" || ctx.Err() != nil {
			return n, nil
		}
	}
}
