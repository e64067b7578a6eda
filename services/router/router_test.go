package router

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/grpcretry"
	"github.com/agentmesh/agentmesh/pkg/natstest"
	"github.com/agentmesh/agentmesh/pkg/subjects"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"github.com/agentmesh/agentmesh/pkg/testlog"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"
)

func TestSubmitValidation(t *testing.T) {
	e := start(t, Config{MaxInputBytes: 100, MaxMetadataEntries: 2, MaxMetadataBytes: 40})
	ok := func(mod func(r *agentmeshv1.SubmitTaskRequest)) *agentmeshv1.SubmitTaskRequest {
		r := &agentmeshv1.SubmitTaskRequest{Input: "hello", Agent: "helper"}
		mod(r)
		return r
	}
	tests := []struct {
		name string
		req  *agentmeshv1.SubmitTaskRequest
		code codes.Code
		msg  string // the message starts with it
	}{
		{"no input", ok(func(r *agentmeshv1.SubmitTaskRequest) { r.Input = "" }), codes.InvalidArgument, "input: required"},
		{"blank input", ok(func(r *agentmeshv1.SubmitTaskRequest) { r.Input = " \n\t" }), codes.InvalidArgument, "input: required"},
		{"input over limit", ok(func(r *agentmeshv1.SubmitTaskRequest) { r.Input = strings.Repeat("x", 101) }), codes.ResourceExhausted, "input: 101 bytes is over the limit of 100 bytes"},
		{"agent and skills", ok(func(r *agentmeshv1.SubmitTaskRequest) { r.RequiredSkills = []string{"sql"} }), codes.InvalidArgument, "agent: give an agent or required_skills, not both"},
		{"bad agent name", ok(func(r *agentmeshv1.SubmitTaskRequest) { r.Agent = "Bad Name" }), codes.InvalidArgument, "agent: must match [a-z0-9][a-z0-9_-]{0,62}"},
		{"agent name too long", ok(func(r *agentmeshv1.SubmitTaskRequest) { r.Agent = strings.Repeat("a", 64) }), codes.InvalidArgument, "agent: must match"},
		{"empty skill", ok(func(r *agentmeshv1.SubmitTaskRequest) { r.Agent, r.RequiredSkills = "", []string{"sql", ""} }), codes.InvalidArgument, "required_skills[1]: must not be empty"},
		{"skill with space", ok(func(r *agentmeshv1.SubmitTaskRequest) { r.Agent, r.RequiredSkills = "", []string{"a b"} }), codes.InvalidArgument, "required_skills[0]: must be lower-case letters"},
		{"upper-case skills are the same skill", ok(func(r *agentmeshv1.SubmitTaskRequest) { r.Agent, r.RequiredSkills = "", []string{"sql", " SQL"} }), codes.InvalidArgument, "required_skills[1]: duplicate skill"},
		{"skill with a wildcard", ok(func(r *agentmeshv1.SubmitTaskRequest) { r.Agent, r.RequiredSkills = "", []string{"sql.*"} }), codes.InvalidArgument, "required_skills[0]: must be lower-case letters"},
		{"duplicate skill", ok(func(r *agentmeshv1.SubmitTaskRequest) { r.Agent, r.RequiredSkills = "", []string{"sql", "sql"} }), codes.InvalidArgument, "required_skills[1]: duplicate skill"},
		{"too many skills", ok(func(r *agentmeshv1.SubmitTaskRequest) {
			r.Agent = ""
			for i := range 65 {
				r.RequiredSkills = append(r.RequiredSkills, fmt.Sprint("s", i))
			}
		}), codes.ResourceExhausted, "required_skills: 65 skills is over the limit of 64"},
		{"unknown priority", ok(func(r *agentmeshv1.SubmitTaskRequest) { r.Priority = 9 }), codes.InvalidArgument, "priority: unknown value 9"},
		{"negative priority", ok(func(r *agentmeshv1.SubmitTaskRequest) { r.Priority = -1 }), codes.InvalidArgument, "priority: unknown value -1"},
		{"too many metadata entries", ok(func(r *agentmeshv1.SubmitTaskRequest) { r.Metadata = map[string]string{"a": "1", "b": "2", "c": "3"} }), codes.ResourceExhausted, "metadata: 3 entries is over the limit of 2"},
		{"metadata too large", ok(func(r *agentmeshv1.SubmitTaskRequest) { r.Metadata = map[string]string{"a": strings.Repeat("v", 40)} }), codes.ResourceExhausted, "metadata: 41 bytes is over the limit of 40 bytes"},
		{"empty metadata key", ok(func(r *agentmeshv1.SubmitTaskRequest) { r.Metadata = map[string]string{"": "v"} }), codes.InvalidArgument, "metadata: keys must not be empty"},
		{"title too long", ok(func(r *agentmeshv1.SubmitTaskRequest) { r.Title = strings.Repeat("t", 1025) }), codes.ResourceExhausted, "title: 1025 bytes is over the limit of 1024 bytes"},
		{"title with newline", ok(func(r *agentmeshv1.SubmitTaskRequest) { r.Title = "a\nb" }), codes.InvalidArgument, "title: must not contain control characters"},
		{"idempotency key too long", ok(func(r *agentmeshv1.SubmitTaskRequest) { r.IdempotencyKey = strings.Repeat("k", 257) }), codes.ResourceExhausted, "idempotency_key: 257 bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := e.tasks.SubmitTask(testCtx(t), tt.req)
			st := status.Convert(err)
			if st.Code() != tt.code || !strings.HasPrefix(st.Message(), tt.msg) {
				t.Fatalf("got %v %q, want %v %q...", st.Code(), st.Message(), tt.code, tt.msg)
			}
		})
	}
	if n := e.fake.count("match") + e.fake.count("create"); n != 0 {
		t.Errorf("invalid requests reached the bus %d times, want 0", n)
	}
}

func TestOtherValidation(t *testing.T) {
	e := start(t, Config{})
	tests := []struct {
		name string
		call func(ctx context.Context) error
		code codes.Code
		msg  string
	}{
		{"get without id", func(ctx context.Context) error {
			_, err := e.tasks.GetTask(ctx, &agentmeshv1.GetTaskRequest{})
			return err
		}, codes.InvalidArgument, "id: required"},
		{"get with a subject wildcard", func(ctx context.Context) error {
			_, err := e.tasks.GetTask(ctx, &agentmeshv1.GetTaskRequest{Id: "a.>"})
			return err
		}, codes.InvalidArgument, "id: malformed task id"},
		{"list page size", func(ctx context.Context) error {
			_, err := e.tasks.ListTasks(ctx, &agentmeshv1.ListTasksRequest{PageSize: 1001})
			return err
		}, codes.InvalidArgument, "page_size: must be between 0 and 1000"},
		{"list negative page size", func(ctx context.Context) error {
			_, err := e.tasks.ListTasks(ctx, &agentmeshv1.ListTasksRequest{PageSize: -1})
			return err
		}, codes.InvalidArgument, "page_size: must be between 0 and 1000"},
		{"list unknown status", func(ctx context.Context) error {
			_, err := e.tasks.ListTasks(ctx, &agentmeshv1.ListTasksRequest{Statuses: []agentmeshv1.TaskStatus{42}})
			return err
		}, codes.InvalidArgument, "statuses[0]: unknown value 42"},
		{"list bad agent", func(ctx context.Context) error {
			_, err := e.tasks.ListTasks(ctx, &agentmeshv1.ListTasksRequest{Agent: "A!"})
			return err
		}, codes.InvalidArgument, "agent: must match"},
		{"list reversed time range", func(ctx context.Context) error {
			now := time.Now()
			_, err := e.tasks.ListTasks(ctx, &agentmeshv1.ListTasksRequest{
				CreatedAfter: timestamppb.New(now), CreatedBefore: timestamppb.New(now.Add(-time.Hour))})
			return err
		}, codes.InvalidArgument, "created_before: must be after created_after"},
		{"cancel reason too long", func(ctx context.Context) error {
			_, err := e.tasks.CancelTask(ctx, &agentmeshv1.CancelTaskRequest{Id: "x", Reason: strings.Repeat("r", 5000)})
			return err
		}, codes.ResourceExhausted, "reason: 5000 bytes is over the limit of 4096 bytes"},
		{"history negative cursor", func(ctx context.Context) error {
			_, err := e.tasks.GetTaskHistory(ctx, &agentmeshv1.GetTaskHistoryRequest{Id: "x", AfterSeq: -1})
			return err
		}, codes.InvalidArgument, "after_seq: must not be negative"},
		{"history limit", func(ctx context.Context) error {
			_, err := e.tasks.GetTaskHistory(ctx, &agentmeshv1.GetTaskHistoryRequest{Id: "x", Limit: 5000})
			return err
		}, codes.InvalidArgument, "limit: must be between 0 and 1000"},
		{"watch without id", func(ctx context.Context) error {
			s, err := e.tasks.WatchTask(ctx, &agentmeshv1.WatchTaskRequest{})
			if err != nil {
				return err
			}
			_, err = s.Recv()
			return err
		}, codes.InvalidArgument, "id: required"},
		{"create agent without agent", func(ctx context.Context) error {
			_, err := e.agents.CreateAgent(ctx, &agentmeshv1.CreateAgentRequest{})
			return err
		}, codes.InvalidArgument, "agent: required"},
		{"create agent without name", func(ctx context.Context) error {
			_, err := e.agents.CreateAgent(ctx, &agentmeshv1.CreateAgentRequest{Agent: &agentmeshv1.Agent{}})
			return err
		}, codes.InvalidArgument, "agent.name: required"},
		{"create agent bad name", func(ctx context.Context) error {
			_, err := e.agents.CreateAgent(ctx, &agentmeshv1.CreateAgentRequest{Agent: &agentmeshv1.Agent{Name: "-x"}})
			return err
		}, codes.InvalidArgument, "agent.name: must match"},
		{"update agent negative version", func(ctx context.Context) error {
			_, err := e.agents.UpdateAgent(ctx, &agentmeshv1.UpdateAgentRequest{Agent: &agentmeshv1.Agent{Name: "x"}, ExpectedVersion: -1})
			return err
		}, codes.InvalidArgument, "expected_version: must not be negative"},
		{"get agent without name", func(ctx context.Context) error {
			_, err := e.agents.GetAgent(ctx, &agentmeshv1.GetAgentRequest{})
			return err
		}, codes.InvalidArgument, "name: required"},
		{"list agents page size", func(ctx context.Context) error {
			_, err := e.agents.ListAgents(ctx, &agentmeshv1.ListAgentsRequest{PageSize: 2000})
			return err
		}, codes.InvalidArgument, "page_size: must be between 0 and 1000"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := status.Convert(tt.call(testCtx(t)))
			if st.Code() != tt.code || !strings.HasPrefix(st.Message(), tt.msg) {
				t.Fatalf("got %v %q, want %v %q...", st.Code(), st.Message(), tt.code, tt.msg)
			}
		})
	}
}

func TestRequestTooLarge(t *testing.T) {
	e := start(t, Config{MaxRequestBytes: 1 << 10})
	_, err := e.tasks.SubmitTask(testCtx(t), &agentmeshv1.SubmitTaskRequest{Agent: "helper", Input: strings.Repeat("x", 2<<10)})
	if got := status.Code(err); got != codes.ResourceExhausted {
		t.Fatalf("got %v (%v), want ResourceExhausted", got, err)
	}
}

func TestToStatus(t *testing.T) {
	log := testlog.New(t)
	tests := []struct {
		name string
		err  error
		code codes.Code
		msg  string
	}{
		{"invalid argument with field", bus.FieldError("input", "required"), codes.InvalidArgument, "input: required"},
		{"not found", bus.Errorf(bus.CodeNotFound, "task %q not found", "X"), codes.NotFound, `task "X" not found`},
		{"already exists", bus.Errorf(bus.CodeAlreadyExists, "agent exists"), codes.AlreadyExists, "agent exists"},
		{"failed precondition", bus.Errorf(bus.CodeFailedPrecondition, "nope"), codes.FailedPrecondition, "nope"},
		{"conflict", bus.Errorf(bus.CodeConflict, "lost a race"), codes.Aborted, "lost a race"},
		{"resource exhausted", &bus.Error{Code: bus.CodeResourceExhausted, Field: "input", Message: "too big"}, codes.ResourceExhausted, "input: too big"},
		{"unavailable", bus.Errorf(bus.CodeUnavailable, "no service answers am.state.task.get"), codes.Unavailable, "no service answers am.state.task.get"},
		{"wrapped bus error", fmt.Errorf("create task: %w", bus.Errorf(bus.CodeNotFound, "gone")), codes.NotFound, "gone"},
		{"bus internal hides its message", bus.Errorf(bus.CodeInternal, "pq: connection refused at 10.0.0.3"), codes.Internal, "internal error"},
		{"unknown bus code", bus.Errorf("weird", "secret"), codes.Internal, "internal error"},
		{"plain error hides its message", errors.New("disk on fire at /var/lib"), codes.Internal, "internal error"},
		{"code without message", &bus.Error{Code: bus.CodeNotFound}, codes.NotFound, "not_found"},
		{"context cancelled", fmt.Errorf("x: %w", context.Canceled), codes.Canceled, "request cancelled"},
		{"deadline", context.DeadlineExceeded, codes.DeadlineExceeded, "deadline exceeded"},
		{"status passes through", status.Error(codes.Unauthenticated, "who"), codes.Unauthenticated, "who"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := status.Convert(toStatus(log, "Test", tt.err))
			if st.Code() != tt.code || st.Message() != tt.msg {
				t.Fatalf("got %v %q, want %v %q", st.Code(), st.Message(), tt.code, tt.msg)
			}
		})
	}
	t.Run("invalid argument carries a field violation", func(t *testing.T) {
		st := status.Convert(toStatus(log, "Test", bus.FieldError("priority", "unknown value 9")))
		var got []string
		for _, d := range st.Details() {
			if br, ok := d.(*errdetails.BadRequest); ok {
				for _, v := range br.FieldViolations {
					got = append(got, v.Field+"="+v.Description)
				}
			}
		}
		if len(got) != 1 || got[0] != "priority=unknown value 9" {
			t.Fatalf("got field violations %v, want [priority=unknown value 9]", got)
		}
	})
	t.Run("unavailable carries retry info", func(t *testing.T) {
		err := toStatus(log, "Test", bus.Errorf(bus.CodeUnavailable, "no service answers am.state.task.get"))
		if got := grpcretry.Pushback(err); got != RetryDelay {
			t.Fatalf("got retry delay %v, want %v", got, RetryDelay)
		}
	})
	if toStatus(log, "Test", nil) != nil {
		t.Fatal("toStatus(nil) is not nil")
	}
}

func TestAuth(t *testing.T) {
	e := start(t, Config{APIKeys: map[string]string{"k-acme": "acme", "k-globex": "globex"}})
	task := e.fake.AddTask(&agentmeshv1.Task{Org: "acme", Agent: "helper", Input: "x"})

	tests := []struct {
		name string
		ctx  func(context.Context) context.Context
		code codes.Code
	}{
		{"no key", func(ctx context.Context) context.Context { return ctx }, codes.Unauthenticated},
		{"unknown bearer key", func(ctx context.Context) context.Context { return withKey(ctx, "authorization", "Bearer nope") }, codes.Unauthenticated},
		{"empty bearer", func(ctx context.Context) context.Context { return withKey(ctx, "authorization", "Bearer ") }, codes.Unauthenticated},
		{"basic scheme", func(ctx context.Context) context.Context { return withKey(ctx, "authorization", "Basic k-acme") }, codes.Unauthenticated},
		{"bearer key of the org", func(ctx context.Context) context.Context { return withKey(ctx, "authorization", "Bearer k-acme") }, codes.OK},
		{"lower-case bearer", func(ctx context.Context) context.Context { return withKey(ctx, "authorization", "bearer k-acme") }, codes.OK},
		{"x-api-key", func(ctx context.Context) context.Context { return withKey(ctx, "x-api-key", "k-acme") }, codes.OK},
		{"key of another org sees no task", func(ctx context.Context) context.Context { return withKey(ctx, "x-api-key", "k-globex") }, codes.NotFound},
		// Different keys at once are refused, whichever comes first: a proxy
		// in front may have checked the other one.
		{"two bearer keys", func(ctx context.Context) context.Context {
			return withKey(withKey(ctx, "authorization", "Bearer k-acme"), "authorization", "Bearer k-globex")
		}, codes.Unauthenticated},
		{"bearer and another x-api-key", func(ctx context.Context) context.Context {
			return withKey(withKey(ctx, "authorization", "Bearer k-acme"), "x-api-key", "k-globex")
		}, codes.Unauthenticated},
		{"bearer and an unknown x-api-key", func(ctx context.Context) context.Context {
			return withKey(withKey(ctx, "x-api-key", "nope"), "authorization", "Bearer k-acme")
		}, codes.Unauthenticated},
		{"the same key twice", func(ctx context.Context) context.Context {
			return withKey(withKey(ctx, "authorization", "Bearer k-acme"), "x-api-key", "k-acme")
		}, codes.OK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := tt.ctx(testCtx(t))
			_, err := e.tasks.GetTask(ctx, &agentmeshv1.GetTaskRequest{Id: task.Id})
			if got := status.Code(err); got != tt.code {
				t.Fatalf("GetTask: got %v (%v), want %v", got, err, tt.code)
			}
			if tt.code != codes.Unauthenticated {
				return
			}
			s, err := e.tasks.WatchTask(ctx, &agentmeshv1.WatchTaskRequest{Id: task.Id})
			if err == nil {
				_, err = s.Recv()
			}
			if got := status.Code(err); got != codes.Unauthenticated {
				t.Fatalf("WatchTask: got %v, want Unauthenticated", got)
			}
		})
	}

	t.Run("org reaches state", func(t *testing.T) {
		ctx := withKey(testCtx(t), "x-api-key", "k-globex")
		resp, err := e.tasks.SubmitTask(ctx, &agentmeshv1.SubmitTaskRequest{Agent: "helper", Input: "hi"})
		if err != nil {
			t.Fatal(err)
		}
		if resp.Task.Org != "globex" {
			t.Fatalf("got org %q, want globex", resp.Task.Org)
		}
	})

	t.Run("health needs no key", func(t *testing.T) {
		resp, err := healthpb.NewHealthClient(e.conn).Check(testCtx(t), &healthpb.HealthCheckRequest{Service: "agentmesh.v1.TaskService"})
		if err != nil {
			t.Fatal(err)
		}
		if resp.Status != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("got %v, want SERVING", resp.Status)
		}
	})

	t.Run("reflection needs no key", func(t *testing.T) {
		stream, err := reflectionpb.NewServerReflectionClient(e.conn).ServerReflectionInfo(testCtx(t))
		if err != nil {
			t.Fatal(err)
		}
		if err := stream.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
			t.Fatal(err)
		}
		resp, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, s := range resp.GetListServicesResponse().GetService() {
			got = append(got, s.Name)
		}
		for _, want := range []string{"agentmesh.v1.TaskService", "agentmesh.v1.AgentService", "grpc.health.v1.Health"} {
			if !contains(got, want) {
				t.Errorf("reflection lists %v, want %s among them", got, want)
			}
		}
	})
}

func TestDevModeOrg(t *testing.T) {
	e := start(t, Config{})
	resp, err := e.tasks.SubmitTask(testCtx(t), &agentmeshv1.SubmitTaskRequest{Agent: "helper", Input: "hi"})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Task.Org != DefaultOrg {
		t.Fatalf("got org %q, want %q", resp.Task.Org, DefaultOrg)
	}
}

func TestSubmit(t *testing.T) {
	e := start(t, Config{})
	t.Run("by agent", func(t *testing.T) {
		resp, err := e.tasks.SubmitTask(testCtx(t), &agentmeshv1.SubmitTaskRequest{
			Title: "t", Input: "hello", Agent: "helper", Metadata: map[string]string{"k": "v"}, IdempotencyKey: "idem-1",
		})
		if err != nil {
			t.Fatal(err)
		}
		if !resp.Created || resp.Task.Id == "" || resp.Task.Status != taskstate.Queued {
			t.Fatalf("got %v, want a created queued task", resp)
		}
		e.fake.mu.Lock()
		got := e.fake.creates[len(e.fake.creates)-1]
		e.fake.mu.Unlock()
		if got.Agent != "helper" || got.AgentSpec.GetName() != "helper" || got.Priority != agentmeshv1.Priority_PRIORITY_NORMAL ||
			got.Title != "t" || got.Input != "hello" || got.Metadata["k"] != "v" || got.IdempotencyKey != "idem-1" || got.Org != DefaultOrg {
			t.Fatalf("state got %v", got)
		}
	})
	t.Run("by skills", func(t *testing.T) {
		resp, err := e.tasks.SubmitTask(testCtx(t), &agentmeshv1.SubmitTaskRequest{
			Input: "hello", RequiredSkills: []string{"sql"}, Priority: agentmeshv1.Priority_PRIORITY_HIGH,
		})
		if err != nil {
			t.Fatal(err)
		}
		if resp.Task.Agent != "helper" || resp.Task.Priority != agentmeshv1.Priority_PRIORITY_HIGH {
			t.Fatalf("got agent %q priority %v, want helper HIGH", resp.Task.Agent, resp.Task.Priority)
		}
	})
	t.Run("neither agent nor skills takes the registry's default", func(t *testing.T) {
		resp, err := e.tasks.SubmitTask(testCtx(t), &agentmeshv1.SubmitTaskRequest{Input: "hello"})
		if err != nil {
			t.Fatal(err)
		}
		e.fake.mu.Lock()
		m := e.fake.matches[len(e.fake.matches)-1]
		e.fake.mu.Unlock()
		if m.Agent != "" || len(m.RequiredSkills) != 0 || resp.Task.Agent != "assistant" {
			t.Fatalf("match got %v, task agent %q; want an empty match and the default agent", m, resp.Task.Agent)
		}
	})
	t.Run("no default agent", func(t *testing.T) {
		e.fake.mu.Lock()
		delete(e.fake.agents, "assistant")
		e.fake.mu.Unlock()
		_, err := e.tasks.SubmitTask(testCtx(t), &agentmeshv1.SubmitTaskRequest{Input: "hello"})
		st := status.Convert(err)
		if st.Code() != codes.FailedPrecondition || !strings.HasPrefix(st.Message(), "agent: no default agent") {
			t.Fatalf("got %v %q, want FailedPrecondition about the default agent", st.Code(), st.Message())
		}
	})
	t.Run("unknown agent", func(t *testing.T) {
		_, err := e.tasks.SubmitTask(testCtx(t), &agentmeshv1.SubmitTaskRequest{Input: "x", Agent: "ghost"})
		st := status.Convert(err)
		if st.Code() != codes.FailedPrecondition || !strings.Contains(st.Message(), `"ghost"`) {
			t.Fatalf("got %v %q, want FailedPrecondition naming ghost", st.Code(), st.Message())
		}
	})
	t.Run("unknown skill", func(t *testing.T) {
		_, err := e.tasks.SubmitTask(testCtx(t), &agentmeshv1.SubmitTaskRequest{Input: "x", RequiredSkills: []string{"sql", "juggling"}})
		st := status.Convert(err)
		if st.Code() != codes.FailedPrecondition || !strings.Contains(st.Message(), "juggling") {
			t.Fatalf("got %v %q, want FailedPrecondition naming juggling", st.Code(), st.Message())
		}
	})
}

func TestStateUnavailable(t *testing.T) {
	srv := natstest.Start(t)
	nc := natstest.ConnectAs(t, srv, subjects.ServiceRouter)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The bus streams exist, as in any deployment: none of them may count
	// as interest in a request subject (the audit stream once did, and a
	// request to a state service that was down waited for its timeout).
	// (The state service creates them; the router's identity may not.)
	js, err := jetstream.New(natstest.Connect(t, srv))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bus.EnsureStreams(ctx, js, names, bus.StreamOptions{Memory: true}); err != nil {
		t.Fatal(err)
	}
	svc, err := New(ctx, Config{Listen: "127.0.0.1:0"}, Deps{NC: nc, Log: testlog.New(t)})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	defer func() { cancel(); <-done }()
	conn, err := grpc.NewClient(svc.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_, err = agentmeshv1.NewTaskServiceClient(conn).GetTask(testCtx(t), &agentmeshv1.GetTaskRequest{Id: "01ABC"})
	st := status.Convert(err)
	// "no service answers" is NATS's no-responders, at once; a timeout
	// would say "timed out waiting for".
	if st.Code() != codes.Unavailable || !strings.Contains(st.Message(), "no service answers") {
		t.Fatalf("got %v %q, want Unavailable: no service answers", st.Code(), st.Message())
	}
	if grpcretry.Pushback(err) <= 0 {
		t.Errorf("no RetryInfo detail on %v", err)
	}
}

func TestTaskOps(t *testing.T) {
	e := start(t, Config{})
	task := e.fake.AddTask(&agentmeshv1.Task{Agent: "helper", Input: "x"})
	done := e.fake.AddTask(&agentmeshv1.Task{Agent: "helper", Input: "y"})
	e.fake.Record(done.Id, &agentmeshv1.TaskEvent{Type: agentmeshv1.EventType_EVENT_TYPE_STATUS, Status: taskstate.Cancelled}, false)

	t.Run("get", func(t *testing.T) {
		resp, err := e.tasks.GetTask(testCtx(t), &agentmeshv1.GetTaskRequest{Id: task.Id})
		if err != nil || resp.Task.Id != task.Id {
			t.Fatalf("got %v, %v", resp, err)
		}
	})
	t.Run("get unknown", func(t *testing.T) {
		_, err := e.tasks.GetTask(testCtx(t), &agentmeshv1.GetTaskRequest{Id: "01NOPE"})
		st := status.Convert(err)
		if st.Code() != codes.NotFound || !strings.Contains(st.Message(), "01NOPE") {
			t.Fatalf("got %v %q, want NotFound naming the id", st.Code(), st.Message())
		}
	})
	t.Run("list", func(t *testing.T) {
		resp, err := e.tasks.ListTasks(testCtx(t), &agentmeshv1.ListTasksRequest{Agent: "helper"})
		if err != nil || len(resp.Tasks) != 2 {
			t.Fatalf("got %v, %v; want 2 tasks", resp, err)
		}
	})
	t.Run("history", func(t *testing.T) {
		resp, err := e.tasks.GetTaskHistory(testCtx(t), &agentmeshv1.GetTaskHistoryRequest{Id: task.Id, AfterSeq: 1})
		if err != nil || len(resp.Events) != 1 || resp.Events[0].Seq != 2 {
			t.Fatalf("got %v, %v; want event 2", resp, err)
		}
	})
	t.Run("cancel", func(t *testing.T) {
		resp, err := e.tasks.CancelTask(testCtx(t), &agentmeshv1.CancelTaskRequest{Id: task.Id, Reason: "changed my mind"})
		if err != nil || resp.Task.Status != taskstate.Cancelled || resp.Task.Error != "changed my mind" {
			t.Fatalf("got %v, %v; want cancelled with the reason", resp, err)
		}
	})
	t.Run("cancel finished", func(t *testing.T) {
		_, err := e.tasks.CancelTask(testCtx(t), &agentmeshv1.CancelTaskRequest{Id: done.Id})
		st := status.Convert(err)
		if st.Code() != codes.FailedPrecondition || !strings.Contains(st.Message(), "already finished") {
			t.Fatalf("got %v %q, want FailedPrecondition saying it already finished", st.Code(), st.Message())
		}
	})
	t.Run("cancel unknown", func(t *testing.T) {
		_, err := e.tasks.CancelTask(testCtx(t), &agentmeshv1.CancelTaskRequest{Id: "01NOPE"})
		if got := status.Code(err); got != codes.NotFound {
			t.Fatalf("got %v, want NotFound", got)
		}
	})
}

func TestAgentOps(t *testing.T) {
	e := start(t, Config{})
	t.Run("create", func(t *testing.T) {
		resp, err := e.agents.CreateAgent(testCtx(t), &agentmeshv1.CreateAgentRequest{Agent: &agentmeshv1.Agent{Name: "writer", Skills: []string{"prose"}}})
		if err != nil || resp.Agent.Name != "writer" || resp.Agent.Version != 1 {
			t.Fatalf("got %v, %v", resp, err)
		}
	})
	t.Run("create again", func(t *testing.T) {
		_, err := e.agents.CreateAgent(testCtx(t), &agentmeshv1.CreateAgentRequest{Agent: &agentmeshv1.Agent{Name: "writer"}})
		if got := status.Code(err); got != codes.AlreadyExists {
			t.Fatalf("got %v, want AlreadyExists", got)
		}
	})
	t.Run("get", func(t *testing.T) {
		resp, err := e.agents.GetAgent(testCtx(t), &agentmeshv1.GetAgentRequest{Name: "writer"})
		if err != nil || resp.Agent.GetSkills()[0] != "prose" {
			t.Fatalf("got %v, %v", resp, err)
		}
	})
	t.Run("get unknown", func(t *testing.T) {
		_, err := e.agents.GetAgent(testCtx(t), &agentmeshv1.GetAgentRequest{Name: "ghost"})
		if got := status.Code(err); got != codes.NotFound {
			t.Fatalf("got %v, want NotFound", got)
		}
	})
	t.Run("no registry for delete", func(t *testing.T) {
		_, err := e.agents.DeleteAgent(testCtx(t), &agentmeshv1.DeleteAgentRequest{Name: "writer"})
		if got := status.Code(err); got != codes.Unavailable {
			t.Fatalf("got %v, want Unavailable", got)
		}
	})
}

func TestRunShutdown(t *testing.T) {
	e := start(t, Config{WatchRefetch: time.Minute})
	task := e.fake.AddTask(&agentmeshv1.Task{Agent: "helper", Input: "x"})
	health := healthpb.NewHealthClient(e.conn)
	resp, err := health.Check(testCtx(t), &healthpb.HealthCheckRequest{})
	if err != nil || resp.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health: got %v, %v; want SERVING", resp, err)
	}
	stream, err := e.tasks.WatchTask(testCtx(t), &agentmeshv1.WatchTaskRequest{Id: task.Id})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := stream.Recv(); err != nil {
			t.Fatal(err)
		}
	}
	// With a watch open, Run must still return promptly: the watch ends
	// with Unavailable and the cursor to reconnect with.
	start := time.Now()
	e.stop(t)
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Run took %v to return, want well under the hard-stop timer", d)
	}
	_, err = stream.Recv()
	st := status.Convert(err)
	if st.Code() != codes.Unavailable || !strings.Contains(st.Message(), "after_seq=2") {
		t.Fatalf("watch ended with %v %q, want Unavailable naming after_seq=2", st.Code(), st.Message())
	}
	if _, err := health.Check(testCtx(t), &healthpb.HealthCheckRequest{}); err == nil {
		t.Fatal("health answered after shutdown")
	}
}

func TestNewRejects(t *testing.T) {
	srv := natstest.Start(t)
	nc := natstest.Connect(t, srv)
	log := testlog.New(t)
	tests := []struct {
		name string
		cfg  Config
		deps Deps
		want string
	}{
		{"no conn", Config{}, Deps{Log: log}, "Deps.NC is required"},
		{"no log", Config{}, Deps{NC: nc}, "Deps.Log is required"},
		{"bad prefix", Config{Prefix: "a b"}, Deps{NC: nc, Log: log}, "invalid prefix"},
		{"negative limit", Config{MaxInputBytes: -1}, Deps{NC: nc, Log: log}, "MaxInputBytes must not be negative"},
		{"input over bus payload", Config{MaxInputBytes: bus.MaxPayload}, Deps{NC: nc, Log: log}, "bus payload limit"},
		{"empty org", Config{APIKeys: map[string]string{"k": ""}}, Deps{NC: nc, Log: log}, "empty key or org"},
		{"bad listen", Config{Listen: "nonsense"}, Deps{NC: nc, Log: log}, "listen on nonsense"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.cfg.Listen == "" {
				tt.cfg.Listen = "127.0.0.1:0"
			}
			_, err := New(context.Background(), tt.cfg, tt.deps)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v, want an error containing %q", err, tt.want)
			}
		})
	}
}
