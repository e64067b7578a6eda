package kvstore_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	busv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/bus/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/natstest"
	"github.com/agentmesh/agentmesh/pkg/poll"
	"github.com/agentmesh/agentmesh/pkg/subjects"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"github.com/agentmesh/agentmesh/services/state/kvstore"
	"github.com/agentmesh/agentmesh/services/state/store"
	"github.com/agentmesh/agentmesh/services/state/storetest"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

var names = subjects.Must("am")

func openOn(t *testing.T, nc *nats.Conn) (*kvstore.Store, jetstream.JetStream) {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("jetstream: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := kvstore.Open(ctx, js, names, kvstore.Options{})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s, js
}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		s, _ := openOn(t, natstest.Connect(t, natstest.Start(t)))
		return s
	})
}

func TestConformanceMemory(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		js, err := jetstream.New(natstest.Connect(t, natstest.Start(t)))
		if err != nil {
			t.Fatalf("jetstream: %v", err)
		}
		// The sole writer's index answers reads and Unfollowed exactly:
		// this run holds it to the same contract as a shared store.
		s, err := kvstore.Open(context.Background(), js, subjects.Must("mem.x"), kvstore.Options{Memory: true, SoleWriter: true})
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	})
}

// A crash between appending an event and updating the KV entry leaves the
// entry behind its history; the next read and the next write roll it
// forward, and the history keeps one event per seq.
func TestRollForward(t *testing.T) {
	ctx := context.Background()
	nc := natstest.Connect(t, natstest.Start(t))
	s, js := openOn(t, nc)
	task, _, _, err := s.CreateTask(ctx, &agentmeshv1.Task{Org: "o", Agent: "a"})
	if err != nil {
		t.Fatalf("CreateTask: %v", err)
	}
	// What a crashed writer left: events 3 and 4 in the history only.
	var records [][]byte
	for _, ev := range []*agentmeshv1.TaskEvent{
		{TaskId: task.Id, Seq: 3, Type: agentmeshv1.EventType_EVENT_TYPE_STATUS, Time: timestamppb.Now(),
			FromStatus: taskstate.Queued, Status: taskstate.Assigned, Attempt: 1, Org: "o"},
		{TaskId: task.Id, Seq: 4, Type: agentmeshv1.EventType_EVENT_TYPE_STATUS, Time: timestamppb.Now(),
			FromStatus: taskstate.Assigned, Status: taskstate.Running, Attempt: 1, Org: "o", Node: "n1"},
	} {
		data, _ := proto.Marshal(ev)
		records = append(records, data)
	}
	s2, got := readAfterCrash(t, js, nc, task.Id, records...)
	if got.Status != taskstate.Running || got.LastEventSeq != 4 || got.Attempt != 1 || got.Node != "n1" {
		t.Errorf("rolled forward: got %s seq %d attempt %d node %q, want running 4 1 n1",
			taskstate.Name(got.Status), got.LastEventSeq, got.Attempt, got.Node)
	}
	// The first store trusted its head (seq 2): its write must notice.
	done, ev, err := s.Transition(ctx, store.Transition{TaskID: task.Id, From: taskstate.Running, To: taskstate.Completed, Attempt: 1, Result: "ok"})
	if err != nil {
		t.Fatalf("Transition after the crash: %v", err)
	}
	if ev.Seq != 5 || done.Status != taskstate.Completed {
		t.Errorf("transition: got seq %d status %s, want 5 completed", ev.Seq, taskstate.Name(done.Status))
	}
	hist, err := s2.History(ctx, task.Id, 0, 0)
	if err != nil {
		t.Fatalf("History: %v", err)
	}
	for i, ev := range hist {
		if ev.Seq != int64(i+1) {
			t.Fatalf("history[%d]: got seq %d, want %d", i, ev.Seq, i+1)
		}
	}
	if len(hist) != 5 {
		t.Errorf("history: got %d events, want 5", len(hist))
	}
	// Both stores' indexes see the final state (the watcher carries it).
	for i, st := range []*kvstore.Store{s, s2} {
		poll.Until(t, 5*time.Second, func() error {
			list, _, err := st.ListTasks(ctx, store.TaskQuery{Statuses: []agentmeshv1.TaskStatus{taskstate.Completed}})
			if err != nil {
				return err
			}
			if len(list) != 1 || list[0].Id != task.Id {
				return errors.New("store " + string(rune('0'+i)) + ": completed task not listed yet")
			}
			return nil
		})
	}
}

// A record of several events (a checkpoint with its completion) that a
// crashed writer left ahead of the KV entry is rolled forward whole, and
// a second process reads it back as the events it holds.
func TestRollForwardRecordOfMany(t *testing.T) {
	ctx := context.Background()
	nc := natstest.Connect(t, natstest.Start(t))
	s, js := openOn(t, nc)
	task, _, _, err := s.CreateTask(ctx, &agentmeshv1.Task{Org: "o", Agent: "a"})
	if err != nil {
		t.Fatalf("CreateTask: %v", err)
	}
	task = mustMove(t, s, store.Transition{TaskID: task.Id, To: taskstate.Assigned, NextAttempt: true})
	task = mustMove(t, s, store.Transition{TaskID: task.Id, To: taskstate.Running, Attempt: 1})
	// Written by Checkpoint (the store's own path): one record.
	if _, _, err := s.Checkpoint(ctx, task.Id, 1, []*agentmeshv1.Step{
		{Index: 0, Kind: agentmeshv1.StepKind_STEP_KIND_MODEL_TURN, Content: "calls a tool"},
		{Index: 1, Kind: agentmeshv1.StepKind_STEP_KIND_TOOL_CALL, ToolName: "t"},
	}, nil); err != nil {
		t.Fatalf("Checkpoint: %v", err)
	}
	// What a crashed writer left: a record of a step and the completion in
	// the history only.
	rec, err := kvstore.EncodeRecord([]*agentmeshv1.TaskEvent{
		{TaskId: task.Id, Seq: 7, Type: agentmeshv1.EventType_EVENT_TYPE_STEP, Time: timestamppb.Now(), Status: taskstate.Running,
			Attempt: 1, Org: "o", Step: &agentmeshv1.Step{Index: 2, Kind: agentmeshv1.StepKind_STEP_KIND_MODEL_TURN, Content: "the answer"}},
		{TaskId: task.Id, Seq: 8, Type: agentmeshv1.EventType_EVENT_TYPE_STATUS, Time: timestamppb.Now(),
			FromStatus: taskstate.Running, Status: taskstate.Completed, Attempt: 1, Org: "o", Result: "42"},
	})
	if err != nil {
		t.Fatalf("EncodeRecord: %v", err)
	}
	s2, got := readAfterCrash(t, js, nc, task.Id, rec)
	if got.Status != taskstate.Completed || got.LastEventSeq != 8 || got.StepCount != 3 || got.Result != "42" {
		t.Errorf("rolled forward: got %s seq %d, %d steps, result %q; want completed 8, 3, 42",
			taskstate.Name(got.Status), got.LastEventSeq, got.StepCount, got.Result)
	}
	hist, err := s2.History(ctx, task.Id, 5, 0)
	if err != nil {
		t.Fatalf("History: %v", err)
	}
	var seqs []int64
	for _, ev := range hist {
		seqs = append(seqs, ev.Seq)
	}
	if !slices.Equal(seqs, []int64{6, 7, 8}) || hist[0].GetStep().GetIndex() != 1 || hist[1].GetStep().GetContent() != "the answer" {
		t.Errorf("history after seq 5: got seqs %v (%v), want 6 7 8: the tool call, the answer, the completion", seqs, hist)
	}
	if part, err := s2.History(ctx, task.Id, 0, 6); err != nil || len(part) != 6 || part[5].Seq != 6 {
		t.Errorf("history limited to 6 events: got %d events, %v", len(part), err)
	}
}

// readAfterCrash appends records to a task's history behind the store's
// back (what a writer that crashed before updating the KV entry left) and
// reads the task with a second store, as a restarted process would: one
// that knows nothing of the head.
func readAfterCrash(t *testing.T, js jetstream.JetStream, nc *nats.Conn, taskID string, records ...[]byte) (*kvstore.Store, *agentmeshv1.Task) {
	t.Helper()
	ctx := context.Background()
	for _, rec := range records {
		if _, err := js.Publish(ctx, names.StoreHistory(taskID), rec); err != nil {
			t.Fatalf("publish: %v", err)
		}
	}
	s2, _ := openOn(t, nc)
	got, err := s2.GetTask(ctx, taskID)
	if err != nil {
		t.Fatalf("GetTask: %v", err)
	}
	return s2, got
}

func mustMove(t *testing.T, s *kvstore.Store, tr store.Transition) *agentmeshv1.Task {
	t.Helper()
	got, _, err := s.Transition(context.Background(), tr)
	if err != nil {
		t.Fatalf("Transition to %s: %v", taskstate.Name(tr.To), err)
	}
	return got
}

// The KV entry, the history and both indexes survive a restart of the
// server on the same directory.
func TestRestart(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	srv := natstest.Start(t, dir)
	nc := natstest.Connect(t, srv)
	s, _ := openOn(t, nc)
	var created []*agentmeshv1.Task
	for range 3 {
		task, _, _, err := s.CreateTask(ctx, &agentmeshv1.Task{Org: "o", Agent: "a", IdempotencyKey: "k" + string(rune('a'+len(created)))})
		if err != nil {
			t.Fatalf("CreateTask: %v", err)
		}
		created = append(created, task)
	}
	if _, _, err := s.Transition(ctx, store.Transition{TaskID: created[0].Id, To: taskstate.Cancelled, Reason: "no"}); err != nil {
		t.Fatalf("Transition: %v", err)
	}
	if _, err := s.PutAgent(ctx, &agentmeshv1.Agent{Name: "a", Skills: []string{"go"}}, true, 0); err != nil {
		t.Fatalf("PutAgent: %v", err)
	}
	s.Close()
	nc.Close()
	srv.Stop()

	srv2 := natstest.Start(t, dir)
	s2, _ := openOn(t, natstest.Connect(t, srv2))
	list, _, err := s2.ListTasks(ctx, store.TaskQuery{})
	if err != nil {
		t.Fatalf("ListTasks: %v", err)
	}
	if len(list) != 3 || list[0].Id != created[2].Id || list[2].Status != taskstate.Cancelled {
		t.Errorf("tasks after restart: got %v, want the 3, newest first, the oldest cancelled", list)
	}
	hist, err := s2.History(ctx, created[0].Id, 0, 0)
	if err != nil || len(hist) != 3 {
		t.Errorf("history after restart: got %d events, %v, want 3", len(hist), err)
	}
	again, _, wasCreated, err := s2.CreateTask(ctx, &agentmeshv1.Task{Org: "o", Agent: "a", IdempotencyKey: "kb"})
	if err != nil || wasCreated || again.Id != created[1].Id {
		t.Errorf("idempotent create after restart: got %s created=%v %v, want %s created=false", again.GetId(), wasCreated, err, created[1].Id)
	}
	agents, _, err := s2.ListAgents(ctx, store.AgentQuery{Skill: "go"})
	if err != nil || len(agents) != 1 {
		t.Errorf("agents after restart: got %v, %v, want 1", agents, err)
	}
	if _, err := s2.GetTask(ctx, "nope"); !errors.Is(err, bus.ErrNotFound) {
		t.Errorf("GetTask(nope): got %v, want not_found", err)
	}
}

// FuzzDecode: stored records are outside input to a reader (another
// version, a hand edit). Decoding never panics; what decodes re-encodes.
func FuzzDecode(f *testing.F) {
	ev, _ := proto.Marshal(&agentmeshv1.TaskEvent{TaskId: "x", Seq: 3, Type: agentmeshv1.EventType_EVENT_TYPE_STEP})
	task, _ := proto.Marshal(&agentmeshv1.Task{Id: "x", LastEventSeq: 2})
	agent, _ := proto.Marshal(&agentmeshv1.Agent{Name: "a", Skills: []string{"go"}})
	many, _ := kvstore.EncodeRecord([]*agentmeshv1.TaskEvent{{TaskId: "x", Seq: 3}, {TaskId: "x", Seq: 4}})
	for _, b := range [][]byte{nil, {0xff}, {0x00}, {0x00, 0x05}, ev, task, agent, many} {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if evs, err := kvstore.DecodeRecord(b); err == nil {
			if len(evs) == 0 || evs[0].Seq <= 0 {
				t.Fatalf("DecodeRecord accepted %v", evs)
			}
			for i := 1; i < len(evs); i++ {
				if evs[i].Seq != evs[i-1].Seq+1 {
					t.Fatalf("DecodeRecord accepted seqs %d then %d", evs[i-1].Seq, evs[i].Seq)
				}
			}
			again, err := kvstore.EncodeRecord(evs)
			if err != nil {
				t.Fatalf("EncodeRecord of a decoded record: %v", err)
			}
			if back, err := kvstore.DecodeRecord(again); err != nil || len(back) != len(evs) {
				t.Fatalf("re-encoded record: %d events, %v; want %d", len(back), err, len(evs))
			}
		} else if !errors.Is(err, bus.ErrInternal) {
			t.Fatalf("DecodeRecord: got %v, want an internal error", err)
		}
		if ev, err := kvstore.DecodeEvent(b); err == nil {
			if ev.Seq <= 0 {
				t.Fatalf("DecodeEvent accepted seq %d", ev.Seq)
			}
		} else if !errors.Is(err, bus.ErrInternal) {
			t.Fatalf("DecodeEvent: got %v, want an internal error", err)
		}
		if _, err := kvstore.DecodeTask(b); err != nil && !errors.Is(err, bus.ErrInternal) {
			t.Fatalf("DecodeTask: got %v, want an internal error", err)
		}
		if _, err := kvstore.DecodeAgent(b); err != nil && !errors.Is(err, bus.ErrInternal) {
			t.Fatalf("DecodeAgent: got %v, want an internal error", err)
		}
	})
}

// BenchmarkSubtasksAmongMany is what settling each finished task reads:
// the unfinished sub-tasks of one parent, with many other tasks in the
// store (AGENTMESH_BENCH_TASKS, default 10,000).
//
//	go test -run '^$' -bench SubtasksAmongMany ./services/state/kvstore/
func BenchmarkSubtasksAmongMany(b *testing.B) {
	ctx := context.Background()
	nc := natstest.Connect(b, natstest.Start(b))
	js, err := jetstream.New(nc)
	if err != nil {
		b.Fatal(err)
	}
	s, err := kvstore.Open(ctx, js, names, kvstore.Options{Memory: true})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	n := 10000
	if v, err := strconv.Atoi(os.Getenv("AGENTMESH_BENCH_TASKS")); err == nil && v > 0 {
		n = v
	}
	var parent string
	for i := range n {
		task := &agentmeshv1.Task{Org: "org", Agent: "agent", Input: "x"}
		if i == n/2 {
			task.Input = "the parent"
		}
		got, _, _, err := s.CreateTask(ctx, task)
		if err != nil {
			b.Fatal(err)
		}
		if i == n/2 {
			parent = got.Id
		}
	}
	for range 3 {
		if _, _, _, err := s.CreateTask(ctx, &agentmeshv1.Task{Org: "org", Agent: "agent", Input: "a sub-task", ParentTaskId: parent}); err != nil {
			b.Fatal(err)
		}
	}
	q := store.TaskQuery{Org: "org", ParentTaskID: parent, PageSize: store.MaxPageSize,
		Statuses: []agentmeshv1.TaskStatus{taskstate.Created, taskstate.Queued, taskstate.Assigned, taskstate.Running, taskstate.Blocked}}
	b.ResetTimer()
	for b.Loop() {
		kids, _, err := s.ListTasks(ctx, q)
		if err != nil || len(kids) != 3 {
			b.Fatalf("ListTasks: %d sub-tasks, %v; want 3", len(kids), err)
		}
	}
}

// A sole writer answers GetTask from its index when it holds the task at
// the head it wrote, without reading the KV entry; a store that may have
// other writers reads the entry. Shown with the bus gone: the sole writer
// still answers, the other cannot.
func TestSoleWriterReadsItsIndex(t *testing.T) {
	ctx := context.Background()
	srv := natstest.Start(t)
	nc := natstest.Connect(t, srv)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	sole, err := kvstore.Open(ctx, js, names, kvstore.Options{SoleWriter: true})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { sole.Close() })
	shared, _ := openOn(t, nc)

	task, _, _, err := sole.CreateTask(ctx, &agentmeshv1.Task{Org: "o", Agent: "a", Title: "mine"})
	if err != nil {
		t.Fatalf("CreateTask: %v", err)
	}
	task = mustMove(t, sole, store.Transition{TaskID: task.Id, To: taskstate.Assigned, NextAttempt: true})
	got, err := sole.GetTask(ctx, task.Id)
	if err != nil || !proto.Equal(got, task) {
		t.Fatalf("GetTask of the sole writer: %v, %v; want %v", got, err, task)
	}
	got.Title = "changed by the caller" // a copy: the index is not the caller's
	if again, _ := sole.GetTask(ctx, task.Id); again.GetTitle() != "mine" {
		t.Fatalf("the index changed with the caller's copy: title %q", again.GetTitle())
	}
	if _, err := shared.GetTask(ctx, task.Id); err != nil {
		t.Fatalf("GetTask of the other store: %v", err)
	}

	// Only the sole writer knows, at once, that nothing follows an end.
	ended, _, _, err := sole.CreateTask(ctx, &agentmeshv1.Task{Org: "o", Agent: "a", Title: "ended"})
	if err != nil {
		t.Fatalf("CreateTask: %v", err)
	}
	mustMove(t, sole, store.Transition{TaskID: ended.Id, To: taskstate.Cancelled, Reason: "stop"})
	if none, exact, err := sole.Unfollowed(ctx, ended.Id); err != nil || !none || !exact {
		t.Errorf("Unfollowed of the sole writer: %v %v %v; want true, exact", none, exact, err)
	}
	if none, exact, err := shared.Unfollowed(ctx, ended.Id); err != nil || none || exact {
		t.Errorf("Unfollowed of a store with other writers: %v %v %v; want false, not exact", none, exact, err)
	}

	nc.Close()
	short, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if got, err := sole.GetTask(short, task.Id); err != nil || !proto.Equal(got, task) {
		t.Errorf("GetTask of the sole writer with the bus gone: %v, %v; want the task from its index", got, err)
	}
	if _, err := shared.GetTask(short, task.Id); err == nil {
		t.Errorf("GetTask of a store with other writers answered with the bus gone; it must read the entry")
	}
}

// Unreachable: what the state service tries again when it opens the store
// (JetStream not enabled yet on a server still starting), and what it
// does not.
func TestUnreachable(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("kvstore: bucket X: %w", jetstream.ErrJetStreamNotEnabled), true},
		{fmt.Errorf("kvstore: bucket X: %w", &jetstream.APIError{Code: 503, ErrorCode: jetstream.JSErrCodeJetStreamNotEnabled}), true},
		{fmt.Errorf("kvstore: %w", nats.ErrNoResponders), true},
		{fmt.Errorf("kvstore: %w", nats.ErrTimeout), true},
		{errors.New("kvstore: bucket X: invalid config"), false},
		{&jetstream.APIError{Code: 400, ErrorCode: jetstream.JSErrCodeStreamNameInUse}, false},
	} {
		if got := kvstore.Unreachable(tc.err); got != tc.want {
			t.Errorf("Unreachable(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

// History reads share one subscription for their direct gets' answers:
// many reads, concurrent and one after another, each get their own task's
// events, and the server's subscription list sees no insert per read
// (before, each read subscribed to an inbox of its own and unsubscribed).
func TestHistoryReadsShareOneSubscription(t *testing.T) {
	ctx := context.Background()
	srv := natstest.Start(t)
	s, _ := openOn(t, natstest.Connect(t, srv))
	var ids []string
	for range 8 {
		task, _, _, err := s.CreateTask(ctx, &agentmeshv1.Task{Org: "o", Agent: "a"})
		if err != nil {
			t.Fatalf("CreateTask: %v", err)
		}
		ids = append(ids, task.Id)
	}
	// A second event for half of them, so the reads' answers differ.
	for _, id := range ids[:4] {
		if _, _, err := s.Transition(ctx, store.Transition{TaskID: id, From: taskstate.Queued, To: taskstate.Cancelled}); err != nil {
			t.Fatalf("Transition: %v", err)
		}
	}
	read := func(id string) error {
		hist, err := s.History(ctx, id, 0, 0)
		if err != nil {
			return err
		}
		want := 2
		if slices.Contains(ids[:4], id) {
			want = 3
		}
		if len(hist) != want {
			return fmt.Errorf("history of %s: %d events, want %d", id, len(hist), want)
		}
		for _, ev := range hist {
			if ev.TaskId != id {
				return fmt.Errorf("history of %s holds an event of %s", id, ev.TaskId)
			}
		}
		return nil
	}
	if err := read(ids[0]); err != nil { // the subscription is made here
		t.Fatal(err)
	}
	subsz, err := srv.Subsz(nil)
	if err != nil {
		t.Fatalf("Subsz: %v", err)
	}
	inserts := subsz.NumInserts
	const rounds = 10
	var wg sync.WaitGroup
	errs := make(chan error, rounds*len(ids))
	for range rounds {
		for _, id := range ids {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := read(id); err != nil {
					errs <- err
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	subsz, err = srv.Subsz(nil)
	if err != nil {
		t.Fatalf("Subsz: %v", err)
	}
	if grew := subsz.NumInserts - inserts; grew >= rounds {
		t.Errorf("%d history reads inserted %d subscriptions in the server, want none per read", rounds*len(ids), grew)
	}
}

// Keys stored before name claims existed (an older version kept no claim,
// and may hold two keys of one org with one name) keep their names: both
// stay, and a new key of that name is refused once the store is open.
func TestKeyNamesOfKeysStoredBeforeClaims(t *testing.T) {
	ctx := context.Background()
	nc := natstest.Connect(t, natstest.Start(t))
	s, js := openOn(t, nc)
	kv, err := js.KeyValue(ctx, names.StoreBucket("keys"))
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"key_01", "key_02"} {
		data, err := proto.Marshal(&busv1.KeyRecord{Key: &agentmeshv1.ApiKey{Id: id, Org: "acme", Name: "x1", Role: "reader", Version: 1}, Sha256: []byte(id)})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := kv.Create(ctx, id, data); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()
	s, _ = openOn(t, nc)
	_, err = s.PutKey(ctx, &busv1.KeyRecord{Key: &agentmeshv1.ApiKey{Id: "key_03", Org: "acme", Name: "x1", Role: "reader"}, Sha256: []byte("s")}, true, 0)
	var be *bus.Error
	if !errors.As(err, &be) || be.Code != bus.CodeAlreadyExists || be.Field != "name" {
		t.Fatalf("create x1 beside the older keys: %v, want already_exists naming name", err)
	}
	recs, _, err := s.ListKeys(ctx, store.RecordQuery{Org: "acme"})
	if err != nil || len(recs) != 2 {
		t.Fatalf("acme keeps its 2 older keys: %d (%v)", len(recs), err)
	}
}
