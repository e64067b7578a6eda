package kvstore_test

import (
	"context"
	"strings"
	"testing"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/natstest"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"github.com/nats-io/nats.go/jetstream"
)

// A graph whose creation a crash interrupted (its intent record is still
// there) is rolled back when the store opens again: none of it runs.
func TestInterruptedGraphIsRolledBackAtOpen(t *testing.T) {
	nc := natstest.Connect(t, natstest.Start(t))
	s, js := openOn(t, nc)
	ctx := context.Background()
	// The first two tasks of a graph were written, then the process died.
	var ids []string
	for range 2 {
		task, _, _, err := s.CreateTask(ctx, &agentmeshv1.Task{Org: "o", Agent: "a", Input: "x"})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, task.Id)
	}
	kv, err := js.KeyValue(ctx, names.StoreBucket("graphs"))
	if err != nil {
		t.Fatalf("graphs bucket: %v", err)
	}
	if _, err := kv.Put(ctx, ids[0], []byte(strings.Join(append(ids, "01JNEVERWRITTENNEVERWRITTE"), "\n"))); err != nil {
		t.Fatal(err)
	}
	s.Close()

	s2, _ := openOn(t, nc)
	for _, id := range ids {
		got, err := s2.GetTask(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if got.Status != taskstate.Cancelled || !strings.Contains(got.Error, "graph") {
			t.Errorf("task %s of an interrupted graph: %s %q, want cancelled", id, taskstate.Name(got.Status), got.Error)
		}
	}
	if _, err := kv.Get(ctx, ids[0]); err != jetstream.ErrKeyNotFound {
		t.Errorf("intent still there: %v", err)
	}
}
