package router

import (
	"context"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/poll"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func statusEv(s agentmeshv1.TaskStatus) *agentmeshv1.TaskEvent {
	return &agentmeshv1.TaskEvent{Type: agentmeshv1.EventType_EVENT_TYPE_STATUS, Status: s}
}

func stepEv(text string) *agentmeshv1.TaskEvent {
	return &agentmeshv1.TaskEvent{Type: agentmeshv1.EventType_EVENT_TYPE_STEP,
		Step: &agentmeshv1.Step{Kind: agentmeshv1.StepKind_STEP_KIND_MODEL_TURN, Content: text}}
}

// watchRecv receives one response within the test's time.
func watchRecv(t *testing.T, got chan *agentmeshv1.WatchTaskResponse) *agentmeshv1.WatchTaskResponse {
	t.Helper()
	select {
	case r, ok := <-got:
		if !ok {
			t.Fatal("watch ended early")
		}
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("no event within 10s")
	}
	return nil
}

// follow runs a watch in the background: responses on the channel, the
// error that ended it on the second (nil for a clean end).
func follow(t *testing.T, e *env, id string, after int64) (chan *agentmeshv1.WatchTaskResponse, chan error) {
	t.Helper()
	stream, err := e.tasks.WatchTask(testCtx(t), &agentmeshv1.WatchTaskRequest{Id: id, AfterSeq: after})
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *agentmeshv1.WatchTaskResponse, 100)
	end := make(chan error, 1)
	go func() {
		defer close(got)
		for {
			r, err := stream.Recv()
			if err == io.EOF {
				end <- nil
				return
			}
			if err != nil {
				end <- err
				return
			}
			got <- r
		}
	}()
	return got, end
}

func seqs(rs []*agentmeshv1.WatchTaskResponse) string {
	var b strings.Builder
	for i, r := range rs {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprint(&b, r.Event.Seq)
	}
	return b.String()
}

func TestWatchLiveWithGap(t *testing.T) {
	// The idle refetch is out of reach, so only the gap can trigger one.
	e := start(t, Config{WatchRefetch: time.Hour})
	task := e.fake.AddTask(&agentmeshv1.Task{Agent: "helper", Input: "x"}) // seq 1, 2
	e.fake.Record(task.Id, statusEv(taskstate.Assigned), false)            // seq 3, history only

	got, end := follow(t, e, task.Id, 1)
	var rs []*agentmeshv1.WatchTaskResponse
	for range 2 { // 2, 3 from history: the subscription is open by now
		rs = append(rs, watchRecv(t, got))
	}

	e.fake.Record(task.Id, statusEv(taskstate.Running), true) // 4 live
	rs = append(rs, watchRecv(t, got))
	historyBefore := e.fake.count("history")
	step5 := e.fake.Record(task.Id, stepEv("thinking"), false) // 5 lost on the bus
	e.fake.Record(task.Id, stepEv("more"), true)               // 6 live: a gap
	for range 2 {
		rs = append(rs, watchRecv(t, got))
	}
	if e.fake.count("history") == historyBefore {
		t.Errorf("the gap did not make the router read history")
	}
	e.fake.Publish(step5)                                       // late duplicate
	e.fake.Record(task.Id, statusEv(taskstate.Completed), true) // 7 terminal
	rs = append(rs, watchRecv(t, got))

	select {
	case err := <-end:
		if err != nil {
			t.Fatalf("watch ended with %v, want a clean end", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("watch did not end after the terminal event")
	}
	if r, ok := <-got; ok {
		t.Fatalf("got event %d after the terminal event", r.Event.Seq)
	}
	if s := seqs(rs); s != "2,3,4,5,6,7" {
		t.Fatalf("got seqs %s, want 2,3,4,5,6,7", s)
	}
	wantStatus := []agentmeshv1.TaskStatus{taskstate.Queued, taskstate.Assigned, taskstate.Running, taskstate.Running, taskstate.Running, taskstate.Completed}
	for i, r := range rs {
		if r.Status != wantStatus[i] {
			t.Errorf("event %d: got status %v, want %v", r.Event.Seq, r.Status, wantStatus[i])
		}
	}
	if rs[3].Event.GetStep().GetContent() != "thinking" {
		t.Errorf("event 5: got %v, want the lost step", rs[3].Event)
	}
}

func TestWatchIdleRefetch(t *testing.T) {
	e := start(t, Config{WatchRefetch: 50 * time.Millisecond})
	task := e.fake.AddTask(&agentmeshv1.Task{Agent: "helper", Input: "x"})
	got, end := follow(t, e, task.Id, 2)
	// Nothing reaches the bus: only the idle refetch can find these.
	e.fake.Record(task.Id, statusEv(taskstate.Assigned), false)
	e.fake.Record(task.Id, statusEv(taskstate.Cancelled), false)
	rs := []*agentmeshv1.WatchTaskResponse{watchRecv(t, got), watchRecv(t, got)}
	if s := seqs(rs); s != "3,4" {
		t.Fatalf("got seqs %s, want 3,4", s)
	}
	if err := <-end; err != nil {
		t.Fatalf("watch ended with %v, want a clean end", err)
	}
}

func TestWatchFinishedTask(t *testing.T) {
	e := start(t, Config{WatchRefetch: time.Hour})
	task := e.fake.AddTask(&agentmeshv1.Task{Agent: "helper", Input: "x"})
	e.fake.Record(task.Id, statusEv(taskstate.Failed), false) // seq 3

	tests := []struct {
		name  string
		after int64
		want  string
	}{
		{"from the start", 0, "1,2,3"},
		{"from a cursor", 2, "3"},
		{"cursor at the end", 3, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stream, err := e.tasks.WatchTask(testCtx(t), &agentmeshv1.WatchTaskRequest{Id: task.Id, AfterSeq: tt.after})
			if err != nil {
				t.Fatal(err)
			}
			rs, err := recvAll(stream)
			if err != nil {
				t.Fatalf("watch ended with %v, want a clean end", err)
			}
			if s := seqs(rs); s != tt.want {
				t.Fatalf("got seqs %q, want %q", s, tt.want)
			}
		})
	}
	t.Run("cursor past the end", func(t *testing.T) {
		stream, err := e.tasks.WatchTask(testCtx(t), &agentmeshv1.WatchTaskRequest{Id: task.Id, AfterSeq: 9})
		if err != nil {
			t.Fatal(err)
		}
		_, err = recvAll(stream)
		if st := status.Convert(err); st.Code() != codes.InvalidArgument || !strings.HasPrefix(st.Message(), "after_seq:") {
			t.Fatalf("got %v %q, want InvalidArgument about after_seq", st.Code(), st.Message())
		}
	})
	t.Run("unknown task", func(t *testing.T) {
		stream, err := e.tasks.WatchTask(testCtx(t), &agentmeshv1.WatchTaskRequest{Id: "01NOPE"})
		if err != nil {
			t.Fatal(err)
		}
		_, err = recvAll(stream)
		if got := status.Code(err); got != codes.NotFound {
			t.Fatalf("got %v, want NotFound", got)
		}
	})
}

func TestWatchLongHistoryPages(t *testing.T) {
	e := start(t, Config{WatchRefetch: time.Hour})
	task := e.fake.AddTask(&agentmeshv1.Task{Agent: "helper", Input: "x"})
	e.fake.Record(task.Id, statusEv(taskstate.Assigned), false)
	e.fake.Record(task.Id, statusEv(taskstate.Running), false)
	for i := range 1500 {
		e.fake.Record(task.Id, stepEv(fmt.Sprint("step ", i)), false)
	}
	e.fake.Record(task.Id, statusEv(taskstate.Completed), false)
	stream, err := e.tasks.WatchTask(testCtx(t), &agentmeshv1.WatchTaskRequest{Id: task.Id})
	if err != nil {
		t.Fatal(err)
	}
	rs, err := recvAll(stream)
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 1505 {
		t.Fatalf("got %d events, want 1505", len(rs))
	}
	for i, r := range rs {
		if r.Event.Seq != int64(i+1) {
			t.Fatalf("event %d has seq %d, want %d", i, r.Event.Seq, i+1)
		}
	}
}

func TestWatchClientCancel(t *testing.T) {
	e := start(t, Config{WatchRefetch: time.Hour})
	task := e.fake.AddTask(&agentmeshv1.Task{Agent: "helper", Input: "x"})
	ctx, cancel := context.WithCancel(testCtx(t))
	stream, err := e.tasks.WatchTask(ctx, &agentmeshv1.WatchTaskRequest{Id: task.Id, AfterSeq: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil {
		t.Fatal(err)
	}
	// Watches hold no NATS subscription of their own: the hub's two feed
	// them all, so a second watch adds none.
	during := e.svc.nc.NumSubscriptions()
	other := e.fake.AddTask(&agentmeshv1.Task{Agent: "helper", Input: "y"})
	stream2, err := e.tasks.WatchTask(ctx, &agentmeshv1.WatchTaskRequest{Id: other.Id, AfterSeq: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream2.Recv(); err != nil {
		t.Fatal(err)
	}
	if n := e.svc.nc.NumSubscriptions(); n != during {
		t.Errorf("router holds %d subscriptions with two watches, %d with one", n, during)
	}
	watchers := func() error {
		e.svc.hub.mu.Lock()
		defer e.svc.hub.mu.Unlock()
		if n := len(e.svc.hub.watchers); n != 0 {
			return fmt.Errorf("hub holds watchers of %d tasks, want 0", n)
		}
		return nil
	}
	cancel()
	// The router lets go of the watchers once their clients have gone.
	poll.Until(t, 5*time.Second, watchers)
}
