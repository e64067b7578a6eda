package pgstore_test

import (
	"context"
	"testing"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/pgtest"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"github.com/agentmesh/agentmesh/services/state/store"
)

// Postgres knows exactly whether anything follows an end this process
// committed: the question rides in the end's own round trip, after its
// commit (ends.go). The answer is given once.
func TestUnfollowedKnownWithTheEnd(t *testing.T) {
	ctx := context.Background()
	s := open(t, pgtest.NewDatabase(t))
	newTask := func(key string) *agentmeshv1.Task {
		return &agentmeshv1.Task{Org: "o", Title: "t", Input: "do it", Agent: "a", IdempotencyKey: key}
	}
	create := func(in *agentmeshv1.Task) *agentmeshv1.Task {
		t.Helper()
		got, _, _, err := s.CreateTask(ctx, in)
		if err != nil {
			t.Fatalf("CreateTask: %v", err)
		}
		return got
	}
	end := func(id string) {
		t.Helper()
		if _, _, err := s.Transition(ctx, store.Transition{TaskID: id, To: taskstate.Cancelled, Reason: "stop"}); err != nil {
			t.Fatalf("cancel %s: %v", id, err)
		}
	}
	ask := func(what, id string, wantNone, wantExact bool) {
		t.Helper()
		none, exact, err := s.Unfollowed(ctx, id)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if none != wantNone || exact != wantExact {
			t.Errorf("%s: unfollowed=%v exact=%v, want %v and %v", what, none, exact, wantNone, wantExact)
		}
	}

	leaf := create(newTask(""))
	end(leaf.Id)
	ask("a leaf this process ended", leaf.Id, true, true)
	ask("the same end asked again", leaf.Id, false, false)

	parent := create(newTask(""))
	kidIn := newTask("")
	kidIn.ParentTaskId = parent.Id
	kid := create(kidIn)
	end(parent.Id)
	ask("a parent with an unfinished sub-task", parent.Id, false, true)
	end(kid.Id)
	ask("a sub-task", kid.Id, false, true)

	first := create(newTask(""))
	depIn := newTask("")
	depIn.DependsOn = []string{first.Id}
	if dep := create(depIn); dep.Status != taskstate.Blocked {
		t.Fatalf("dependent is %s, want blocked", taskstate.Name(dep.Status))
	}
	end(first.Id)
	ask("a task a blocked one waits on", first.Id, false, true)

}
