package storetest

import (
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
