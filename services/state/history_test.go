package state_test

import (
	"context"
	"sync/atomic"
	"testing"

	busv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/bus/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/natstest"
	"github.com/agentmesh/agentmesh/pkg/subjects"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"github.com/agentmesh/agentmesh/services/state/store"
	"google.golang.org/protobuf/proto"
)

// laggingHead is the embedded store whose task reads can be made to say
// one event less than its history holds: the moment between the store's
// appending an event and rewriting the task.
type laggingHead struct {
	store.Store
	lag atomic.Bool
}

func (l *laggingHead) GetTask(ctx context.Context, id string) (*agentmeshv1.Task, error) {
	t, err := l.Store.GetTask(ctx, id)
	if err != nil || !l.lag.Load() {
		return t, err
	}
	t = proto.CloneOf(t)
	t.LastEventSeq--
	t.Status = taskstate.Running
	return t, nil
}

// A watcher that saw the task's newest event on the bus reconnects with
// it as its cursor while the task record still says one event less: the
// history answers with the event's seq and status as the last, so the
// cursor is not refused as past the end, and a terminal event ends it.
func TestHistoryAfterAnEventNewerThanItsTask(t *testing.T) {
	srv := natstest.Start(t)
	nc := natstest.ConnectAs(t, srv, subjects.ServiceState)
	st := &laggingHead{Store: openKV(t, nc)}
	r := startService(t, nc, natstest.Connect(t, srv), st)
	done := runTask(t, r.nc, "acme")

	st.lag.Store(true)
	hist := mustCall(t, r.nc, subjects.StateHistory, &busv1.HistoryRequest{TaskId: done.Id, AfterSeq: done.LastEventSeq}, &busv1.HistoryResponse{})
	if len(hist.Events) != 0 || hist.LastSeq != done.LastEventSeq || hist.Status != taskstate.Completed {
		t.Fatalf("history after seq %d: %d events, last seq %d, status %v; want none, %d, completed",
			done.LastEventSeq, len(hist.Events), hist.LastSeq, hist.Status, done.LastEventSeq)
	}
	// A cursor past every event is still past the end.
	hist = mustCall(t, r.nc, subjects.StateHistory, &busv1.HistoryRequest{TaskId: done.Id, AfterSeq: done.LastEventSeq + 1}, &busv1.HistoryResponse{})
	if hist.LastSeq != done.LastEventSeq-1 {
		t.Fatalf("history after seq %d: last seq %d, want the task's %d", done.LastEventSeq+1, hist.LastSeq, done.LastEventSeq-1)
	}
}
