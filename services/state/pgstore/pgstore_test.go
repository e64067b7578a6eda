package pgstore_test

import (
	"context"
	"sync"
	"testing"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/pgtest"
	"github.com/agentmesh/agentmesh/services/state/pgstore"
	"github.com/agentmesh/agentmesh/services/state/store"
	"github.com/agentmesh/agentmesh/services/state/storetest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func open(t *testing.T, url string) *pgstore.Store {
	t.Helper()
	s, err := pgstore.Open(context.Background(), url)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		return open(t, pgtest.NewDatabase(t))
	})
}

// Several state services starting at once on one database migrate once
// and all work.
func TestOpenConcurrentlyAndAgain(t *testing.T) {
	url := pgtest.NewDatabase(t)
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := pgstore.Open(context.Background(), url)
			if err != nil {
				errs <- err
				return
			}
			s.Close()
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("concurrent Open: %v", err)
	}
	s := open(t, url)
	ctx := context.Background()
	task, _, _, err := s.CreateTask(ctx, &agentmeshv1.Task{Org: "o", Agent: "a"})
	if err != nil {
		t.Fatalf("CreateTask: %v", err)
	}
	s2 := open(t, url)
	got, err := s2.GetTask(ctx, task.Id)
	if err != nil {
		t.Fatalf("GetTask through a second store: %v", err)
	}
	if got.Id != task.Id || got.LastEventSeq != 2 {
		t.Errorf("got %v, want task %s at seq 2", got, task.Id)
	}
}

func TestOpenBadURL(t *testing.T) {
	if _, err := pgstore.Open(context.Background(), "postgres://127.0.0.1:1/none?connect_timeout=1"); err == nil {
		t.Fatalf("Open of an unreachable server: got nil error, want one")
	}
}
