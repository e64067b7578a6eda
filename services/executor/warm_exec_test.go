package executor_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/pkg/metrics"
	"github.com/agentmesh/agentmesh/pkg/natstest"
	"github.com/agentmesh/agentmesh/pkg/poll"
	"github.com/agentmesh/agentmesh/pkg/subjects"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"github.com/agentmesh/agentmesh/services/executor"
	"github.com/agentmesh/agentmesh/services/executor/sandbox"
)

// The warm pool on the whole executor (Run): tasks run in warm children
// (pool hits), each warm child ends with its one task and is replaced, the
// task is labelled with the sandbox's isolation, and Run's end leaves no
// agent process.
func TestWarmPoolRunsTasks(t *testing.T) {
	e := newEnv(t)
	e.cfg.WarmPool = 2
	ex, err := executor.New(context.Background(), e.cfg, executor.Deps{NC: natstest.ConnectAs(t, e.srv, subjects.ServiceExecutor), Log: e.log})
	if err != nil {
		t.Fatalf("executor.New: %v", err)
	}
	stop := runService(t, ex.Run)
	idle := func() []int {
		var c []int
		poll.Until(t, 60*time.Second, func() error {
			c = children(t)
			if len(c) != 2 || ex.WarmStats().Idle != 2 {
				return fmt.Errorf("%d agent processes, %d idle warm; want 2 idle", len(c), ex.WarmStats().Idle)
			}
			return nil
		})
		return c
	}
	before := idle()
	ready0 := counterValue(t, metrics.FirstTurns.WithLabelValues("ready"))
	var used []int
	for i := range 2 {
		task := e.submit("what time is it?")
		got := e.waitStatus(task.Id, taskstate.Completed, 30*time.Second)
		if got.Isolation != sandbox.IsolationStrict {
			t.Errorf("isolation %q on the task, want %q", got.Isolation, sandbox.IsolationStrict)
		}
		after := idle()
		// Exactly one of the warm children went, with its task.
		var gone []int
		for _, pid := range before {
			if !slices.Contains(after, pid) {
				gone = append(gone, pid)
			}
		}
		if len(gone) != 1 {
			t.Fatalf("task %d: warm children %v before, %v after; want exactly one used and replaced", i, before, after)
		}
		used = append(used, gone[0])
		before = after
	}
	if used[0] == used[1] {
		t.Fatalf("both tasks ran in child %d", used[0])
	}
	if st := ex.WarmStats(); st.Hits != 2 || st.Misses != 0 {
		t.Errorf("warm stats %+v, want 2 hits and no miss", st)
	}
	// Each task's first model turn was asked before its child ran, and the
	// ready warm child took the task at once, beside the call (first.go).
	if n, a := counterValue(t, metrics.FirstTurns.WithLabelValues("ready"))-ready0, ex.ChildrenAfterAnswer(); n != 2 || a != 0 {
		t.Errorf("%v first turns with a ready child, %d children started after the answer; want 2 and 0", n, a)
	}
	stop()
	if c := children(t); len(c) != 0 {
		t.Errorf("agent processes alive after Run returned: %v", c)
	}
}
