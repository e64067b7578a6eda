// Package e2e runs the whole agentmesh stack in one process and speaks only
// its public gRPC API: the tests a user's experience depends on.
package e2e

import (
	"context"
	"errors"
	"fmt"
	"google.golang.org/protobuf/types/known/durationpb"
	"io"
	"strings"
	"testing"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/pgtest"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"github.com/agentmesh/agentmesh/services/executor"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// stores runs fn against the embedded store and against Postgres.
func stores(t *testing.T, fn func(t *testing.T, o opts)) {
	t.Run("embedded", func(t *testing.T) { fn(t, opts{}) })
	t.Run("postgres", func(t *testing.T) { fn(t, opts{postgres: pgtest.NewDatabase(t)}) })
}

func TestSubmitCompletesWithToolCall(t *testing.T) {
	stores(t, func(t *testing.T, o opts) {
		e := start(t, o)
		e.createAgent(t, "helper", "general")
		task := e.submit(t, &agentmeshv1.SubmitTaskRequest{Title: "greet", Input: "hello world", Agent: "helper"})
		if task.Id == "" || task.Status != taskstate.Queued {
			t.Fatalf("submitted task = %v, want an id and status queued", task)
		}
		done := e.waitStatus(t, task.Id, taskstate.Completed, 30*time.Second)
		if want := "final answer: hello world"; done.Result != want {
			t.Errorf("result = %q, want %q", done.Result, want)
		}
		if done.Usage.GetTotalTokens() <= 0 {
			t.Errorf("usage = %v, want tokens counted", done.Usage)
		}

		// The history is one ordered log: statuses and every step.
		var got []string
		for i, ev := range e.history(t, task.Id) {
			if ev.Seq != int64(i+1) {
				t.Fatalf("event %d has seq %d, want %d", i, ev.Seq, i+1)
			}
			switch ev.Type {
			case agentmeshv1.EventType_EVENT_TYPE_CREATED, agentmeshv1.EventType_EVENT_TYPE_STATUS:
				got = append(got, taskstate.Name(ev.Status))
			case agentmeshv1.EventType_EVENT_TYPE_STEP:
				s := ev.Step
				switch s.Kind {
				case agentmeshv1.StepKind_STEP_KIND_MODEL_TURN:
					got = append(got, fmt.Sprintf("model(%d calls)", len(s.ToolCalls)))
				case agentmeshv1.StepKind_STEP_KIND_TOOL_CALL:
					got = append(got, "call "+s.ToolName)
				case agentmeshv1.StepKind_STEP_KIND_TOOL_RESULT:
					got = append(got, "result "+s.Content)
				}
			}
		}
		want := []string{"created", "queued", "assigned", "running", "model(1 calls)", "call echo", "result hello world", "model(0 calls)", "completed"}
		if strings.Join(got, " | ") != strings.Join(want, " | ") {
			t.Errorf("history:\n got %v\nwant %v", got, want)
		}
	})
}

func TestSubmitBySkill(t *testing.T) {
	e := start(t, opts{})
	e.createAgent(t, "writer", "writing")
	e.createAgent(t, "coder", "go", "sql")
	task := e.submit(t, &agentmeshv1.SubmitTaskRequest{Input: "fix it", RequiredSkills: []string{"sql"}})
	if task.Agent != "coder" {
		t.Fatalf("agent = %q, want coder", task.Agent)
	}
	e.waitStatus(t, task.Id, taskstate.Completed, 30*time.Second)
}

func TestCancelRunningTask(t *testing.T) {
	e := start(t, opts{})
	e.createAgent(t, "helper")
	task := e.submit(t, &agentmeshv1.SubmitTaskRequest{Input: "slow task", Agent: "helper"})
	e.waitStatus(t, task.Id, taskstate.Running, 30*time.Second)
	resp, err := e.tasks.CancelTask(ctxT(t), &agentmeshv1.CancelTaskRequest{Id: task.Id, Reason: "changed my mind"})
	if err != nil {
		t.Fatalf("cancel: %v", err)
	}
	if resp.Task.Status != taskstate.Cancelled {
		t.Fatalf("status after cancel = %s, want cancelled", taskstate.Name(resp.Task.Status))
	}
	// Cancelling again is refused: the task has finished.
	_, err = e.tasks.CancelTask(ctxT(t), &agentmeshv1.CancelTaskRequest{Id: task.Id})
	if status.Code(err) != codes.FailedPrecondition {
		t.Errorf("second cancel: got %v, want FailedPrecondition", err)
	}
	// The executor carries on: another task completes, and the cancelled one
	// is still cancelled (its child was killed; nothing moved it since).
	other := e.submit(t, &agentmeshv1.SubmitTaskRequest{Input: "after the cancel", Agent: "helper"})
	e.waitStatus(t, other.Id, taskstate.Completed, 30*time.Second)
	got, err := e.tasks.GetTask(ctxT(t), &agentmeshv1.GetTaskRequest{Id: task.Id})
	if err != nil {
		t.Fatal(err)
	}
	if got.Task.Status != taskstate.Cancelled || got.Task.Error != "changed my mind" {
		t.Errorf("cancelled task = %s %q, want cancelled \"changed my mind\"", taskstate.Name(got.Task.Status), got.Task.Error)
	}
}

func TestRestartSurvival(t *testing.T) {
	stores(t, func(t *testing.T, o opts) {
		o.dataDir = t.TempDir()
		e := start(t, o)
		e.createAgent(t, "helper")
		done := e.submit(t, &agentmeshv1.SubmitTaskRequest{Input: "before restart", Agent: "helper"})
		e.waitStatus(t, done.Id, taskstate.Completed, 30*time.Second)
		before := e.history(t, done.Id)
		e.stop()

		e2 := start(t, o)
		got, err := e2.tasks.GetTask(ctxT(t), &agentmeshv1.GetTaskRequest{Id: done.Id})
		if err != nil {
			t.Fatalf("get after restart: %v", err)
		}
		if got.Task.Status != taskstate.Completed || got.Task.Result != "final answer: before restart" {
			t.Errorf("after restart: %s %q", taskstate.Name(got.Task.Status), got.Task.Result)
		}
		if after := e2.history(t, done.Id); len(after) != len(before) {
			t.Errorf("history after restart has %d events, want %d", len(after), len(before))
		}
		if _, err := e2.agents.GetAgent(ctxT(t), &agentmeshv1.GetAgentRequest{Name: "helper"}); err != nil {
			t.Errorf("agent after restart: %v", err)
		}
		next := e2.submit(t, &agentmeshv1.SubmitTaskRequest{Input: "after restart", Agent: "helper"})
		e2.waitStatus(t, next.Id, taskstate.Completed, 30*time.Second)
	})
}

// A task accepted while no executor runs is not lost: it completes once the
// stack is back.
func TestQueuedTaskSurvivesRestart(t *testing.T) {
	o := opts{dataDir: t.TempDir()}
	e := start(t, o)
	e.createAgent(t, "helper")
	// Submit many at once and stop straight away: some are still queued,
	// assigned or running when the stack goes down.
	var ids []string
	for i := 0; i < 20; i++ {
		ids = append(ids, e.submit(t, &agentmeshv1.SubmitTaskRequest{Input: fmt.Sprintf("task %d", i), Agent: "helper"}).Id)
	}
	e.stop()
	e2 := start(t, o)
	for _, id := range ids {
		e2.waitStatus(t, id, taskstate.Completed, 90*time.Second)
	}
}

func TestWatchTaskResumesFromCursor(t *testing.T) {
	e := start(t, opts{})
	e.createAgent(t, "helper")
	task := e.submit(t, &agentmeshv1.SubmitTaskRequest{Input: "watch me", Agent: "helper"})

	// First connection: read three events, then drop the stream.
	ctx1, cancel1 := context.WithCancel(ctxT(t))
	stream, err := e.tasks.WatchTask(ctx1, &agentmeshv1.WatchTaskRequest{Id: task.Id})
	if err != nil {
		t.Fatal(err)
	}
	var seen []int64
	for len(seen) < 3 {
		resp, err := stream.Recv()
		if err != nil {
			t.Fatalf("recv: %v", err)
		}
		if resp.Event.Type == agentmeshv1.EventType_EVENT_TYPE_TOKEN {
			continue // streamed model output: live only, seq 0, not the cursor
		}
		seen = append(seen, resp.Event.Seq)
	}
	cancel1()

	// Reconnect from the last cursor and follow to the end.
	stream, err = e.tasks.WatchTask(ctxT(t), &agentmeshv1.WatchTaskRequest{Id: task.Id, AfterSeq: seen[len(seen)-1]})
	if err != nil {
		t.Fatal(err)
	}
	var last *agentmeshv1.WatchTaskResponse
	for {
		resp, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("recv: %v", err)
		}
		if resp.Event.Type == agentmeshv1.EventType_EVENT_TYPE_TOKEN {
			if resp.Event.Seq != 0 {
				t.Fatalf("token event with seq %d", resp.Event.Seq)
			}
			continue // streamed model output: live only, seq 0, not the cursor
		}
		seen = append(seen, resp.Event.Seq)
		last = resp
	}
	for i, s := range seen {
		if s != int64(i+1) {
			t.Fatalf("seqs seen = %v: want 1..n with no gap and no repeat", seen)
		}
	}
	if last == nil || last.Status != taskstate.Completed {
		t.Fatalf("last event = %v, want the completed status", last)
	}
	if h := e.history(t, task.Id); len(h) != len(seen) {
		t.Errorf("watched %d events, history has %d", len(seen), len(h))
	}

	// Watching a finished task from its end returns at once.
	stream, err = e.tasks.WatchTask(ctxT(t), &agentmeshv1.WatchTaskRequest{Id: task.Id, AfterSeq: seen[len(seen)-1]})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); !errors.Is(err, io.EOF) {
		t.Errorf("watch of a finished task from its end: got %v, want EOF", err)
	}
}

func TestBadInput(t *testing.T) {
	e := start(t, opts{})
	e.createAgent(t, "helper", "general")
	tests := []struct {
		name      string
		req       *agentmeshv1.SubmitTaskRequest
		wantCode  codes.Code
		wantInMsg string
	}{
		{"no input", &agentmeshv1.SubmitTaskRequest{Agent: "helper"}, codes.InvalidArgument, "input"},
		{"unknown agent", &agentmeshv1.SubmitTaskRequest{Input: "x", Agent: "nobody"}, codes.FailedPrecondition, "nobody"},
		{"unknown skill", &agentmeshv1.SubmitTaskRequest{Input: "x", RequiredSkills: []string{"juggling"}}, codes.FailedPrecondition, "juggling"},
		{"bad priority", &agentmeshv1.SubmitTaskRequest{Input: "x", Agent: "helper", Priority: 42}, codes.InvalidArgument, "priority"},
		{"input too large", &agentmeshv1.SubmitTaskRequest{Input: strings.Repeat("x", 300<<10), Agent: "helper"}, codes.ResourceExhausted, "input"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := e.tasks.SubmitTask(ctxT(t), tt.req)
			if status.Code(err) != tt.wantCode || !strings.Contains(status.Convert(err).Message(), tt.wantInMsg) {
				t.Fatalf("got %v, want %v mentioning %q", err, tt.wantCode, tt.wantInMsg)
			}
		})
	}
	t.Run("unknown task", func(t *testing.T) {
		_, err := e.tasks.GetTask(ctxT(t), &agentmeshv1.GetTaskRequest{Id: "01JDOESNOTEXIST0000000000"})
		if status.Code(err) != codes.NotFound {
			t.Fatalf("got %v, want NotFound", err)
		}
	})
	t.Run("nothing half-written", func(t *testing.T) {
		resp, err := e.tasks.ListTasks(ctxT(t), &agentmeshv1.ListTasksRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Tasks) != 0 {
			t.Fatalf("rejected submits left %d tasks behind", len(resp.Tasks))
		}
	})
}

func TestIdempotentSubmit(t *testing.T) {
	e := start(t, opts{})
	e.createAgent(t, "helper")
	req := &agentmeshv1.SubmitTaskRequest{Input: "once", Agent: "helper", IdempotencyKey: "k-1"}
	first, err := e.tasks.SubmitTask(ctxT(t), req)
	if err != nil {
		t.Fatal(err)
	}
	again, err := e.tasks.SubmitTask(ctxT(t), req)
	if err != nil {
		t.Fatal(err)
	}
	if !first.Created || again.Created || again.Task.Id != first.Task.Id {
		t.Fatalf("first created=%v id=%s, again created=%v id=%s: want one task", first.Created, first.Task.Id, again.Created, again.Task.Id)
	}
	// The key reused for another request is refused, naming the key; the
	// first task is not handed back as if it were this request's.
	for _, other := range []*agentmeshv1.SubmitTaskRequest{
		{Input: "something else", Agent: "helper", IdempotencyKey: "k-1"},
		{Input: "once", Agent: "helper", IdempotencyKey: "k-1", Priority: agentmeshv1.Priority_PRIORITY_HIGH},
	} {
		resp, err := e.tasks.SubmitTask(ctxT(t), other)
		if status.Code(err) != codes.AlreadyExists || !strings.Contains(status.Convert(err).Message(), "idempotency_key") {
			t.Errorf("submit of another request under key k-1: got %v, %v; want AlreadyExists naming idempotency_key", resp, err)
		}
	}
}

func TestModelDownFailsTask(t *testing.T) {
	// The model's address is allowed (a refused address is a request no
	// retry changes: MODEL_REJECTED); nothing listens there: it is down.
	e := start(t, opts{executor: func(c *executor.Config) { c.Model.Allow = []string{"127.0.0.1:1"} }})
	_, err := e.agents.CreateAgent(ctxT(t), &agentmeshv1.CreateAgentRequest{Agent: &agentmeshv1.Agent{
		Name: "offline", Model: &agentmeshv1.ModelSettings{BaseUrl: "http://127.0.0.1:1/v1"},
		RetryPolicy: &agentmeshv1.RetryPolicy{MaxAttempts: 2, InitialBackoff: durationpb.New(100 * time.Millisecond)},
	}})
	if err != nil {
		t.Fatal(err)
	}
	task := e.submit(t, &agentmeshv1.SubmitTaskRequest{Input: "anyone there?", Agent: "offline"})
	failed := e.waitStatus(t, task.Id, taskstate.Failed, 60*time.Second)
	if !strings.Contains(failed.Error, "model") {
		t.Errorf("failure reason = %q, want it to name the model call", failed.Error)
	}
	// The agent's policy allowed 2 attempts: one retry, then failed.
	if failed.RetryCount != 1 || failed.Attempt != 2 || failed.FailureKind != agentmeshv1.FailureKind_FAILURE_KIND_MODEL {
		t.Errorf("retry count %d attempt %d kind %s, want 1, 2, MODEL", failed.RetryCount, failed.Attempt, failed.FailureKind)
	}
}

func TestListTasks(t *testing.T) {
	e := start(t, opts{})
	e.createAgent(t, "a1")
	e.createAgent(t, "a2")
	var ids []string
	for i := 0; i < 5; i++ {
		agent := "a1"
		if i%2 == 1 {
			agent = "a2"
		}
		ids = append(ids, e.submit(t, &agentmeshv1.SubmitTaskRequest{Input: fmt.Sprint(i), Agent: agent}).Id)
	}
	for _, id := range ids {
		e.waitStatus(t, id, taskstate.Completed, 30*time.Second)
	}
	// Newest first, two per page, every task exactly once.
	var got []string
	token := ""
	for {
		resp, err := e.tasks.ListTasks(ctxT(t), &agentmeshv1.ListTasksRequest{PageSize: 2, PageToken: token})
		if err != nil {
			t.Fatal(err)
		}
		for _, task := range resp.Tasks {
			got = append(got, task.Id)
		}
		if token = resp.NextPageToken; token == "" {
			break
		}
	}
	if len(got) != len(ids) {
		t.Fatalf("listed %d tasks, want %d", len(got), len(ids))
	}
	for i := range ids {
		if got[i] != ids[len(ids)-1-i] {
			t.Fatalf("order = %v, want newest first %v", got, ids)
		}
	}
	resp, err := e.tasks.ListTasks(ctxT(t), &agentmeshv1.ListTasksRequest{Agent: "a2", Statuses: []agentmeshv1.TaskStatus{taskstate.Completed}})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Tasks) != 2 {
		t.Errorf("a2 completed tasks = %d, want 2", len(resp.Tasks))
	}
}
