package registry

import (
	"testing"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
)

// The workload model counts a task in its agent's load while assigned or
// running, counts its finish for its org, and ignores replayed (older)
// events.
func TestWorkloadModel(t *testing.T) {
	w := newWorkload(time.Hour)
	w.ready = true
	a := agentKey{"org-a", "sql"}
	shared := agentKey{"", "helper"}
	now := time.Now()
	w.apply("t1", "org-a", a, taskstate.Assigned, 2, now)
	w.apply("t1", "org-a", a, taskstate.Running, 3, now)
	w.apply("t1", "org-a", a, taskstate.Assigned, 2, now) // replayed
	w.apply("t2", "org-b", shared, taskstate.Running, 3, now)
	w.apply("t3", "org-a", shared, taskstate.Running, 3, now)
	w.apply("t3", "org-a", agentKey{}, taskstate.Completed, 4, now) // an event without the agent keeps the known one
	w.apply("t4", "org-a", a, taskstate.Failed, 5, now.Add(-2*time.Hour))
	agents := []*agentmeshv1.Agent{{Org: "org-a", Name: "sql"}, {Name: "helper"}}
	st, ok := w.stats("org-a", agents)
	if !ok {
		t.Fatal("model not ready")
	}
	if st[0].Running != 1 || st[0].Completed != 0 || st[0].Failed != 0 {
		t.Errorf("sql = %v, want running 1 (the failure is outside the window)", st[0])
	}
	if st[1].Running != 1 || st[1].Completed != 1 {
		t.Errorf("helper for org-a = %v, want running 1 (org-b's), completed 1", st[1])
	}
	if st, _ := w.stats("org-b", agents); st[1].Completed != 0 || st[1].Running != 1 {
		t.Errorf("helper for org-b = %v, want org-a's finish not counted", st[1])
	}
	w.apply("t1", "org-a", a, taskstate.Queued, 6, now) // requeued: out of the load
	if st, _ := w.stats("org-a", agents); st[0].Running != 0 {
		t.Errorf("after requeue: %v", st[0])
	}
	w.prune(now.Add(2 * time.Hour))
	if len(w.tasks) != 1 || len(w.finished) != 0 {
		t.Errorf("after prune: %d marks (want the live t2), %d finish lists", len(w.tasks), len(w.finished))
	}
	w.reset()
	if _, ok := w.stats("org-a", agents); ok {
		t.Error("a reset model answers")
	}
}
