package scheduler

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	busv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/bus/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/natstest"
	"github.com/agentmesh/agentmesh/pkg/poll"
	"github.com/agentmesh/agentmesh/pkg/subjects"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"github.com/agentmesh/agentmesh/pkg/testlog"
	"github.com/agentmesh/agentmesh/services/state"
	"github.com/agentmesh/agentmesh/services/state/kvstore"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// setup runs a real NATS server and the real state service, and returns a
// scheduler that is built (consumer created) but not running, so the test
// drives dispatch and reconcile itself.
func setup(t testing.TB, cfg Config) (*Service, *nats.Conn, jetstream.JetStream) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	srv := natstest.Start(t)
	nc := natstest.Connect(t, srv) // the test driver
	stateNC := natstest.ConnectAs(t, srv, subjects.ServiceState)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	stateJS, err := jetstream.New(stateNC)
	if err != nil {
		t.Fatal(err)
	}
	st, err := kvstore.Open(ctx, stateJS, subjects.Must(""), kvstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	svc, err := state.New(ctx, state.Config{}, state.Deps{NC: stateNC, Store: st, Log: testlog.New(t)})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = svc.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	s, err := New(ctx, cfg, Deps{NC: natstest.ConnectAs(t, srv, subjects.ServiceScheduler), Log: testlog.New(t)})
	if err != nil {
		t.Fatal(err)
	}
	return s, nc, js
}

func createTask(t *testing.T, nc *nats.Conn) *agentmeshv1.Task {
	t.Helper()
	var resp busv1.CreateTaskResponse
	err := bus.Request(context.Background(), nc, subjects.Must("").State(subjects.StateCreateTask),
		&busv1.CreateTaskRequest{Task: &agentmeshv1.Task{Org: "o", Input: "x", Agent: "helper"}}, &resp)
	if err != nil {
		t.Fatal(err)
	}
	return resp.Task
}

func getTask(t *testing.T, nc *nats.Conn, id string) *agentmeshv1.Task {
	t.Helper()
	var resp busv1.GetTaskResponse
	if err := bus.Request(context.Background(), nc, subjects.Must("").State(subjects.StateGetTask), &busv1.GetTaskRequest{Id: id}, &resp); err != nil {
		t.Fatal(err)
	}
	return resp.Task
}

// workFor reads the work stream and returns the attempts published for id.
func workFor(t *testing.T, js jetstream.JetStream, id string) []int32 {
	t.Helper()
	var attempts []int32
	for _, w := range workItems(t, js) {
		if w.Task.Id == id {
			attempts = append(attempts, w.Attempt)
		}
	}
	return attempts
}

// workItems reads the work stream's items, in stream order.
func workItems(t *testing.T, js jetstream.JetStream) []*busv1.WorkItem {
	t.Helper()
	ctx := context.Background()
	stream, err := js.Stream(ctx, subjects.Must("").WorkStream())
	if err != nil {
		t.Fatal(err)
	}
	info, err := stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var items []*busv1.WorkItem
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := stream.GetMsg(ctx, seq)
		if err != nil {
			continue // deleted
		}
		w := &busv1.WorkItem{}
		if err := proto.Unmarshal(m.Data, w); err != nil {
			t.Fatalf("work message %d: %v", seq, err)
		}
		items = append(items, w)
	}
	return items
}

func TestReconcileDispatchesQueuedTaskWhoseEventWasLost(t *testing.T) {
	s, nc, js := setup(t, Config{QueuedGrace: time.Nanosecond, AssignedGrace: time.Hour, ReconcileInterval: time.Hour})
	runScheduler(t, s) // no executor yet: the task waits in the model
	task := createTask(t, nc)
	poll.Until(t, 10*time.Second, func() error {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.m.tasks[task.Id] == nil {
			return fmt.Errorf("task not in the model yet")
		}
		return nil
	})
	// Forget it, as if its queued event had never come: reconcile must
	// find it in the record.
	s.mu.Lock()
	s.m.remove(s.m.tasks[task.Id])
	s.mu.Unlock()
	if n, err := s.Reconcile(context.Background()); err != nil || n < 1 {
		t.Fatalf("Reconcile = %d, %v; want at least 1 task found", n, err)
	}
	startFakeExecutor(t, nc, fakeExecutor{node: "n1", capacity: 4, hold: time.Hour})
	poll.Until(t, 10*time.Second, func() error {
		if a := workFor(t, js, task.Id); len(a) == 0 {
			return fmt.Errorf("no work published")
		}
		return nil
	})
}

func TestReconcileRepublishesLostWork(t *testing.T) {
	s, nc, js := setup(t, Config{QueuedGrace: time.Hour, AssignedGrace: time.Nanosecond})
	task := createTask(t, nc)
	if err := s.dispatch(context.Background(), task.Id); err != nil {
		t.Fatal(err)
	}
	// The bus loses the work message.
	stream, err := js.Stream(context.Background(), subjects.Must("").WorkStream())
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Purge(context.Background()); err != nil {
		t.Fatal(err)
	}
	if a := workFor(t, js, task.Id); len(a) != 0 {
		t.Fatalf("work after purge = %v, want none", a)
	}
	// JetStream still remembers the first Msg-Id (its duplicate window
	// outlives the message), so the republish must not be de-duplicated away.
	if _, err := s.Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	got := getTask(t, nc, task.Id)
	if got.Status != taskstate.Assigned || got.Attempt != 1 {
		t.Fatalf("task = %s attempt %d, want still assigned attempt 1 (no new attempt for a republish)", taskstate.Name(got.Status), got.Attempt)
	}
	if a := workFor(t, js, task.Id); len(a) != 1 || a[0] != 1 {
		t.Fatalf("work after reconcile = %v, want [1]", a)
	}
}

func TestDispatchIgnoresFinishedTask(t *testing.T) {
	s, nc, js := setup(t, Config{})
	task := createTask(t, nc)
	err := bus.Request(context.Background(), nc, subjects.Must("").State(subjects.StateCancel),
		&busv1.TransitionRequest{TaskId: task.Id, Org: "o", To: taskstate.Cancelled, Reason: "test"}, &busv1.TransitionResponse{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.dispatch(context.Background(), task.Id); err != nil {
		t.Fatalf("dispatch of a cancelled task: %v, want nil", err)
	}
	if a := workFor(t, js, task.Id); len(a) != 0 {
		t.Fatalf("work for a cancelled task: %v, want none", a)
	}
	if got := getTask(t, nc, task.Id); got.Status != taskstate.Cancelled {
		t.Fatalf("status = %s, want cancelled", taskstate.Name(got.Status))
	}
}

func TestRunDispatchesFromEvents(t *testing.T) {
	s, nc, js := setup(t, Config{})
	startFakeExecutor(t, nc, fakeExecutor{node: "n1", capacity: 1, hold: time.Hour})
	runScheduler(t, s)
	task := createTask(t, nc)
	poll.Until(t, 10*time.Second, func() error {
		if len(workFor(t, js, task.Id)) == 0 {
			return fmt.Errorf("no work published for the queued task")
		}
		return nil
	})
}

func TestNoExecutorNoDispatch(t *testing.T) {
	s, nc, js := setup(t, Config{})
	runScheduler(t, s)
	task := createTask(t, nc)
	// Wait until the leader holds the task, then check it was not sent
	// anywhere: no executor has room.
	poll.Until(t, 10*time.Second, func() error {
		s.mu.Lock()
		defer s.mu.Unlock()
		if e := s.m.tasks[task.Id]; e == nil || e.state != stWaiting {
			return fmt.Errorf("task not waiting in the model")
		}
		return nil
	})
	if a := workFor(t, js, task.Id); len(a) != 0 {
		t.Fatalf("work published with no executor: %v", a)
	}
	if got := getTask(t, nc, task.Id); got.Status != taskstate.Queued {
		t.Fatalf("status %s, want queued", taskstate.Name(got.Status))
	}
}

func TestReconcileExpiresApprovals(t *testing.T) {
	s, nc, _ := setup(t, Config{QueuedGrace: time.Hour, AssignedGrace: time.Hour})
	names := subjects.Must("")
	move := func(id, op string, req *busv1.TransitionRequest) *agentmeshv1.Task {
		t.Helper()
		req.TaskId = id
		var resp busv1.TransitionResponse
		if err := bus.Request(context.Background(), nc, names.State(op), req, &resp); err != nil {
			t.Fatalf("transition to %s: %v", taskstate.Name(req.To), err)
		}
		return resp.Task
	}
	block := func(deadline time.Time) *agentmeshv1.Task {
		task := createTask(t, nc)
		move(task.Id, subjects.StateDispatch, &busv1.TransitionRequest{From: taskstate.Queued, To: taskstate.Assigned, NextAttempt: true})
		move(task.Id, subjects.StateStart, &busv1.TransitionRequest{From: taskstate.Assigned, To: taskstate.Running, Attempt: 1})
		return move(task.Id, subjects.StateBlock, &busv1.TransitionRequest{From: taskstate.Running, To: taskstate.Blocked, Attempt: 1, Approval: &agentmeshv1.Approval{
			Status: agentmeshv1.ApprovalStatus_APPROVAL_STATUS_PENDING, Tool: "shell", ToolCallId: "c1",
			Deadline: timestamppb.New(deadline),
		}})
	}
	late := block(time.Now().Add(-time.Second))
	waiting := block(time.Now().Add(time.Hour))
	if _, err := s.Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	got := getTask(t, nc, late.Id)
	if got.Status != taskstate.Failed || got.FailureKind != agentmeshv1.FailureKind_FAILURE_KIND_APPROVAL || !strings.Contains(got.Error, "expired") {
		t.Fatalf("past its deadline: %s %s %q, want failed by approval expiry", taskstate.Name(got.Status), got.FailureKind, got.Error)
	}
	if got := getTask(t, nc, waiting.Id); got.Status != taskstate.Blocked {
		t.Fatalf("before its deadline: %s, want still blocked", taskstate.Name(got.Status))
	}
}

// Item 2 of issue 26: a dispatch whose work publish fails (the work stream
// down) is delivered once the stream is back — by the dispatch itself,
// sending the work again until it is stored, not by the reconcile loop,
// which is minutes away here.
func TestDispatchDeliveredAfterAFailedPublish(t *testing.T) {
	s, nc, js := setup(t, Config{ReconcileInterval: 10 * time.Minute, QueuedGrace: time.Hour, AssignedGrace: time.Hour})
	ctx := context.Background()
	// The work stream goes down.
	if err := js.DeleteStream(ctx, names.WorkStream()); err != nil {
		t.Fatal(err)
	}
	runScheduler(t, s)
	heartbeat(nc, "n1", 4) // a node with room that takes no work: the test reads the stream
	task := createTask(t, nc)
	// State records the assignment; the publish that follows fails. The
	// stream stays down for 3 s, longer than the first tries take
	// (JetStream's client itself tries a publish that finds no stream
	// three times, 250 ms apart).
	waitStatus(t, nc, task.Id, taskstate.Assigned, 20*time.Second)
	time.Sleep(3 * time.Second)
	if _, err := bus.EnsureStreams(ctx, js, names, bus.StreamOptions{}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 30*time.Second, func() error {
		if a := workFor(t, js, task.Id); len(a) != 1 || a[0] != 1 {
			return fmt.Errorf("work of %s in the stream: %v, want [1]", task.Id, a)
		}
		return nil
	})
	if got := getTask(t, nc, task.Id); got.Status != taskstate.Assigned || got.Attempt != 1 {
		t.Fatalf("task = %s attempt %d, want assigned attempt 1 (delivered, not dispatched again)", taskstate.Name(got.Status), got.Attempt)
	}
}

// A scheduler that starts leading (restarted, or taking over from a dead
// leader) publishes at once the work of the tasks the record shows
// assigned recently: the dead leader may have recorded the assignment and
// died before the publish. Its copy of work already out is de-duplicated.
func TestNewLeaderPublishesAssignedWork(t *testing.T) {
	s, nc, js := setup(t, Config{ReconcileInterval: 10 * time.Minute, QueuedGrace: time.Hour, AssignedGrace: time.Hour})
	published := createTask(t, nc)
	lost := createTask(t, nc)
	// A leader before this one assigned both and published only the
	// first's work.
	for _, task := range []*agentmeshv1.Task{published, lost} {
		var tr busv1.TransitionResponse
		if err := bus.Request(context.Background(), nc, names.State(subjects.StateDispatch), &busv1.TransitionRequest{
			TaskId: task.Id, From: taskstate.Queued, To: taskstate.Assigned, NextAttempt: true,
		}, &tr); err != nil {
			t.Fatal(err)
		}
		if task == published {
			if err := s.publishWork(context.Background(), tr.Task, ""); err != nil {
				t.Fatal(err)
			}
		}
	}
	runScheduler(t, s)
	poll.Until(t, 30*time.Second, func() error {
		if a := workFor(t, js, lost.Id); len(a) != 1 || a[0] != 1 {
			return fmt.Errorf("work of the task whose publish was lost: %v, want [1]", a)
		}
		return nil
	})
	if a := workFor(t, js, published.Id); len(a) != 1 {
		t.Errorf("work of the task published before: %v, want one message (the copy de-duplicated)", a)
	}
}
