package state_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	busv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/bus/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/subjects"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"github.com/agentmesh/agentmesh/services/state"
)

// task.dispatch.batch answers each move as task.dispatch would, each with
// its own outcome, and publishes one assigned event per move recorded — on
// both stores.
func TestDispatchBatch(t *testing.T) {
	both(t, func(t *testing.T, r *running) {
		created := func() string {
			return mustCall(t, r.nc, subjects.StateCreateTask, newTask("org"), &busv1.CreateTaskResponse{}).Task.Id
		}
		a, b, taken, refused := created(), created(), created(), created()
		assigned := collect(t, r.nc, names.TaskEventsOfType("assigned"))
		// taken was dispatched alone before (a lost reply, say).
		mustCall(t, r.nc, subjects.StateDispatch, &busv1.TransitionRequest{TaskId: taken, From: taskstate.Queued, NextAttempt: true}, &busv1.TransitionResponse{})
		move := func(id string) *busv1.TransitionRequest {
			return &busv1.TransitionRequest{TaskId: id, From: taskstate.Queued, To: taskstate.Assigned, NextAttempt: true}
		}
		bad := move(refused)
		bad.From = taskstate.Running // not what the dispatch intent moves
		resp := mustCall(t, r.nc, subjects.StateDispatchBatch, &busv1.DispatchBatchRequest{Requests: []*busv1.TransitionRequest{
			move(a), move(b), move(taken), move("01NOSUCHTASK000000000000000"), bad,
		}}, &busv1.DispatchBatchResponse{})
		if len(resp.Items) != 5 {
			t.Fatalf("%d items, want 5", len(resp.Items))
		}
		for i, id := range []string{a, b} {
			it := resp.Items[i]
			if it.Error != nil || it.TaskOmitted || it.Response.GetTask().GetId() != id {
				t.Fatalf("item %d: %v, want task %s moved", i, it, id)
			}
			if tk, ev := it.Response.Task, it.Response.Event; tk.Status != taskstate.Assigned || tk.Attempt != 1 || ev.GetStatus() != taskstate.Assigned || ev.GetTaskId() != id {
				t.Errorf("item %d: task %s attempt %d, event %v; want assigned, attempt 1", i, taskstate.Name(tk.Status), tk.Attempt, ev)
			}
		}
		for i, want := range []struct{ code, field string }{{bus.CodeFailedPrecondition, ""}, {bus.CodeNotFound, ""}, {bus.CodeInvalidArgument, "from"}} {
			it := resp.Items[2+i]
			if it.Response != nil || it.Error.GetCode() != want.code || it.Error.GetField() != want.field {
				t.Errorf("item %d: response %v error %v, want error %s (field %q)", 2+i, it.Response, it.Error, want.code, want.field)
			}
		}
		if got := mustCall(t, r.nc, subjects.StateGetTask, &busv1.GetTaskRequest{Id: refused}, &busv1.GetTaskResponse{}).Task; got.Status != taskstate.Queued || got.Attempt != 0 {
			t.Errorf("refused move: task %s attempt %d, want still queued", taskstate.Name(got.Status), got.Attempt)
		}
		// One assigned event per recorded move: taken's from before, a's
		// and b's from the batch; nothing for the refused ones.
		assigned.wait(t, 3)
		time.Sleep(200 * time.Millisecond) // time for a wrong extra event to arrive
		var ids []string
		for _, m := range assigned.wait(t, 3) {
			var ev agentmeshv1.TaskEvent
			if err := bus.DecodeEvent(m.Data, &ev); err != nil {
				t.Fatal(err)
			}
			ids = append(ids, ev.TaskId)
		}
		slices.Sort(ids)
		want := []string{a, b, taken}
		slices.Sort(want)
		if !slices.Equal(ids, want) {
			t.Errorf("assigned events of %v, want one each of %v", ids, want)
		}
	})
}

func TestDispatchBatchTooLarge(t *testing.T) {
	r := startKV(t)
	reqs := make([]*busv1.TransitionRequest, state.MaxDispatchBatch+1)
	for i := range reqs {
		reqs[i] = &busv1.TransitionRequest{TaskId: "t", From: taskstate.Queued, NextAttempt: true}
	}
	_, err := call(t, r.nc, subjects.StateDispatchBatch, &busv1.DispatchBatchRequest{Requests: reqs}, &busv1.DispatchBatchResponse{})
	var be *bus.Error
	if !errors.As(err, &be) || be.Code != bus.CodeInvalidArgument || be.Field != "requests" {
		t.Fatalf("a batch of %d: %v, want invalid_argument on requests", len(reqs), err)
	}
}
