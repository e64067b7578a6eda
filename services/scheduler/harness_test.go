package scheduler

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	busv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/bus/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/poll"
	"github.com/agentmesh/agentmesh/pkg/subjects"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

var names = subjects.Must("")

// runScheduler runs s until the test ends and waits until it leads.
func runScheduler(t testing.TB, s *Service) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("scheduler Run: %v", err)
		}
	})
	poll.Until(t, 20*time.Second, func() error {
		if !s.Leader() {
			return errors.New("scheduler is not leader yet")
		}
		return nil
	})
}

// fakeExecutor stands in for an executor node: it heartbeats and takes
// work from the shared executors consumer, moves each task assigned →
// running → completed, holding it for hold (or until gate gives a token).
type fakeExecutor struct {
	node     string
	capacity int
	hold     time.Duration
	gate     chan struct{}
	ttl      time.Duration
}

type fakeRunner struct {
	cancel context.CancelFunc
	done   chan struct{}
	mu     sync.Mutex
	taken  []string
}

func (r *fakeRunner) stop() { r.cancel(); <-r.done }

func startFakeExecutor(t *testing.T, nc *nats.Conn, f fakeExecutor) *fakeRunner {
	t.Helper()
	if f.ttl == 0 {
		f.ttl = 2 * time.Second
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	cons, err := js.CreateOrUpdateConsumer(context.Background(), names.WorkStream(), jetstream.ConsumerConfig{
		Durable: subjects.ConsumerExecutors, FilterSubject: names.WorkAll(), AckPolicy: jetstream.AckExplicitPolicy,
		AckWait: time.Minute, MaxDeliver: -1, MaxAckPending: 1 << 16,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &fakeRunner{cancel: cancel, done: make(chan struct{})}
	var wg sync.WaitGroup
	wg.Go(func() {
		tk := time.NewTicker(f.ttl / 10)
		defer tk.Stop()
		for {
			b, _ := proto.Marshal(&busv1.ExecutorHeartbeat{Node: f.node, Capacity: int32(f.capacity), Ttl: durationpb.New(f.ttl), Time: timestamppb.Now()})
			_ = nc.Publish(names.Heartbeat(f.node), b)
			select {
			case <-ctx.Done():
				return
			case <-tk.C:
			}
		}
	})
	slots := make(chan struct{}, f.capacity)
	wg.Go(func() {
		for ctx.Err() == nil {
			select {
			case slots <- struct{}{}:
			case <-ctx.Done():
				return
			}
			batch, err := cons.Fetch(1, jetstream.FetchMaxWait(200*time.Millisecond))
			if err != nil {
				<-slots
				continue
			}
			got := false
			for m := range batch.Messages() {
				got = true
				wg.Go(func() {
					defer func() { <-slots }()
					r.work(ctx, nc, f, m)
				})
			}
			if !got {
				<-slots
			}
		}
	})
	go func() { wg.Wait(); close(r.done) }()
	t.Cleanup(r.stop)
	return r
}

func (r *fakeRunner) work(ctx context.Context, nc *nats.Conn, f fakeExecutor, m jetstream.Msg) {
	var w busv1.WorkItem
	if err := proto.Unmarshal(m.Data(), &w); err != nil {
		_ = m.Term()
		return
	}
	id := w.Task.Id
	tr := func(from, to agentmeshv1.TaskStatus) error {
		rctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return bus.Request(rctx, nc, names.State(intentOp(from, to)), &busv1.TransitionRequest{
			TaskId: id, From: from, To: to, Attempt: w.Attempt, Node: f.node,
		}, &busv1.TransitionResponse{})
	}
	if err := tr(taskstate.Assigned, taskstate.Running); err != nil {
		_ = m.Ack()
		return
	}
	r.mu.Lock()
	r.taken = append(r.taken, id)
	r.mu.Unlock()
	if f.gate != nil {
		select {
		case <-f.gate:
		case <-ctx.Done():
			return // "crashed": no ack, no transition
		}
	} else {
		t := time.NewTimer(f.hold)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return
		}
	}
	_ = tr(taskstate.Running, taskstate.Completed)
	_ = m.Ack()
}

type taskOpt func(*agentmeshv1.Task)

func withOrg(o string) taskOpt { return func(t *agentmeshv1.Task) { t.Org = o } }
func withAgent(a string) taskOpt {
	return func(t *agentmeshv1.Task) { t.Agent = a }
}
func withPriority(p agentmeshv1.Priority) taskOpt {
	return func(t *agentmeshv1.Task) { t.Priority = p }
}
func withQueueTimeout(d time.Duration) taskOpt {
	return func(t *agentmeshv1.Task) { t.QueueTimeout = durationpb.New(d) }
}

func submit(t *testing.T, nc *nats.Conn, opts ...taskOpt) *agentmeshv1.Task {
	t.Helper()
	task := &agentmeshv1.Task{Org: "o", Input: "x", Agent: "helper", Priority: agentmeshv1.Priority_PRIORITY_NORMAL}
	for _, o := range opts {
		o(task)
	}
	var resp busv1.CreateTaskResponse
	if err := bus.Request(context.Background(), nc, names.State(subjects.StateCreateTask), &busv1.CreateTaskRequest{Task: task}, &resp); err != nil {
		t.Fatal(err)
	}
	return resp.Task
}

func putAgent(t *testing.T, nc *nats.Conn, a *agentmeshv1.Agent) {
	t.Helper()
	if err := bus.Request(context.Background(), nc, names.State(subjects.StatePutAgent), &busv1.PutAgentRequest{Agent: a, Create: true}, &busv1.PutAgentResponse{}); err != nil {
		t.Fatal(err)
	}
}

// interval is one attempt's time running, from the history.
type interval struct {
	task       string
	start, end time.Time
}

func history(t *testing.T, nc *nats.Conn, id string) []*agentmeshv1.TaskEvent {
	t.Helper()
	var resp busv1.HistoryResponse
	if err := bus.Request(context.Background(), nc, names.State(subjects.StateHistory), &busv1.HistoryRequest{TaskId: id}, &resp); err != nil {
		t.Fatal(err)
	}
	return resp.Events
}

// runningIntervals returns every running interval of the tasks.
func runningIntervals(t *testing.T, nc *nats.Conn, ids []string) []interval {
	t.Helper()
	var out []interval
	for _, id := range ids {
		var cur *interval
		for _, ev := range history(t, nc, id) {
			if ev.Type != agentmeshv1.EventType_EVENT_TYPE_STATUS {
				continue
			}
			if ev.Status == taskstate.Running {
				cur = &interval{task: id, start: ev.Time.AsTime()}
				continue
			}
			if cur != nil {
				cur.end = ev.Time.AsTime()
				out = append(out, *cur)
				cur = nil
			}
		}
		if cur != nil {
			cur.end = time.Now()
			out = append(out, *cur)
		}
	}
	return out
}

// maxOverlap is the largest number of intervals open at one time. An
// interval ending exactly when another starts does not overlap it.
func maxOverlap(iv []interval) int {
	type point struct {
		at    time.Time
		delta int
	}
	var pts []point
	for _, i := range iv {
		pts = append(pts, point{i.start, 1}, point{i.end, -1})
	}
	sort.Slice(pts, func(a, b int) bool {
		if pts[a].at.Equal(pts[b].at) {
			return pts[a].delta < pts[b].delta
		}
		return pts[a].at.Before(pts[b].at)
	})
	n, top := 0, 0
	for _, p := range pts {
		n += p.delta
		top = max(top, n)
	}
	return top
}

// startedAt returns when the task first ran.
func startedAt(t *testing.T, nc *nats.Conn, id string) time.Time {
	t.Helper()
	for _, ev := range history(t, nc, id) {
		if ev.Type == agentmeshv1.EventType_EVENT_TYPE_STATUS && ev.Status == taskstate.Running {
			return ev.Time.AsTime()
		}
	}
	t.Fatalf("task %s never ran", id)
	return time.Time{}
}

func waitStatus(t *testing.T, nc *nats.Conn, id string, want agentmeshv1.TaskStatus, timeout time.Duration) *agentmeshv1.Task {
	t.Helper()
	var got *agentmeshv1.Task
	poll.Until(t, timeout, func() error {
		got = getTask(t, nc, id)
		if got.Status != want {
			return fmt.Errorf("task %s is %s, want %s", id, taskstate.Name(got.Status), taskstate.Name(want))
		}
		return nil
	})
	return got
}

func waitAll(t *testing.T, nc *nats.Conn, ids []string, want agentmeshv1.TaskStatus, timeout time.Duration) {
	t.Helper()
	wanted := map[string]bool{}
	for _, id := range ids {
		wanted[id] = true
	}
	poll.Until(t, timeout, func() error {
		var resp busv1.ListTasksResponse
		n := 0
		for token := ""; ; {
			if err := bus.Request(context.Background(), nc, names.State(subjects.StateListTasks), &busv1.ListTasksRequest{
				Statuses: []agentmeshv1.TaskStatus{want}, PageSize: 1000, PageToken: token,
			}, &resp); err != nil {
				return err
			}
			for _, task := range resp.Tasks {
				if wanted[task.Id] {
					n++
				}
			}
			if token = resp.NextPageToken; token == "" {
				break
			}
		}
		if n < len(ids) {
			return fmt.Errorf("%d of %d tasks %s", n, len(ids), taskstate.Name(want))
		}
		return nil
	})
}

// intentOp is the state intent a test uses for a status change, as the
// service that owns that change would (there is no generic transition).
func intentOp(from, to agentmeshv1.TaskStatus) string {
	switch {
	case to == taskstate.Assigned:
		return subjects.StateDispatch
	case to == taskstate.Running:
		return subjects.StateStart
	case to == taskstate.Completed:
		return subjects.StateComplete
	case to == taskstate.Blocked:
		return subjects.StateBlock
	case to == taskstate.Queued:
		return subjects.StateRequeue
	case to == taskstate.Cancelled:
		return subjects.StateCancel
	}
	return subjects.StateFail
}
