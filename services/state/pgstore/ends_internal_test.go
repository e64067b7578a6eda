package pgstore

import (
	"context"
	"errors"
	"testing"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/pgtest"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"github.com/agentmesh/agentmesh/services/state/store"
)

// A group holding an end whose transaction breaks (a statement fails
// outright) is rolled back and written again one write at a time: the end
// still commits, unanswered, the broken write gets its own error, and the
// connection goes back to the pool clean (the next end is answered).
func TestEndInABrokenGroup(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, pgtest.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	endWrite := func() (*agentmeshv1.Task, rowWrite) {
		t.Helper()
		cur, _, _, err := s.CreateTask(ctx, &agentmeshv1.Task{Org: "o", Title: "t", Input: "do it", Agent: "a"})
		if err != nil {
			t.Fatal(err)
		}
		next, ev, err := store.PlanTransition(cur, store.Transition{TaskID: cur.Id, To: taskstate.Cancelled, Reason: "stop"}, s.now())
		if err != nil {
			t.Fatal(err)
		}
		w, err := newRowWrite(cur.LastEventSeq, next, ev)
		if err != nil {
			t.Fatal(err)
		}
		if !w.ends {
			t.Fatal("a cancel is not marked as an end")
		}
		return cur, w
	}
	task, w := endWrite()
	broken := rowWrite{id: "~broken", sql: "SELECT 1 / 0"}
	errs := s.flush(ctx, []rowWrite{w, broken})
	if errs[0] != nil {
		t.Errorf("the end: %v, want committed", errs[0])
	}
	if errs[1] == nil || errors.Is(errs[1], errLostRace) {
		t.Errorf("the broken write: %v, want its own error", errs[1])
	}
	got, err := s.GetTask(ctx, task.Id)
	if err != nil || got.Status != taskstate.Cancelled || got.LastEventSeq != task.LastEventSeq+1 {
		t.Fatalf("the end after the broken group: %v seq %d (%v), want cancelled, seq %d", got.GetStatus(), got.GetLastEventSeq(), err, task.LastEventSeq+1)
	}
	if none, exact, _ := s.Unfollowed(ctx, task.Id); none || exact {
		t.Errorf("an end written again on its own: unfollowed=%v exact=%v, want not known", none, exact)
	}
	// Every connection still works, and the next end is answered.
	for range int(s.pool.Config().MaxConns) + 1 {
		task, w := endWrite()
		if errs := s.flush(ctx, []rowWrite{w}); errs[0] != nil {
			t.Fatalf("an end after the broken group: %v", errs[0])
		}
		if none, exact, _ := s.Unfollowed(ctx, task.Id); !none || !exact {
			t.Fatalf("an end after the broken group: unfollowed=%v exact=%v, want true, true", none, exact)
		}
	}
}
