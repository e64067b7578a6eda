package state_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	busv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/bus/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/natstest"
	"github.com/agentmesh/agentmesh/pkg/pgtest"
	"github.com/agentmesh/agentmesh/pkg/poll"
	"github.com/agentmesh/agentmesh/pkg/subjects"
	"github.com/agentmesh/agentmesh/services/state"
	"github.com/agentmesh/agentmesh/services/state/pgstore"
	"github.com/agentmesh/agentmesh/services/state/store"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// storedIDs counts the messages of stream by Nats-Msg-Id. It fails while
// the stream has no leader (as just after a partition heals): callers poll.
func storedIDs(js jetstream.JetStream, stream string) (map[string]int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return nil, fmt.Errorf("stream %s: %w", stream, err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("stream %s: %w", stream, err)
	}
	ids := map[string]int{}
	if info.State.Msgs == 0 {
		return ids, nil
	}
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			continue // deleted
		}
		ids[m.Header.Get(jetstream.MsgIDHeader)]++
	}
	return ids, nil
}

// An event published while the events stream's leader is lost (its server
// cut off the others, as by a crash or a partition: the survivors elect a
// new leader after their election timeout) is stored exactly once: the
// state service sends it again with the same Msg-Id until the stream has
// it. Before the outbox such events were logged and lost.
func TestEventsSurviveStreamLeaderLoss(t *testing.T) {
	c := natstest.StartCluster(t, 3)
	st, err := pgstore.Open(context.Background(), pgtest.NewDatabase(t))
	if err != nil {
		t.Fatalf("pgstore.Open: %v", err)
	}
	t.Cleanup(func() { st.Close() })
	// State and the test talk through one member, which stays with the
	// majority.
	sjs, err := jetstream.New(c.ConnectAs(t, subjects.ServiceState))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bus.EnsureStreams(context.Background(), sjs, names, bus.StreamOptions{}); err != nil {
		t.Fatal(err)
	}
	leader := -1
	poll.Until(t, 30*time.Second, func() error {
		if leader = c.StreamLeader(names.EventsStream()); leader < 0 {
			return fmt.Errorf("the events stream has no leader yet")
		}
		return nil
	})
	member := (leader + 1) % c.Size()
	driver := c.ConnectTo(t, member, "")
	r := startService(t, c.ConnectTo(t, member, subjects.ServiceState), driver, st)
	js, err := jetstream.New(driver)
	if err != nil {
		t.Fatal(err)
	}
	c.Isolate(leader)
	healed := false
	defer func() {
		if !healed {
			c.Heal(leader)
		}
	}()

	// Tasks created while the survivors elect a new leader: each create
	// commits in Postgres and replies, whatever became of its events.
	const n = 12
	var ids []string
	for i := range n {
		req := newTask("org")
		req.Task.IdempotencyKey = fmt.Sprintf("leader-loss-%d", i)
		var resp busv1.CreateTaskResponse
		err := bus.Retry(context.Background(), bus.Backoff{Initial: 20 * time.Millisecond, Max: 200 * time.Millisecond, Tries: 200},
			func(ctx context.Context) error {
				return bus.Request(ctx, r.nc, names.State(subjects.StateCreateTask), req, &resp)
			})
		if err != nil {
			t.Fatalf("create task %d: %v", i, err)
		}
		ids = append(ids, resp.Task.Id)
	}
	c.Heal(leader)
	healed = true
	var want []string
	for _, id := range ids {
		hist := mustCall(t, r.nc, subjects.StateHistory, &busv1.HistoryRequest{TaskId: id}, &busv1.HistoryResponse{})
		for _, ev := range hist.Events {
			want = append(want, fmt.Sprintf("%s:%d", id, ev.Seq))
		}
	}
	if len(want) != 2*n {
		t.Fatalf("%d events in the record, want %d", len(want), 2*n)
	}
	var got map[string]int
	poll.Until(t, 90*time.Second, func() error {
		var err error
		if got, err = storedIDs(js, names.EventsStream()); err != nil {
			return err
		}
		for _, id := range want {
			if got[id] == 0 {
				return fmt.Errorf("event %s is not in %s", id, names.EventsStream())
			}
		}
		return nil
	})
	for _, id := range want {
		if got[id] != 1 {
			t.Errorf("event %s stored %d times, want once", id, got[id])
		}
	}
}

// On more than one NATS server the bus streams and the embedded store's
// buckets get 3 replicas unless told otherwise; a stream that exists with
// fewer is kept as it is and reported at start, by name.
func TestClusterStreamsReplicated(t *testing.T) {
	c := natstest.StartCluster(t, 3)
	driver := c.Connect(t)
	js, err := jetstream.New(driver)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// An audit stream from an older setting: one replica.
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: names.AuditStream(), Subjects: names.AuditSubjects(), Replicas: 1}); err != nil {
		t.Fatal(err)
	}
	nc := c.ConnectAs(t, subjects.ServiceState)
	logs := &logBuffer{}
	if _, err := newStateLogged(ctx, nc, openKV(t, nc), logs); err != nil {
		t.Fatalf("state.New: %v", err)
	}
	for _, name := range []string{names.EventsStream(), names.WorkStream(), "KV_" + names.StoreBucket("tasks"), names.StoreHistoryStream()} {
		s, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatalf("stream %s: %v", name, err)
		}
		if got := s.CachedInfo().Config.Replicas; got != 3 {
			t.Errorf("stream %s: %d replicas, want 3 (more than one NATS server)", name, got)
		}
	}
	s, err := js.Stream(ctx, names.AuditStream())
	if err != nil {
		t.Fatal(err)
	}
	if got := s.CachedInfo().Config.Replicas; got != 1 {
		t.Errorf("existing stream %s: %d replicas, want its own 1 kept", names.AuditStream(), got)
	}
	if !logs.contains("fewer replicas than wanted", names.AuditStream()) {
		t.Errorf("no warning naming %s at start; log:\n%s", names.AuditStream(), logs.String())
	}
	if logs.contains("fewer replicas than wanted", names.EventsStream()) {
		t.Errorf("a warning names %s, which has its 3 replicas; log:\n%s", names.EventsStream(), logs.String())
	}

	// One server: one replica.
	srv := natstest.Start(t)
	lone := natstest.ConnectAs(t, srv, subjects.ServiceState)
	if got := bus.Replicas(lone, 0); got != 1 {
		t.Errorf("Replicas on one server = %d, want 1", got)
	}
	if got := bus.Replicas(nc, 0); got != 3 {
		t.Errorf("Replicas on a URL list of three = %d, want 3", got)
	}
	if got := bus.Replicas(nc, 2); got != 2 {
		t.Errorf("Replicas configured 2 = %d, want 2", got)
	}
}

// logBuffer is a log a test reads back.
type logBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// contains reports whether one line holds every part.
func (l *logBuffer) contains(parts ...string) bool {
	for _, line := range strings.Split(l.String(), "\n") {
		all := true
		for _, p := range parts {
			all = all && strings.Contains(line, p)
		}
		if all {
			return true
		}
	}
	return false
}

// newStateLogged builds a state service (not running) that logs to logs.
func newStateLogged(ctx context.Context, nc *nats.Conn, st store.Store, logs *logBuffer) (*state.Service, error) {
	return state.New(ctx, state.Config{Concurrency: 16}, state.Deps{NC: nc, Store: st, Log: slog.New(slog.NewTextHandler(logs, nil))})
}
