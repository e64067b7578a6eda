// Package storetest is the conformance suite every store.Store passes:
// pgstore and kvstore run it from their tests, so the two stores behave the
// same to the byte of an error code. It owns no data of its own.
package storetest

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sort"
	"sync"
	"testing"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"github.com/agentmesh/agentmesh/services/state/store"
	"google.golang.org/protobuf/proto"
)

// Run runs the suite. newStore returns a fresh, empty store; it closes the
// store at t's cleanup.
func Run(t *testing.T, newStore func(t *testing.T) store.Store) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s store.Store)
	}{
		{"CreateTask", testCreate},
		{"Idempotency", testIdempotency},
		{"ConcurrentIdempotentCreates", testConcurrentIdempotentCreates},
		{"NotFound", testNotFound},
		{"TransitionTable", testTransitionTable},
		{"TransitionPreconditions", testTransitionPreconditions},
		{"TerminalNeverChanges", testTerminal},
		{"ConcurrentTransitions", testConcurrentTransitions},
		{"ConcurrentSteps", testConcurrentSteps},
		{"AppendStep", testAppendStep},
		{"StepIdempotent", testStepIdempotent},
		{"Checkpoint", testCheckpoint},
		{"History", testHistory},
		{"ListTasksFilters", testListFilters},
		{"ListTasksPagination", testListPagination},
		{"Agents", testAgents},
		{"ListAgents", testListAgents},
		{"AgentsPerOrg", testAgentsPerOrg},
		{"Approvals", testApprovals},
		{"Usage", testUsage},
		{"Isolation", testIsolation},
		{"Retries", testRetries},
		{"RequeueNotBefore", testRequeueNotBefore},
		{"GroupCommit", testGroupCommit},
	}
	tests = append(tests, graphTests...)
	tests = append(tests, treeTests...)
	tests = append(tests, skillTests...)
	tests = append(tests, proposalTests...)
	tests = append(tests, opsTests...)
	tests = append(tests, memoryTests...)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.fn(t, newStore(t))
		})
	}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func newTask(org, agent, key string) *agentmeshv1.Task {
	return &agentmeshv1.Task{
		Org: org, Title: "t", Input: "do it", Agent: agent, IdempotencyKey: key,
		Metadata: map[string]string{"k": "v"}, Priority: agentmeshv1.Priority_PRIORITY_NORMAL,
	}
}

func create(t *testing.T, s store.Store, task *agentmeshv1.Task) *agentmeshv1.Task {
	t.Helper()
	got, _, _, err := s.CreateTask(ctxT(t), task)
	if err != nil {
		t.Fatalf("CreateTask: %v", err)
	}
	return got
}

func move(t *testing.T, s store.Store, id string, tr store.Transition) *agentmeshv1.Task {
	t.Helper()
	tr.TaskID = id
	got, _, err := s.Transition(ctxT(t), tr)
	if err != nil {
		t.Fatalf("Transition %s → %s: %v", id, taskstate.Name(tr.To), err)
	}
	return got
}

func wantCode(t *testing.T, what string, err error, want *bus.Error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("%s: got error %v, want code %s", what, err, want.Code)
	}
}

// pathTo lists the transitions that bring a new (queued) task to status s.
var pathTo = map[agentmeshv1.TaskStatus][]agentmeshv1.TaskStatus{
	taskstate.Queued:    nil,
	taskstate.Assigned:  {taskstate.Assigned},
	taskstate.Running:   {taskstate.Assigned, taskstate.Running},
	taskstate.Blocked:   {taskstate.Blocked},
	taskstate.Completed: {taskstate.Assigned, taskstate.Running, taskstate.Completed},
	taskstate.Failed:    {taskstate.Failed},
	taskstate.Cancelled: {taskstate.Cancelled},
}

var allStatuses = []agentmeshv1.TaskStatus{
	taskstate.Created, taskstate.Queued, taskstate.Assigned, taskstate.Running,
	taskstate.Blocked, taskstate.Completed, taskstate.Failed, taskstate.Cancelled,
}

// taskIn creates a task and moves it to status st.
func taskIn(t *testing.T, s store.Store, st agentmeshv1.TaskStatus) *agentmeshv1.Task {
	t.Helper()
	task := create(t, s, newTask("org", "agent", ""))
	for _, to := range pathTo[st] {
		task = move(t, s, task.Id, store.Transition{To: to, NextAttempt: to == taskstate.Assigned})
	}
	if task.Status != st {
		t.Fatalf("setup: got status %s, want %s", taskstate.Name(task.Status), taskstate.Name(st))
	}
	return task
}

func testCreate(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	in := newTask("org-a", "writer", "")
	task, events, created, err := s.CreateTask(ctx, in)
	if err != nil {
		t.Fatalf("CreateTask: %v", err)
	}
	if !created {
		t.Errorf("created: got false, want true")
	}
	if task.Id == "" || task.Status != taskstate.Queued || task.LastEventSeq != 2 || task.Attempt != 0 {
		t.Errorf("task: got id %q status %s seq %d attempt %d, want an id, queued, 2, 0",
			task.Id, taskstate.Name(task.Status), task.LastEventSeq, task.Attempt)
	}
	if task.CreatedAt == nil || task.UpdatedAt == nil {
		t.Errorf("times: got created %v updated %v, want both set", task.CreatedAt, task.UpdatedAt)
	}
	if task.Title != in.Title || task.Input != in.Input || task.Agent != in.Agent || task.Metadata["k"] != "v" {
		t.Errorf("task fields: got %v, want those of %v", task, in)
	}
	if in.Id != "" || in.Status != 0 {
		t.Errorf("CreateTask modified its argument: %v", in)
	}
	if len(events) != 2 {
		t.Fatalf("events: got %d, want 2", len(events))
	}
	want := []struct {
		seq    int64
		typ    agentmeshv1.EventType
		status agentmeshv1.TaskStatus
	}{
		{1, agentmeshv1.EventType_EVENT_TYPE_CREATED, taskstate.Created},
		{2, agentmeshv1.EventType_EVENT_TYPE_STATUS, taskstate.Queued},
	}
	for i, w := range want {
		ev := events[i]
		if ev.Seq != w.seq || ev.Type != w.typ || ev.Status != w.status || ev.TaskId != task.Id || ev.Org != "org-a" {
			t.Errorf("event %d: got %v, want seq %d type %s status %s", i, ev, w.seq, w.typ, taskstate.Name(w.status))
		}
	}
	got, err := s.GetTask(ctx, task.Id)
	if err != nil {
		t.Fatalf("GetTask: %v", err)
	}
	if !proto.Equal(got, task) {
		t.Errorf("GetTask: got %v, want %v", got, task)
	}
	hist, err := s.History(ctx, task.Id, 0, 0)
	if err != nil {
		t.Fatalf("History: %v", err)
	}
	if len(hist) != 2 || !proto.Equal(hist[0], events[0]) || !proto.Equal(hist[1], events[1]) {
		t.Errorf("History: got %v, want %v", hist, events)
	}
	if _, _, _, err := s.CreateTask(ctx, nil); !errors.Is(err, bus.ErrInvalidArgument) {
		t.Errorf("CreateTask(nil): got %v, want invalid_argument", err)
	}
}

func testIdempotency(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	first, _, _, err := s.CreateTask(ctx, newTask("org-a", "a", "key-1"))
	if err != nil {
		t.Fatalf("CreateTask: %v", err)
	}
	tests := []struct {
		name        string
		task        *agentmeshv1.Task
		wantCreated bool
		wantSameID  bool
	}{
		{"same org and key returns the task", newTask("org-a", "a", "key-1"), false, true},
		{"same key, other org is a new task", newTask("org-b", "a", "key-1"), true, false},
		{"other key is a new task", newTask("org-a", "a", "key-2"), true, false},
		{"no key is a new task", newTask("org-a", "a", ""), true, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, events, created, err := s.CreateTask(ctx, tc.task)
			if err != nil {
				t.Fatalf("CreateTask: %v", err)
			}
			if created != tc.wantCreated {
				t.Errorf("created: got %v, want %v", created, tc.wantCreated)
			}
			if (got.Id == first.Id) != tc.wantSameID {
				t.Errorf("id: got %s (first %s), want same=%v", got.Id, first.Id, tc.wantSameID)
			}
			if !created && len(events) != 0 {
				t.Errorf("events of a duplicate: got %d, want 0", len(events))
			}
			if tc.wantSameID && !proto.Equal(got, first) {
				t.Errorf("duplicate: got %v, want %v", got, first)
			}
		})
	}
	testIdempotentRequestDigest(t, s)
}

// A key reused for a different request (another request digest) is
// already_exists naming idempotency_key; the same request, or one whose
// digest is unknown, gets the first task.
func testIdempotentRequestDigest(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	withDigest := func(digest string) *agentmeshv1.Task {
		task := newTask("org-a", "a", "key-digest")
		task.RequestDigest = digest
		return task
	}
	first, _, created, err := s.CreateTask(ctx, withDigest("d1"))
	if err != nil || !created {
		t.Fatalf("CreateTask: %v, created %v", err, created)
	}
	if first.RequestDigest != "d1" {
		t.Errorf("request digest recorded: got %q, want d1", first.RequestDigest)
	}
	for _, tc := range []struct {
		name, digest string
		wantErr      error
	}{
		{"same request gets the task", "d1", nil},
		{"unknown digest gets the task", "", nil},
		{"another request under the key is refused", "d2", bus.ErrAlreadyExists},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, events, created, err := s.CreateTask(ctx, withDigest(tc.digest))
			if tc.wantErr != nil {
				var be *bus.Error
				if !errors.Is(err, tc.wantErr) || !errors.As(err, &be) || be.Field != "idempotency_key" {
					t.Fatalf("CreateTask: got %v (task %v), want %v naming idempotency_key", err, got, tc.wantErr)
				}
				return
			}
			if err != nil || created || len(events) != 0 || got.Id != first.Id {
				t.Fatalf("CreateTask: got %v created=%v events=%d err=%v, want task %s again", got.GetId(), created, len(events), err, first.Id)
			}
		})
	}
}

func testConcurrentIdempotentCreates(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	const n = 10
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		ids     = map[string]int{}
		nCreate int
		errs    []error
	)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			task, _, created, err := s.CreateTask(ctx, newTask("org-c", "a", "same-key"))
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			ids[task.Id]++
			if created {
				nCreate++
			}
		}()
	}
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("CreateTask errors: %v", errs)
	}
	if len(ids) != 1 || nCreate != 1 {
		t.Errorf("got %d distinct ids and %d created, want 1 and 1 (%v)", len(ids), nCreate, ids)
	}
	tasks, _, err := s.ListTasks(ctx, store.TaskQuery{Org: "org-c"})
	if err != nil {
		t.Fatalf("ListTasks: %v", err)
	}
	if len(tasks) != 1 {
		t.Errorf("tasks of the org: got %d, want 1", len(tasks))
	}
}

func testNotFound(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	const id = "01J00000000000000000000000"
	tests := []struct {
		name string
		call func() error
	}{
		{"GetTask", func() error { _, err := s.GetTask(ctx, id); return err }},
		{"GetTask odd id", func() error { _, err := s.GetTask(ctx, "no such id!"); return err }},
		{"Transition", func() error {
			_, _, err := s.Transition(ctx, store.Transition{TaskID: id, To: taskstate.Cancelled})
			return err
		}},
		{"AppendStep", func() error { _, _, err := s.AppendStep(ctx, id, 1, &agentmeshv1.Step{}); return err }},
		{"History", func() error { _, err := s.History(ctx, id, 0, 0); return err }},
		{"GetAgent", func() error { _, err := s.GetAgent(ctx, "", "nobody"); return err }},
		{"DeleteAgent", func() error { return s.DeleteAgent(ctx, "", "nobody") }},
		{"UpdateAgent", func() error {
			_, err := s.PutAgent(ctx, &agentmeshv1.Agent{Name: "nobody"}, false, 0)
			return err
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			wantCode(t, tc.name, tc.call(), bus.ErrNotFound)
		})
	}
}

func testTransitionTable(t *testing.T, s store.Store) {
	for from := range pathTo {
		for _, to := range allStatuses {
			allowed := taskstate.Allowed(from, to)
			name := fmt.Sprintf("%s to %s", taskstate.Name(from), taskstate.Name(to))
			t.Run(name, func(t *testing.T) {
				ctx := ctxT(t)
				task := taskIn(t, s, from)
				got, ev, err := s.Transition(ctx, store.Transition{TaskID: task.Id, To: to, Reason: "why", Result: "answer", Node: "n1"})
				if !allowed {
					wantCode(t, name, err, bus.ErrFailedPrecondition)
					after, err := s.GetTask(ctx, task.Id)
					if err != nil {
						t.Fatalf("GetTask: %v", err)
					}
					if !proto.Equal(after, task) {
						t.Errorf("refused transition changed the task: got %v, want %v", after, task)
					}
					return
				}
				if err != nil {
					t.Fatalf("Transition: %v", err)
				}
				if got.Status != to || got.LastEventSeq != task.LastEventSeq+1 {
					t.Errorf("task: got status %s seq %d, want %s %d", taskstate.Name(got.Status), got.LastEventSeq, taskstate.Name(to), task.LastEventSeq+1)
				}
				if ev.Seq != got.LastEventSeq || ev.Type != agentmeshv1.EventType_EVENT_TYPE_STATUS || ev.FromStatus != from || ev.Status != to {
					t.Errorf("event: got %v, want seq %d status %s → %s", ev, got.LastEventSeq, taskstate.Name(from), taskstate.Name(to))
				}
				if to == taskstate.Completed && got.Result != "answer" {
					t.Errorf("result: got %q, want %q", got.Result, "answer")
				}
				if (to == taskstate.Failed || to == taskstate.Cancelled) && got.Error != "why" {
					t.Errorf("error: got %q, want %q", got.Error, "why")
				}
				if taskstate.Terminal(to) && got.FinishedAt == nil {
					t.Errorf("finished_at: got nil, want set")
				}
				stored, err := s.GetTask(ctx, task.Id)
				if err != nil {
					t.Fatalf("GetTask: %v", err)
				}
				if !proto.Equal(stored, got) {
					t.Errorf("stored: got %v, want %v", stored, got)
				}
			})
		}
	}
}

func testTransitionPreconditions(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	task := create(t, s, newTask("org", "a", ""))
	tests := []struct {
		name string
		tr   store.Transition
		want *bus.Error // nil: succeeds
		// wantAttempt after a success
		wantAttempt int32
	}{
		{"no target", store.Transition{}, bus.ErrInvalidArgument, 0},
		{"from mismatch", store.Transition{From: taskstate.Running, To: taskstate.Failed}, bus.ErrFailedPrecondition, 0},
		{"dispatch starts attempt 1", store.Transition{From: taskstate.Queued, To: taskstate.Assigned, NextAttempt: true}, nil, 1},
		{"stale attempt", store.Transition{To: taskstate.Running, Attempt: 2}, bus.ErrFailedPrecondition, 0},
		{"current attempt", store.Transition{From: taskstate.Assigned, To: taskstate.Running, Attempt: 1, Node: "n1"}, nil, 1},
		{"executor lost", store.Transition{To: taskstate.Queued, Attempt: 1, Reason: "executor lost"}, nil, 1},
		{"redispatch starts attempt 2", store.Transition{To: taskstate.Assigned, NextAttempt: true}, nil, 2},
		{"old attempt is fenced off", store.Transition{To: taskstate.Running, Attempt: 1}, bus.ErrFailedPrecondition, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.tr.TaskID = task.Id
			got, _, err := s.Transition(ctx, tc.tr)
			if tc.want != nil {
				wantCode(t, tc.name, err, tc.want)
				return
			}
			if err != nil {
				t.Fatalf("Transition: %v", err)
			}
			if got.Attempt != tc.wantAttempt {
				t.Errorf("attempt: got %d, want %d", got.Attempt, tc.wantAttempt)
			}
		})
	}
	got, err := s.GetTask(ctx, task.Id)
	if err != nil {
		t.Fatalf("GetTask: %v", err)
	}
	if got.Status != taskstate.Assigned || got.Attempt != 2 || got.LastEventSeq != 6 {
		t.Errorf("final: got %s attempt %d seq %d, want assigned 2 6", taskstate.Name(got.Status), got.Attempt, got.LastEventSeq)
	}
}

func testTerminal(t *testing.T, s store.Store) {
	for _, st := range []agentmeshv1.TaskStatus{taskstate.Completed, taskstate.Failed, taskstate.Cancelled} {
		t.Run(taskstate.Name(st), func(t *testing.T) {
			ctx := ctxT(t)
			task := taskIn(t, s, st)
			for _, to := range allStatuses {
				_, _, err := s.Transition(ctx, store.Transition{TaskID: task.Id, To: to})
				wantCode(t, "to "+taskstate.Name(to), err, bus.ErrFailedPrecondition)
			}
			_, _, err := s.AppendStep(ctx, task.Id, task.Attempt, &agentmeshv1.Step{Content: "late"})
			wantCode(t, "AppendStep", err, bus.ErrFailedPrecondition)
			got, err := s.GetTask(ctx, task.Id)
			if err != nil {
				t.Fatalf("GetTask: %v", err)
			}
			if !proto.Equal(got, task) {
				t.Errorf("terminal task changed: got %v, want %v", got, task)
			}
		})
	}
}

// checkHistory asserts that the task's history is seqs 1..n exactly.
func checkHistory(t *testing.T, s store.Store, id string, n int64) []*agentmeshv1.TaskEvent {
	t.Helper()
	hist, err := s.History(ctxT(t), id, 0, 0)
	if err != nil {
		t.Fatalf("History: %v", err)
	}
	if int64(len(hist)) != n {
		t.Errorf("history length: got %d, want %d", len(hist), n)
	}
	for i, ev := range hist {
		if ev.Seq != int64(i+1) {
			t.Fatalf("history[%d].seq: got %d, want %d (gap or duplicate)", i, ev.Seq, i+1)
		}
	}
	return hist
}

func testConcurrentTransitions(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	task := create(t, s, newTask("org", "a", ""))
	const n = 10
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		wins  int
		other []error
	)
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			_, _, err := s.Transition(ctx, store.Transition{TaskID: task.Id, To: taskstate.Assigned, NextAttempt: true, Node: fmt.Sprint("n", i)})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				wins++
			case errors.Is(err, bus.ErrFailedPrecondition):
			default:
				other = append(other, err)
			}
		}()
	}
	close(start)
	wg.Wait()
	if wins != 1 || len(other) > 0 {
		t.Errorf("got %d winners and errors %v, want 1 winner and only failed_precondition", wins, other)
	}
	got, err := s.GetTask(ctx, task.Id)
	if err != nil {
		t.Fatalf("GetTask: %v", err)
	}
	if got.Status != taskstate.Assigned || got.Attempt != 1 || got.LastEventSeq != 3 {
		t.Errorf("task: got %s attempt %d seq %d, want assigned 1 3", taskstate.Name(got.Status), got.Attempt, got.LastEventSeq)
	}
	checkHistory(t, s, task.Id, 3)
}

func testConcurrentSteps(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	task := taskIn(t, s, taskstate.Running)
	const writers, each = 6, 5
	var wg sync.WaitGroup
	errs := make(chan error, writers*each)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				_, _, err := s.AppendStep(ctx, task.Id, task.Attempt, &agentmeshv1.Step{
					Index: int32(w*each + i), Usage: &agentmeshv1.Usage{TotalTokens: 1},
				})
				if err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("AppendStep: %v", err)
	}
	got, err := s.GetTask(ctx, task.Id)
	if err != nil {
		t.Fatalf("GetTask: %v", err)
	}
	if got.StepCount != writers*each || got.GetUsage().GetTotalTokens() != writers*each {
		t.Errorf("steps: got count %d tokens %d, want %d %d", got.StepCount, got.GetUsage().GetTotalTokens(), writers*each, writers*each)
	}
	hist := checkHistory(t, s, task.Id, task.LastEventSeq+writers*each)
	seen := map[int32]bool{}
	for _, ev := range hist[task.LastEventSeq:] {
		if seen[ev.GetStep().GetIndex()] {
			t.Errorf("step %d recorded twice", ev.GetStep().GetIndex())
		}
		seen[ev.GetStep().GetIndex()] = true
	}
}

func testAppendStep(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	assigned := taskIn(t, s, taskstate.Assigned)
	_, _, err := s.AppendStep(ctx, assigned.Id, assigned.Attempt, &agentmeshv1.Step{})
	wantCode(t, "step of an assigned task", err, bus.ErrFailedPrecondition)

	task := taskIn(t, s, taskstate.Running)
	tests := []struct {
		name      string
		attempt   int32
		step      *agentmeshv1.Step
		want      *bus.Error
		wantCount int32
		wantTotal int64
	}{
		{"no step", task.Attempt, nil, bus.ErrInvalidArgument, 0, 0},
		{"stale attempt", task.Attempt + 1, &agentmeshv1.Step{}, bus.ErrFailedPrecondition, 0, 0},
		{"first", task.Attempt, &agentmeshv1.Step{Index: 0, Kind: agentmeshv1.StepKind_STEP_KIND_MODEL_TURN,
			Usage: &agentmeshv1.Usage{PromptTokens: 10, CompletionTokens: 5, TotalTokens: 15}}, nil, 1, 15},
		{"tool call", task.Attempt, &agentmeshv1.Step{Index: 1, Kind: agentmeshv1.StepKind_STEP_KIND_TOOL_CALL, ToolName: "echo"}, nil, 2, 15},
		{"second turn", task.Attempt, &agentmeshv1.Step{Index: 2, Kind: agentmeshv1.StepKind_STEP_KIND_MODEL_TURN,
			Usage: &agentmeshv1.Usage{PromptTokens: 20, CompletionTokens: 7, TotalTokens: 27}}, nil, 3, 42},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ev, err := s.AppendStep(ctx, task.Id, tc.attempt, tc.step)
			if tc.want != nil {
				wantCode(t, tc.name, err, tc.want)
				return
			}
			if err != nil {
				t.Fatalf("AppendStep: %v", err)
			}
			if got.StepCount != tc.wantCount || got.GetUsage().GetTotalTokens() != tc.wantTotal {
				t.Errorf("got count %d total %d, want %d %d", got.StepCount, got.GetUsage().GetTotalTokens(), tc.wantCount, tc.wantTotal)
			}
			if ev.Type != agentmeshv1.EventType_EVENT_TYPE_STEP || ev.Seq != got.LastEventSeq || ev.Step.GetAttempt() != task.Attempt || ev.Step.GetIndex() != tc.step.Index {
				t.Errorf("event: got %v, want a step event seq %d attempt %d", ev, got.LastEventSeq, task.Attempt)
			}
			if got.Status != taskstate.Running {
				t.Errorf("status: got %s, want running", taskstate.Name(got.Status))
			}
		})
	}
	got, err := s.GetTask(ctx, task.Id)
	if err != nil {
		t.Fatalf("GetTask: %v", err)
	}
	if got.GetUsage().GetPromptTokens() != 30 || got.GetUsage().GetCompletionTokens() != 12 || got.StepCount != 3 {
		t.Errorf("stored usage: got %v count %d, want prompt 30 completion 12 count 3", got.GetUsage(), got.StepCount)
	}
}

func testHistory(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	task := taskIn(t, s, taskstate.Running) // seqs 1..4
	for i := range 3 {                      // seqs 5..7
		if _, _, err := s.AppendStep(ctx, task.Id, task.Attempt, &agentmeshv1.Step{Index: int32(i)}); err != nil {
			t.Fatalf("AppendStep: %v", err)
		}
	}
	all := checkHistory(t, s, task.Id, 7)
	tests := []struct {
		name     string
		after    int64
		limit    int
		wantSeqs []int64
	}{
		{"all", 0, 0, []int64{1, 2, 3, 4, 5, 6, 7}},
		{"after 2 limit 2", 2, 2, []int64{3, 4}},
		{"after 5", 5, 0, []int64{6, 7}},
		{"limit 1", 0, 1, []int64{1}},
		{"after the end", 7, 0, nil},
		{"far after the end", 100, 10, nil},
		{"limit over the max", 0, store.MaxPageSize + 5, []int64{1, 2, 3, 4, 5, 6, 7}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := s.History(ctx, task.Id, tc.after, tc.limit)
			if err != nil {
				t.Fatalf("History: %v", err)
			}
			var seqs []int64
			for _, ev := range got {
				seqs = append(seqs, ev.Seq)
				if !proto.Equal(ev, all[ev.Seq-1]) {
					t.Errorf("event %d: got %v, want %v", ev.Seq, ev, all[ev.Seq-1])
				}
			}
			if fmt.Sprint(seqs) != fmt.Sprint(tc.wantSeqs) {
				t.Errorf("seqs: got %v, want %v", seqs, tc.wantSeqs)
			}
		})
	}
	if all[6].Type != agentmeshv1.EventType_EVENT_TYPE_STEP || all[3].Status != taskstate.Running {
		t.Errorf("history types: got %v, want steps after running", all)
	}
}

// tick waits until the clock has moved past ts by a margin, so timestamps
// taken before and after differ even at the stores' microsecond precision.
func tick(ts time.Time) {
	for time.Since(ts) < 2*time.Millisecond {
		runtime.Gosched()
	}
}

func ids(tasks []*agentmeshv1.Task) []string {
	var out []string
	for _, t := range tasks {
		out = append(out, t.Id)
	}
	return out
}

func testListFilters(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	// Six tasks, created in order, in two orgs and with two agents.
	var tasks []*agentmeshv1.Task
	for i := range 6 {
		org := "org-x"
		if i%2 == 1 {
			org = "org-y"
		}
		agent := "alpha"
		if i >= 3 {
			agent = "beta"
		}
		task := create(t, s, newTask(org, agent, ""))
		tasks = append(tasks, task)
		tick(task.CreatedAt.AsTime())
	}
	mark := time.Now()
	tick(mark)
	// Move tasks 1 and 4 on after the mark.
	tasks[1] = move(t, s, tasks[1].Id, store.Transition{To: taskstate.Assigned, NextAttempt: true})
	tasks[4] = move(t, s, tasks[4].Id, store.Transition{To: taskstate.Cancelled})
	rev := func(idx ...int) []string { // the tasks at idx, newest first
		sort.Sort(sort.Reverse(sort.IntSlice(idx)))
		var out []string
		for _, i := range idx {
			out = append(out, tasks[i].Id)
		}
		return out
	}
	tests := []struct {
		name string
		q    store.TaskQuery
		want []string
	}{
		{"all", store.TaskQuery{}, rev(0, 1, 2, 3, 4, 5)},
		{"org", store.TaskQuery{Org: "org-x"}, rev(0, 2, 4)},
		{"agent", store.TaskQuery{Agent: "beta"}, rev(3, 4, 5)},
		{"org and agent", store.TaskQuery{Org: "org-y", Agent: "alpha"}, rev(1)},
		{"one status", store.TaskQuery{Statuses: []agentmeshv1.TaskStatus{taskstate.Queued}}, rev(0, 2, 3, 5)},
		{"two statuses", store.TaskQuery{Statuses: []agentmeshv1.TaskStatus{taskstate.Assigned, taskstate.Cancelled}}, rev(1, 4)},
		{"status nobody has", store.TaskQuery{Statuses: []agentmeshv1.TaskStatus{taskstate.Running}}, nil},
		{"created after", store.TaskQuery{CreatedAfter: tasks[2].CreatedAt.AsTime()}, rev(3, 4, 5)},
		{"created before", store.TaskQuery{CreatedBefore: tasks[2].CreatedAt.AsTime()}, rev(0, 1)},
		{"created between", store.TaskQuery{CreatedAfter: tasks[0].CreatedAt.AsTime(), CreatedBefore: tasks[4].CreatedAt.AsTime()}, rev(1, 2, 3)},
		{"updated before", store.TaskQuery{UpdatedBefore: mark}, rev(0, 2, 3, 5)},
		{"updated before and queued in org-y", store.TaskQuery{UpdatedBefore: mark, Org: "org-y", Statuses: []agentmeshv1.TaskStatus{taskstate.Queued}}, rev(3, 5)},
		{"unknown org", store.TaskQuery{Org: "nobody"}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, next, err := s.ListTasks(ctx, tc.q)
			if err != nil {
				t.Fatalf("ListTasks: %v", err)
			}
			if fmt.Sprint(ids(got)) != fmt.Sprint(tc.want) {
				t.Errorf("ids: got %v, want %v", ids(got), tc.want)
			}
			if next != "" {
				t.Errorf("next page token: got %q, want none", next)
			}
			for _, task := range got {
				if !store.MatchesQuery(task, tc.q) {
					t.Errorf("task %s does not match the query", task.Id)
				}
			}
		})
	}
	t.Run("stored fields", func(t *testing.T) {
		got, _, err := s.ListTasks(ctx, store.TaskQuery{})
		if err != nil {
			t.Fatalf("ListTasks: %v", err)
		}
		for i, task := range got {
			if want := tasks[len(tasks)-1-i]; !proto.Equal(task, want) {
				t.Errorf("task %d: got %v, want %v", i, task, want)
			}
		}
	})
}

func testListPagination(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	const n = 11
	var want []string
	for range n {
		want = append([]string{create(t, s, newTask("org-p", "a", "")).Id}, want...)
	}
	for _, size := range []int{1, 3, 4, 11, 12} {
		t.Run(fmt.Sprint("page size ", size), func(t *testing.T) {
			var got []string
			tok := ""
			pages := 0
			for {
				page, next, err := s.ListTasks(ctx, store.TaskQuery{Org: "org-p", PageSize: size, PageToken: tok})
				if err != nil {
					t.Fatalf("ListTasks: %v", err)
				}
				if len(page) > size {
					t.Fatalf("page: got %d tasks, want at most %d", len(page), size)
				}
				got = append(got, ids(page)...)
				pages++
				if next == "" {
					break
				}
				if pages > n+1 {
					t.Fatalf("pagination does not end")
				}
				tok = next
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("ids: got %v, want %v", got, want)
			}
			if wantPages := (n + size - 1) / size; pages != wantPages {
				t.Errorf("pages: got %d, want %d", pages, wantPages)
			}
		})
	}
	t.Run("malformed token", func(t *testing.T) {
		_, _, err := s.ListTasks(ctx, store.TaskQuery{PageToken: "!!not a token"})
		wantCode(t, "ListTasks", err, bus.ErrInvalidArgument)
	})
	t.Run("default page size", func(t *testing.T) {
		got, _, err := s.ListTasks(ctx, store.TaskQuery{Org: "org-p"})
		if err != nil {
			t.Fatalf("ListTasks: %v", err)
		}
		if len(got) != n {
			t.Errorf("tasks: got %d, want %d", len(got), n)
		}
	})
}

func testAgents(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	in := &agentmeshv1.Agent{Name: "writer", Description: "writes", Skills: []string{"prose"}, SystemPrompt: "be brief",
		Model: &agentmeshv1.ModelSettings{Model: "m1"}, Tools: []string{"echo"}, MaxConcurrency: 3}
	a, err := s.PutAgent(ctx, in, true, 0)
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	if a.Version != 1 || a.CreatedAt == nil || a.UpdatedAt == nil || a.SystemPrompt != "be brief" {
		t.Errorf("created: got %v, want version 1 with times", a)
	}
	_, err = s.PutAgent(ctx, in, true, 0)
	wantCode(t, "duplicate create", err, bus.ErrAlreadyExists)

	upd := proto.Clone(in).(*agentmeshv1.Agent)
	upd.Description = "writes well"
	_, err = s.PutAgent(ctx, upd, false, 7)
	wantCode(t, "update at a wrong version", err, bus.ErrFailedPrecondition)
	a2, err := s.PutAgent(ctx, upd, false, 1)
	if err != nil {
		t.Fatalf("update: %v", err)
	}
	if a2.Version != 2 || a2.Description != "writes well" || !proto.Equal(a2.CreatedAt, a.CreatedAt) {
		t.Errorf("updated: got %v, want version 2, new description, first created_at", a2)
	}
	a3, err := s.PutAgent(ctx, upd, false, 0)
	if err != nil {
		t.Fatalf("update without a version: %v", err)
	}
	if a3.Version != 3 {
		t.Errorf("version: got %d, want 3", a3.Version)
	}
	got, err := s.GetAgent(ctx, "", "writer")
	if err != nil {
		t.Fatalf("get: %v", err)
	}
	if !proto.Equal(got, a3) {
		t.Errorf("get: got %v, want %v", got, a3)
	}
	odd := &agentmeshv1.Agent{Name: "odd name/ü", Skills: []string{"x"}}
	if _, err := s.PutAgent(ctx, odd, true, 0); err != nil {
		t.Fatalf("create %q: %v", odd.Name, err)
	}
	if got, err := s.GetAgent(ctx, "", odd.Name); err != nil || got.Name != odd.Name {
		t.Errorf("get %q: got %v, %v", odd.Name, got, err)
	}
	if err := s.DeleteAgent(ctx, "", "writer"); err != nil {
		t.Fatalf("delete: %v", err)
	}
	_, err = s.GetAgent(ctx, "", "writer")
	wantCode(t, "get after delete", err, bus.ErrNotFound)
	wantCode(t, "delete twice", s.DeleteAgent(ctx, "", "writer"), bus.ErrNotFound)
	list, _, err := s.ListAgents(ctx, store.AgentQuery{})
	if err != nil {
		t.Fatalf("list: %v", err)
	}
	if len(list) != 1 || list[0].Name != odd.Name {
		t.Errorf("list after delete: got %v, want only %q", list, odd.Name)
	}
	if _, err := s.PutAgent(ctx, in, true, 0); err != nil {
		t.Fatalf("create again after delete: %v", err)
	}
	_, err = s.PutAgent(ctx, &agentmeshv1.Agent{}, true, 0)
	wantCode(t, "create without a name", err, bus.ErrInvalidArgument)
}

func testListAgents(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	skills := map[string][]string{
		"a1": {"go", "sql"}, "a2": {"go"}, "a3": {"prose"}, "a4": {"go", "prose"}, "a5": nil,
	}
	for name, sk := range skills {
		if _, err := s.PutAgent(ctx, &agentmeshv1.Agent{Name: name, Skills: sk}, true, 0); err != nil {
			t.Fatalf("create %s: %v", name, err)
		}
	}
	tests := []struct {
		name  string
		skill string
		size  int
		want  []string
	}{
		{"all", "", 0, []string{"a1", "a2", "a3", "a4", "a5"}},
		{"all in pages of 2", "", 2, []string{"a1", "a2", "a3", "a4", "a5"}},
		{"by skill", "go", 0, []string{"a1", "a2", "a4"}},
		{"by skill in pages of 1", "go", 1, []string{"a1", "a2", "a4"}},
		{"by skill in pages of 2", "prose", 2, []string{"a3", "a4"}},
		{"unknown skill", "cobol", 0, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			tok := ""
			for pages := 0; ; pages++ {
				if pages > 10 {
					t.Fatalf("pagination does not end")
				}
				page, next, err := s.ListAgents(ctx, store.AgentQuery{Skill: tc.skill, PageSize: tc.size, PageToken: tok})
				if err != nil {
					t.Fatalf("ListAgents: %v", err)
				}
				if tc.size > 0 && len(page) > tc.size {
					t.Fatalf("page: got %d agents, want at most %d", len(page), tc.size)
				}
				for _, a := range page {
					got = append(got, a.Name)
				}
				if next == "" {
					break
				}
				tok = next
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("names: got %v, want %v", got, tc.want)
			}
		})
	}
	_, _, err := s.ListAgents(ctx, store.AgentQuery{PageToken: "%%%"})
	wantCode(t, "malformed token", err, bus.ErrInvalidArgument)
}

// testIsolation: the isolation an executor reports with the move to
// running is on the task (and its event), survives to the end, and a
// re-queue clears it for the next attempt.
func testIsolation(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	task := create(t, s, newTask("org", "a", ""))
	steps := []store.Transition{
		{From: taskstate.Queued, To: taskstate.Assigned, NextAttempt: true},
		{From: taskstate.Assigned, To: taskstate.Running, Attempt: 1, Node: "n1", Isolation: "reduced"},
	}
	var ev *agentmeshv1.TaskEvent
	for _, tr := range steps {
		tr.TaskID = task.Id
		var err error
		if _, ev, err = s.Transition(ctx, tr); err != nil {
			t.Fatalf("Transition to %s: %v", taskstate.Name(tr.To), err)
		}
	}
	if ev.Isolation != "reduced" {
		t.Errorf("running event: isolation %q, want reduced", ev.Isolation)
	}
	if got, err := s.GetTask(ctx, task.Id); err != nil || got.Isolation != "reduced" {
		t.Fatalf("GetTask: isolation %q, %v; want reduced", got.GetIsolation(), err)
	}
	if _, _, err := s.Transition(ctx, store.Transition{TaskID: task.Id, To: taskstate.Queued, Attempt: 1, Reason: "executor lost"}); err != nil {
		t.Fatal(err)
	}
	if got, err := s.GetTask(ctx, task.Id); err != nil || got.Isolation != "" {
		t.Errorf("after a re-queue: isolation %q, %v; want none recorded", got.GetIsolation(), err)
	}
	for _, tr := range []store.Transition{
		{To: taskstate.Assigned, NextAttempt: true},
		{To: taskstate.Running, Attempt: 2, Node: "n2", Isolation: "strict"},
		{To: taskstate.Completed, Attempt: 2, Result: "done"},
	} {
		tr.TaskID = task.Id
		if _, _, err := s.Transition(ctx, tr); err != nil {
			t.Fatalf("Transition to %s: %v", taskstate.Name(tr.To), err)
		}
	}
	if got, err := s.GetTask(ctx, task.Id); err != nil || got.Isolation != "strict" {
		t.Errorf("completed: isolation %q, %v; want strict (the last attempt's)", got.GetIsolation(), err)
	}
}
