package router

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"sync"
	"testing"
	"time"

	busv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/bus/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/natstest"
	"github.com/agentmesh/agentmesh/pkg/subjects"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"github.com/agentmesh/agentmesh/pkg/testlog"
	"github.com/nats-io/nats.go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// The tests run the router against a real nats-server. State and registry
// are answered by plain NATS responders below (real request/reply on the
// bus, protobuf payloads, errors as the micro services send them), backed
// by a small in-memory record.

var names = subjects.Must("")

// respond answers subject with fn, the way bus.Handler does: protobuf
// reply, or an error code header and a busv1.Error body.
func respond[Req, Resp proto.Message](t testing.TB, nc *nats.Conn, subject string, newReq func() Req, fn func(Req) (Resp, error)) {
	t.Helper()
	sub, err := nc.Subscribe(subject, func(m *nats.Msg) {
		req := newReq()
		if err := proto.Unmarshal(m.Data, req); err != nil {
			t.Errorf("%s: decode request: %v", subject, err)
			return
		}
		resp, err := fn(req)
		reply := nats.NewMsg(m.Reply)
		if err != nil {
			pe := bus.ToProto(err)
			reply.Header.Set(bus.HeaderErrorCode, pe.Code)
			reply.Data, _ = proto.Marshal(pe)
		} else {
			reply.Data, _ = proto.Marshal(resp)
		}
		_ = m.RespondMsg(reply)
	})
	if err != nil {
		t.Fatalf("subscribe %s: %v", subject, err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
}

// fakeBus is the record behind the responders, and what they were asked.
type fakeBus struct {
	t  testing.TB
	nc *nats.Conn

	mu       sync.Mutex
	agents   map[string]*agentmeshv1.Agent
	tasks    map[string]*agentmeshv1.Task
	events   map[string][]*agentmeshv1.TaskEvent
	nextID   int
	requests map[string]int
	matches  []*busv1.MatchRequest
	creates  []*agentmeshv1.Task
	orgs     []string // org of every state request
	agentReq []proto.Message
}

func newFakeBus(t testing.TB, nc *nats.Conn) *fakeBus {
	f := &fakeBus{
		t: t, nc: nc,
		agents: map[string]*agentmeshv1.Agent{
			"helper":    {Name: "helper", Skills: []string{"summarise", "sql"}, Version: 1},
			"assistant": {Name: "assistant", Version: 1},
		},
		tasks:    map[string]*agentmeshv1.Task{},
		events:   map[string][]*agentmeshv1.TaskEvent{},
		requests: map[string]int{},
	}
	respond(t, nc, names.Registry(subjects.RegistryMatch), func() *busv1.MatchRequest { return new(busv1.MatchRequest) },
		func(req *busv1.MatchRequest) (*busv1.MatchResponse, error) {
			f.mu.Lock()
			defer f.mu.Unlock()
			f.requests["match"]++
			f.matches = append(f.matches, req)
			if req.Agent == "" && len(req.RequiredSkills) == 0 {
				a, ok := f.agents["assistant"]
				if !ok {
					return nil, &bus.Error{Code: bus.CodeFailedPrecondition, Field: "agent", Message: "no default agent \"assistant\""}
				}
				return &busv1.MatchResponse{Agent: a}, nil
			}
			if req.Agent != "" {
				a, ok := f.agents[req.Agent]
				if !ok {
					return nil, bus.Errorf(bus.CodeNotFound, "agent %q not found", req.Agent)
				}
				return &busv1.MatchResponse{Agent: a}, nil
			}
			for _, a := range f.agents {
				ok := true
				for _, sk := range req.RequiredSkills {
					ok = ok && contains(a.Skills, sk)
				}
				if ok {
					return &busv1.MatchResponse{Agent: a}, nil
				}
			}
			return nil, bus.Errorf(bus.CodeFailedPrecondition, "no agent offers skill %q", req.RequiredSkills[len(req.RequiredSkills)-1])
		})
	respond(t, nc, names.State(subjects.StateCreateTask), func() *busv1.CreateTaskRequest { return new(busv1.CreateTaskRequest) },
		func(req *busv1.CreateTaskRequest) (*busv1.CreateTaskResponse, error) {
			f.mu.Lock()
			f.requests["create"]++
			f.creates = append(f.creates, req.Task)
			f.orgs = append(f.orgs, req.Task.Org)
			f.mu.Unlock()
			task := f.AddTask(req.Task)
			return &busv1.CreateTaskResponse{Task: task, Created: true}, nil
		})
	respond(t, nc, names.State(subjects.StateGetTask), func() *busv1.GetTaskRequest { return new(busv1.GetTaskRequest) },
		func(req *busv1.GetTaskRequest) (*busv1.GetTaskResponse, error) {
			f.mu.Lock()
			defer f.mu.Unlock()
			f.requests["get"]++
			f.orgs = append(f.orgs, req.Org)
			task, ok := f.tasks[req.Id]
			if !ok || (req.Org != "" && task.Org != req.Org) {
				return nil, bus.Errorf(bus.CodeNotFound, "task %q not found", req.Id)
			}
			return &busv1.GetTaskResponse{Task: proto.Clone(task).(*agentmeshv1.Task)}, nil
		})
	respond(t, nc, names.State(subjects.StateListTasks), func() *busv1.ListTasksRequest { return new(busv1.ListTasksRequest) },
		func(req *busv1.ListTasksRequest) (*busv1.ListTasksResponse, error) {
			f.mu.Lock()
			defer f.mu.Unlock()
			f.requests["list"]++
			f.orgs = append(f.orgs, req.Org)
			var out []*agentmeshv1.Task
			for _, task := range f.tasks {
				if task.Org == req.Org && (req.Agent == "" || task.Agent == req.Agent) {
					out = append(out, task)
				}
			}
			sort.Slice(out, func(i, j int) bool { return out[i].Id > out[j].Id })
			return &busv1.ListTasksResponse{Tasks: out}, nil
		})
	transition := func(req *busv1.TransitionRequest) (*busv1.TransitionResponse, error) {
		f.mu.Lock()
		f.requests["transition"]++
		task, ok := f.tasks[req.TaskId]
		f.mu.Unlock()
		if !ok || task.Org != req.Org {
			return nil, bus.Errorf(bus.CodeNotFound, "task %q not found", req.TaskId)
		}
		if err := taskstate.Check(task.Status, req.To); err != nil {
			return nil, bus.Errorf(bus.CodeFailedPrecondition, "task %s: %v", req.TaskId, err)
		}
		ev := f.Record(req.TaskId, &agentmeshv1.TaskEvent{Type: agentmeshv1.EventType_EVENT_TYPE_STATUS, Status: req.To, Reason: req.Reason}, true)
		f.mu.Lock()
		defer f.mu.Unlock()
		return &busv1.TransitionResponse{Task: proto.Clone(f.tasks[req.TaskId]).(*agentmeshv1.Task), Event: ev}, nil
	}
	// The router's two transition intents.
	for _, op := range []string{subjects.StateCancel, subjects.StateDecide} {
		respond(t, nc, names.State(op), func() *busv1.TransitionRequest { return new(busv1.TransitionRequest) }, transition)
	}
	history := func(req *busv1.HistoryRequest) (*busv1.HistoryResponse, error) {
		f.requests["history"]++
		task, ok := f.tasks[req.TaskId]
		if !ok || (req.Org != "" && task.Org != req.Org) {
			return nil, bus.Errorf(bus.CodeNotFound, "task %q not found", req.TaskId)
		}
		resp := &busv1.HistoryResponse{LastSeq: task.LastEventSeq, Status: task.Status}
		for _, ev := range f.events[req.TaskId] {
			if ev.Seq > req.AfterSeq && (req.Limit == 0 || len(resp.Events) < int(req.Limit)) {
				resp.Events = append(resp.Events, ev)
				resp.Status = ev.Status
			}
		}
		return resp, nil
	}
	respond(t, nc, names.State(subjects.StateHistory), func() *busv1.HistoryRequest { return new(busv1.HistoryRequest) },
		func(req *busv1.HistoryRequest) (*busv1.HistoryResponse, error) {
			f.mu.Lock()
			defer f.mu.Unlock()
			return history(req)
		})
	respond(t, nc, names.State(subjects.StateHistoryBatch), func() *busv1.HistoryBatchRequest { return new(busv1.HistoryBatchRequest) },
		func(req *busv1.HistoryBatchRequest) (*busv1.HistoryBatchResponse, error) {
			f.mu.Lock()
			defer f.mu.Unlock()
			f.requests["history.batch"]++
			resp := &busv1.HistoryBatchResponse{}
			for _, r := range req.Requests {
				h, err := history(r)
				if err != nil {
					resp.Items = append(resp.Items, &busv1.HistoryBatchItem{Error: bus.ToProto(err)})
					continue
				}
				resp.Items = append(resp.Items, &busv1.HistoryBatchItem{Response: h})
			}
			return resp, nil
		})
	respond(t, nc, names.Registry(subjects.RegistryGetAgent), func() *busv1.AgentOp { return new(busv1.AgentOp) },
		func(op *busv1.AgentOp) (*agentmeshv1.GetAgentResponse, error) {
			f.mu.Lock()
			defer f.mu.Unlock()
			req := op.GetGet()
			f.agentReq = append(f.agentReq, op)
			a, ok := f.agents[req.GetName()]
			if !ok || op.GetOrg() == "" {
				return nil, bus.Errorf(bus.CodeNotFound, "agent %q not found", req.GetName())
			}
			return &agentmeshv1.GetAgentResponse{Agent: a}, nil
		})
	respond(t, nc, names.Registry(subjects.RegistryCreateAgent), func() *busv1.AgentOp { return new(busv1.AgentOp) },
		func(op *busv1.AgentOp) (*agentmeshv1.CreateAgentResponse, error) {
			f.mu.Lock()
			defer f.mu.Unlock()
			req := op.GetCreate()
			f.agentReq = append(f.agentReq, op)
			if op.GetOrg() == "" || req == nil {
				return nil, bus.FieldError("org", "required")
			}
			if _, ok := f.agents[req.Agent.Name]; ok {
				return nil, bus.Errorf(bus.CodeAlreadyExists, "agent %q already exists", req.Agent.Name)
			}
			a := proto.Clone(req.Agent).(*agentmeshv1.Agent)
			a.Version = 1
			a.Org = op.GetOrg()
			f.agents[a.Name] = a
			return &agentmeshv1.CreateAgentResponse{Agent: a}, nil
		})
	return f
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// AddTask records a new task with its created and queued events (not
// published), as state would.
func (f *fakeBus) AddTask(t *agentmeshv1.Task) *agentmeshv1.Task {
	f.mu.Lock()
	f.nextID++
	task := proto.Clone(t).(*agentmeshv1.Task)
	task.Id = fmt.Sprintf("01TASK%04d", f.nextID)
	if task.Org == "" {
		task.Org = DefaultOrg
	}
	f.tasks[task.Id] = task
	f.mu.Unlock()
	f.Record(task.Id, &agentmeshv1.TaskEvent{Type: agentmeshv1.EventType_EVENT_TYPE_CREATED, Status: taskstate.Created}, false)
	f.Record(task.Id, &agentmeshv1.TaskEvent{Type: agentmeshv1.EventType_EVENT_TYPE_STATUS, Status: taskstate.Queued}, false)
	f.mu.Lock()
	defer f.mu.Unlock()
	return proto.Clone(f.tasks[task.Id]).(*agentmeshv1.Task)
}

// Record appends ev to the task's history (seq assigned) and publishes it
// on its event subject when publish is set.
func (f *fakeBus) Record(id string, ev *agentmeshv1.TaskEvent, publish bool) *agentmeshv1.TaskEvent {
	f.mu.Lock()
	task := f.tasks[id]
	ev = proto.Clone(ev).(*agentmeshv1.TaskEvent)
	ev.TaskId, ev.Org, ev.Time = id, task.Org, timestamppb.Now()
	ev.Seq = task.LastEventSeq + 1
	if ev.Type == agentmeshv1.EventType_EVENT_TYPE_STEP {
		ev.Status = task.Status
	} else {
		ev.FromStatus = task.Status
	}
	f.tasks[id] = taskstate.Apply(task, ev)
	f.events[id] = append(f.events[id], ev)
	f.mu.Unlock()
	if publish {
		f.Publish(ev)
	}
	return ev
}

// Publish sends ev on its event subject (again, if it was before).
func (f *fakeBus) Publish(ev *agentmeshv1.TaskEvent) {
	typ := subjects.EventStep
	if ev.Type != agentmeshv1.EventType_EVENT_TYPE_STEP {
		typ = subjects.StatusToken(ev.Status)
	}
	msg, err := bus.NewEventMsg(context.Background(), names.TaskEvent(ev.Org, ev.TaskId, typ), ev)
	if err != nil {
		f.t.Fatal(err)
	}
	if err := f.nc.PublishMsg(msg); err != nil {
		f.t.Errorf("publish: %v", err)
	}
	if err := f.nc.Flush(); err != nil {
		f.t.Errorf("flush: %v", err)
	}
}

func (f *fakeBus) count(op string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.requests[op]
}

// env is a running router over a real NATS server with the fake record.
type env struct {
	svc    *Service
	fake   *fakeBus
	conn   *grpc.ClientConn
	tasks  agentmeshv1.TaskServiceClient
	agents agentmeshv1.AgentServiceClient
	cancel context.CancelFunc
	done   chan error
}

func start(t testing.TB, cfg Config) *env {
	t.Helper()
	srv := natstest.Start(t)
	routerNC := natstest.ConnectAs(t, srv, subjects.ServiceRouter)
	fakeNC := natstest.Connect(t, srv)
	fake := newFakeBus(t, fakeNC)
	if err := fakeNC.Flush(); err != nil {
		t.Fatal(err)
	}
	if cfg.Listen == "" {
		cfg.Listen = "127.0.0.1:0"
	}
	ctx, cancel := context.WithCancel(context.Background())
	svc, err := New(ctx, cfg, Deps{NC: routerNC, Log: testlog.New(t)})
	if err != nil {
		cancel()
		t.Fatalf("New: %v", err)
	}
	e := &env{svc: svc, fake: fake, cancel: cancel, done: make(chan error, 1)}
	go func() { e.done <- svc.Run(ctx) }()
	t.Cleanup(func() { e.stop(t) })
	conn, err := grpc.NewClient(svc.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("grpc client: %v", err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	e.conn = conn
	e.tasks = agentmeshv1.NewTaskServiceClient(conn)
	e.agents = agentmeshv1.NewAgentServiceClient(conn)
	return e
}

// stop ends Run and checks that it returned nil in time.
func (e *env) stop(t testing.TB) {
	e.cancel()
	select {
	case err, ok := <-e.done:
		if ok && err != nil {
			t.Errorf("Run returned %v, want nil", err)
		}
		if ok {
			close(e.done)
		}
	case <-time.After(15 * time.Second):
		t.Errorf("Run did not return after cancel")
	}
}

func withKey(ctx context.Context, k, v string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, k, v)
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// recv reads the stream to its end and returns what came, and the error
// that ended it (nil for io.EOF).
func recvAll(stream grpc.ServerStreamingClient[agentmeshv1.WatchTaskResponse]) ([]*agentmeshv1.WatchTaskResponse, error) {
	var out []*agentmeshv1.WatchTaskResponse
	for {
		r, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, r)
	}
}
