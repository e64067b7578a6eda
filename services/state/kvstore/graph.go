package kvstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/taskgraph"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"github.com/agentmesh/agentmesh/services/state/store"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"
)

// graphsBucket holds, while a CreateTasks writes, the ids of its graph
// (key: the graph's first id; value: the ids, one per line). A graph whose
// entry survives a crash was not wholly written: Open cancels the tasks of
// it that were, so no part of a half-created graph ever runs.
const graphsBucket = "graphs"

// CreateTasks records a graph (see store.Graph). The embedded store has no
// multi-key transaction: it validates and plans everything first (a
// refused graph writes nothing), records the graph's ids as an intent,
// writes the tasks, then drops the intent. A write that fails part-way
// cancels what it wrote; a crash part-way is rolled back by Open.
func (s *Store) CreateTasks(ctx context.Context, tasks []*agentmeshv1.Task, refs []string) ([]*agentmeshv1.Task, [][]*agentmeshv1.TaskEvent, error) {
	if _, err := store.CheckGraph(tasks, refs); err != nil {
		return nil, nil, err
	}
	parents := map[string]*agentmeshv1.Task{}
	for i, t := range tasks {
		if t.IdempotencyKey != "" {
			return nil, nil, bus.FieldError(fmt.Sprintf("tasks[%d].idempotency_key", i), "not supported in a graph")
		}
		var own []string
		for _, d := range t.DependsOn {
			if !strings.HasPrefix(d, taskgraph.RefPrefix) {
				own = append(own, d)
			}
		}
		ps, err := store.LoadParents(ctx, s.GetTask, &agentmeshv1.Task{Org: t.Org, DependsOn: own}, nil)
		if err != nil {
			return nil, nil, err
		}
		for id, p := range ps {
			parents[id] = p
		}
	}
	outT, outE, err := store.PlanGraph(tasks, refs, parents, s.now())
	if err != nil {
		return nil, nil, err
	}
	ids := make([]string, len(outT))
	for i, t := range outT {
		ids[i] = t.Id
	}
	intents, err := s.graphs(ctx)
	if err != nil {
		return nil, nil, err
	}
	if _, err := intents.Put(ctx, ids[0], []byte(strings.Join(ids, "\n"))); err != nil {
		return nil, nil, store.Internal("record graph intent", err)
	}
	for i := range outT {
		if err := s.insert(ctx, outT[i], outE[i]); err != nil {
			s.rollbackGraph(context.WithoutCancel(ctx), ids[:i])
			_ = intents.Delete(context.WithoutCancel(ctx), ids[0])
			return nil, nil, fmt.Errorf("create task %s of the graph: %w", outT[i].Id, err)
		}
	}
	if err := intents.Delete(ctx, ids[0]); err != nil {
		// A leftover intent would cancel the graph at the next Open, after
		// it may have started: cancel it now and say it was not created.
		s.rollbackGraph(context.WithoutCancel(ctx), ids)
		return nil, nil, store.Internal("drop graph intent", err)
	}
	return outT, outE, nil
}

func (s *Store) graphs(ctx context.Context) (jetstream.KeyValue, error) {
	if s.graphKV != nil {
		return s.graphKV, nil
	}
	storage := jetstream.FileStorage
	if s.memory {
		storage = jetstream.MemoryStorage
	}
	kv, reps, err := bus.EnsureKeyValue(ctx, s.js, jetstream.KeyValueConfig{
		Bucket: s.names.StoreBucket(graphsBucket), Description: "agentmesh graphs being created (first id → ids)",
		History: 1, Storage: storage, Replicas: s.replicas,
	})
	bus.LogReplication(s.log, reps)
	if err != nil {
		return nil, store.Internal("graphs bucket", err)
	}
	s.graphKV = kv // set in Open (recoverGraphs), before any concurrent use
	return kv, nil
}

// insert writes a planned task: its events, then its KV entry.
func (s *Store) insert(ctx context.Context, task *agentmeshv1.Task, events []*agentmeshv1.TaskEvent) error {
	after, err := s.appendRecord(ctx, events, 0)
	if err != nil {
		return err
	}
	data, err := marshal(task)
	if err != nil {
		return err
	}
	rev, err := s.tasks.Create(ctx, task.Id, data)
	if err != nil {
		return store.Internal("create task "+task.Id, err)
	}
	s.taskIndex.put(task.Id, task, rev)
	s.setHead(task.Id, head{seq: events[len(events)-1].Seq, streamSeq: after}, taskstate.Terminal(task.Status))
	return nil
}

// rollbackGraph cancels the tasks of a graph that was not wholly written.
func (s *Store) rollbackGraph(ctx context.Context, ids []string) {
	for _, id := range ids {
		_, _, err := s.Transition(ctx, store.Transition{TaskID: id, To: taskstate.Cancelled,
			Reason: "the graph this task belongs to was not wholly created; none of it runs"})
		if err != nil && !errors.Is(err, bus.ErrNotFound) && !errors.Is(err, bus.ErrFailedPrecondition) {
			continue
		}
	}
}

// recoverGraphs rolls back graphs whose creation a crash interrupted.
func (s *Store) recoverGraphs(ctx context.Context) error {
	intents, err := s.graphs(ctx)
	if err != nil {
		return err
	}
	keys, err := intents.Keys(ctx)
	if errors.Is(err, jetstream.ErrNoKeysFound) {
		return nil
	}
	if err != nil {
		return store.Internal("list graph intents", err)
	}
	for _, k := range keys {
		e, err := intents.Get(ctx, k)
		if err != nil {
			continue
		}
		s.rollbackGraph(ctx, strings.Split(string(e.Value()), "\n"))
		_ = intents.Delete(ctx, k)
	}
	return nil
}

// ResolveDependency (see store.Graph).
func (s *Store) ResolveDependency(ctx context.Context, taskID string, parent *agentmeshv1.DependencyResult) (*agentmeshv1.Task, *agentmeshv1.TaskEvent, error) {
	return store.ResolveWith(ctx, s.write, s.now, taskID, parent)
}

// UpdateTask (see store.Graph).
func (s *Store) UpdateTask(ctx context.Context, taskID string, upd *agentmeshv1.TaskUpdate) (*agentmeshv1.Task, *agentmeshv1.TaskEvent, error) {
	return s.write(ctx, taskID, func(cur *agentmeshv1.Task) (*agentmeshv1.Task, *agentmeshv1.TaskEvent, error) {
		var parents map[string]*agentmeshv1.Task
		if upd != nil {
			for _, f := range upd.Mask {
				if f == taskstate.FieldDependsOn {
					var err error
					parents, err = store.LoadParents(ctx, s.GetTask, &agentmeshv1.Task{Org: cur.Org, DependsOn: upd.DependsOn}, nil)
					if err != nil {
						return nil, nil, err
					}
				}
			}
		}
		return store.PlanUpdate(cur, upd, parents, s.now())
	})
}

// DeleteTask (see store.Graph): the KV entry by revision (so a task that
// changed meanwhile is not deleted), then the history and the idempotency
// key. A crash in between leaves only history nothing points to.
func (s *Store) DeleteTask(ctx context.Context, taskID string) error {
	cur, rev, _, err := s.load(ctx, taskID, false)
	if err != nil {
		return err
	}
	if err := store.CheckDelete(cur); err != nil {
		return err
	}
	err = s.tasks.Delete(ctx, taskID, jetstream.LastRevision(rev))
	if errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return bus.Errorf(bus.CodeConflict, "task %s changed while being deleted; retry", taskID)
	}
	if err != nil {
		return store.Internal("delete task "+taskID, err)
	}
	s.taskIndex.del(taskID, rev+1)
	s.forgetHead(taskID)
	if err := s.hist.Purge(ctx, jetstream.WithPurgeSubject(s.names.StoreHistory(taskID))); err != nil {
		return store.Internal("purge history of "+taskID, err)
	}
	if cur.IdempotencyKey != "" {
		key := idempotencyKey(cur.Org, cur.IdempotencyKey)
		if e, err := s.idem.Get(ctx, key); err == nil && string(e.Value()) == taskID {
			_ = s.idem.Delete(ctx, key, jetstream.LastRevision(e.Revision()))
		}
	}
	return nil
}

// ScanTasks (see store.Graph) reads the index.
func (s *Store) ScanTasks(_ context.Context, q store.TaskQuery, fn func(*agentmeshv1.Task) bool) error {
	s.taskIndex.descend("", func(_ string, t *agentmeshv1.Task) bool {
		if !store.MatchesQuery(t, q) {
			return true
		}
		return fn(proto.Clone(t).(*agentmeshv1.Task))
	})
	return nil
}

// reverse is a reverse index of the task index: a key (a parent's id) →
// the ids of the tasks keys gives for it, so that a look-up by the key
// does not scan every task. keys names the keys a live task is under.
type reverse struct {
	mu   sync.Mutex
	m    map[string]map[string]struct{}
	keys func(*agentmeshv1.Task) []string
}

func newReverse(keys func(*agentmeshv1.Task) []string) *reverse {
	return &reverse{m: map[string]map[string]struct{}{}, keys: keys}
}

// change follows a change of the task index (its onChange).
func (r *reverse) change(id string, old, cur *agentmeshv1.Task, oldLive, newLive bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if oldLive && old != nil {
		for _, k := range r.keys(old) {
			if set := r.m[k]; set != nil {
				delete(set, id)
				if len(set) == 0 {
					delete(r.m, k)
				}
			}
		}
	}
	if newLive && cur != nil {
		for _, k := range r.keys(cur) {
			set := r.m[k]
			if set == nil {
				set = map[string]struct{}{}
				r.m[k] = set
			}
			set[id] = struct{}{}
		}
	}
}

func (r *reverse) of(key string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]string, 0, len(r.m[key]))
	for id := range r.m[key] {
		out = append(out, id)
	}
	return out
}

// waitingOn keys a blocked task under the parents it waits on (the
// resolver's look-up of a parent's dependents).
func waitingOn(t *agentmeshv1.Task) []string {
	if t.Status != taskstate.Blocked {
		return nil
	}
	return t.WaitingOn
}

// subtaskOf keys a task under its parent, whatever its status: settling an
// ended task looks up its unfinished sub-tasks (before this index each
// task's end scanned every task), and ListTasks lists a parent's.
func subtaskOf(t *agentmeshv1.Task) []string {
	if t.ParentTaskId == "" {
		return nil
	}
	return []string{t.ParentTaskId}
}

// listAmong serves ListTasks from the ids a reverse index gave (WaitingOn,
// ParentTaskID): the matching ones, newest first, one page.
func (s *Store) listAmong(ids []string, q store.TaskQuery, after string, n int) ([]*agentmeshv1.Task, string) {
	slices.Sort(ids)
	slices.Reverse(ids)
	var out []*agentmeshv1.Task
	for _, id := range ids {
		if after != "" && id >= after {
			continue
		}
		t, ok := s.taskIndex.get(id)
		if !ok || !store.MatchesQuery(t, q) {
			continue
		}
		if len(out) == n {
			return out, store.EncodeToken(out[len(out)-1].Id)
		}
		out = append(out, proto.Clone(t).(*agentmeshv1.Task))
	}
	return out, ""
}

// WaitSubtasks (see store.Delegation).
func (s *Store) WaitSubtasks(ctx context.Context, taskID string, attempt int32, node string, w *agentmeshv1.SubtaskWait) (*agentmeshv1.Task, *agentmeshv1.TaskEvent, error) {
	return store.WaitWith(ctx, s.write, s.now, store.WaitArgs{TaskID: taskID, Attempt: attempt, Node: node, Wait: w})
}

// ReleaseSubtaskWait (see store.Delegation).
func (s *Store) ReleaseSubtaskWait(ctx context.Context, taskID string) (*agentmeshv1.Task, *agentmeshv1.TaskEvent, error) {
	return store.ReleaseWaitWith(ctx, s.write, s.now, taskID)
}
