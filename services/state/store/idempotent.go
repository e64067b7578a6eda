package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"google.golang.org/protobuf/proto"
)

// Step checkpoints are idempotent on (task, attempt, step index): an
// executor that did not hear the answer to a checkpoint (the state service
// restarted, the bus dropped the reply) sends the same step again, and the
// store answers with the step already committed instead of appending it a
// second time. Both stores use CommittedStep inside their write loop, so a
// retry that races with its original (the original commits first, or the
// retry does) still ends with one event.

// ErrStepCommitted is returned by a plan function to say the step is
// already in the history; the store then returns that event without
// writing.
var ErrStepCommitted = errors.New("step already committed")

// recentSteps is how many of a task's newest events are read first when
// looking for a committed step: a retry is nearly always of the last one.
const recentSteps = 16

// HistoryFunc reads a task's history (Store.History).
type HistoryFunc func(ctx context.Context, taskID string, afterSeq int64, limit int) ([]*agentmeshv1.TaskEvent, error)

// CommittedStep returns the step event of cur's history with the given
// attempt and the step's index, or nil when there is none. It reads
// nothing in the common case: a step whose index is at or past the task's
// NextStepIndex cannot have been committed, and neither can a step of an
// attempt that is not the task's current one (the plan refuses it as
// stale).
func CommittedStep(ctx context.Context, history HistoryFunc, cur *agentmeshv1.Task, attempt int32, step *agentmeshv1.Step) (*agentmeshv1.TaskEvent, error) {
	if step == nil || cur.Attempt != attempt || step.Index >= cur.NextStepIndex {
		return nil, nil
	}
	match := func(evs []*agentmeshv1.TaskEvent) *agentmeshv1.TaskEvent {
		for i := len(evs) - 1; i >= 0; i-- {
			ev := evs[i]
			if ev.Type == agentmeshv1.EventType_EVENT_TYPE_STEP && ev.Attempt == attempt && ev.GetStep().GetIndex() == step.Index {
				return ev
			}
		}
		return nil
	}
	from := max(cur.LastEventSeq-recentSteps, 0)
	evs, err := history(ctx, cur.Id, from, recentSteps)
	if err != nil {
		return nil, err
	}
	if ev := match(evs); ev != nil || from == 0 {
		return ev, nil
	}
	for after := int64(0); after < from; {
		evs, err := history(ctx, cur.Id, after, MaxPageSize)
		if err != nil {
			return nil, err
		}
		if len(evs) == 0 {
			break
		}
		if ev := match(evs); ev != nil {
			return ev, nil
		}
		after = evs[len(evs)-1].Seq
	}
	return nil, nil
}

// WritePlan plans a write of one or more events against the task as it
// is: the task after them and the events, in order.
type WritePlan func(cur *agentmeshv1.Task) (*agentmeshv1.Task, []*agentmeshv1.TaskEvent, error)

// CheckpointArgs are the arguments of Store.Checkpoint but the task (which
// the write of CheckpointOnce holds): Steps of Attempt, then Transition
// when set.
type CheckpointArgs struct {
	Attempt    int32
	Steps      []*agentmeshv1.Step
	Transition *Transition
}

// CheckpointOnce runs a store's write loop for Checkpoint with the
// idempotency check: write runs the plan with compare-and-set on the
// task, re-running it on conflict. The plan appends a step event for each
// step not yet in the history (CommittedStep), then the transition's
// status event when it is set. When every step is committed already and
// there is no transition, nothing is written. It returns the task and one
// event per step (committed earlier or now), then the transition's event.
func CheckpointOnce(ctx context.Context, history HistoryFunc, now func() time.Time, a CheckpointArgs,
	write func(plan WritePlan) (*agentmeshv1.Task, []*agentmeshv1.TaskEvent, error),
) (*agentmeshv1.Task, []*agentmeshv1.TaskEvent, error) {
	attempt, steps, tr := a.Attempt, a.Steps, a.Transition
	if len(steps) == 0 && tr == nil {
		return nil, nil, bus.FieldError("step", "a step is required")
	}
	var (
		found   []*agentmeshv1.TaskEvent // by step: committed before, or nil
		dupTask *agentmeshv1.Task
	)
	t, written, err := write(func(cur *agentmeshv1.Task) (*agentmeshv1.Task, []*agentmeshv1.TaskEvent, error) {
		found = make([]*agentmeshv1.TaskEvent, len(steps))
		at := now()
		next, evs := cur, make([]*agentmeshv1.TaskEvent, 0, len(steps)+1)
		for i, step := range steps {
			got, err := CommittedStep(ctx, history, cur, attempt, step)
			if err != nil {
				return nil, nil, err
			}
			if got != nil {
				found[i] = got
				continue
			}
			var ev *agentmeshv1.TaskEvent
			if next, ev, err = PlanStep(next, attempt, step, at); err != nil {
				return nil, nil, err
			}
			evs = append(evs, ev)
		}
		if tr != nil {
			var ev *agentmeshv1.TaskEvent
			var err error
			if next, ev, err = PlanTransition(next, *tr, at); err != nil {
				return nil, nil, err
			}
			evs = append(evs, ev)
		}
		if len(evs) == 0 {
			dupTask = proto.Clone(cur).(*agentmeshv1.Task)
			return nil, nil, ErrStepCommitted
		}
		return next, evs, nil
	})
	if errors.Is(err, ErrStepCommitted) {
		return dupTask, found, nil
	}
	if err != nil {
		return nil, nil, err
	}
	out := make([]*agentmeshv1.TaskEvent, 0, len(steps)+1)
	for _, ev := range found {
		if ev == nil {
			ev, written = written[0], written[1:]
		}
		out = append(out, ev)
	}
	return t, append(out, written...), nil
}

// OneEvent adapts a plan of one event to a WritePlan.
func OneEvent(plan func(cur *agentmeshv1.Task) (*agentmeshv1.Task, *agentmeshv1.TaskEvent, error)) WritePlan {
	return func(cur *agentmeshv1.Task) (*agentmeshv1.Task, []*agentmeshv1.TaskEvent, error) {
		next, ev, err := plan(cur)
		if err != nil {
			return nil, nil, err
		}
		return next, []*agentmeshv1.TaskEvent{ev}, nil
	}
}

// AppendStepBy is AppendStep for a store whose Checkpoint does the work.
func AppendStepBy(ctx context.Context, checkpoint func(ctx context.Context, taskID string, attempt int32, steps []*agentmeshv1.Step, tr *Transition) (*agentmeshv1.Task, []*agentmeshv1.TaskEvent, error),
	taskID string, attempt int32, step *agentmeshv1.Step,
) (*agentmeshv1.Task, *agentmeshv1.TaskEvent, error) {
	t, evs, err := checkpoint(ctx, taskID, attempt, []*agentmeshv1.Step{step}, nil)
	if err != nil {
		return nil, nil, err
	}
	return t, evs[0], nil
}

// SameRequest decides a create that found the org's task with its
// idempotency key: a retry of the same request — same request digest
// (Task.request_digest, set by the router), or a digest unknown on either
// side (a sub-task's spawn, a task recorded before digests) — is answered
// with that task; a different request under the same key is
// already_exists naming idempotency_key, never silently the first task.
func SameRequest(existing, t *agentmeshv1.Task) error {
	if existing.RequestDigest == "" || t.RequestDigest == "" || existing.RequestDigest == t.RequestDigest {
		return nil
	}
	return &bus.Error{Code: bus.CodeAlreadyExists, Field: "idempotency_key",
		Message: fmt.Sprintf("already used for task %s, created by a different request; send the same request to get that task, or a new key for a new task", existing.Id)}
}
