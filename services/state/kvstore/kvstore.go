// Package kvstore is the embedded implementation of store.Store, on
// JetStream alone: the dev default, needing nothing but the bus. It owns
// (names from subjects.Names):
//
//	<P>_STORE_TASKS        KV: task id → agentmesh.v1.Task
//	<P>_STORE_AGENTS       KV: agent (org, name) → agentmesh.v1.Agent; a shared
//	                       agent's key is its name, an org's "<org>.<name>"
//	<P>_STORE_IDEMPOTENCY  KV: hash(org, idempotency key) → task id
//	<P>_STORE_KEYS, _SCHEDULES, _WEBHOOKS, _DELIVERIES
//	                       KV: API keys, schedules, webhook endpoints and
//	                       their delivery log (ops.go)
//	<P>_STORE_HISTORY      stream: each task's events, in order, on
//	                       StoreHistory(id), one message per write: one
//	                       event, or several written together (a
//	                       checkpoint with its completion; see
//	                       EncodeRecord)
//
// What a write does is decided by the shared planning in package store; this
// package only persists it. The history is the record: a write appends its
// event first, with Nats-Expected-Last-Subject-Sequence set to the stream
// sequence of the task's last event — the serialization point, so exactly
// one event is ever recorded per seq and a concurrent writer gets a
// conflict, re-reads and re-plans (bounded retries). It then updates the KV
// entry by revision. A KV entry that lags its history (a crash between the
// two writes) is rolled forward with taskstate.Apply when it is next read or
// written. A create appends its two events and then creates the KV entry; a
// crash in between leaves only an orphan history that nothing points to (the
// id was never returned).
//
// Reads of one task check the history's head unless this process knows it
// (it made or saw the last write); so a single state process — the dev
// deployment — always reads its own writes and rolls forward what a crash
// left behind. With several processes on one embedded store, a read may
// miss an event another process appended right before crashing, until the
// next write of that task repairs it.
//
// ListTasks and ListAgents are served from in-memory indexes of the two
// buckets, loaded by a KV watcher in Open (so they survive a restart), kept
// current by the watcher and updated directly by this process's own writes
// (so a list reads its own writes). Lists scan the index newest first; that
// is fine at the scale the embedded store is meant for.
package kvstore

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/backoff"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/subjects"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"github.com/agentmesh/agentmesh/services/state/store"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// Options tune the embedded store's buckets and stream.
type Options struct {
	// Replicas of each bucket and of the history stream; 0 means
	// bus.Replicas: 3 on more than one NATS server, else 1. Existing ones
	// keep theirs (fewer than wanted is logged).
	Replicas int
	// Log receives the warnings about buckets with fewer replicas than
	// wanted; nil uses slog.Default().
	Log *slog.Logger
	// Memory keeps everything in memory (tests that do not restart).
	Memory bool
	// SoleWriter says this process is the store's only writer (agentmesh
	// dev: one state service in the process that embeds NATS). GetTask then
	// answers from the in-memory index when it holds the task at the head
	// this process wrote, without reading the KV entry: with no other
	// writer the index is the entry.
	SoleWriter bool
}

const (
	// maxRetries bounds the re-read/re-plan loop of a write that lost.
	maxRetries = 64
	// orphanAfter is how old an idempotency key must be, with no task
	// behind it, before a create may reclaim it (its creator crashed).
	orphanAfter = 30 * time.Second
	// awaitCreate bounds how long a duplicate create waits for the
	// winner's task to appear.
	awaitCreate = 10 * time.Second
)

// Store is the embedded store. It is safe for concurrent use.
type Store struct {
	js    jetstream.JetStream
	nc    *nats.Conn
	names subjects.Names
	now   func() time.Time

	tasks, agents, idem jetstream.KeyValue
	hist                jetstream.Stream
	directGet           string         // direct-get API subject of the history stream
	direct              *directReplies // where direct gets are answered (directreplies.go)

	taskIndex  *index[*agentmeshv1.Task]
	agentIndex *index[*agentmeshv1.Agent]

	headsMu sync.Mutex
	heads   map[string]head // task id → its last recorded event

	stopWatch context.CancelFunc
	watchers  sync.WaitGroup

	// group commits concurrent task writes together (groupcommit.go);
	// kvPut is the subject prefix of the tasks bucket's entries.
	group *store.GroupCommit[*entryWrite]
	kvPut string

	memory   bool // the buckets' storage (graph.go creates one more)
	replicas int
	log      *slog.Logger
	// soleWriter: see Options.SoleWriter.
	soleWriter bool
	graphKV    jetstream.KeyValue // the graphs bucket (graph.go)
	waiting    *reverse           // parent → the blocked tasks waiting on it (graph.go)
	children   *reverse           // parent → its sub-tasks (graph.go)

	skillStore // skills and agent versions (skills.go)
	opsStore   // keys, schedules, webhooks (ops.go)
	memStore   // working state, memories and threads (memory.go, wstate.go)
}

// head locates a task's last recorded event.
type head struct {
	seq       int64  // event seq
	streamSeq uint64 // its sequence in the history stream
}

var _ store.Store = (*Store)(nil)

// Open creates (or updates) the buckets and the history stream, loads the
// indexes and returns the store.
func Open(ctx context.Context, js jetstream.JetStream, names subjects.Names, opts Options) (*Store, error) {
	opts.Replicas = bus.Replicas(js.Conn(), opts.Replicas)
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	storage := jetstream.FileStorage
	if opts.Memory {
		storage = jetstream.MemoryStorage
	}
	s := &Store{
		js: js, nc: js.Conn(), names: names, now: time.Now,
		taskIndex:  newIndex[*agentmeshv1.Task](),
		agentIndex: newIndex[*agentmeshv1.Agent](),
		heads:      map[string]head{},
		memory:     opts.Memory, replicas: opts.Replicas, soleWriter: opts.SoleWriter, log: opts.Log,
		waiting:  newReverse(waitingOn),
		children: newReverse(subtaskOf),
	}
	s.taskIndex.onChange = func(id string, old, cur *agentmeshv1.Task, oldLive, newLive bool) {
		s.waiting.change(id, old, cur, oldLive, newLive)
		s.children.change(id, old, cur, oldLive, newLive)
	}
	bucket := func(name, desc string) (jetstream.KeyValue, error) {
		if !slices.Contains(subjects.StoreBuckets, name) {
			// Only declared buckets are in the state identity's permissions.
			return nil, fmt.Errorf("kvstore: bucket %q is not declared in subjects.StoreBuckets", name)
		}
		kv, reps, err := bus.EnsureKeyValue(ctx, js, jetstream.KeyValueConfig{
			Bucket: names.StoreBucket(name), Description: desc, History: 1,
			Storage: storage, Replicas: opts.Replicas,
		})
		bus.LogReplication(opts.Log, reps)
		if err != nil {
			return nil, fmt.Errorf("kvstore: bucket %s: %w", names.StoreBucket(name), err)
		}
		return kv, nil
	}
	var err error
	if s.tasks, err = bucket("tasks", "agentmesh tasks (id → agentmesh.v1.Task)"); err != nil {
		return nil, err
	}
	if s.agents, err = bucket("agents", "agentmesh agents (name → agentmesh.v1.Agent)"); err != nil {
		return nil, err
	}
	if s.idem, err = bucket("idempotency", "agentmesh idempotency keys (hash(org, key) → task id)"); err != nil {
		return nil, err
	}
	var reps []bus.Replication
	s.hist, reps, err = bus.EnsureStream(ctx, js, jetstream.StreamConfig{
		Name:        names.StoreHistoryStream(),
		Description: "agentmesh task histories, one subject per task",
		Subjects:    []string{names.StoreHistoryAll()},
		Retention:   jetstream.LimitsPolicy,
		Storage:     storage,
		Replicas:    opts.Replicas,
		AllowDirect: true,
	})
	bus.LogReplication(opts.Log, reps)
	if err != nil {
		return nil, fmt.Errorf("kvstore: stream %s: %w", names.StoreHistoryStream(), err)
	}
	prefix := js.Options().APIPrefix
	if prefix == "" {
		prefix = jetstream.DefaultAPIPrefix
	}
	if !strings.HasSuffix(prefix, ".") {
		prefix += "."
	}
	s.directGet = prefix + "DIRECT.GET." + names.StoreHistoryStream()
	s.direct = newDirectReplies(s.nc)
	s.kvPut = "$KV." + names.StoreBucket("tasks") + "."
	if prefix != jetstream.DefaultAPIPrefix {
		s.kvPut = prefix + s.kvPut // as the KV client does under a non-default API prefix
	}
	s.group = store.NewGroupCommit(s.flush)

	wctx, cancel := context.WithCancel(context.Background())
	s.stopWatch = cancel
	if err := watch(ctx, wctx, s, s.tasks, s.onTask); err != nil {
		cancel()
		return nil, err
	}
	if err := watch(ctx, wctx, s, s.agents, s.onAgent); err != nil {
		cancel()
		s.watchers.Wait()
		return nil, err
	}
	if err := s.recoverGraphs(ctx); err != nil {
		cancel()
		s.watchers.Wait()
		return nil, err
	}
	if err := s.openSkills(ctx, wctx, bucket); err != nil {
		cancel()
		s.watchers.Wait()
		return nil, err
	}
	if err := s.openOps(ctx, wctx, bucket); err != nil {
		cancel()
		s.watchers.Wait()
		return nil, err
	}
	if err := s.openMemory(ctx, wctx, bucket); err != nil {
		cancel()
		s.watchers.Wait()
		return nil, err
	}
	return s, nil
}

// watch loads a bucket through fn, waits until the initial values are in,
// then keeps applying updates in the background until wctx ends.
func watch(ctx, wctx context.Context, s *Store, kv jetstream.KeyValue, fn func(jetstream.KeyValueEntry)) error {
	w, err := kv.WatchAll(wctx)
	if err != nil {
		return fmt.Errorf("kvstore: watch %s: %w", kv.Bucket(), err)
	}
	for loaded := false; !loaded; {
		select {
		case e, ok := <-w.Updates():
			if !ok {
				return fmt.Errorf("kvstore: watch %s: closed while loading", kv.Bucket())
			}
			if e == nil {
				loaded = true
				continue
			}
			fn(e)
		case <-ctx.Done():
			_ = w.Stop()
			return fmt.Errorf("kvstore: load %s: %w", kv.Bucket(), ctx.Err())
		}
	}
	s.watchers.Add(1)
	go func() {
		defer s.watchers.Done()
		defer w.Stop() //nolint:errcheck
		for {
			select {
			case e, ok := <-w.Updates():
				if !ok {
					return
				}
				if e != nil {
					fn(e)
				}
			case <-wctx.Done():
				return
			}
		}
	}()
	return nil
}

func (s *Store) onTask(e jetstream.KeyValueEntry) {
	if e.Operation() != jetstream.KeyValuePut {
		s.taskIndex.del(e.Key(), e.Revision()) // DeleteTask, retention
		return
	}
	t := &agentmeshv1.Task{}
	if err := proto.Unmarshal(e.Value(), t); err != nil || t.Id == "" {
		return // not ours to crash on; Get reports it
	}
	s.taskIndex.put(t.Id, t, e.Revision())
}

func (s *Store) onAgent(e jetstream.KeyValueEntry) {
	if e.Operation() != jetstream.KeyValuePut {
		if org, name, ok := decodeAgentKey(e.Key()); ok {
			s.agentIndex.del(store.AgentPos(org, name), e.Revision())
		}
		return
	}
	a := &agentmeshv1.Agent{}
	if err := proto.Unmarshal(e.Value(), a); err != nil || a.Name == "" {
		return
	}
	if org, _, ok := decodeAgentKey(e.Key()); ok {
		a.Org = org // the key is the truth
	}
	s.agentIndex.put(store.AgentPos(a.Org, a.Name), a, e.Revision())
}

// Close stops the watchers. The JetStream connection is the caller's.
func (s *Store) Close() error {
	s.stopWatch()
	s.watchers.Wait()
	s.direct.stop()
	return nil
}

func (s *Store) getHead(id string) (head, bool) {
	s.headsMu.Lock()
	defer s.headsMu.Unlock()
	h, ok := s.heads[id]
	return h, ok
}

func (s *Store) setHead(id string, h head, terminal bool) {
	s.headsMu.Lock()
	defer s.headsMu.Unlock()
	if terminal {
		// A terminal task is never written again; keep the map small.
		delete(s.heads, id)
		return
	}
	if cur, ok := s.heads[id]; !ok || h.seq > cur.seq {
		s.heads[id] = h
	}
}

func (s *Store) forgetHead(id string) {
	s.headsMu.Lock()
	defer s.headsMu.Unlock()
	delete(s.heads, id)
}

// ---- tasks ----

// DecodeTask decodes a stored task record.
func DecodeTask(b []byte) (*agentmeshv1.Task, error) {
	t := &agentmeshv1.Task{}
	if err := proto.Unmarshal(b, t); err != nil {
		return nil, kvError("decode task", err)
	}
	return t, nil
}

// DecodeEvent decodes a stored history record.
func DecodeEvent(b []byte) (*agentmeshv1.TaskEvent, error) {
	ev := &agentmeshv1.TaskEvent{}
	if err := proto.Unmarshal(b, ev); err != nil {
		return nil, kvError("decode event", err)
	}
	if ev.Seq <= 0 {
		return nil, kvError("decode event", fmt.Errorf("event without a seq"))
	}
	return ev, nil
}

// A history record holds the events of one write. A record of one event
// is the event's protobuf encoding, as it always was; a record of several
// starts with a zero byte — never the first byte of an encoded event (no
// field is numbered 0) — followed by each event's encoding, each preceded
// by its length (a protobuf varint).
const recordOfMany = 0x00

// EncodeRecord encodes the events of one write as a history record.
func EncodeRecord(evs []*agentmeshv1.TaskEvent) ([]byte, error) {
	if len(evs) == 1 {
		return marshal(evs[0])
	}
	b := []byte{recordOfMany}
	for _, ev := range evs {
		data, err := marshal(ev)
		if err != nil {
			return nil, err
		}
		b = protowire.AppendBytes(b, data)
	}
	return b, nil
}

// DecodeRecord decodes a history record: its events, in order, their seqs
// consecutive.
func DecodeRecord(b []byte) ([]*agentmeshv1.TaskEvent, error) {
	if len(b) == 0 || b[0] != recordOfMany {
		ev, err := DecodeEvent(b)
		if err != nil {
			return nil, err
		}
		return []*agentmeshv1.TaskEvent{ev}, nil
	}
	var evs []*agentmeshv1.TaskEvent
	for rest := b[1:]; len(rest) > 0; {
		data, n := protowire.ConsumeBytes(rest)
		if n < 0 {
			return nil, kvError("decode record", protowire.ParseError(n))
		}
		rest = rest[n:]
		ev, err := DecodeEvent(data)
		if err != nil {
			return nil, err
		}
		if len(evs) > 0 && ev.Seq != evs[len(evs)-1].Seq+1 {
			return nil, kvError("decode record", fmt.Errorf("event %d follows %d", ev.Seq, evs[len(evs)-1].Seq))
		}
		evs = append(evs, ev)
	}
	if len(evs) == 0 {
		return nil, kvError("decode record", fmt.Errorf("a record without events"))
	}
	return evs, nil
}

func marshal(m proto.Message) ([]byte, error) {
	b, err := proto.Marshal(m)
	if err != nil {
		return nil, kvError("marshal", err)
	}
	return b, nil
}

func isWrongLastSeq(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}

// appendRecord records evs, one history record, after the history message
// at stream sequence after (0: the task has no history yet). A lost race
// is bus conflict.
func (s *Store) appendRecord(ctx context.Context, evs []*agentmeshv1.TaskEvent, after uint64) (uint64, error) {
	data, err := EncodeRecord(evs)
	if err != nil {
		return 0, err
	}
	ev := evs[len(evs)-1]
	msg := nats.NewMsg(s.names.StoreHistory(ev.TaskId))
	msg.Data = data
	ack, err := s.js.PublishMsg(ctx, msg, jetstream.WithExpectLastSequencePerSubject(after))
	if isWrongLastSeq(err) {
		return 0, bus.Errorf(bus.CodeConflict, "task %s: event %d lost a race", ev.TaskId, ev.Seq)
	}
	if err != nil {
		return 0, kvError("append event", err)
	}
	return ack.Sequence, nil
}

// CreateTask appends the created and queued events, then creates the KV
// entry. An idempotency key is claimed first with kv.Create; a duplicate
// waits for the winner's task and returns it.
func (s *Store) CreateTask(ctx context.Context, t *agentmeshv1.Task) (*agentmeshv1.Task, []*agentmeshv1.TaskEvent, bool, error) {
	if t == nil {
		return nil, nil, false, bus.FieldError("task", "a task is required")
	}
	parents, err := store.LoadParents(ctx, s.GetTask, t, nil)
	if err != nil {
		return nil, nil, false, err
	}
	task, events, err := store.PlanCreateDeps(t, "", parents, s.now())
	if err != nil {
		return nil, nil, false, err
	}
	var (
		idemKey string
		idemRev uint64
	)
	if t.IdempotencyKey != "" {
		idemKey = idempotencyKey(t.Org, t.IdempotencyKey)
		for claimed := false; !claimed; {
			rev, err := s.idem.Create(ctx, idemKey, []byte(task.Id))
			switch {
			case err == nil:
				idemRev, claimed = rev, true
			case errors.Is(err, jetstream.ErrKeyExists):
				cur, err := s.awaitKeyed(ctx, idemKey)
				if err != nil {
					return nil, nil, false, err
				}
				if cur != nil {
					if err := store.SameRequest(cur, t); err != nil {
						return nil, nil, false, err
					}
					return cur, nil, false, nil
				}
				// The key was released or reclaimed: try to claim it again.
			default:
				return nil, nil, false, kvError("claim idempotency key", err)
			}
		}
	}
	release := func() {
		if idemKey != "" {
			_ = s.idem.Delete(context.WithoutCancel(ctx), idemKey, jetstream.LastRevision(idemRev))
		}
	}
	// Created and queued (or blocked): one record.
	last, err := s.appendRecord(ctx, events, 0)
	if err != nil {
		release()
		return nil, nil, false, fmt.Errorf("create task %s: %w", task.Id, err)
	}
	data, err := marshal(task)
	if err != nil {
		release()
		return nil, nil, false, err
	}
	rev, err := s.tasks.Create(ctx, task.Id, data)
	if err != nil {
		release()
		return nil, nil, false, kvError("create task "+task.Id, err)
	}
	s.taskIndex.put(task.Id, task, rev)
	s.setHead(task.Id, head{seq: events[len(events)-1].Seq, streamSeq: last}, false)
	return task, events, true, nil
}

// awaitKeyed returns the task an idempotency key points to, waiting while
// its creator finishes. It returns nil, nil when the key is free again
// (released by a failed create, or reclaimed from a crashed one).
func (s *Store) awaitKeyed(ctx context.Context, key string) (*agentmeshv1.Task, error) {
	deadline := time.Now().Add(awaitCreate)
	for {
		e, err := s.idem.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return nil, nil
		}
		if err != nil {
			return nil, kvError("read idempotency key", err)
		}
		id := string(e.Value())
		task, err := s.GetTask(ctx, id)
		if err == nil {
			return task, nil
		}
		if !errors.Is(err, bus.ErrNotFound) {
			return nil, err
		}
		if time.Since(e.Created()) > orphanAfter {
			// Its creator died between claiming the key and creating the task.
			err := s.idem.Delete(ctx, key, jetstream.LastRevision(e.Revision()))
			if err != nil && !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
				return nil, kvError("reclaim idempotency key", err)
			}
			return nil, nil
		}
		if time.Now().After(deadline) {
			return nil, bus.Errorf(bus.CodeUnavailable, "a task with this idempotency key is still being created; retry")
		}
		if !backoff.Sleep(ctx, 5*time.Millisecond) {
			return nil, bus.Errorf(bus.CodeUnavailable, "waiting for a task with this idempotency key: %v", ctx.Err())
		}
	}
}

// idempotencyKey is the KV key of (org, key).
func idempotencyKey(org, key string) string { return orgTextKey(org, key) }

// orgTextKey is a KV key made of an org and a free text (an idempotency
// key, a key's name): a hash, as both are free text.
func orgTextKey(org, text string) string {
	h := sha256.Sum256([]byte(org + "\x00" + text))
	return hex.EncodeToString(h[:])
}

// load returns a task, its KV revision and the stream sequence of its last
// event, rolling a lagging KV entry forward. With trustHead, a head this
// process knows stands for the history's head (a wrong guess makes the
// next append fail, never succeed wrongly).
func (s *Store) load(ctx context.Context, id string, trustHead bool) (*agentmeshv1.Task, uint64, uint64, error) {
	e, err := s.tasks.Get(ctx, id)
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrInvalidKey) {
		return nil, 0, 0, store.TaskNotFound(id)
	}
	if err != nil {
		return nil, 0, 0, kvError("get task "+id, err)
	}
	cur, err := DecodeTask(e.Value())
	if err != nil {
		return nil, 0, 0, err
	}
	rev := e.Revision()
	if h, ok := s.getHead(id); trustHead && ok && h.seq == cur.LastEventSeq {
		return cur, rev, h.streamSeq, nil
	}
	last, err := s.hist.GetLastMsgForSubject(ctx, s.names.StoreHistory(id))
	if err != nil {
		return nil, 0, 0, kvError("task "+id+": read history head", err)
	}
	rec, err := DecodeRecord(last.Data)
	if err != nil {
		return nil, 0, 0, err
	}
	hev := rec[len(rec)-1]
	switch {
	case hev.Seq < cur.LastEventSeq:
		return nil, 0, 0, kvError("task "+id, fmt.Errorf("history ends at %d, record is at %d", hev.Seq, cur.LastEventSeq))
	case hev.Seq > cur.LastEventSeq:
		// A record's events go in together, so an entry is never inside
		// one; skip what it holds anyway.
		missing := rec
		for len(missing) > 0 && missing[0].Seq <= cur.LastEventSeq {
			missing = missing[1:]
		}
		if rec[0].Seq > cur.LastEventSeq+1 {
			missing, err = s.history(ctx, id, cur.LastEventSeq, int(hev.Seq-cur.LastEventSeq))
			if err != nil {
				return nil, 0, 0, err
			}
		}
		for _, ev := range missing {
			if ev.Seq != cur.LastEventSeq+1 {
				return nil, 0, 0, kvError("task "+id, fmt.Errorf("history has event %d after %d", ev.Seq, cur.LastEventSeq))
			}
			cur = taskstate.Apply(cur, ev)
		}
		// Repair the entry; if another writer got there first, the next
		// write's update by revision finds out.
		if data, err := marshal(cur); err == nil {
			if nrev, err := s.tasks.Update(ctx, id, data, rev); err == nil {
				rev = nrev
				s.taskIndex.put(id, cur, nrev)
			}
		}
	}
	s.setHead(id, head{seq: hev.Seq, streamSeq: last.Sequence}, taskstate.Terminal(cur.Status))
	return cur, rev, last.Sequence, nil
}

// GetTask returns the task or not_found.
func (s *Store) GetTask(ctx context.Context, id string) (*agentmeshv1.Task, error) {
	if s.soleWriter {
		if t, _, ok := s.taskIndex.getRev(id); ok {
			if h, ok := s.getHead(id); ok && h.seq == t.LastEventSeq {
				return proto.Clone(t).(*agentmeshv1.Task), nil
			}
		}
	}
	t, _, _, err := s.load(ctx, id, true)
	return t, err
}

// write runs the append-then-update loop shared by Transition and
// AppendStep: load (from the index when this process knows the task's
// head), plan, then append the event and update the KV entry through the
// group commit (groupcommit.go), with the writes of other tasks waiting at
// the same moment.
func (s *Store) write(ctx context.Context, id string, plan func(cur *agentmeshv1.Task) (*agentmeshv1.Task, *agentmeshv1.TaskEvent, error)) (*agentmeshv1.Task, *agentmeshv1.TaskEvent, error) {
	next, evs, err := s.writeEvents(ctx, id, store.OneEvent(plan))
	if err != nil {
		return nil, nil, err
	}
	return next, evs[0], nil
}

// writeEvents is write for a plan of one or more events: they go into one
// history record, so they are recorded together or not at all.
func (s *Store) writeEvents(ctx context.Context, id string, plan store.WritePlan) (*agentmeshv1.Task, []*agentmeshv1.TaskEvent, error) {
	trust := true
	for range maxRetries {
		cur, rev, after, known, err := s.loadForWrite(ctx, id, trust)
		if err != nil {
			return nil, nil, err
		}
		next, evs, err := plan(cur)
		if err != nil && known {
			trust = false // the index may be behind: decide on a fresh read
			continue
		}
		if err != nil {
			return nil, nil, err
		}
		w, err := newEntryWrite(evs, after, next, rev)
		if err != nil {
			return nil, nil, err
		}
		err = s.group.Do(ctx, w)
		if errors.Is(err, bus.ErrConflict) {
			trust = false // re-read the head, roll forward, re-plan
			continue
		}
		if err != nil {
			return nil, nil, err
		}
		return next, evs, nil
	}
	return nil, nil, bus.Errorf(bus.CodeConflict, "task %s: too much contention, retry", id)
}

// loadForWrite is load for a write: when trust is set and this process
// knows the task's head and its index holds the entry at that head, it
// plans against the index without a read (known=true). A wrong guess makes
// the append fail with a conflict, never succeed wrongly.
func (s *Store) loadForWrite(ctx context.Context, id string, trust bool) (cur *agentmeshv1.Task, rev, after uint64, known bool, err error) {
	if trust {
		if t, r, ok := s.taskIndex.getRev(id); ok {
			if h, ok := s.getHead(id); ok && h.seq == t.LastEventSeq {
				return t, r, h.streamSeq, true, nil
			}
		}
	}
	cur, rev, after, err = s.load(ctx, id, trust)
	return cur, rev, after, false, err
}

// rollForward brings a KV entry whose update failed (someone else moved it)
// at least to next, whose event is recorded. The history is the record, so
// a failure here does not fail the write: a lagging entry is rolled forward
// by the next read or write.
func (s *Store) rollForward(ctx context.Context, id string, next *agentmeshv1.Task) {
	for range 4 {
		cur, _, _, err := s.load(ctx, id, false)
		if err != nil || cur.LastEventSeq >= next.LastEventSeq {
			return
		}
	}
}

// Transition changes a task's status (see store.Store).
func (s *Store) Transition(ctx context.Context, tr store.Transition) (*agentmeshv1.Task, *agentmeshv1.TaskEvent, error) {
	return s.write(ctx, tr.TaskID, func(cur *agentmeshv1.Task) (*agentmeshv1.Task, *agentmeshv1.TaskEvent, error) {
		return store.PlanTransition(cur, tr, s.now())
	})
}

// AppendStep checkpoints a step (see store.Store). It is idempotent on
// (task, attempt, step index): a retry of a committed step returns it.
func (s *Store) AppendStep(ctx context.Context, taskID string, attempt int32, step *agentmeshv1.Step) (*agentmeshv1.Task, *agentmeshv1.TaskEvent, error) {
	return store.AppendStepBy(ctx, s.Checkpoint, taskID, attempt, step)
}

// Checkpoint appends steps, then tr, in one history record (see
// store.Store).
func (s *Store) Checkpoint(ctx context.Context, taskID string, attempt int32, steps []*agentmeshv1.Step, tr *store.Transition) (*agentmeshv1.Task, []*agentmeshv1.TaskEvent, error) {
	return store.CheckpointOnce(ctx, s.History, s.now, store.CheckpointArgs{Attempt: attempt, Steps: steps, Transition: tr}, func(plan store.WritePlan) (*agentmeshv1.Task, []*agentmeshv1.TaskEvent, error) {
		return s.writeEvents(ctx, taskID, plan)
	})
}

// History returns events after afterSeq, oldest first.
func (s *Store) History(ctx context.Context, taskID string, afterSeq int64, limit int) ([]*agentmeshv1.TaskEvent, error) {
	if limit <= 0 || limit > store.MaxPageSize {
		limit = store.MaxPageSize
	}
	if _, err := s.GetTask(ctx, taskID); err != nil {
		return nil, err
	}
	return s.history(ctx, taskID, afterSeq, limit)
}

// history reads a task's events with seq > afterSeq, at most limit, with
// batched direct gets on the history subject.
func (s *Store) history(ctx context.Context, taskID string, afterSeq int64, limit int) ([]*agentmeshv1.TaskEvent, error) {
	subj := s.names.StoreHistory(taskID)
	var (
		out  []*agentmeshv1.TaskEvent
		from uint64 = 1 // stream sequence to read on from
		seen int64      // events read so far (the task's seqs are 1, 2, ...)
	)
	for len(out) < limit {
		want := min(afterSeq+int64(limit)-seen, 1024)
		msgs, more, err := s.directBatch(ctx, subj, from, int(max(want, 1)))
		if err != nil {
			return nil, kvError("read history of "+taskID, err)
		}
		for _, m := range msgs {
			evs, err := DecodeRecord(m.data)
			if err != nil {
				return nil, err
			}
			from, seen = m.seq+1, seen+int64(len(evs))
			for _, ev := range evs {
				if ev.Seq > afterSeq && len(out) < limit {
					out = append(out, ev)
				}
			}
		}
		if !more || len(msgs) == 0 {
			break
		}
	}
	return out, nil
}

type rawMsg struct {
	seq  uint64
	data []byte
}

// directBatch gets up to batch messages of subj from stream sequence from
// on, in one request (JetStream batched direct get). more reports whether
// further messages remain.
func (s *Store) directBatch(ctx context.Context, subj string, from uint64, batch int) ([]rawMsg, bool, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, bus.DefaultTimeout)
		defer cancel()
	}
	inbox, read, err := s.direct.open()
	if err != nil {
		return nil, false, err
	}
	defer s.direct.close(inbox)
	req := fmt.Appendf(nil, `{"seq":%d,"next_by_subj":%q,"batch":%d}`, from, subj, batch)
	if err := s.nc.PublishRequest(s.directGet, inbox, req); err != nil {
		return nil, false, err
	}
	var out []rawMsg
	for {
		m, err := read.next(ctx)
		if err != nil {
			return nil, false, err
		}
		switch status := m.Header.Get("Status"); status {
		case "":
		case "503":
			if len(m.Data) == 0 {
				return nil, false, nats.ErrNoResponders // as a subscription's NextMsg says it
			}
			return nil, false, fmt.Errorf("direct get: status %s %s", status, m.Header.Get("Description"))
		case "404":
			return out, false, nil
		case "204": // end of batch
			np := m.Header.Get("Nats-Num-Pending")
			return out, np != "" && np != "0", nil
		default:
			return nil, false, fmt.Errorf("direct get: status %s %s", status, m.Header.Get("Description"))
		}
		var seq uint64
		if _, err := fmt.Sscan(m.Header.Get(jetstream.SequenceHeader), &seq); err != nil {
			return nil, false, fmt.Errorf("direct get: bad sequence header: %w", err)
		}
		out = append(out, rawMsg{seq: seq, data: m.Data})
	}
}

// ListTasks returns one page of tasks newest first, from the index.
func (s *Store) ListTasks(_ context.Context, q store.TaskQuery) ([]*agentmeshv1.Task, string, error) {
	after, err := store.DecodeToken(q.PageToken)
	if err != nil {
		return nil, "", err
	}
	n := store.PageSize(q.PageSize)
	switch {
	case q.WaitingOn != "":
		out, next := s.listAmong(s.waiting.of(q.WaitingOn), q, after, n)
		return out, next, nil
	case q.ParentTaskID != "":
		out, next := s.listAmong(s.children.of(q.ParentTaskID), q, after, n)
		return out, next, nil
	}
	var out []*agentmeshv1.Task
	more := false
	s.taskIndex.descend(after, func(_ string, t *agentmeshv1.Task) bool {
		if !store.MatchesQuery(t, q) {
			return true
		}
		if len(out) == n {
			more = true
			return false
		}
		out = append(out, proto.Clone(t).(*agentmeshv1.Task))
		return true
	})
	next := ""
	if more {
		next = store.EncodeToken(out[len(out)-1].Id)
	}
	return out, next, nil
}

// Usage sums the usage of the matching tasks, from the index.
func (s *Store) Usage(_ context.Context, org, agent string, from, to time.Time) (*agentmeshv1.Usage, int64, error) {
	q := store.TaskQuery{Org: org, Agent: agent, CreatedAfter: from, CreatedBefore: to}
	sum := &agentmeshv1.Usage{}
	var n int64
	s.taskIndex.descend("", func(_ string, t *agentmeshv1.Task) bool {
		if store.MatchesQuery(t, q) {
			n++
			store.AddUsage(sum, t.GetUsage())
		}
		return true
	})
	return sum, n, nil
}

// ---- agents ----

var plainKey = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// agentKey is the KV key of an agent: for a shared agent (org "") its
// name, for an org's agent "<org>.<name>"; each part is itself when that is
// a plain key, else "=" and it in base64url (plain parts never hold '=' or
// '.', so the forms cannot collide).
func agentKey(org, name string) string {
	if org == "" {
		return keyPart(name)
	}
	return keyPart(org) + "." + keyPart(name)
}

func keyPart(s string) string {
	if plainKey.MatchString(s) {
		return s
	}
	return "=" + base64.RawURLEncoding.EncodeToString([]byte(s))
}

func decodeKeyPart(p string) (string, bool) {
	if !strings.HasPrefix(p, "=") {
		return p, p != ""
	}
	b, err := base64.RawURLEncoding.DecodeString(p[1:])
	if err != nil || len(b) == 0 {
		return "", false
	}
	return string(b), true
}

func decodeAgentKey(key string) (org, name string, ok bool) {
	o, n, scoped := strings.Cut(key, ".")
	if !scoped {
		name, ok = decodeKeyPart(key)
		return "", name, ok
	}
	if org, ok = decodeKeyPart(o); !ok {
		return "", "", false
	}
	name, ok = decodeKeyPart(n)
	return org, name, ok
}

// DecodeAgent decodes a stored agent record.
func DecodeAgent(b []byte) (*agentmeshv1.Agent, error) {
	a := &agentmeshv1.Agent{}
	if err := proto.Unmarshal(b, a); err != nil {
		return nil, kvError("decode agent", err)
	}
	return a, nil
}

func (s *Store) getAgent(ctx context.Context, org, name string) (*agentmeshv1.Agent, uint64, error) {
	e, err := s.agents.Get(ctx, agentKey(org, name))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, kvError("get agent", err)
	}
	a, err := DecodeAgent(e.Value())
	if err != nil {
		return nil, 0, err
	}
	a.Org = org
	return a, e.Revision(), nil
}

// PutAgent creates or replaces an agent (see store.Store).
func (s *Store) PutAgent(ctx context.Context, a *agentmeshv1.Agent, create bool, expectedVersion int64) (*agentmeshv1.Agent, error) {
	if a == nil || a.Name == "" {
		return nil, bus.FieldError("agent.name", "a name is required")
	}
	next, rev, err := s.agentEntries().put(ctx, a.Org, a.Name, func(cur *agentmeshv1.Agent) (*agentmeshv1.Agent, error) {
		return store.PlanAgent(cur, a, create, expectedVersion, s.now())
	})
	if err != nil {
		return nil, err
	}
	s.agentIndex.put(store.AgentPos(next.Org, next.Name), next, rev)
	s.recordVersion(ctx, next)
	return next, nil
}

// GetAgent returns org's agent or not_found.
func (s *Store) GetAgent(ctx context.Context, org, name string) (*agentmeshv1.Agent, error) {
	a, _, err := s.getAgent(ctx, org, name)
	if err != nil {
		return nil, err
	}
	if a == nil {
		return nil, store.AgentNotFound(name)
	}
	return a, nil
}

// ListAgents returns agents by name, one page, from the index.
func (s *Store) ListAgents(_ context.Context, q store.AgentQuery) ([]*agentmeshv1.Agent, string, error) {
	var keep func(*agentmeshv1.Agent) bool
	if q.Skill != "" {
		keep = func(a *agentmeshv1.Agent) bool { return store.HasSkill(a, q.Skill) }
	}
	return listOrgPage(s.agentIndex, q.Org, q.PageToken, q.PageSize, keep)
}

// DeleteAgent removes org's agent or answers not_found.
func (s *Store) DeleteAgent(ctx context.Context, org, name string) error {
	rev, err := s.agentEntries().delete(ctx, org, name)
	if err != nil {
		return err
	}
	s.agentIndex.del(store.AgentPos(org, name), rev+1)
	s.dropVersions(ctx, org, name)
	return nil
}
