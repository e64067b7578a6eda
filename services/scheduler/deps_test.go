package scheduler

import (
	"context"
	"errors"
	"testing"
	"time"

	busv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/bus/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/poll"
	"github.com/agentmesh/agentmesh/pkg/subjects"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"github.com/agentmesh/agentmesh/pkg/testlog"
	"github.com/nats-io/nats.go"
)

func createChild(t *testing.T, nc *nats.Conn, parents ...string) *agentmeshv1.Task {
	t.Helper()
	var resp busv1.CreateTaskResponse
	err := bus.Request(context.Background(), nc, subjects.Must("").State(subjects.StateCreateTask),
		&busv1.CreateTaskRequest{Task: &agentmeshv1.Task{Org: "o", Input: "x", Agent: "helper", DependsOn: parents}}, &resp)
	if err != nil {
		t.Fatal(err)
	}
	return resp.Task
}

// complete moves a queued task through to completed, as an executor would.
func complete(t *testing.T, nc *nats.Conn, id string) {
	t.Helper()
	for _, to := range []agentmeshv1.TaskStatus{taskstate.Assigned, taskstate.Running, taskstate.Completed} {
		if err := advance(nc, id, to, "parent result"); err != nil {
			t.Fatalf("%s → %s: %v", id, taskstate.Name(to), err)
		}
	}
}

// advance moves a task one step along queued → assigned → running →
// completed through the intent of the service that owns that step
// (attempt 1).
func advance(nc *nats.Conn, id string, to agentmeshv1.TaskStatus, result string) error {
	op, req := "", &busv1.TransitionRequest{TaskId: id, To: to}
	switch to {
	case taskstate.Assigned:
		op, req.From, req.NextAttempt = subjects.StateDispatch, taskstate.Queued, true
	case taskstate.Running:
		op, req.From, req.Attempt = subjects.StateStart, taskstate.Assigned, 1
	case taskstate.Completed:
		op, req.From, req.Attempt, req.Result = subjects.StateComplete, taskstate.Running, 1, result
	}
	return bus.Request(context.Background(), nc, subjects.Must("").State(op), req, &busv1.TransitionResponse{})
}

func waitFor(t *testing.T, nc *nats.Conn, id string, want agentmeshv1.TaskStatus) *agentmeshv1.Task {
	t.Helper()
	var got *agentmeshv1.Task
	poll.Until(t, 20*time.Second, func() error {
		got = getTask(t, nc, id)
		if got.Status != want {
			return errors.New("task " + id + " is " + taskstate.Name(got.Status) + ", want " + taskstate.Name(want))
		}
		return nil
	})
	return got
}

func runResolver(t *testing.T, s *Service) context.CancelFunc {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = s.deps.run(ctx); close(done) }()
	stop := func() { cancel(); <-done }
	t.Cleanup(stop)
	return stop
}

func TestResolverReleasesDependentsOnTheParentsEvent(t *testing.T) {
	// A sweep only at start (the interval is long): the release comes from
	// the terminal event.
	s, nc, _ := setup(t, Config{ReconcileInterval: time.Hour})
	parent := createTask(t, nc)
	child := createChild(t, nc, parent.Id)
	if child.Status != taskstate.Blocked {
		t.Fatalf("child is %s, want blocked", taskstate.Name(child.Status))
	}
	runResolver(t, s)
	complete(t, nc, parent.Id)
	got := waitFor(t, nc, child.Id, taskstate.Queued)
	if len(got.DependencyResults) != 1 || got.DependencyResults[0].Result != "parent result" {
		t.Errorf("dependency results %v, want the parent's result", got.DependencyResults)
	}
}

func TestResolverCatchesUpAfterARestart(t *testing.T) {
	s, nc, _ := setup(t, Config{ReconcileInterval: time.Hour})
	stop := runResolver(t, s)
	parent := createTask(t, nc)
	child := createChild(t, nc, parent.Id)
	stop()
	// The parent ends while no resolver runs.
	complete(t, nc, parent.Id)
	if got := getTask(t, nc, child.Id); got.Status != taskstate.Blocked {
		t.Fatalf("child is %s with no resolver running, want blocked", taskstate.Name(got.Status))
	}
	s2, err := New(context.Background(), Config{ReconcileInterval: time.Hour}, Deps{NC: nc, Log: testlog.New(t)})
	if err != nil {
		t.Fatal(err)
	}
	runResolver(t, s2)
	waitFor(t, nc, child.Id, taskstate.Queued)
}

func TestSweepRebuildsFromTheRecord(t *testing.T) {
	s, nc, _ := setup(t, Config{ReconcileInterval: time.Hour})
	a, b := createTask(t, nc), createTask(t, nc)
	child := createChild(t, nc, a.Id, b.Id)
	complete(t, nc, a.Id)
	// Nothing consumes the events: only the sweep can see that a ended.
	n, err := s.deps.Sweep(context.Background())
	if err != nil || n != 1 {
		t.Fatalf("Sweep = %d, %v; want 1 resolution", n, err)
	}
	got := getTask(t, nc, child.Id)
	if got.Status != taskstate.Blocked || len(got.WaitingOn) != 1 || got.WaitingOn[0] != b.Id {
		t.Fatalf("after one parent: %s waiting %v, want blocked on %s", taskstate.Name(got.Status), got.WaitingOn, b.Id)
	}
	if n, err := s.deps.Sweep(context.Background()); err != nil || n != 0 {
		t.Fatalf("second Sweep = %d, %v; want nothing to do", n, err)
	}
	complete(t, nc, b.Id)
	if _, err := s.deps.Sweep(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, nc, child.Id, taskstate.Queued)
}

// A parent that ends while its dependent is being created never leaves the
// dependent blocked: state re-reads the parents after the create, and the
// resolver looks for dependents after the parent's event. (The sweep is
// off: its interval is an hour.)
func TestParentEndingDuringCreateNeverStrandsTheDependent(t *testing.T) {
	s, nc, _ := setup(t, Config{ReconcileInterval: time.Hour})
	runResolver(t, s)
	const rounds = 40
	children := make([]string, 0, rounds)
	for range rounds {
		parent := createTask(t, nc)
		errc := make(chan error, 1)
		go func() {
			for _, to := range []agentmeshv1.TaskStatus{taskstate.Assigned, taskstate.Running, taskstate.Completed} {
				if err := advance(nc, parent.Id, to, ""); err != nil {
					errc <- err
					return
				}
			}
			errc <- nil
		}()
		children = append(children, createChild(t, nc, parent.Id).Id)
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range children {
		waitFor(t, nc, id, taskstate.Queued)
	}
}
