package store

import (
	"context"
	"errors"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"github.com/oklog/ulid/v2"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Tree records trees of tasks: every ancestor's history holds one
// EVENT_TYPE_SUBTASK event when a descendant is created and one when it
// ends; the end's event folds the descendant's own usage into the
// ancestor's subtree_usage (taskstate.Apply).
type Tree interface {
	// RecordSubtask appends to holder's history one SUBTASK event for sub:
	// its creation when sub.Status is not terminal, its end otherwise. It
	// is idempotent per (holder, sub-task, phase): when the history already
	// holds that event it returns the holder and a nil event. not_found for
	// an unknown holder.
	RecordSubtask(ctx context.Context, holderID string, sub *agentmeshv1.SubtaskEvent) (*agentmeshv1.Task, *agentmeshv1.TaskEvent, error)
	// Unfollowed reports whether nothing follows the end of the ended task
	// id: it has no parent to record its end in, no unfinished sub-task to
	// cancel and no blocked task waiting on it. It is asked right after the
	// end was committed, so a sub-task or dependent created later is not
	// missed: its create re-reads the parents after it commits and acts on
	// an end it finds (state's spawned and graph.go). exact is false when
	// the store cannot tell for certain or cheaply (a store shared with
	// other writers, whose index may lag theirs; Postgres for an end it did
	// not commit itself, or asked a second time); unfollowed is then false
	// too, and the end is settled and resolved as any other.
	Unfollowed(ctx context.Context, id string) (unfollowed, exact bool, err error)
}

// subtaskPage is how many of the holder's events a look-up for a recorded
// SUBTASK event reads at a time, newest first.
const subtaskPage = 256

// SubtaskRecorded reports whether cur's history already holds the SUBTASK
// event of sub's phase. It reads back from the newest event only as far as
// the sub-task's creation (its id is a ULID, so it carries that time): no
// event about a task is older than the task.
func SubtaskRecorded(ctx context.Context, history HistoryFunc, cur *agentmeshv1.Task, sub *agentmeshv1.SubtaskEvent) (bool, error) {
	var born time.Time
	if id, err := ulid.ParseStrict(sub.TaskId); err == nil {
		born = ulid.Time(id.Time()).Add(-time.Second) // clocks of two writers
	}
	ended := taskstate.Terminal(sub.Status)
	for upto := cur.LastEventSeq; upto > 0; {
		from := max(upto-subtaskPage, 0)
		evs, err := history(ctx, cur.Id, from, int(upto-from))
		if err != nil {
			return false, err
		}
		for i := len(evs) - 1; i >= 0; i-- {
			ev := evs[i]
			if ev.Seq > upto {
				continue
			}
			if s := ev.GetSubtask(); ev.Type == agentmeshv1.EventType_EVENT_TYPE_SUBTASK && s.GetTaskId() == sub.TaskId && taskstate.Terminal(s.GetStatus()) == ended {
				return true, nil
			}
			if !born.IsZero() && ev.GetTime().AsTime().Before(born) {
				return false, nil
			}
		}
		upto = from
	}
	return false, nil
}

// PlanSubtask returns the holder after a SUBTASK event about sub, and the
// event. The holder's status does not change.
func PlanSubtask(cur *agentmeshv1.Task, sub *agentmeshv1.SubtaskEvent, now time.Time) (*agentmeshv1.Task, *agentmeshv1.TaskEvent, error) {
	switch {
	case sub == nil || sub.TaskId == "":
		return nil, nil, bus.FieldError("subtask.task_id", "a sub-task id is required")
	case sub.TaskId == cur.Id:
		return nil, nil, bus.FieldError("subtask.task_id", "task %s cannot be its own sub-task", cur.Id)
	}
	ev := &agentmeshv1.TaskEvent{
		TaskId: cur.Id, Seq: cur.LastEventSeq + 1, Type: agentmeshv1.EventType_EVENT_TYPE_SUBTASK,
		Time: timestamppb.New(now), Status: cur.Status, Attempt: cur.Attempt, Org: cur.Org, Node: cur.Node,
		Subtask: proto.Clone(sub).(*agentmeshv1.SubtaskEvent),
	}
	return taskstate.Apply(cur, ev), ev, nil
}

// SubtaskArgs are the arguments of Tree.RecordSubtask: Subtask is
// recorded in the history of task HolderID.
type SubtaskArgs struct {
	HolderID string
	Subtask  *agentmeshv1.SubtaskEvent
}

// RecordSubtaskWith is Tree.RecordSubtask over a store's write loop and
// history.
func RecordSubtaskWith(ctx context.Context, write WriteFunc, history HistoryFunc, now func() time.Time, a SubtaskArgs) (*agentmeshv1.Task, *agentmeshv1.TaskEvent, error) {
	var unchanged *agentmeshv1.Task
	t, ev, err := write(ctx, a.HolderID, func(cur *agentmeshv1.Task) (*agentmeshv1.Task, *agentmeshv1.TaskEvent, error) {
		done, err := SubtaskRecorded(ctx, history, cur, a.Subtask)
		if err != nil {
			return nil, nil, err
		}
		if done {
			unchanged = proto.Clone(cur).(*agentmeshv1.Task)
			return nil, nil, errUnchanged
		}
		return PlanSubtask(cur, a.Subtask, now())
	})
	if errors.Is(err, errUnchanged) {
		return unchanged, nil, nil
	}
	return t, ev, err
}
