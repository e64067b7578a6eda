package storetest

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"github.com/agentmesh/agentmesh/services/state/store"
	"google.golang.org/protobuf/proto"
)

// testStepIdempotent: a step sent again with the same (attempt, index) —
// an executor that did not hear the answer — returns the committed event
// and appends nothing, also when the retries race each other; a stale
// attempt is still refused; a new index is a new step.
func testStepIdempotent(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	task := taskIn(t, s, taskstate.Running)
	turn := func(i int32, content string) *agentmeshv1.Step {
		return &agentmeshv1.Step{Index: i, Kind: agentmeshv1.StepKind_STEP_KIND_MODEL_TURN, Content: content,
			Usage: &agentmeshv1.Usage{TotalTokens: 10}}
	}
	_, first, err := s.AppendStep(ctx, task.Id, task.Attempt, turn(0, "answer"))
	if err != nil {
		t.Fatalf("AppendStep: %v", err)
	}
	// Enough steps after it that the committed one is not among the newest.
	for i := int32(1); i <= 20; i++ {
		if _, _, err := s.AppendStep(ctx, task.Id, task.Attempt, turn(i, "more")); err != nil {
			t.Fatalf("AppendStep %d: %v", i, err)
		}
	}
	last := task.LastEventSeq + 21

	tests := []struct {
		name    string
		step    *agentmeshv1.Step
		wantSeq int64
	}{
		{"retry of the last step", turn(20, "more"), last},
		{"retry of an old step", turn(0, "answer"), first.Seq},
		{"retry with another body still returns the committed step", turn(0, "different"), first.Seq},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ev, err := s.AppendStep(ctx, task.Id, task.Attempt, tc.step)
			if err != nil {
				t.Fatalf("AppendStep: %v", err)
			}
			if ev.GetSeq() != tc.wantSeq || ev.GetStep().GetIndex() != tc.step.Index {
				t.Errorf("event: got seq %d index %d, want seq %d index %d", ev.GetSeq(), ev.GetStep().GetIndex(), tc.wantSeq, tc.step.Index)
			}
			if got.GetLastEventSeq() != last || got.GetStepCount() != 21 || got.GetUsage().GetTotalTokens() != 210 {
				t.Errorf("task: got last seq %d, %d steps, %d tokens; want %d, 21, 210",
					got.GetLastEventSeq(), got.GetStepCount(), got.GetUsage().GetTotalTokens(), last)
			}
		})
	}
	if ev := first; ev.GetStep().GetContent() != "answer" {
		t.Errorf("committed step content %q", ev.GetStep().GetContent())
	}

	// Concurrent retries of one new step: exactly one event.
	const retries = 8
	var wg sync.WaitGroup
	seqs := make(chan int64, retries)
	for range retries {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, ev, err := s.AppendStep(ctx, task.Id, task.Attempt, proto.Clone(turn(21, "raced")).(*agentmeshv1.Step))
			if err != nil {
				t.Errorf("AppendStep: %v", err)
				return
			}
			seqs <- ev.GetSeq()
		}()
	}
	wg.Wait()
	close(seqs)
	for seq := range seqs {
		if seq != last+1 {
			t.Errorf("racing retry: got seq %d, want %d", seq, last+1)
		}
	}
	checkHistory(t, s, task.Id, last+1)

	// A stale attempt is refused even for an index it once wrote.
	next := move(t, s, task.Id, store.Transition{To: taskstate.Queued, Attempt: task.Attempt, Reason: "requeue"})
	next = move(t, s, next.Id, store.Transition{To: taskstate.Assigned, NextAttempt: true})
	next = move(t, s, next.Id, store.Transition{To: taskstate.Running, Attempt: next.Attempt})
	_, _, err = s.AppendStep(ctx, task.Id, task.Attempt, turn(21, "raced"))
	wantCode(t, "retry of a stale attempt", err, bus.ErrFailedPrecondition)
	// The new attempt goes on from the next index.
	_, ev, err := s.AppendStep(ctx, task.Id, next.Attempt, turn(22, "resumed"))
	if err != nil || ev.GetSeq() != next.LastEventSeq+1 {
		t.Fatalf("AppendStep of the new attempt: event %v, err %v", ev, err)
	}
}

// testCheckpoint: several steps, and steps with a transition, are written
// as one: every event or none, in order, seqs consecutive; a retry appends
// only what is missing; a refused transition leaves its steps unwritten.
func testCheckpoint(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	task := taskIn(t, s, taskstate.Running)
	step := func(i int32, kind agentmeshv1.StepKind) *agentmeshv1.Step {
		st := &agentmeshv1.Step{Index: i, Kind: kind, Content: fmt.Sprint("step ", i)}
		if kind == agentmeshv1.StepKind_STEP_KIND_MODEL_TURN {
			st.Usage = &agentmeshv1.Usage{TotalTokens: 10}
		}
		return st
	}
	turn, call := agentmeshv1.StepKind_STEP_KIND_MODEL_TURN, agentmeshv1.StepKind_STEP_KIND_TOOL_CALL
	base := task.LastEventSeq
	check := func(what string, evs []*agentmeshv1.TaskEvent, wantSeqs ...int64) {
		t.Helper()
		if len(evs) != len(wantSeqs) {
			t.Fatalf("%s: got %d events, want %d", what, len(evs), len(wantSeqs))
		}
		for i, ev := range evs {
			if ev.Seq != wantSeqs[i] {
				t.Errorf("%s: event %d has seq %d, want %d", what, i, ev.Seq, wantSeqs[i])
			}
		}
	}

	got, evs, err := s.Checkpoint(ctx, task.Id, task.Attempt, []*agentmeshv1.Step{step(0, turn), step(1, call)}, nil)
	if err != nil {
		t.Fatalf("Checkpoint of two steps: %v", err)
	}
	check("two steps", evs, base+1, base+2)
	if evs[0].GetStep().GetIndex() != 0 || evs[1].GetStep().GetIndex() != 1 || got.GetStepCount() != 2 || got.GetLastEventSeq() != base+2 {
		t.Errorf("two steps: events %v, task at seq %d with %d steps", evs, got.GetLastEventSeq(), got.GetStepCount())
	}

	// A retry of both appends nothing; a retry of one with a new one
	// appends the new one only.
	_, evs, err = s.Checkpoint(ctx, task.Id, task.Attempt, []*agentmeshv1.Step{step(0, turn), step(1, call)}, nil)
	if err != nil {
		t.Fatalf("retry: %v", err)
	}
	check("retry", evs, base+1, base+2)
	_, evs, err = s.Checkpoint(ctx, task.Id, task.Attempt, []*agentmeshv1.Step{step(1, call), step(2, turn)}, nil)
	if err != nil {
		t.Fatalf("retry with a new step: %v", err)
	}
	check("retry with a new step", evs, base+2, base+3)

	// A transition the task refuses (wrong from) leaves its step unwritten.
	_, _, err = s.Checkpoint(ctx, task.Id, task.Attempt, []*agentmeshv1.Step{step(3, turn)},
		&store.Transition{TaskID: task.Id, From: taskstate.Queued, To: taskstate.Completed, Attempt: task.Attempt})
	wantCode(t, "a refused transition", err, bus.ErrFailedPrecondition)
	// So does a stale attempt.
	_, _, err = s.Checkpoint(ctx, task.Id, task.Attempt+1, []*agentmeshv1.Step{step(3, turn)}, nil)
	wantCode(t, "a stale attempt", err, bus.ErrFailedPrecondition)
	checkHistory(t, s, task.Id, base+3)

	// The last turn with the completion: both, in order.
	done, evs, err := s.Checkpoint(ctx, task.Id, task.Attempt, []*agentmeshv1.Step{step(3, turn)},
		&store.Transition{TaskID: task.Id, From: taskstate.Running, To: taskstate.Completed, Attempt: task.Attempt, Result: "the answer"})
	if err != nil {
		t.Fatalf("Checkpoint with the completion: %v", err)
	}
	check("with the completion", evs, base+4, base+5)
	if evs[1].GetType() != agentmeshv1.EventType_EVENT_TYPE_STATUS || evs[1].GetStatus() != taskstate.Completed {
		t.Errorf("last event: %v, want the move to completed", evs[1])
	}
	if done.GetStatus() != taskstate.Completed || done.GetResult() != "the answer" || done.GetStepCount() != 4 || done.GetUsage().GetTotalTokens() != 30 {
		t.Errorf("task: status %s, result %q, %d steps, %d tokens; want completed, the answer, 4, 30",
			taskstate.Name(done.GetStatus()), done.GetResult(), done.GetStepCount(), done.GetUsage().GetTotalTokens())
	}
	// What a reader sees is the same (the store read back, not the writer's copy).
	read, err := s.GetTask(ctx, task.Id)
	if err != nil || read.GetStatus() != taskstate.Completed || read.GetLastEventSeq() != base+5 || read.GetStepCount() != 4 {
		t.Fatalf("GetTask: %v at seq %d with %d steps (err %v)", taskstate.Name(read.GetStatus()), read.GetLastEventSeq(), read.GetStepCount(), err)
	}
	hist := checkHistory(t, s, task.Id, base+5)
	if st := hist[len(hist)-2].GetStep(); st.GetIndex() != 3 || st.GetContent() != "step 3" {
		t.Errorf("history: step before the completion is %v", st)
	}
	// A retry of the whole after it committed: the step is found, the
	// transition refused (the task is no longer running), nothing written.
	_, _, err = s.Checkpoint(ctx, task.Id, task.Attempt, []*agentmeshv1.Step{step(3, turn)},
		&store.Transition{TaskID: task.Id, From: taskstate.Running, To: taskstate.Completed, Attempt: task.Attempt, Result: "the answer"})
	wantCode(t, "a retry after the commit", err, bus.ErrFailedPrecondition)
	checkHistory(t, s, task.Id, base+5)

	if _, _, err := s.Checkpoint(ctx, task.Id, task.Attempt, nil, nil); !errors.Is(err, bus.ErrInvalidArgument) {
		t.Errorf("an empty checkpoint: got %v, want invalid_argument", err)
	}
}
