package state_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	busv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/bus/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/busauth"
	"github.com/agentmesh/agentmesh/pkg/natstest"
	"github.com/agentmesh/agentmesh/pkg/pgtest"
	"github.com/agentmesh/agentmesh/pkg/poll"
	"github.com/agentmesh/agentmesh/pkg/subjects"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"github.com/agentmesh/agentmesh/pkg/testlog"
	"github.com/agentmesh/agentmesh/services/state"
	"github.com/agentmesh/agentmesh/services/state/kvstore"
	"github.com/agentmesh/agentmesh/services/state/pgstore"
	"github.com/agentmesh/agentmesh/services/state/store"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

var names = subjects.Must("am")

// running is a state service serving in the background.
type running struct {
	// nc is the test driver's connection (it may say anything), not the
	// service's own.
	nc    *nats.Conn
	store store.Store
	stop  func() // cancels Run and waits for it
}

// startService runs a state service over svcNC (the state identity's
// connection) with st, stopped at cleanup; driver is the test's own.
func startService(t *testing.T, svcNC, driver *nats.Conn, st store.Store, taps ...*busauth.TapSigner) *running {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cfg := state.Config{Concurrency: 16}
	if len(taps) > 0 {
		cfg.Taps = taps[0]
	}
	svc, err := state.New(ctx, cfg, state.Deps{NC: svcNC, Store: st, Log: testlog.New(t)})
	if err != nil {
		cancel()
		t.Fatalf("state.New: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: got %v, want nil", err)
			}
		})
	}
	t.Cleanup(stop)
	return &running{nc: driver, store: st, stop: stop}
}

func openKV(t *testing.T, nc *nats.Conn) *kvstore.Store {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("jetstream: %v", err)
	}
	st, err := kvstore.Open(context.Background(), js, names, kvstore.Options{})
	if err != nil {
		t.Fatalf("kvstore.Open: %v", err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func startKV(t *testing.T) *running {
	t.Helper()
	srv := natstest.Start(t)
	nc := natstest.ConnectAs(t, srv, subjects.ServiceState)
	return startService(t, nc, natstest.Connect(t, srv), openKV(t, nc))
}

func call[Resp proto.Message](t *testing.T, nc *nats.Conn, op string, req proto.Message, resp Resp) (Resp, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := bus.Request(ctx, nc, names.State(op), req, resp)
	return resp, err
}

func mustCall[Resp proto.Message](t *testing.T, nc *nats.Conn, op string, req proto.Message, resp Resp) Resp {
	t.Helper()
	r, err := call(t, nc, op, req, resp)
	if err != nil {
		t.Fatalf("%s: %v", op, err)
	}
	return r
}

func newTask(org string) *busv1.CreateTaskRequest {
	return &busv1.CreateTaskRequest{Task: &agentmeshv1.Task{Org: org, Agent: "writer", Title: "t", Input: "hello"}}
}

// collector gathers the task events seen on the bus.
type collector struct {
	mu   sync.Mutex
	msgs []*nats.Msg
}

func collect(t *testing.T, nc *nats.Conn, subject string) *collector {
	t.Helper()
	c := &collector{}
	sub, err := nc.Subscribe(subject, func(m *nats.Msg) {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.msgs = append(c.msgs, m)
	})
	if err != nil {
		t.Fatalf("subscribe: %v", err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatalf("flush: %v", err)
	}
	t.Cleanup(func() { sub.Unsubscribe() })
	return c
}

func (c *collector) wait(t *testing.T, n int) []*nats.Msg {
	t.Helper()
	poll.Until(t, 10*time.Second, func() error {
		c.mu.Lock()
		defer c.mu.Unlock()
		if len(c.msgs) < n {
			return fmt.Errorf("got %d messages, want %d", len(c.msgs), n)
		}
		return nil
	})
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*nats.Msg(nil), c.msgs...)
}

// runTask drives a task from submit to completed through the service.
func runTask(t *testing.T, nc *nats.Conn, org string) *agentmeshv1.Task {
	t.Helper()
	created := mustCall(t, nc, subjects.StateCreateTask, newTask(org), &busv1.CreateTaskResponse{})
	id := created.Task.Id
	mustCall(t, nc, subjects.StateDispatch, &busv1.TransitionRequest{TaskId: id, From: taskstate.Queued, To: taskstate.Assigned, NextAttempt: true}, &busv1.TransitionResponse{})
	mustCall(t, nc, subjects.StateStart, &busv1.TransitionRequest{TaskId: id, From: taskstate.Assigned, To: taskstate.Running, Attempt: 1, Node: "n1"}, &busv1.TransitionResponse{})
	mustCall(t, nc, subjects.StateAppendStep, &busv1.AppendStepRequest{TaskId: id, Attempt: 1, Step: &agentmeshv1.Step{Content: "hi", Usage: &agentmeshv1.Usage{TotalTokens: 3}}}, &busv1.AppendStepResponse{})
	done := mustCall(t, nc, subjects.StateComplete, &busv1.TransitionRequest{TaskId: id, From: taskstate.Running, To: taskstate.Completed, Attempt: 1, Result: "done"}, &busv1.TransitionResponse{})
	return done.Task
}

// checkEvents asserts that msgs are the task's events 1..n in order, on
// the right subjects, with type header and Msg-Id.
func checkEvents(t *testing.T, msgs []*nats.Msg, org, id string, tokens []string) {
	t.Helper()
	if len(msgs) != len(tokens) {
		t.Fatalf("events: got %d, want %d", len(msgs), len(tokens))
	}
	for i, m := range msgs {
		ev := &agentmeshv1.TaskEvent{}
		if err := bus.DecodeEvent(m.Data, ev); err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		if got := m.Header.Get(bus.HeaderContentType); got != bus.ContentTypeJSON {
			t.Errorf("event %d %s: got %q, want %q", i, bus.HeaderContentType, got, bus.ContentTypeJSON)
		}
		if ev.Seq != int64(i+1) || ev.TaskId != id {
			t.Errorf("event %d: got task %s seq %d, want %s %d", i, ev.TaskId, ev.Seq, id, i+1)
		}
		if want := names.TaskEvent(org, id, tokens[i]); m.Subject != want {
			t.Errorf("event %d subject: got %s, want %s", i, m.Subject, want)
		}
		if got, want := m.Header.Get(jetstream.MsgIDHeader), fmt.Sprintf("%s:%d", id, i+1); got != want {
			t.Errorf("event %d Nats-Msg-Id: got %q, want %q", i, got, want)
		}
		if got := m.Header.Get(bus.HeaderType); got != "agentmesh.v1.TaskEvent" {
			t.Errorf("event %d %s: got %q, want agentmesh.v1.TaskEvent", i, bus.HeaderType, got)
		}
	}
}

var lifecycle = []string{"created", "queued", "assigned", "running", subjects.EventStep, "completed"}

func TestEventsInOrder(t *testing.T) {
	r := startKV(t)
	c := collect(t, r.nc, names.TaskEventsOfType(">"))
	task := runTask(t, r.nc, "org")
	if task.Status != taskstate.Completed || task.StepCount != 1 || task.Result != "done" {
		t.Errorf("task: got %v, want completed with 1 step and a result", task)
	}
	checkEvents(t, c.wait(t, len(lifecycle)), "org", task.Id, lifecycle)

	// The events are in the event stream too, once each.
	js, _ := jetstream.New(r.nc)
	ctx := context.Background()
	stream, err := js.Stream(ctx, names.EventsStream())
	if err != nil {
		t.Fatalf("events stream: %v", err)
	}
	info, err := stream.Info(ctx, jetstream.WithSubjectFilter(names.TaskEvents("org", task.Id)))
	if err != nil {
		t.Fatalf("stream info: %v", err)
	}
	var stored uint64
	for _, n := range info.State.Subjects {
		stored += n
	}
	if stored != uint64(len(lifecycle)) {
		t.Errorf("stored events: got %d, want %d", stored, len(lifecycle))
	}

	hist := mustCall(t, r.nc, subjects.StateHistory, &busv1.HistoryRequest{TaskId: task.Id, AfterSeq: 4}, &busv1.HistoryResponse{})
	if len(hist.Events) != 2 || hist.Events[0].Seq != 5 || hist.LastSeq != 6 || hist.Status != taskstate.Completed {
		t.Errorf("history after 4: got %v, want seqs 5, 6, last 6, completed", hist)
	}
}

// The executor's combined writes — a model turn with its tool call, the
// answer's turn with the completion — are recorded as the separate
// requests were: each event once, in order, on its own subject.
func TestCombinedWritesEventsInOrder(t *testing.T) {
	r := startKV(t)
	c := collect(t, r.nc, names.TaskEventsOfType(">"))
	created := mustCall(t, r.nc, subjects.StateCreateTask, newTask("org"), &busv1.CreateTaskResponse{})
	id := created.Task.Id
	mustCall(t, r.nc, subjects.StateDispatch, &busv1.TransitionRequest{TaskId: id, From: taskstate.Queued, To: taskstate.Assigned, NextAttempt: true}, &busv1.TransitionResponse{})
	mustCall(t, r.nc, subjects.StateStart, &busv1.TransitionRequest{TaskId: id, From: taskstate.Assigned, To: taskstate.Running, Attempt: 1, Node: "n1"}, &busv1.TransitionResponse{})
	turn := func(i int32) *agentmeshv1.Step {
		return &agentmeshv1.Step{Index: i, Kind: agentmeshv1.StepKind_STEP_KIND_MODEL_TURN, Usage: &agentmeshv1.Usage{TotalTokens: 3}}
	}
	two := mustCall(t, r.nc, subjects.StateAppendStep, &busv1.AppendStepRequest{TaskId: id, Attempt: 1, Step: turn(0),
		MoreSteps: []*agentmeshv1.Step{{Index: 1, Kind: agentmeshv1.StepKind_STEP_KIND_TOOL_CALL, ToolName: "t"}}}, &busv1.AppendStepResponse{})
	if two.Event.GetSeq() != 5 || len(two.MoreEvents) != 1 || two.MoreEvents[0].GetSeq() != 6 {
		t.Errorf("two steps: got %v and %v, want seqs 5 and 6", two.Event, two.MoreEvents)
	}
	done := mustCall(t, r.nc, subjects.StateComplete, &busv1.TransitionRequest{TaskId: id, From: taskstate.Running, To: taskstate.Completed, Attempt: 1,
		Result: "done", Steps: []*agentmeshv1.Step{turn(2)}}, &busv1.TransitionResponse{})
	if done.Task.GetStatus() != taskstate.Completed || done.Task.GetStepCount() != 3 || done.Task.GetUsage().GetTotalTokens() != 6 ||
		done.Event.GetSeq() != 8 || len(done.StepEvents) != 1 || done.StepEvents[0].GetSeq() != 7 {
		t.Errorf("completion with its step: got %v, step events %v", done.Task, done.StepEvents)
	}
	tokens := []string{"created", "queued", "assigned", "running", subjects.EventStep, subjects.EventStep, subjects.EventStep, "completed"}
	checkEvents(t, c.wait(t, len(tokens)), "org", id, tokens)
}

func TestErrorCodes(t *testing.T) {
	r := startKV(t)
	task := mustCall(t, r.nc, subjects.StateCreateTask, newTask("org-a"), &busv1.CreateTaskResponse{}).Task
	mustCall(t, r.nc, subjects.StatePutAgent, &busv1.PutAgentRequest{Agent: &agentmeshv1.Agent{Name: "writer"}, Create: true}, &busv1.PutAgentResponse{})
	tests := []struct {
		name      string
		op        string
		req       proto.Message
		resp      proto.Message
		want      *bus.Error
		wantField string
	}{
		{"create without a task", subjects.StateCreateTask, &busv1.CreateTaskRequest{}, &busv1.CreateTaskResponse{}, bus.ErrInvalidArgument, "task"},
		{"create without an agent", subjects.StateCreateTask, &busv1.CreateTaskRequest{Task: &agentmeshv1.Task{}}, &busv1.CreateTaskResponse{}, bus.ErrInvalidArgument, "task.agent"},
		{"get without an id", subjects.StateGetTask, &busv1.GetTaskRequest{}, &busv1.GetTaskResponse{}, bus.ErrInvalidArgument, "id"},
		{"get unknown", subjects.StateGetTask, &busv1.GetTaskRequest{Id: "01J00000000000000000000000"}, &busv1.GetTaskResponse{}, bus.ErrNotFound, ""},
		{"get of another org", subjects.StateGetTask, &busv1.GetTaskRequest{Id: task.Id, Org: "org-b"}, &busv1.GetTaskResponse{}, bus.ErrNotFound, ""},
		{"history of another org", subjects.StateHistory, &busv1.HistoryRequest{TaskId: task.Id, Org: "org-b"}, &busv1.HistoryResponse{}, bus.ErrNotFound, ""},
		{"cancel of another org", subjects.StateCancel, &busv1.TransitionRequest{TaskId: task.Id, Org: "org-b"}, &busv1.TransitionResponse{}, bus.ErrNotFound, ""},
		{"cancel without an org", subjects.StateCancel, &busv1.TransitionRequest{TaskId: task.Id}, &busv1.TransitionResponse{}, bus.ErrInvalidArgument, "org"},
		{"intent without a task", subjects.StateDispatch, &busv1.TransitionRequest{From: taskstate.Queued}, &busv1.TransitionResponse{}, bus.ErrInvalidArgument, "task_id"},
		{"dispatch to another status", subjects.StateDispatch, &busv1.TransitionRequest{TaskId: task.Id, From: taskstate.Queued, To: taskstate.Completed}, &busv1.TransitionResponse{}, bus.ErrInvalidArgument, "to"},
		{"dispatch from another status", subjects.StateDispatch, &busv1.TransitionRequest{TaskId: task.Id, From: taskstate.Blocked}, &busv1.TransitionResponse{}, bus.ErrInvalidArgument, "from"},
		{"complete a queued task", subjects.StateComplete, &busv1.TransitionRequest{TaskId: task.Id, From: taskstate.Running, Attempt: 1}, &busv1.TransitionResponse{}, bus.ErrFailedPrecondition, ""},
		{"start without the attempt", subjects.StateStart, &busv1.TransitionRequest{TaskId: task.Id, From: taskstate.Assigned}, &busv1.TransitionResponse{}, bus.ErrInvalidArgument, "attempt"},
		{"requeue from queued", subjects.StateRequeue, &busv1.TransitionRequest{TaskId: task.Id, From: taskstate.Queued, Attempt: 1}, &busv1.TransitionResponse{}, bus.ErrInvalidArgument, "from"},
		{"fail with a result", subjects.StateFail, &busv1.TransitionRequest{TaskId: task.Id, From: taskstate.Running, Attempt: 1, Result: "x"}, &busv1.TransitionResponse{}, bus.ErrInvalidArgument, "result"},
		{"block without an approval", subjects.StateBlock, &busv1.TransitionRequest{TaskId: task.Id, From: taskstate.Running, Attempt: 1}, &busv1.TransitionResponse{}, bus.ErrInvalidArgument, "approval"},
		{"block with a decided approval", subjects.StateBlock, &busv1.TransitionRequest{TaskId: task.Id, From: taskstate.Running, Attempt: 1,
			Approval: &agentmeshv1.Approval{Id: "a", Status: agentmeshv1.ApprovalStatus_APPROVAL_STATUS_APPROVED}}, &busv1.TransitionResponse{}, bus.ErrInvalidArgument, "approval.status"},
		{"decide with an expiry", subjects.StateDecide, &busv1.TransitionRequest{TaskId: task.Id, From: taskstate.Blocked, Org: "org-a",
			Approval: &agentmeshv1.Approval{Id: "a", Status: agentmeshv1.ApprovalStatus_APPROVAL_STATUS_EXPIRED}}, &busv1.TransitionResponse{}, bus.ErrInvalidArgument, "approval.status"},
		{"expire approving", subjects.StateExpire, &busv1.TransitionRequest{TaskId: task.Id, From: taskstate.Blocked,
			Approval: &agentmeshv1.Approval{Id: "a", Status: agentmeshv1.ApprovalStatus_APPROVAL_STATUS_APPROVED}}, &busv1.TransitionResponse{}, bus.ErrInvalidArgument, "approval.status"},
		{"dispatch a new attempt by start", subjects.StateStart, &busv1.TransitionRequest{TaskId: task.Id, From: taskstate.Assigned, Attempt: 1, NextAttempt: true}, &busv1.TransitionResponse{}, bus.ErrInvalidArgument, "next_attempt"},
		{"stale attempt", subjects.StateStart, &busv1.TransitionRequest{TaskId: task.Id, From: taskstate.Assigned, Attempt: 3}, &busv1.TransitionResponse{}, bus.ErrFailedPrecondition, ""},
		{"step without attempt", subjects.StateAppendStep, &busv1.AppendStepRequest{TaskId: task.Id, Step: &agentmeshv1.Step{}}, &busv1.AppendStepResponse{}, bus.ErrInvalidArgument, "attempt"},
		{"step of a queued task", subjects.StateAppendStep, &busv1.AppendStepRequest{TaskId: task.Id, Attempt: 1, Step: &agentmeshv1.Step{}}, &busv1.AppendStepResponse{}, bus.ErrFailedPrecondition, ""},
		{"steps whose indexes do not increase", subjects.StateAppendStep, &busv1.AppendStepRequest{TaskId: task.Id, Attempt: 1, Step: &agentmeshv1.Step{Index: 2},
			MoreSteps: []*agentmeshv1.Step{{Index: 3}, {Index: 3}}}, &busv1.AppendStepResponse{}, bus.ErrInvalidArgument, "more_steps[1].index"},
		{"a negative step index", subjects.StateAppendStep, &busv1.AppendStepRequest{TaskId: task.Id, Attempt: 1, Step: &agentmeshv1.Step{Index: -1},
			MoreSteps: []*agentmeshv1.Step{{Index: 2}}}, &busv1.AppendStepResponse{}, bus.ErrInvalidArgument, "step.index"},
		{"too many steps in one write", subjects.StateAppendStep, &busv1.AppendStepRequest{TaskId: task.Id, Attempt: 1, Step: &agentmeshv1.Step{},
			MoreSteps: make([]*agentmeshv1.Step, state.MaxStepsPerWrite)}, &busv1.AppendStepResponse{}, bus.ErrInvalidArgument, "more_steps"},
		{"fail with steps", subjects.StateFail, &busv1.TransitionRequest{TaskId: task.Id, From: taskstate.Running, Attempt: 1,
			Steps: []*agentmeshv1.Step{{Index: 0}}}, &busv1.TransitionResponse{}, bus.ErrInvalidArgument, "steps"},
		{"requeue with steps", subjects.StateRequeue, &busv1.TransitionRequest{TaskId: task.Id, From: taskstate.Running, Attempt: 1,
			Steps: []*agentmeshv1.Step{{Index: 0}}}, &busv1.TransitionResponse{}, bus.ErrInvalidArgument, "steps"},
		{"complete with steps out of order", subjects.StateComplete, &busv1.TransitionRequest{TaskId: task.Id, From: taskstate.Running, Attempt: 1,
			Steps: []*agentmeshv1.Step{{Index: 3}, {Index: 1}}}, &busv1.TransitionResponse{}, bus.ErrInvalidArgument, "steps[1].index"},
		{"complete with steps of a queued task", subjects.StateComplete, &busv1.TransitionRequest{TaskId: task.Id, From: taskstate.Running, Attempt: 1,
			Steps: []*agentmeshv1.Step{{Index: 0}}}, &busv1.TransitionResponse{}, bus.ErrFailedPrecondition, ""},
		{"history with negative cursor", subjects.StateHistory, &busv1.HistoryRequest{TaskId: task.Id, AfterSeq: -1}, &busv1.HistoryResponse{}, bus.ErrInvalidArgument, "after_seq"},
		{"list with a bad token", subjects.StateListTasks, &busv1.ListTasksRequest{PageToken: "***"}, &busv1.ListTasksResponse{}, bus.ErrInvalidArgument, "page_token"},
		{"list with a bad status", subjects.StateListTasks, &busv1.ListTasksRequest{Statuses: []agentmeshv1.TaskStatus{42}}, &busv1.ListTasksResponse{}, bus.ErrInvalidArgument, "statuses"},
		{"duplicate agent", subjects.StatePutAgent, &busv1.PutAgentRequest{Agent: &agentmeshv1.Agent{Name: "writer"}, Create: true}, &busv1.PutAgentResponse{}, bus.ErrAlreadyExists, ""},
		{"agent with a bad name", subjects.StatePutAgent, &busv1.PutAgentRequest{Agent: &agentmeshv1.Agent{Name: "a.b"}, Create: true}, &busv1.PutAgentResponse{}, bus.ErrInvalidArgument, "agent.name"},
		{"agent stats without an org", subjects.StateAgentStats, &busv1.AgentStatsRequest{}, &busv1.AgentStatsResponse{}, bus.ErrInvalidArgument, "org"},
		{"agent stats with a huge window", subjects.StateAgentStats, &busv1.AgentStatsRequest{Org: "acme", WindowSeconds: 1 << 40}, &busv1.AgentStatsResponse{}, bus.ErrInvalidArgument, "window_seconds"},
		{"agent stats of a nameless agent", subjects.StateAgentStats, &busv1.AgentStatsRequest{Org: "acme", Agents: []*busv1.AgentRef{{Org: "acme"}}}, &busv1.AgentStatsResponse{}, bus.ErrInvalidArgument, "agents[0].name"},
		{"agent stats of too many agents", subjects.StateAgentStats, &busv1.AgentStatsRequest{Org: "acme", Agents: make([]*busv1.AgentRef, 1001)}, &busv1.AgentStatsResponse{}, bus.ErrResourceExhausted, "agents"},
		{"agent with an upper-case skill (the one rule)", subjects.StatePutAgent, &busv1.PutAgentRequest{Agent: &agentmeshv1.Agent{Name: "w2", Skills: []string{"SQL"}}, Create: true}, &busv1.PutAgentResponse{}, bus.ErrInvalidArgument, "agent.skills[0]"},
		{"update at a wrong version", subjects.StatePutAgent, &busv1.PutAgentRequest{Agent: &agentmeshv1.Agent{Name: "writer"}, ExpectedVersion: 9}, &busv1.PutAgentResponse{}, bus.ErrFailedPrecondition, ""},
		{"get unknown agent", subjects.StateGetAgent, &busv1.GetAgentRequest{Name: "nobody"}, &busv1.GetAgentResponse{}, bus.ErrNotFound, ""},
		{"delete unknown agent", subjects.StateDeleteAgent, &busv1.DeleteAgentRequest{Name: "nobody"}, &busv1.DeleteAgentResponse{}, bus.ErrNotFound, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := call(t, r.nc, tc.op, tc.req, tc.resp)
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want code %s", err, tc.want.Code)
			}
			var be *bus.Error
			if errors.As(err, &be) && be.Field != tc.wantField {
				t.Errorf("field: got %q, want %q", be.Field, tc.wantField)
			}
		})
	}
	// The refused requests changed nothing.
	got := mustCall(t, r.nc, subjects.StateGetTask, &busv1.GetTaskRequest{Id: task.Id, Org: "org-a"}, &busv1.GetTaskResponse{})
	if !proto.Equal(got.Task, task) {
		t.Errorf("task after refused requests: got %v, want %v", got.Task, task)
	}
}

func TestMalformedPayload(t *testing.T) {
	r := startKV(t)
	for _, op := range []string{subjects.StateCreateTask, subjects.StateDispatch, subjects.StatePutAgent} {
		t.Run(op, func(t *testing.T) {
			reply, err := r.nc.Request(names.State(op), []byte{0xff, 0xff, 0xff}, 5*time.Second)
			if err != nil {
				t.Fatalf("request: %v", err)
			}
			if got := reply.Header.Get(bus.HeaderErrorCode); got != bus.CodeInvalidArgument {
				t.Errorf("error code: got %q, want %q", got, bus.CodeInvalidArgument)
			}
		})
	}
	// The service keeps answering.
	got := mustCall(t, r.nc, subjects.StateCreateTask, newTask("org"), &busv1.CreateTaskResponse{})
	if !got.Created {
		t.Errorf("create after malformed requests: got created=false, want true")
	}
}

func TestIdempotentCreateOverTheBus(t *testing.T) {
	r := startKV(t)
	c := collect(t, r.nc, names.TaskEventsOfType("created"))
	req := newTask("org")
	req.Task.IdempotencyKey = "k1"
	first := mustCall(t, r.nc, subjects.StateCreateTask, req, &busv1.CreateTaskResponse{})
	second := mustCall(t, r.nc, subjects.StateCreateTask, req, &busv1.CreateTaskResponse{})
	if !first.Created || second.Created || first.Task.Id != second.Task.Id {
		t.Errorf("got %s created=%v then %s created=%v, want one task created once", first.Task.Id, first.Created, second.Task.Id, second.Created)
	}
	// A third, different task proves the bus is flowing: the duplicate
	// published no created event before it.
	third := mustCall(t, r.nc, subjects.StateCreateTask, newTask("org"), &busv1.CreateTaskResponse{})
	msgs := c.wait(t, 2)
	if len(msgs) != 2 || !strings.Contains(msgs[1].Subject, third.Task.Id) {
		t.Errorf("created events: got %d (%v), want 2, the second of %s", len(msgs), msgs, third.Task.Id)
	}
}

func TestConcurrentRequests(t *testing.T) {
	r := startKV(t)
	const n = 40
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var resp busv1.CreateTaskResponse
			if err := bus.Request(context.Background(), r.nc, names.State(subjects.StateCreateTask), newTask("load"), &resp); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("create: %v", err)
	}
	list := mustCall(t, r.nc, subjects.StateListTasks, &busv1.ListTasksRequest{Org: "load", PageSize: 100}, &busv1.ListTasksResponse{})
	if len(list.Tasks) != n {
		t.Errorf("tasks: got %d, want %d", len(list.Tasks), n)
	}
}

func TestAgentEvents(t *testing.T) {
	r := startKV(t)
	c := collect(t, r.nc, names.AgentEvents())
	mustCall(t, r.nc, subjects.StatePutSkill, &busv1.PutSkillRequest{Skill: &agentmeshv1.Skill{Name: "prose"}, Create: true}, &busv1.PutSkillResponse{})
	put := mustCall(t, r.nc, subjects.StatePutAgent, &busv1.PutAgentRequest{Agent: &agentmeshv1.Agent{Name: "writer", Skills: []string{"prose"}}, Create: true}, &busv1.PutAgentResponse{})
	if put.Agent.Version != 1 {
		t.Errorf("version: got %d, want 1", put.Agent.Version)
	}
	list := mustCall(t, r.nc, subjects.StateListAgents, &busv1.ListAgentsRequest{Skill: "prose"}, &busv1.ListAgentsResponse{})
	if len(list.Agents) != 1 {
		t.Errorf("agents with skill prose: got %d, want 1", len(list.Agents))
	}
	mustCall(t, r.nc, subjects.StateDeleteAgent, &busv1.DeleteAgentRequest{Name: "writer"}, &busv1.DeleteAgentResponse{})
	msgs := c.wait(t, 2)
	for i, wantDeleted := range []bool{false, true} {
		ev := &busv1.AgentEvent{}
		if err := bus.DecodeEvent(msgs[i].Data, ev); err != nil {
			t.Fatalf("agent event: %v", err)
		}
		if want := names.AgentEvent(subjects.SharedOrg, "writer"); msgs[i].Subject != want || ev.Deleted != wantDeleted || ev.GetAgent().GetName() != "writer" {
			t.Errorf("agent event %d: got %s %v, want %s deleted=%v", i, msgs[i].Subject, ev, want, wantDeleted)
		}
	}
}

// Stopping the service and the NATS server and starting both again on the
// same directory keeps every task and its history; the latest event of an
// unfinished task is republished at start-up.
func TestRestart(t *testing.T) {
	dir := t.TempDir()
	srv := natstest.Start(t, dir)
	svcNC := natstest.ConnectAs(t, srv, subjects.ServiceState)
	nc := natstest.Connect(t, srv)
	st := openKV(t, svcNC)
	r := startService(t, svcNC, nc, st)
	done := runTask(t, nc, "org")
	open := mustCall(t, nc, subjects.StateCreateTask, newTask("org"), &busv1.CreateTaskResponse{}).Task
	mustCall(t, nc, subjects.StateDispatch, &busv1.TransitionRequest{TaskId: open.Id, From: taskstate.Queued, NextAttempt: true}, &busv1.TransitionResponse{})

	r.stop()
	st.Close()
	nc.Close()
	svcNC.Close()
	srv.Stop()

	srv2 := natstest.Start(t, dir)
	svcNC2 := natstest.ConnectAs(t, srv2, subjects.ServiceState)
	nc2 := natstest.Connect(t, srv2)
	c := collect(t, nc2, names.TaskEventsOfType(">"))
	startService(t, svcNC2, nc2, openKV(t, svcNC2))

	got := mustCall(t, nc2, subjects.StateGetTask, &busv1.GetTaskRequest{Id: done.Id}, &busv1.GetTaskResponse{})
	if !proto.Equal(got.Task, done) {
		t.Errorf("task after restart: got %v, want %v", got.Task, done)
	}
	hist := mustCall(t, nc2, subjects.StateHistory, &busv1.HistoryRequest{TaskId: done.Id}, &busv1.HistoryResponse{})
	if len(hist.Events) != len(lifecycle) || hist.LastSeq != int64(len(lifecycle)) {
		t.Errorf("history after restart: got %d events, last %d, want %d", len(hist.Events), hist.LastSeq, len(lifecycle))
	}
	// Republished: the unfinished task's latest event (assigned, seq 3),
	// and nothing of the completed one.
	msgs := c.wait(t, 1)
	ev := &agentmeshv1.TaskEvent{}
	if err := bus.DecodeEvent(msgs[0].Data, ev); err != nil {
		t.Fatalf("republished event: %v", err)
	}
	if msgs[0].Subject != names.TaskEvent("org", open.Id, "assigned") || ev.Seq != 3 || msgs[0].Header.Get(jetstream.MsgIDHeader) != open.Id+":3" {
		t.Errorf("republished: got %s seq %d, want %s seq 3", msgs[0].Subject, ev.Seq, names.TaskEvent("org", open.Id, "assigned"))
	}
	// New work goes on from there.
	mv := mustCall(t, nc2, subjects.StateStart, &busv1.TransitionRequest{TaskId: open.Id, From: taskstate.Assigned, Attempt: 1}, &busv1.TransitionResponse{})
	if mv.Event.Seq != 4 {
		t.Errorf("seq after restart: got %d, want 4", mv.Event.Seq)
	}
}

func TestPostgresStore(t *testing.T) {
	st, err := pgstore.Open(context.Background(), pgtest.NewDatabase(t))
	if err != nil {
		t.Fatalf("pgstore.Open: %v", err)
	}
	t.Cleanup(func() { st.Close() })
	srv := natstest.Start(t)
	r := startService(t, natstest.ConnectAs(t, srv, subjects.ServiceState), natstest.Connect(t, srv), st)
	c := collect(t, r.nc, names.TaskEventsOfType(">"))
	task := runTask(t, r.nc, "org")
	checkEvents(t, c.wait(t, len(lifecycle)), "org", task.Id, lifecycle)
	_, err = call(t, r.nc, subjects.StateGetTask, &busv1.GetTaskRequest{Id: task.Id, Org: "other"}, &busv1.GetTaskResponse{})
	if !errors.Is(err, bus.ErrNotFound) {
		t.Errorf("get of another org: got %v, want not_found", err)
	}
}

func TestNewRejectsMissingDeps(t *testing.T) {
	srv := natstest.Start(t)
	nc := natstest.ConnectAs(t, srv, subjects.ServiceState)
	st := openKV(t, nc)
	tests := []struct {
		name string
		deps state.Deps
		want string
	}{
		{"no NC", state.Deps{Store: st, Log: testlog.New(t)}, "NC"},
		{"no Store", state.Deps{NC: nc, Log: testlog.New(t)}, "Store"},
		{"no Log", state.Deps{NC: nc, Store: st}, "Log"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := state.New(context.Background(), state.Config{}, tc.deps)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want an error naming %s", err, tc.want)
			}
		})
	}
	if _, err := state.New(context.Background(), state.Config{Prefix: "bad prefix"}, state.Deps{NC: nc, Store: st, Log: testlog.New(t)}); err == nil {
		t.Errorf("bad prefix: got nil error, want one")
	}
}

// The service answers the micro discovery requests.
func TestMicroPing(t *testing.T) {
	r := startKV(t)
	reply, err := r.nc.Request("$SRV.PING."+state.ServiceName, nil, 5*time.Second)
	if err != nil {
		t.Fatalf("ping: %v", err)
	}
	if !strings.Contains(string(reply.Data), state.ServiceName) {
		t.Errorf("ping reply: got %s, want it to name %s", reply.Data, state.ServiceName)
	}
}

// An agent may offer only skills of the catalogue: its org's or the shared
// ones; unknown names are refused, all of them named, nothing stored.
func TestAgentUnknownSkills(t *testing.T) {
	r := startKV(t)
	mustCall(t, r.nc, subjects.StatePutSkill, &busv1.PutSkillRequest{Skill: &agentmeshv1.Skill{Name: "shared-one"}, Create: true}, &busv1.PutSkillResponse{})
	mustCall(t, r.nc, subjects.StatePutSkill, &busv1.PutSkillRequest{Skill: &agentmeshv1.Skill{Name: "own", Org: "acme"}, Create: true}, &busv1.PutSkillResponse{})
	put := func(org string, create bool, skills ...string) error {
		return bus.Request(context.Background(), r.nc, names.State(subjects.StatePutAgent),
			&busv1.PutAgentRequest{Agent: &agentmeshv1.Agent{Name: "a", Org: org, Skills: skills}, Create: create}, &busv1.PutAgentResponse{})
	}
	err := put("acme", true, "own", "ghost", "shared-one", "phantom")
	var be *bus.Error
	if !errors.As(err, &be) || be.Code != bus.CodeInvalidArgument || be.Field != "agent.skills" ||
		!strings.Contains(be.Message, "ghost, phantom") || strings.Contains(be.Message, "shared-one") {
		t.Fatalf("unknown skills: got %v, want invalid_argument naming ghost, phantom", err)
	}
	if err := bus.Request(context.Background(), r.nc, names.State(subjects.StateGetAgent), &busv1.GetAgentRequest{Name: "a", Org: "acme"}, &busv1.GetAgentResponse{}); !errors.Is(err, bus.ErrNotFound) {
		t.Errorf("refused agent stored: %v", err)
	}
	if err := put("acme", true, "own", "shared-one"); err != nil {
		t.Fatalf("known skills: %v", err)
	}
	// An update is checked too; another org's skill is not the org's.
	if err := put("acme", false, "own", "ghost"); bus.CodeOf(err) != bus.CodeInvalidArgument {
		t.Errorf("update with an unknown skill: %v", err)
	}
	if err := put("globex", true, "own"); bus.CodeOf(err) != bus.CodeInvalidArgument {
		t.Errorf("another org's skill: %v", err)
	}
	// A shared agent sees only the shared catalogue.
	if err := put("", true, "own"); bus.CodeOf(err) != bus.CodeInvalidArgument {
		t.Errorf("shared agent offering an org's skill: %v", err)
	}
}
