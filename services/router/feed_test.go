package router

import (
	"context"
	"strings"
	"testing"
	"time"

	busv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/bus/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// followTasks opens a WatchTasks stream as key and returns its responses
// after the empty first one (the watch is in place when it returns).
func followTasks(t *testing.T, e *env, key string, req *agentmeshv1.WatchTasksRequest) chan *agentmeshv1.WatchTasksResponse {
	t.Helper()
	ctx, cancel := context.WithCancel(withKey(context.Background(), "x-api-key", key))
	t.Cleanup(cancel)
	stream, err := e.tasks.WatchTasks(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	first, err := stream.Recv()
	if err != nil {
		t.Fatalf("first response: %v", err)
	}
	if len(first.Changes) != 0 || first.Reset_ {
		t.Fatalf("first response %v, want an empty one (the watch stands)", first)
	}
	got := make(chan *agentmeshv1.WatchTasksResponse, 100)
	go func() {
		defer close(got)
		for {
			r, err := stream.Recv()
			if err != nil {
				return
			}
			got <- r
		}
	}()
	return got
}

// changesUntil gathers changes by task until done says it has seen enough.
func changesUntil(t *testing.T, got chan *agentmeshv1.WatchTasksResponse, done func(map[string]*agentmeshv1.TaskChange) bool) map[string]*agentmeshv1.TaskChange {
	t.Helper()
	seen := map[string]*agentmeshv1.TaskChange{}
	deadline := time.After(10 * time.Second)
	for !done(seen) {
		select {
		case r, ok := <-got:
			if !ok {
				t.Fatal("stream ended")
			}
			for _, c := range r.Changes {
				if prev := seen[c.TaskId]; prev != nil {
					// fold successive changes the way a client does
					prev.Seq, prev.Steps = c.Seq, prev.Steps+c.Steps
					if c.Status != agentmeshv1.TaskStatus_TASK_STATUS_UNSPECIFIED {
						prev.Status = c.Status
					}
					if c.Usage != nil {
						if prev.Usage == nil {
							prev.Usage = &agentmeshv1.Usage{}
						}
						prev.Usage.CostUsd += c.Usage.CostUsd
					}
					continue
				}
				seen[c.TaskId] = proto.Clone(c).(*agentmeshv1.TaskChange)
			}
		case <-deadline:
			t.Fatalf("changes so far %v", seen)
		}
	}
	return seen
}

// publishLife publishes a task's created, queued, a step with usage and
// its end, as state would.
func publishLife(e *env, task *agentmeshv1.Task, end agentmeshv1.TaskStatus) {
	f := e.fake
	id := task.Id
	f.mu.Lock()
	evs := append([]*agentmeshv1.TaskEvent(nil), f.events[id]...)
	f.mu.Unlock()
	evs[0].Created = &agentmeshv1.TaskCreated{Title: task.Title, Tags: task.Tags}
	evs[1].Agent, evs[1].Priority = task.Agent, task.Priority
	for _, ev := range evs {
		f.Publish(ev)
	}
	f.Record(id, statusEv(taskstate.Running), true)
	step := stepEv("thinking")
	step.Step.Usage = &agentmeshv1.Usage{TotalTokens: 30, CostUsd: 0.25}
	f.Record(id, step, true)
	f.Record(id, statusEv(end), true)
}

// WatchTasks: one stream sees its own org's tasks only, each task's events
// folded into changes (created with its title and tags, agent, the steps'
// usage, the final status); a status filter lets through only tasks in (or
// leaving) those statuses.
func TestWatchTasks(t *testing.T) {
	e := start(t, Config{APIKeys: map[string]string{"a": "acme:reader", "g": "globex:reader"}, WatchTasksInterval: 20 * time.Millisecond})
	all := followTasks(t, e, "a", &agentmeshv1.WatchTasksRequest{})
	failedOnly := followTasks(t, e, "a", &agentmeshv1.WatchTasksRequest{Statuses: []agentmeshv1.TaskStatus{taskstate.Failed}})

	ok := e.fake.AddTask(&agentmeshv1.Task{Org: "acme", Title: "<b>report</b>", Tags: []string{"q3"}, Agent: "helper", Priority: agentmeshv1.Priority_PRIORITY_HIGH})
	bad := e.fake.AddTask(&agentmeshv1.Task{Org: "acme", Title: "fails", Agent: "helper"})
	other := e.fake.AddTask(&agentmeshv1.Task{Org: "globex", Title: "globex's", Agent: "helper"})
	publishLife(e, ok, taskstate.Completed)
	publishLife(e, bad, taskstate.Failed)
	publishLife(e, other, taskstate.Completed)

	seen := changesUntil(t, all, func(m map[string]*agentmeshv1.TaskChange) bool {
		return m[ok.Id].GetStatus() == taskstate.Completed && m[bad.Id].GetStatus() == taskstate.Failed
	})
	if _, leak := seen[other.Id]; leak {
		t.Errorf("acme's stream got globex's task %s", other.Id)
	}
	c := seen[ok.Id]
	if c.Created.GetTitle() != "<b>report</b>" || len(c.Created.GetTags()) != 1 || c.CreatedAt == nil || c.Agent != "helper" ||
		c.Priority != agentmeshv1.Priority_PRIORITY_HIGH || c.Steps != 1 || c.Usage.GetCostUsd() != 0.25 || c.Seq != 5 {
		t.Errorf("change of %s: %v, want created with title and tags, agent helper, high, 1 step of $0.25, seq 5", ok.Id, c)
	}
	// The filtered stream: the failed task (it ends in failed), never the
	// completed one's status changes.
	seenFailed := changesUntil(t, failedOnly, func(m map[string]*agentmeshv1.TaskChange) bool {
		return m[bad.Id].GetStatus() == taskstate.Failed
	})
	for id, c := range seenFailed {
		if id == ok.Id && c.Status != agentmeshv1.TaskStatus_TASK_STATUS_UNSPECIFIED {
			t.Errorf("the failed-only stream got %s's status change %v", id, c)
		}
	}
}

// A stream whose changes may have been lost (the hub missed events, or the
// stream fell behind) is told to list again.
func TestWatchTasksReset(t *testing.T) {
	e := start(t, Config{APIKeys: map[string]string{"a": "acme:reader"}})
	got := followTasks(t, e, "a", &agentmeshv1.WatchTasksRequest{})
	e.svc.hub.mu.Lock()
	e.svc.hub.feedsLost()
	e.svc.hub.mu.Unlock()
	select {
	case r := <-got:
		if !r.Reset_ || len(r.Changes) != 0 {
			t.Errorf("got %v, want reset", r)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no reset")
	}
	// A mailbox that overflows is a reset too.
	w := &listWatcher{filter: &agentmeshv1.WatchTasksRequest{}, wake: make(chan struct{}, 1)}
	for range listMailboxCap + 1 {
		w.offer(&agentmeshv1.WatchTasksResponse{Changes: []*agentmeshv1.TaskChange{{TaskId: "T"}}})
	}
	if box, reset := w.take(); !reset || len(box) != 0 {
		t.Errorf("overflowed mailbox: %d held, reset %v; want none held and reset", len(box), reset)
	}
}

// Bad filters are refused naming the field; a platform key may not watch
// an org's tasks unless it names the org.
func TestWatchTasksBadInput(t *testing.T) {
	e := start(t, Config{APIKeys: map[string]string{"a": "acme:reader", "p": "*:platform"}})
	for _, tc := range []struct {
		key  string
		req  *agentmeshv1.WatchTasksRequest
		code codes.Code
		word string
	}{
		{"a", &agentmeshv1.WatchTasksRequest{Statuses: []agentmeshv1.TaskStatus{42}}, codes.InvalidArgument, "statuses[0]"},
		{"a", &agentmeshv1.WatchTasksRequest{Agent: "Bad Name"}, codes.InvalidArgument, "agent"},
		{"a", &agentmeshv1.WatchTasksRequest{Priorities: []agentmeshv1.Priority{9}}, codes.InvalidArgument, "priorities[0]"},
		{"p", &agentmeshv1.WatchTasksRequest{}, codes.PermissionDenied, "platform key"},
	} {
		ctx, cancel := context.WithTimeout(withKey(context.Background(), "x-api-key", tc.key), 10*time.Second)
		stream, err := e.tasks.WatchTasks(ctx, tc.req)
		if err == nil {
			_, err = stream.Recv()
		}
		cancel()
		if status.Code(err) != tc.code || !strings.Contains(status.Convert(err).Message(), tc.word) {
			t.Errorf("%v: %v, want %v naming %q", tc.req, err, tc.code, tc.word)
		}
	}
}

// GET /v1/tasks:watch: "ready" once the watch stands, then "changes"; a
// bad filter is a 400 naming it.
func TestHTTPWatchTasks(t *testing.T) {
	e, c := startHTTP(t, Config{WatchTasksInterval: 20 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	st, r, err := c.Events(ctx, "/v1/tasks:watch?statuses=completed,queued", "")
	if err != nil || st == nil {
		t.Fatalf("open: %v %d %s", err, r.Code, r.Body)
	}
	defer st.Close()
	if ev, err := st.Next(); err != nil || ev.Name != "ready" {
		t.Fatalf("first event %+v %v, want ready", ev, err)
	}
	task := e.fake.AddTask(&agentmeshv1.Task{Org: "acme", Title: "t", Agent: "helper"})
	publishLife(e, task, taskstate.Completed)
	for {
		ev, err := st.Next()
		if err != nil {
			t.Fatal(err)
		}
		if ev.Comment != "" {
			continue
		}
		if ev.Name != "changes" || ev.ID != "" {
			t.Fatalf("event %+v, want changes without an id", ev)
		}
		if strings.Contains(ev.Data, `"TASK_STATUS_COMPLETED"`) {
			break
		}
	}
	bad := c.Do(t, "GET", "/v1/tasks:watch?statuses=done", nil)
	wantStatus(t, bad, 400, codes.InvalidArgument, "unknown value", "statuses")
	bad = c.Do(t, "GET", "/v1/tasks:watch?colour=red", nil)
	wantStatus(t, bad, 400, codes.InvalidArgument, "unknown parameter", "colour")
}

// ListExecutors: the nodes from their heartbeats; an admin sees capacity
// and load, a platform key also the task ids, a reader nothing; a node
// silent past its ttl is lost.
func TestListExecutors(t *testing.T) {
	e := start(t, Config{APIKeys: map[string]string{"adm": "acme", "r": "acme:reader", "p": "*:platform"}})
	idle := int32(3)
	hb := &busv1.ExecutorHeartbeat{Node: "node-b", Capacity: 8, Running: 2, RunningTasks: []string{"T1", "T2"},
		Labels: map[string]string{"zone": "a"}, Ttl: durationpb.New(15 * time.Second), Time: timestamppb.Now(), WarmIdle: &idle, WarmTarget: &idle}
	data, _ := proto.Marshal(hb)
	old := &busv1.ExecutorHeartbeat{Node: "node-a", Capacity: 4, Draining: true}
	oldData, _ := proto.Marshal(old)
	list := agentmeshv1.NewExecutorServiceClient(e.conn)
	var got []*agentmeshv1.Executor
	deadline := time.Now().Add(10 * time.Second)
	for len(got) < 2 && time.Now().Before(deadline) {
		_ = e.fake.nc.Publish(names.Heartbeat("node-b"), data)
		_ = e.fake.nc.Publish(names.Heartbeat("node-a"), oldData)
		_ = e.fake.nc.Flush()
		resp, err := list.ListExecutors(withKey(context.Background(), "x-api-key", "adm"), &agentmeshv1.ListExecutorsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		got = resp.Executors
		time.Sleep(20 * time.Millisecond)
	}
	if len(got) != 2 || got[0].Node != "node-a" || got[1].Node != "node-b" {
		t.Fatalf("executors %v, want node-a and node-b", got)
	}
	b := got[1]
	if b.Capacity != 8 || b.Running != 2 || b.Free != 6 || b.Lost || len(b.RunningTasks) != 0 || b.Labels["zone"] != "a" ||
		!b.WarmPool.GetReported() || b.WarmPool.GetIdle() != 3 || b.Heartbeats < 1 {
		t.Errorf("node-b for an admin: %v", b)
	}
	if a := got[0]; !a.Draining || a.Free != 0 || a.WarmPool.GetReported() {
		t.Errorf("node-a: %v, want draining with no free slot and no warm pool reported", a)
	}
	resp, err := list.ListExecutors(withKey(context.Background(), "x-api-key", "p"), &agentmeshv1.ListExecutorsRequest{})
	if err != nil || len(resp.Executors) != 2 || len(resp.Executors[1].RunningTasks) != 2 {
		t.Errorf("for a platform key: %v %v, want node-b's two task ids", resp, err)
	}
	if _, err := list.ListExecutors(withKey(context.Background(), "x-api-key", "r"), &agentmeshv1.ListExecutorsRequest{}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("a reader: %v, want PermissionDenied", err)
	}
	later := e.svc.executors.list(time.Now().Add(16*time.Second), false)
	if len(later) != 2 || !later[1].Lost || later[1].Free != 0 {
		t.Errorf("16 s later: %v, want node-b lost", later)
	}
	if gone := e.svc.executors.list(time.Now().Add(forgetAfter+time.Second), false); len(gone) != 0 {
		t.Errorf("after %s: %v, want none listed", forgetAfter, gone)
	}
}

// A platform key that names an org reads it as a reader — its tasks, not
// another's, and changes nothing; an org's key may name only its own org.
func TestPlatformReadsAnOrg(t *testing.T) {
	e := start(t, Config{APIKeys: map[string]string{"a": "acme", "p": "*:platform"}})
	mine := e.fake.AddTask(&agentmeshv1.Task{Org: "acme", Title: "acme's"})
	as := func(key, org string) context.Context {
		ctx := withKey(context.Background(), "x-api-key", key)
		if org != "" {
			ctx = withKey(ctx, OrgHeader, org)
		}
		return ctx
	}
	if _, err := e.tasks.GetTask(as("p", ""), &agentmeshv1.GetTaskRequest{Id: mine.Id}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("platform key without an org: %v, want PermissionDenied", err)
	}
	got, err := e.tasks.GetTask(as("p", "acme"), &agentmeshv1.GetTaskRequest{Id: mine.Id})
	if err != nil || got.Task.GetTitle() != "acme's" {
		t.Fatalf("platform key in acme: %v %v", got, err)
	}
	if _, err := e.tasks.GetTask(as("p", "globex"), &agentmeshv1.GetTaskRequest{Id: mine.Id}); status.Code(err) != codes.NotFound {
		t.Errorf("platform key in globex reading acme's task: %v, want NotFound", err)
	}
	if _, err := e.tasks.SubmitTask(as("p", "acme"), &agentmeshv1.SubmitTaskRequest{Input: "x"}); status.Code(err) != codes.PermissionDenied ||
		!strings.Contains(err.Error(), "reader") {
		t.Errorf("platform key submitting in acme: %v, want PermissionDenied (a reader)", err)
	}
	if _, err := e.tasks.GetTask(as("a", "globex"), &agentmeshv1.GetTaskRequest{Id: mine.Id}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("acme's key naming globex: %v, want PermissionDenied", err)
	}
	if _, err := e.tasks.GetTask(as("a", "acme"), &agentmeshv1.GetTaskRequest{Id: mine.Id}); err != nil {
		t.Errorf("acme's key naming acme: %v", err)
	}
	if _, err := e.tasks.GetTask(as("p", "Not An Org"), &agentmeshv1.GetTaskRequest{Id: mine.Id}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("a bad org name: %v, want InvalidArgument", err)
	}
}
