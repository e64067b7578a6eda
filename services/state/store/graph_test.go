package store

import (
	"fmt"
	"testing"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
)

// graphOf builds n tasks, each depending on up to 3 earlier ones by ref.
func graphOf(n int) ([]*agentmeshv1.Task, []string) {
	tasks := make([]*agentmeshv1.Task, n)
	refs := make([]string, n)
	for i := range n {
		refs[i] = fmt.Sprintf("t%d", i)
		t := &agentmeshv1.Task{Org: "o", Agent: "a", Input: "x"}
		for _, j := range []int{i - 1, i / 2, i - 7} {
			if j >= 0 && j < i {
				t.DependsOn = append(t.DependsOn, "ref:"+refs[j])
			}
		}
		tasks[i] = t
	}
	return tasks, refs
}

func TestPlanGraphLarge(t *testing.T) {
	tasks, refs := graphOf(MaxGraphTasks)
	out, evs, err := PlanGraph(tasks, refs, nil, time.Now())
	if err != nil || len(out) != MaxGraphTasks || len(evs) != MaxGraphTasks {
		t.Fatalf("PlanGraph: %d tasks, %v", len(out), err)
	}
	if out[0].Status.String() != "TASK_STATUS_QUEUED" || out[1].Status.String() != "TASK_STATUS_BLOCKED" {
		t.Errorf("root %s, child %s", out[0].Status, out[1].Status)
	}
}

// BenchmarkCheckGraph10k validates a 10,000-task graph (refs, cycles,
// order): what SubmitTasks does before it writes anything.
func BenchmarkCheckGraph10k(b *testing.B) {
	tasks, refs := graphOf(10000)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := CheckGraph(tasks, refs); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPlanGraph10k checks and plans a 10,000-task graph: ids, refs
// replaced, every task's two events.
func BenchmarkPlanGraph10k(b *testing.B) {
	tasks, refs := graphOf(10000)
	now := time.Now()
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := PlanGraph(tasks, refs, nil, now); err != nil {
			b.Fatal(err)
		}
	}
}
