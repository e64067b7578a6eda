package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/poll"
	"github.com/agentmesh/agentmesh/pkg/scriptedmodel"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"github.com/agentmesh/agentmesh/services/executor/child"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
)

// treeScript adds to testScript a turn that takes a few seconds ("steady
// ..."), for a parent that completes while its sub-task still runs.
const treeScript = `{
  "scenarios": [
    {"match": "^slow", "turns": [{"delay_ms": 30000, "content": "too late"}]},
    {"match": "^steady", "turns": [{"delay_ms": 3000, "content": "steady done"}]},
    {"turns": [
      {"content": "Let me echo that.", "tool_calls": [{"name": "echo", "arguments": {"text": "{{input}}"}}]},
      {"content": "final answer: {{last_tool_result}}"}
    ]}
  ]
}`

// agentProcesses lists the agent child processes of this test binary
// (children marked by child.EnvChild), wherever below it they run.
// busyAgentProcesses counts the agent processes serving tasks: all of
// them less the executor's idle warm children (a refill in progress shows
// as busy for a moment; callers poll).
func (e *env) busyAgentProcesses() int {
	return len(agentProcesses()) - e.stack.Executor().WarmStats().Idle
}

// noBusyAgents waits until no agent process serves a task or is being
// started (the warm pool has filled) and returns that baseline, 0.
func (e *env) noBusyAgents(t *testing.T) int {
	t.Helper()
	poll.Until(t, 60*time.Second, func() error {
		if n := e.busyAgentProcesses(); n != 0 {
			return fmt.Errorf("%d agent processes busy or starting", n)
		}
		return nil
	})
	return 0
}

func agentProcesses() []int {
	var out []int
	for _, pid := range descendants(os.Getpid()) {
		env, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
		if err != nil {
			continue
		}
		for _, kv := range bytes.Split(env, []byte{0}) {
			if string(kv) == child.EnvChild+"=1" {
				out = append(out, pid)
				break
			}
		}
	}
	return out
}

// subtaskWatch collects the SUBTASK events WatchTask streams for a task.
type subtaskWatch struct {
	mu   sync.Mutex
	subs []*agentmeshv1.SubtaskEvent
	done chan struct{}
}

func (e *env) watchSubtasks(t *testing.T, id string) *subtaskWatch {
	ctx, cancel := context.WithCancel(context.Background())
	w := &subtaskWatch{done: make(chan struct{})}
	stream, err := e.tasks.WatchTask(ctx, &agentmeshv1.WatchTaskRequest{Id: id})
	if err != nil {
		cancel()
		t.Fatalf("WatchTask: %v", err)
	}
	go func() {
		defer close(w.done)
		for {
			r, err := stream.Recv()
			if err != nil {
				return
			}
			if ev := r.GetEvent(); ev.GetType() == agentmeshv1.EventType_EVENT_TYPE_SUBTASK {
				w.mu.Lock()
				w.subs = append(w.subs, ev.GetSubtask())
				w.mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-w.done })
	return w
}

// has reports whether the watch saw the event of id in that phase.
func (w *subtaskWatch) has(id string, ended bool) *agentmeshv1.SubtaskEvent {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, s := range w.subs {
		if s.GetTaskId() == id && taskstate.Terminal(s.GetStatus()) == ended {
			return s
		}
	}
	return nil
}

func (e *env) get(t *testing.T, id string) *agentmeshv1.Task {
	t.Helper()
	resp, err := e.tasks.GetTask(ctxT(t), &agentmeshv1.GetTaskRequest{Id: id})
	if err != nil {
		t.Fatalf("GetTask %s: %v", id, err)
	}
	return resp.Task
}

// A three-level tree, watched from its root: the root's WatchTask shows
// each sub-task's creation and end with its id; the usage of the part
// that ended rolls up; cancelling the root mid-flight cancels the whole
// tree, each with the ancestor named, and leaves no agent process; the
// delegations show in GetMetrics per agent pair.
func TestTreeWatchUsageAndCancel(t *testing.T) {
	stores(t, func(t *testing.T, o opts) {
		o.noWarmPool = true      // every agent process runs a task
		o.childBesideCall = true // and the slow tasks have theirs: the cancel ends them
		e := start(t, o)
		e.createAgent(t, "planner")
		e.createAgent(t, "worker")
		before := e.noBusyAgents(t)
		root := e.submit(t, &agentmeshv1.SubmitTaskRequest{Input: "slow root", Agent: "planner"})
		w := e.watchSubtasks(t, root.Id)
		mid := e.submit(t, &agentmeshv1.SubmitTaskRequest{Input: "slow middle", Agent: "worker", ParentTaskId: "subtask://" + root.Id})
		leaf := e.submit(t, &agentmeshv1.SubmitTaskRequest{Input: "slow leaf", Agent: "worker", ParentTaskId: mid.Id})
		quick := e.submit(t, &agentmeshv1.SubmitTaskRequest{Input: "quick leaf", Agent: "worker", ParentTaskId: mid.Id})
		for _, id := range []string{root.Id, mid.Id, leaf.Id} {
			e.waitStatus(t, id, taskstate.Running, 60*time.Second)
		}
		done := e.waitStatus(t, quick.Id, taskstate.Completed, 60*time.Second)
		if done.Usage.GetTotalTokens() == 0 {
			t.Fatalf("the quick leaf used no tokens: %v", done.Usage)
		}
		// The root's watch shows the tree: spawned (with depth and parent)
		// and the quick leaf's end with its result and usage.
		poll.Until(t, 30*time.Second, func() error {
			for _, s := range []*agentmeshv1.Task{mid, leaf, quick} {
				if w.has(s.Id, false) == nil {
					return fmt.Errorf("no spawn event of %s", s.Id)
				}
			}
			if w.has(quick.Id, true) == nil {
				return errors.New("no end event of the quick leaf")
			}
			return nil
		})
		if s := w.has(leaf.Id, false); s.Depth != 2 || s.ParentTaskId != mid.Id || s.Agent != "worker" {
			t.Errorf("spawn of the leaf as the root sees it: %v", s)
		}
		if s := w.has(quick.Id, true); s.Status != taskstate.Completed || !strings.Contains(s.Result, "quick leaf") || s.Usage.GetTotalTokens() != done.Usage.GetTotalTokens() {
			t.Errorf("end of the quick leaf as the root sees it: %v", s)
		}
		// Usage: the leaf's own turns in its parent's and the root's subtree.
		poll.Until(t, 30*time.Second, func() error {
			for _, id := range []string{root.Id, mid.Id} {
				if got := e.get(t, id).SubtreeUsage.GetTotalTokens(); got != done.Usage.GetTotalTokens() {
					return fmt.Errorf("subtree of %s: %d tokens, want %d", id, got, done.Usage.GetTotalTokens())
				}
			}
			return nil
		})
		if n := e.busyAgentProcesses() - before; n < 3 {
			t.Fatalf("%d agent processes run for the three running tasks, want at least 3", n)
		}

		if _, err := e.tasks.CancelTask(ctxT(t), &agentmeshv1.CancelTaskRequest{Id: root.Id, Reason: "stop the tree"}); err != nil {
			t.Fatalf("cancel the root: %v", err)
		}
		want := map[string]string{mid.Id: "parent " + root.Id + " ended cancelled", leaf.Id: "ancestor " + root.Id + " ended cancelled"}
		poll.Until(t, 60*time.Second, func() error {
			for id, reason := range want {
				got := e.get(t, id)
				if got.Status != taskstate.Cancelled {
					return fmt.Errorf("%s is %s", id, taskstate.Name(got.Status))
				}
				if got.Error != reason {
					t.Fatalf("%s cancelled with %q, want %q", id, got.Error, reason)
				}
			}
			return nil
		})
		poll.Until(t, 60*time.Second, func() error {
			if n := e.busyAgentProcesses(); n > before {
				return fmt.Errorf("%d agent processes still run", n-before)
			}
			return nil
		})
		if got := e.get(t, quick.Id); got.Status != taskstate.Completed {
			t.Errorf("the finished leaf changed: %s", taskstate.Name(got.Status))
		}
		list, err := e.tasks.ListTasks(ctxT(t), &agentmeshv1.ListTasksRequest{Statuses: []agentmeshv1.TaskStatus{
			taskstate.Queued, taskstate.Assigned, taskstate.Running, taskstate.Blocked}})
		if err != nil {
			t.Fatal(err)
		}
		if len(list.Tasks) != 0 {
			t.Errorf("%d tasks still unfinished after the tree's cancel", len(list.Tasks))
		}

		m, err := agentmeshv1.NewMetricsServiceClient(e.conn).GetMetrics(ctxT(t), &agentmeshv1.GetMetricsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		pairs := map[string]*agentmeshv1.DelegationMetrics{}
		for _, d := range m.Delegations {
			pairs[d.ParentAgent+">"+d.ChildAgent] = d
		}
		pw, ww := pairs["planner>worker"], pairs["worker>worker"]
		switch {
		case len(pairs) != 2 || pw == nil || ww == nil:
			t.Fatalf("delegations: %v, want planner>worker and worker>worker", m.Delegations)
		case pw.Submitted != 1 || pw.Cancelled != 1 || pw.Completed != 0 || pw.SuccessRate != 0:
			t.Errorf("planner>worker: %v, want 1 submitted, 1 cancelled", pw)
		case ww.Submitted != 2 || ww.Completed != 1 || ww.Cancelled != 1 || ww.SuccessRate != 0.5:
			t.Errorf("worker>worker: %v, want 2 submitted, 1 completed, 1 cancelled, rate 0.5", ww)
		}
	})
}

// A parent that completes leaves no sub-task running: its unfinished
// sub-task is cancelled with the reason naming it, and its process ends; a
// sub-task of an ended task is refused.
func TestParentCompletionCancelsChildren(t *testing.T) {
	e := start(t, opts{script: treeScript, noWarmPool: true}) // every agent process runs a task
	e.createAgent(t, "planner")
	e.createAgent(t, "worker")
	before := e.noBusyAgents(t)
	parent := e.submit(t, &agentmeshv1.SubmitTaskRequest{Input: "steady parent", Agent: "planner"})
	kid := e.submit(t, &agentmeshv1.SubmitTaskRequest{Input: "slow child", Agent: "worker", ParentTaskId: parent.Id})
	e.waitStatus(t, parent.Id, taskstate.Completed, 60*time.Second)
	poll.Until(t, 60*time.Second, func() error {
		got := e.get(t, kid.Id)
		if got.Status != taskstate.Cancelled {
			return fmt.Errorf("child is %s", taskstate.Name(got.Status))
		}
		if want := "parent " + parent.Id + " ended completed"; got.Error != want {
			t.Fatalf("child cancelled with %q, want %q", got.Error, want)
		}
		return nil
	})
	poll.Until(t, 60*time.Second, func() error {
		if n := e.busyAgentProcesses(); n > before {
			return fmt.Errorf("%d agent processes still run", n-before)
		}
		return nil
	})
	_, err := e.tasks.SubmitTask(ctxT(t), &agentmeshv1.SubmitTaskRequest{Input: "late", Agent: "worker", ParentTaskId: parent.Id})
	wantStatus(t, "a sub-task of an ended task", err, codes.FailedPrecondition, parent.Id)
}

// continue_from carries the earlier conversation: the model receives the
// earlier input, turns, tool result and answer, then the new input; a
// chain carries the whole thread; another org's task is not found and an
// unfinished one is refused by name.
func TestContinueFromCarriesTheConversation(t *testing.T) {
	stores(t, func(t *testing.T, o opts) {
		o.apiKeys = map[string]string{"key-a": "org-a", "key-b": "org-b"}
		e := start(t, o)
		as := func(key string) context.Context {
			return metadata.AppendToOutgoingContext(ctxT(t), "authorization", "Bearer "+key)
		}
		for _, key := range []string{"key-a", "key-b"} {
			if _, err := e.agents.CreateAgent(as(key), &agentmeshv1.CreateAgentRequest{Agent: &agentmeshv1.Agent{Name: "helper", Tools: []string{"echo"}}}); err != nil {
				t.Fatal(err)
			}
		}
		submit := func(key string, req *agentmeshv1.SubmitTaskRequest) *agentmeshv1.Task {
			t.Helper()
			resp, err := e.tasks.SubmitTask(as(key), req)
			if err != nil {
				t.Fatalf("submit: %v", err)
			}
			return resp.Task
		}
		wait := func(key, id string) *agentmeshv1.Task {
			t.Helper()
			var got *agentmeshv1.Task
			poll.Until(t, 60*time.Second, func() error {
				resp, err := e.tasks.GetTask(as(key), &agentmeshv1.GetTaskRequest{Id: id})
				if err != nil {
					return err
				}
				if got = resp.Task; got.Status != taskstate.Completed {
					if taskstate.Terminal(got.Status) {
						t.Fatalf("task %s ended %s: %s", id, taskstate.Name(got.Status), got.Error)
					}
					return fmt.Errorf("task %s is %s", id, taskstate.Name(got.Status))
				}
				return nil
			})
			return got
		}
		first := wait("key-a", submit("key-a", &agentmeshv1.SubmitTaskRequest{Input: "remember the code 4242", Agent: "helper"}).Id)
		second := submit("key-a", &agentmeshv1.SubmitTaskRequest{Input: "what was the code?", ContinueFrom: "subtask://" + first.Id})
		if second.ContinueFrom != first.Id || second.Agent != "helper" {
			t.Fatalf("continued task: continue_from %q agent %q, want %q and the earlier agent", second.ContinueFrom, second.Agent, first.Id)
		}
		got := wait("key-a", second.Id)
		if !strings.Contains(got.Result, "4242") {
			t.Errorf("continued answer %q does not carry the earlier tool result", got.Result)
		}
		third := wait("key-a", submit("key-a", &agentmeshv1.SubmitTaskRequest{Input: "and again?", ContinueFrom: second.Id}).Id)

		conv := lastConversationEndingWith(e, "and again?")
		if conv == nil {
			t.Fatalf("the model never received a conversation ending with the third input")
		}
		var roles, texts []string
		for _, m := range conv {
			if m.Role == "system" {
				continue
			}
			roles = append(roles, m.Role)
			texts = append(texts, m.Text)
		}
		wantRoles := "user assistant tool assistant user assistant user"
		if strings.Join(roles, " ") != wantRoles {
			t.Fatalf("the model received roles %q, want %q (texts %q)", strings.Join(roles, " "), wantRoles, texts)
		}
		for i, want := range []string{"remember the code 4242", "", "remember the code 4242", "final answer: remember the code 4242", "what was the code?", second.Id, "and again?"} {
			switch {
			case i == 5:
				if texts[i] != got.Result {
					t.Errorf("message %d: got %q, want the second task's answer %q", i, texts[i], got.Result)
				}
			case want != "" && texts[i] != want:
				t.Errorf("message %d: got %q, want %q", i, texts[i], want)
			}
		}
		if third.ContinueFrom != second.Id {
			t.Errorf("third continue_from %q", third.ContinueFrom)
		}

		_, err := e.tasks.SubmitTask(as("key-b"), &agentmeshv1.SubmitTaskRequest{Input: "steal", ContinueFrom: first.Id})
		wantStatus(t, "continue_from of another org's task", err, codes.NotFound, first.Id)
		running := submit("key-a", &agentmeshv1.SubmitTaskRequest{Input: "slow thought", Agent: "helper"})
		_, err = e.tasks.SubmitTask(as("key-a"), &agentmeshv1.SubmitTaskRequest{Input: "too soon", ContinueFrom: running.Id})
		wantStatus(t, "continue_from of an unfinished task", err, codes.FailedPrecondition, running.Id)
		_, err = e.tasks.SubmitTask(as("key-a"), &agentmeshv1.SubmitTaskRequest{Input: "bad", ContinueFrom: "subtask://not an id"})
		wantStatus(t, "continue_from malformed", err, codes.InvalidArgument, "continue_from")
		if _, err := e.tasks.CancelTask(as("key-a"), &agentmeshv1.CancelTaskRequest{Id: running.Id}); err != nil {
			t.Fatal(err)
		}
	})
}

// lastConversationEndingWith returns the newest conversation the scripted
// model received whose last message is the user input text.
func lastConversationEndingWith(e *env, text string) []scriptedmodel.ReceivedMessage {
	convs := e.stack.ScriptedModel().Received()
	for i := len(convs) - 1; i >= 0; i-- {
		c := convs[i]
		if n := len(c); n > 0 && c[n-1].Role == "user" && c[n-1].Text == text {
			return c
		}
	}
	return nil
}
