package scheduler

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	busv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/bus/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/embednats"
	"github.com/agentmesh/agentmesh/pkg/natstest"
	"github.com/agentmesh/agentmesh/pkg/poll"
	"github.com/agentmesh/agentmesh/pkg/subjects"
	"github.com/agentmesh/agentmesh/pkg/testlog"
	"github.com/agentmesh/agentmesh/services/state"
	"github.com/agentmesh/agentmesh/services/state/kvstore"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"
)

// The tests of schedules and webhooks run the real state service (the
// embedded store) on a real NATS server, each identity with its own
// permissions, and answer the registry's match on the bus: every
// template's agent is "writer" of the asking org, but agent "gone".

// opsEnv is a NATS server with state, a registry's match and a driver.
type opsEnv struct {
	srv *embednats.Server
	nc  *nats.Conn // the test driver
}

func startOps(t testing.TB) *opsEnv {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	srv := natstest.Start(t)
	stateNC := natstest.ConnectAs(t, srv, subjects.ServiceState)
	js, err := jetstream.New(stateNC)
	if err != nil {
		t.Fatal(err)
	}
	st, err := kvstore.Open(ctx, js, names, kvstore.Options{SoleWriter: true}) // as in agentmesh dev
	if err != nil {
		t.Fatal(err)
	}
	svc, err := state.New(ctx, state.Config{}, state.Deps{NC: stateNC, Store: st, Log: testlog.New(t)})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = svc.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done; _ = st.Close() })
	e := &opsEnv{srv: srv, nc: natstest.Connect(t, srv)}
	e.answerMatch(t)
	return e
}

// answerMatch answers registry.match as the registry would for agent
// "writer" of the asking org, and not_found for an agent named "gone".
func (e *opsEnv) answerMatch(t testing.TB) {
	t.Helper()
	sub, err := e.nc.Subscribe(names.Registry(subjects.RegistryMatch), func(m *nats.Msg) {
		var req busv1.MatchRequest
		reply := nats.NewMsg(m.Reply)
		if err := proto.Unmarshal(m.Data, &req); err != nil || req.Agent == "gone" {
			pe := bus.ToProto(bus.Errorf(bus.CodeNotFound, "agent %q not found", req.Agent))
			reply.Header.Set(bus.HeaderErrorCode, pe.Code)
			reply.Data, _ = proto.Marshal(pe)
		} else {
			reply.Data, _ = proto.Marshal(&busv1.MatchResponse{Agent: &agentmeshv1.Agent{Name: "writer", Org: req.Org, Version: 1}})
		}
		_ = m.RespondMsg(reply)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := e.nc.Flush(); err != nil {
		t.Fatal(err)
	}
}

// call makes a state request as the driver.
func (e *opsEnv) call(t *testing.T, op string, req, resp proto.Message) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := bus.Request(ctx, e.nc, names.State(op), req, resp); err != nil {
		t.Fatalf("%s: %v", op, err)
	}
}

// replica is one running scheduler replica.
type replica struct {
	s      *Service
	nc     *nats.Conn
	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
}

func startReplica(t testing.TB, e *opsEnv, cfg Config) *replica {
	t.Helper()
	nc := natstest.ConnectAs(t, e.srv, subjects.ServiceScheduler)
	s, err := New(context.Background(), cfg, Deps{NC: nc, Log: testlog.New(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &replica{s: s, nc: nc, cancel: cancel, done: make(chan struct{})}
	go func() { _ = s.Run(ctx); close(r.done) }()
	t.Cleanup(r.stop)
	return r
}

// stop stops the replica cleanly (it hands the lease over).
func (r *replica) stop() {
	r.once.Do(func() { r.cancel(); <-r.done })
}

// kill cuts the replica off the bus first, as a crash would: it cannot
// hand the lease over, which expires.
func (r *replica) kill() {
	r.nc.Close()
	r.stop()
}

func waitLeader(t *testing.T, r *replica) {
	t.Helper()
	poll.Until(t, 20*time.Second, func() error {
		if !r.s.Leader() {
			return errors.New("not leader yet")
		}
		return nil
	})
}

// fakeClock is a Clock the test moves.
type fakeClock struct {
	mu      sync.Mutex
	now     time.Time
	waiters []fakeWaiter
}

type fakeWaiter struct {
	at time.Time
	ch chan time.Time
}

func newFakeClock(now time.Time) *fakeClock { return &fakeClock{now: now} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan time.Time, 1)
	if d <= 0 {
		ch <- c.now
		return ch
	}
	c.waiters = append(c.waiters, fakeWaiter{at: c.now.Add(d), ch: ch})
	return ch
}

// Set moves the clock to t and wakes the waiters whose time came.
func (c *fakeClock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
	kept := c.waiters[:0]
	for _, w := range c.waiters {
		if w.at.After(t) {
			kept = append(kept, w)
			continue
		}
		w.ch <- t
	}
	c.waiters = kept
}

func (e *opsEnv) getSchedule(t *testing.T, org, id string) *agentmeshv1.Schedule {
	t.Helper()
	var resp busv1.ScheduleResponse
	e.call(t, subjects.StateGetSchedule, &busv1.GetScheduleRequest{Id: id, Org: org}, &resp)
	return resp.Schedule
}

// runs lists the runs of a schedule (its tagged tasks), oldest first.
func (e *opsEnv) runs(t *testing.T, sc *agentmeshv1.Schedule) []*agentmeshv1.Task {
	t.Helper()
	var resp busv1.ListTasksResponse
	e.call(t, subjects.StateListTasks, &busv1.ListTasksRequest{Org: sc.Org, Tag: "schedule:" + sc.Id, PageSize: 1000}, &resp)
	out := resp.Tasks
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return out
}

func (e *opsEnv) waitRuns(t *testing.T, sc *agentmeshv1.Schedule, n int) []*agentmeshv1.Task {
	t.Helper()
	var got []*agentmeshv1.Task
	poll.Until(t, 20*time.Second, func() error {
		if got = e.runs(t, sc); len(got) < n {
			return fmt.Errorf("%d runs of %s, want %d", len(got), sc.Id, n)
		}
		return nil
	})
	return got
}
