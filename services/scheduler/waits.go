package scheduler

import (
	"container/heap"
	"context"
	"errors"
	"time"

	busv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/bus/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/subjects"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
)

// Deadlines of waits on sub-tasks (wait_tasks timeout_seconds).
//
// The leader keeps the deadline of every task blocked on sub-tasks in a
// timer heap (waitDeadlines, guarded by Service.mu like the model): fed by
// the blocked status events (they carry the wait, subtask_wait, with its
// deadline) and, when a term starts, by the blocked tasks of the record
// (rebuild), so a deadline survives a restart or a change of leader. The
// dispatch loop's timer wakes at the nearest deadline and asks state to
// release the wait (state.task.wait_expired; state checks the deadline
// against the record, so a stale or early timer moves nothing). The
// reconcile sweep (expireWaits) stays as the safety net.

// waitDeadlines is the leader's heap of wait deadlines, nearest first. A
// heap item is live while at[task] still holds its time.
type waitDeadlines struct {
	at    map[string]time.Time
	items deadlineHeap
}

type deadlineItem struct {
	at   time.Time
	task string
}

type deadlineHeap []deadlineItem

func (h deadlineHeap) Len() int           { return len(h) }
func (h deadlineHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h deadlineHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *deadlineHeap) Push(x any)        { *h = append(*h, x.(deadlineItem)) }
func (h *deadlineHeap) Pop() any {
	old := *h
	it := old[len(old)-1]
	*h = old[:len(old)-1]
	return it
}

func newWaitDeadlines() *waitDeadlines { return &waitDeadlines{at: map[string]time.Time{}} }

// set arms (or moves) task's deadline.
func (w *waitDeadlines) set(task string, at time.Time) {
	if cur, ok := w.at[task]; ok && cur.Equal(at) {
		return
	}
	w.at[task] = at
	heap.Push(&w.items, deadlineItem{at: at, task: task})
}

// drop forgets task's deadline (its wait ended).
func (w *waitDeadlines) drop(task string) { delete(w.at, task) }

func (w *waitDeadlines) live(it deadlineItem) bool {
	at, ok := w.at[it.task]
	return ok && at.Equal(it.at)
}

// due pops and returns the tasks whose deadline is at or before now.
func (w *waitDeadlines) due(now time.Time) []string {
	var out []string
	for len(w.items) > 0 && !w.items[0].at.After(now) {
		it := heap.Pop(&w.items).(deadlineItem)
		if w.live(it) {
			delete(w.at, it.task)
			out = append(out, it.task)
		}
	}
	return out
}

// next is the nearest live deadline (zero: none).
func (w *waitDeadlines) next() time.Time {
	for len(w.items) > 0 {
		if it := w.items[0]; w.live(it) {
			return it.at
		}
		heap.Pop(&w.items)
	}
	return time.Time{}
}

func (w *waitDeadlines) reset() {
	w.at = map[string]time.Time{}
	w.items = nil
}

// noteWait folds a status event into the deadlines (Service.mu held): a
// move to blocked on sub-tasks with a deadline arms it, any other status
// forgets it. It reports whether a deadline was armed.
func (w *waitDeadlines) noteWait(ev *agentmeshv1.TaskEvent) bool {
	if d := ev.GetSubtaskWait().GetDeadline(); ev.Status == taskstate.Blocked && d != nil {
		w.set(ev.TaskId, d.AsTime())
		return true
	}
	w.drop(ev.TaskId)
	return false
}

// blockedWaits reads from the record the deadlines of the tasks blocked on
// sub-tasks (a new term's starting point).
func (s *Service) blockedWaits(ctx context.Context) (map[string]time.Time, error) {
	out := map[string]time.Time{}
	for token := ""; ; {
		var resp busv1.ListTasksResponse
		if err := bus.Request(ctx, s.nc, s.names.State(subjects.StateListTasks), &busv1.ListTasksRequest{
			Statuses: []agentmeshv1.TaskStatus{taskstate.Blocked}, PageSize: 1000, PageToken: token,
		}, &resp); err != nil {
			return nil, err
		}
		for _, t := range resp.Tasks {
			if d := t.GetSubtaskWait().GetDeadline(); d != nil && taskstate.BlockedOn(t) == agentmeshv1.BlockedOn_BLOCKED_ON_SUBTASKS {
				out[t.Id] = d.AsTime()
			}
		}
		if token = resp.NextPageToken; token == "" {
			return out, nil
		}
	}
}

// releaseWait asks state to release a wait whose deadline the timer says
// has passed. When state does not (its clock is behind, or the task moved
// on meanwhile) a wait still pending is armed again.
func (s *Service) releaseWait(ctx context.Context, id string) {
	var out busv1.ReleaseSubtaskWaitResponse
	err := bus.Request(ctx, s.nc, s.names.State(subjects.StateWaitExpired), &busv1.ReleaseSubtaskWaitRequest{TaskId: id}, &out)
	switch {
	case errors.Is(err, bus.ErrNotFound):
		return // deleted meanwhile
	case err != nil:
		s.log.WarnContext(ctx, "release an expired sub-task wait; will retry", "task_id", id, "err", err)
		s.rearmWait(id, time.Now().Add(time.Second))
		return
	case out.Event != nil:
		s.log.InfoContext(ctx, "sub-task wait timed out; task re-queued", "task_id", id)
		s.applyEvent(out.Event)
		return
	}
	t := out.Task
	if d := t.GetSubtaskWait().GetDeadline(); t.GetStatus() == taskstate.Blocked && taskstate.BlockedOn(t) == agentmeshv1.BlockedOn_BLOCKED_ON_SUBTASKS && d != nil {
		at := d.AsTime()
		if soon := time.Now().Add(100 * time.Millisecond); at.Before(soon) {
			at = soon // state's clock is behind ours: ask again shortly
		}
		s.rearmWait(id, at)
	}
}

func (s *Service) rearmWait(id string, at time.Time) {
	s.mu.Lock()
	if s.leader.Load() {
		s.waits.set(id, at)
	}
	s.mu.Unlock()
	s.wake()
}

// expireWaits releases the tasks blocked on sub-tasks (wait_tasks) whose
// wait's deadline (timeout_seconds) has passed: state moves each back to
// queued and the resumed wait_tasks call reports what finished and what
// did not. It runs with every reconcile, the safety net of the deadline
// timers above. It reports how many tasks it released.
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
					s.log.WarnContext(ctx, "release an expired sub-task wait", "task_id", t.Id, "err", err)
				}
				continue
			}
			if out.Event != nil {
				s.log.InfoContext(ctx, "sub-task wait timed out; task re-queued", "task_id", t.Id)
				n++
			}
		}
		if token = resp.NextPageToken; token == "" || ctx.Err() != nil {
			return n, nil
		}
	}
}
