package state_test

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	busv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/bus/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/poll"
	"github.com/agentmesh/agentmesh/pkg/subjects"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"google.golang.org/protobuf/types/known/durationpb"
)

// finish drives a queued task to completed with result.
func finish(t *testing.T, r *running, id, result string) *agentmeshv1.Task {
	t.Helper()
	mustCall(t, r.nc, subjects.StateDispatch, &busv1.TransitionRequest{TaskId: id, From: taskstate.Queued, NextAttempt: true}, &busv1.TransitionResponse{})
	mustCall(t, r.nc, subjects.StateStart, &busv1.TransitionRequest{TaskId: id, From: taskstate.Assigned, Attempt: 1, Node: "n1"}, &busv1.TransitionResponse{})
	mustCall(t, r.nc, subjects.StateAppendStep, &busv1.AppendStepRequest{TaskId: id, Attempt: 1, Step: &agentmeshv1.Step{Content: result, Usage: &agentmeshv1.Usage{TotalTokens: 7, CostUsd: 0.01}}}, &busv1.AppendStepResponse{})
	return mustCall(t, r.nc, subjects.StateComplete, &busv1.TransitionRequest{TaskId: id, From: taskstate.Running, Attempt: 1, Result: result}, &busv1.TransitionResponse{}).Task
}

func cachedAgent(version int64) *agentmeshv1.Agent {
	return &agentmeshv1.Agent{Name: "summariser", Version: version, Tools: []string{"web_fetch"},
		Model: &agentmeshv1.ModelSettings{Model: "small"}, Cache: &agentmeshv1.CachePolicy{Ttl: durationpb.New(time.Hour)}}
}

func submit(t *testing.T, r *running, task *agentmeshv1.Task) (*agentmeshv1.Task, error) {
	t.Helper()
	resp, err := call(t, r.nc, subjects.StateCreateTask, &busv1.CreateTaskRequest{Task: task}, &busv1.CreateTaskResponse{})
	return resp.GetTask(), err
}

func TestResultCache(t *testing.T) {
	onBothStores(t, func(t *testing.T, r *running) {
		first, err := submit(t, r, &agentmeshv1.Task{Org: "acme", Agent: "summariser", Input: "summarise page 1", AgentSpec: cachedAgent(3)})
		if err != nil || first.Status != taskstate.Queued || first.CacheKey == "" {
			t.Fatalf("first submit: got %v, %v; want queued with a cache key", first, err)
		}
		done := finish(t, r, first.Id, "page 1 says hello")
		hit, err := submit(t, r, &agentmeshv1.Task{Org: "acme", Agent: "summariser", Input: "summarise page 1", AgentSpec: cachedAgent(3)})
		if err != nil || hit.Status != taskstate.Completed || hit.CachedFrom != done.Id || hit.Result != "page 1 says hello" || hit.GetUsage().GetTotalTokens() != 0 {
			t.Fatalf("identical submit: got status %v cached_from %q result %q usage %v, %v", hit.GetStatus(), hit.GetCachedFrom(), hit.GetResult(), hit.GetUsage(), err)
		}
		hist := mustCall(t, r.nc, subjects.StateHistory, &busv1.HistoryRequest{TaskId: hit.Id}, &busv1.HistoryResponse{})
		if evs := hist.GetEvents(); len(evs) != 2 || evs[1].Status != taskstate.Completed || evs[1].CachedFrom != done.Id || !strings.Contains(evs[1].Reason, "result cache") {
			t.Errorf("the hit's history: got %v; want created, completed from the cache", evs)
		}
		for name, task := range map[string]*agentmeshv1.Task{
			"no_cache":        {Org: "acme", Agent: "summariser", Input: "summarise page 1", AgentSpec: cachedAgent(3), NoCache: true},
			"a new version":   {Org: "acme", Agent: "summariser", Input: "summarise page 1", AgentSpec: cachedAgent(4)},
			"another org":     {Org: "globex", Agent: "summariser", Input: "summarise page 1", AgentSpec: cachedAgent(3)},
			"another input":   {Org: "acme", Agent: "summariser", Input: "summarise page 2", AgentSpec: cachedAgent(3)},
			"a continuation":  {Org: "acme", Agent: "summariser", Input: "summarise page 1", AgentSpec: cachedAgent(3), ContinueFrom: done.Id},
			"no cache policy": {Org: "acme", Agent: "summariser", Input: "summarise page 1", AgentSpec: &agentmeshv1.Agent{Name: "summariser", Version: 3, Tools: []string{"web_fetch"}, Model: &agentmeshv1.ModelSettings{Model: "small"}}},
		} {
			got, err := submit(t, r, task)
			if err != nil || got.Status != taskstate.Queued || got.CachedFrom != "" {
				t.Errorf("%s: got status %v cached_from %q, %v; want queued, not from the cache", name, got.GetStatus(), got.GetCachedFrom(), err)
			}
		}
		// A caller cannot claim a cache hit.
		forged, err := submit(t, r, &agentmeshv1.Task{Org: "acme", Agent: "summariser", Input: "summarise page 9", AgentSpec: cachedAgent(3), CachedFrom: done.Id, Result: "forged"})
		if err != nil || forged.Status != taskstate.Queued || forged.Result != "" {
			t.Errorf("a create naming cached_from: got %v, %v; want queued, nothing taken", forged, err)
		}
	})
}

// threadSubmit is a submit of a message to a thread.
func threadSubmit(thread string, policy agentmeshv1.ThreadPolicy, input string) *agentmeshv1.Task {
	return &agentmeshv1.Task{Org: "acme", Agent: "chat", Input: input, ThreadId: thread, ThreadPolicy: policy,
		AgentSpec: &agentmeshv1.Agent{Name: "chat", Version: 1}}
}

// Two submits race on a thread whose last task has finished: one
// continues it, and the other meets a busy thread and follows its policy.
func TestThreadPoliciesRacing(t *testing.T) {
	onBothStores(t, func(t *testing.T, r *running) {
		for _, policy := range []agentmeshv1.ThreadPolicy{
			agentmeshv1.ThreadPolicy_THREAD_POLICY_REJECT, agentmeshv1.ThreadPolicy_THREAD_POLICY_ENQUEUE,
			agentmeshv1.ThreadPolicy_THREAD_POLICY_INTERRUPT, agentmeshv1.ThreadPolicy_THREAD_POLICY_ROLLBACK,
		} {
			t.Run(policy.String(), func(t *testing.T) { racingOnThread(t, r, policy) })
		}
	})
}

func racingOnThread(t *testing.T, r *running, policy agentmeshv1.ThreadPolicy) {
	thread := strings.ToLower(strings.TrimPrefix(policy.String(), "THREAD_POLICY_"))
	first, err := submit(t, r, threadSubmit(thread, policy, "hello"))
	if err != nil || first.ContinueFrom != "" || !hasTag(first, "thread:"+thread) {
		t.Fatalf("first message: got %v, %v", first, err)
	}
	finish(t, r, first.Id, "hi")
	var wg sync.WaitGroup
	start := make(chan struct{})
	got := make([]*agentmeshv1.Task, 2)
	errs := make([]error, 2)
	for i := range 2 {
		wg.Go(func() {
			<-start
			got[i], errs[i] = submit(t, r, threadSubmit(thread, policy, fmt.Sprint("message ", i)))
		})
	}
	close(start)
	wg.Wait()
	// The winner continues the finished task; the loser met it busy.
	win, lose := 0, 1
	if got[1] != nil && got[1].ContinueFrom == first.Id && len(got[1].DependsOn) == 0 {
		win, lose = 1, 0
	}
	w := got[win]
	if errs[win] != nil || w.ContinueFrom != first.Id || len(w.DependsOn) != 0 || w.Status != taskstate.Queued {
		t.Fatalf("the winner: got %v, %v; want queued, continuing %s", w, errs[win], first.Id)
	}
	l, lerr := got[lose], errs[lose]
	switch policy {
	case agentmeshv1.ThreadPolicy_THREAD_POLICY_REJECT:
		if !errors.Is(lerr, bus.ErrFailedPrecondition) || !strings.Contains(lerr.Error(), w.Id) {
			t.Errorf("reject: the loser got %v, %v; want failed_precondition naming %s", l, lerr, w.Id)
		}
		checkThread(t, r, thread, w.Id, 2, []string{first.Id, w.Id})
		return
	case agentmeshv1.ThreadPolicy_THREAD_POLICY_ENQUEUE:
		if lerr != nil || l.ContinueFrom != w.Id || l.Status != taskstate.Blocked || fmt.Sprint(l.DependsOn) != fmt.Sprint([]string{w.Id}) {
			t.Fatalf("enqueue: the loser got %v, %v; want blocked after %s, continuing it", l, lerr, w.Id)
		}
		if cur := getTask(t, r, w.Id); cur.Status != taskstate.Queued {
			t.Errorf("enqueue: the winner is %v, want still queued", cur.Status)
		}
		checkThread(t, r, thread, l.Id, 3, []string{first.Id, w.Id, l.Id})
	case agentmeshv1.ThreadPolicy_THREAD_POLICY_INTERRUPT, agentmeshv1.ThreadPolicy_THREAD_POLICY_ROLLBACK:
		wantFrom, how, conv := w.Id, "interrupted", []string{first.Id, w.Id, l.GetId()}
		if policy == agentmeshv1.ThreadPolicy_THREAD_POLICY_ROLLBACK {
			wantFrom, how, conv = first.Id, "rolled back", []string{first.Id, l.GetId()}
		}
		if lerr != nil || l.ContinueFrom != wantFrom {
			t.Fatalf("%s: the loser got %v, %v; want it to continue %s", policy, l, lerr, wantFrom)
		}
		if cur := getTask(t, r, w.Id); cur.Status != taskstate.Cancelled || !strings.Contains(cur.Error, how+" by task "+l.Id) {
			t.Errorf("%s: the winner is %v (%q), want cancelled, %s by %s", policy, cur.Status, cur.Error, how, l.Id)
		}
		poll.Until(t, 10*time.Second, func() error {
			if cur := getTask(t, r, l.Id); cur.Status != taskstate.Queued {
				return fmt.Errorf("the loser is %v, want queued once the winner was cancelled", cur.Status)
			}
			return nil
		})
		checkThread(t, r, thread, l.Id, 3, conv)
	}
}

func hasTag(t *agentmeshv1.Task, tag string) bool {
	for _, g := range t.GetTags() {
		if g == tag {
			return true
		}
	}
	return false
}

// checkThread checks the thread's head, count and conversation.
func checkThread(t *testing.T, r *running, id, head string, count int64, conversation []string) {
	t.Helper()
	resp, err := call(t, r.nc, subjects.StateGetThread, &busv1.ThreadOp{Org: "acme", Op: &busv1.ThreadOp_Get{Get: &agentmeshv1.GetThreadRequest{Id: id}}}, &agentmeshv1.GetThreadResponse{})
	if err != nil {
		t.Fatalf("get thread: %v", err)
	}
	var conv []string
	for _, task := range resp.GetTasks() {
		conv = append(conv, task.Id)
	}
	if th := resp.GetThread(); th.GetHeadTaskId() != head || th.GetTaskCount() != count || fmt.Sprint(conv) != fmt.Sprint(conversation) {
		t.Errorf("thread %s: head %s, %d tasks, conversation %v; want %s, %d, %v", id, th.GetHeadTaskId(), th.GetTaskCount(), conv, head, count, conversation)
	}
	if _, err := call(t, r.nc, subjects.StateGetThread, &busv1.ThreadOp{Org: "globex", Op: &busv1.ThreadOp_Get{Get: &agentmeshv1.GetThreadRequest{Id: id}}}, &agentmeshv1.GetThreadResponse{}); !errors.Is(err, bus.ErrNotFound) {
		t.Errorf("another org's get of thread %s: got %v, want not_found", id, err)
	}
}

func TestThreadListAndDelete(t *testing.T) {
	r := startKV(t)
	a, err := submit(t, r, threadSubmit("chat", 0, "one"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = submit(t, r, threadSubmit("chat", 0, "two"))
	wantErr(t, "a second message while the first runs, no policy (reject)", err, bus.ErrFailedPrecondition)
	del := &busv1.ThreadOp{Org: "acme", KeyName: "ops", Op: &busv1.ThreadOp_Delete{Delete: &agentmeshv1.DeleteThreadRequest{Id: "chat"}}}
	_, err = call(t, r.nc, subjects.StateDeleteThread, del, &agentmeshv1.DeleteThreadResponse{})
	wantErr(t, "delete of a thread whose task runs", err, bus.ErrFailedPrecondition)
	finish(t, r, a.Id, "ok")
	b, err := submit(t, r, threadSubmit("chat", 0, "two"))
	if err != nil || b.ContinueFrom != a.Id {
		t.Fatalf("second message after the first ended: got %v, %v", b, err)
	}
	finish(t, r, b.Id, "ok")
	if _, err := submit(t, r, threadSubmit("other", 0, "x")); err != nil {
		t.Fatal(err)
	}
	list := mustCall(t, r.nc, subjects.StateListThreads, &busv1.ThreadOp{Org: "acme", Op: &busv1.ThreadOp_List{List: &agentmeshv1.ListThreadsRequest{}}}, &agentmeshv1.ListThreadsResponse{})
	if len(list.GetThreads()) != 2 || list.GetThreads()[0].GetId() != "other" {
		t.Errorf("list: got %v; want other, chat", list.GetThreads())
	}
	if l := mustCall(t, r.nc, subjects.StateListThreads, &busv1.ThreadOp{Org: "globex", Op: &busv1.ThreadOp_List{List: &agentmeshv1.ListThreadsRequest{}}}, &agentmeshv1.ListThreadsResponse{}); len(l.GetThreads()) != 0 {
		t.Errorf("another org's list: got %v", l.GetThreads())
	}
	gone := mustCall(t, r.nc, subjects.StateDeleteThread, del, &agentmeshv1.DeleteThreadResponse{})
	if gone.GetDeletedTasks() != 2 {
		t.Errorf("delete: %d tasks deleted, want 2", gone.GetDeletedTasks())
	}
	if _, err := call(t, r.nc, subjects.StateGetTask, &busv1.GetTaskRequest{Id: a.Id}, &busv1.GetTaskResponse{}); !errors.Is(err, bus.ErrNotFound) {
		t.Errorf("a deleted thread's task: got %v, want not_found", err)
	}
	c, err := submit(t, r, threadSubmit("chat", 0, "again"))
	if err != nil || c.ContinueFrom != "" {
		t.Errorf("a message to a deleted thread starts it anew: got %v, %v", c, err)
	}
}

// A submit sent again (its reply lost) while its task still runs is
// answered with that task, not refused as a busy thread.
func TestThreadSubmitRetried(t *testing.T) {
	r := startKV(t)
	first := threadSubmit("chat", 0, "hello")
	first.IdempotencyKey = "k1"
	a, err := submit(t, r, first)
	if err != nil {
		t.Fatal(err)
	}
	_, err = call(t, r.nc, subjects.StateCreateTask, &busv1.CreateTaskRequest{Task: threadSubmit("chat", 0, "hello")}, &busv1.CreateTaskResponse{})
	wantErr(t, "another message on the busy thread", err, bus.ErrFailedPrecondition)
	again := threadSubmit("chat", 0, "hello")
	again.IdempotencyKey = "k1"
	resp, err := call(t, r.nc, subjects.StateCreateTask, &busv1.CreateTaskRequest{Task: again}, &busv1.CreateTaskResponse{})
	if err != nil || resp.GetCreated() || resp.GetTask().GetId() != a.Id {
		t.Fatalf("the same submit again: got %v created=%v, %v; want task %s, not created", resp.GetTask().GetId(), resp.GetCreated(), err, a.Id)
	}
	checkThread(t, r, "chat", a.Id, 1, []string{a.Id})
}
