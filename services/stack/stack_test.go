package stack_test

import (
	"context"
	"errors"
	"os"
	"slices"
	"testing"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/natstest"
	"github.com/agentmesh/agentmesh/pkg/poll"
	"github.com/agentmesh/agentmesh/pkg/scriptedmodel"
	"github.com/agentmesh/agentmesh/pkg/subjects"
	"github.com/agentmesh/agentmesh/pkg/testlog"
	"github.com/agentmesh/agentmesh/services/executor"
	"github.com/agentmesh/agentmesh/services/executor/child"
	"github.com/agentmesh/agentmesh/services/executor/sandbox"
	"github.com/agentmesh/agentmesh/services/stack"
	"github.com/nats-io/nats.go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

func TestMain(m *testing.M) {
	child.RunIfChild()
	os.Exit(m.Run())
}

// config is a stack's configuration for these tests: the executor runs
// this test binary as its agent child, unsandboxed, without a warm pool.
func config(t *testing.T) stack.Config {
	cfg := stack.Config{Log: testlog.New(t)}
	cfg.Router.Listen = "127.0.0.1:0"
	cfg.Executor = executor.Config{
		ChildCommand: []string{os.Args[0]}, Capacity: 2, WarmPool: -1, WallTime: time.Minute, DrainGrace: time.Second,
		Sandbox: sandbox.Config{Level: sandbox.None},
	}
	return cfg
}

// run runs st until the test ends.
func run(t *testing.T, st *stack.Stack) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- st.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	})
}

// `agentmesh dev` (New) builds every service of the table, in its order,
// over its embedded server, and serves the API.
func TestDevBuildsTheTable(t *testing.T) {
	cfg := config(t)
	cfg.DataDir, cfg.NATSPort = t.TempDir(), -1
	st, err := stack.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	run(t, st)
	if got := st.Names(); !slices.Equal(got, tableNames()) {
		t.Errorf("dev built %v, want the table's %v", got, tableNames())
	}
	conn := dialAPI(t, st.Addr())
	poll.Until(t, 10*time.Second, func() error {
		resp, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{})
		if err == nil && resp.Status != healthpb.HealthCheckResponse_SERVING {
			err = errors.New(resp.Status.String())
		}
		return err
	})
}

// `agentmesh <service>` (NewService) builds each service of the table
// alone, on its own identity's connection to one bus: the five started so,
// one by one in the table's order, run a task end to end.
func TestEachServiceAloneFromTheTable(t *testing.T) {
	srv := natstest.Start(t)
	cfg := config(t)
	cfg.Dial = func(_ context.Context, service string) (*nats.Conn, error) { return srv.ConnectAs(service) }
	cfg.Executor.Model.BaseURL, cfg.Executor.Model.Model = startModel(t), "scripted"
	var addr string
	for _, svc := range stack.Services() {
		s, err := stack.NewService(context.Background(), svc.Name, cfg)
		if err != nil {
			t.Fatalf("%s: %v", svc.Name, err)
		}
		if got := s.Names(); !slices.Equal(got, []string{svc.Name}) {
			t.Errorf("NewService(%s) built %v", svc.Name, got)
		}
		run(t, s)
		if a := s.Addr(); a != "" {
			addr = a
		}
	}
	conn := dialAPI(t, addr)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := agentmeshv1.NewAgentServiceClient(conn).CreateAgent(ctx, &agentmeshv1.CreateAgentRequest{Agent: &agentmeshv1.Agent{
		Name: "helper", SystemPrompt: "Help.", Tools: []string{"current_time"},
	}}); err != nil {
		t.Fatal(err)
	}
	tasks := agentmeshv1.NewTaskServiceClient(conn)
	sub, err := tasks.SubmitTask(ctx, &agentmeshv1.SubmitTaskRequest{Agent: "helper", Input: "what time is it?"})
	if err != nil {
		t.Fatal(err)
	}
	poll.Until(t, time.Minute, func() error {
		got, err := tasks.GetTask(ctx, &agentmeshv1.GetTaskRequest{Id: sub.GetTask().GetId()})
		if err != nil {
			return err
		}
		switch s := got.GetTask().GetStatus(); s {
		case agentmeshv1.TaskStatus_TASK_STATUS_COMPLETED:
		case agentmeshv1.TaskStatus_TASK_STATUS_FAILED, agentmeshv1.TaskStatus_TASK_STATUS_CANCELLED:
			t.Fatalf("task ended %s: %s", s, got.GetTask().GetError())
		default:
			return errors.New(s.String())
		}
		return nil
	})
}

// A service that needs a model and has none is refused before it dials:
// only dev starts the scripted model.
func TestServiceWithoutModelRefused(t *testing.T) {
	cfg := config(t)
	cfg.Dial = func(context.Context, string) (*nats.Conn, error) {
		t.Error("dialed the bus")
		return nil, errors.New("no bus here")
	}
	if _, err := stack.NewService(context.Background(), subjects.ServiceExecutor, cfg); !errors.Is(err, stack.ErrNoModel) {
		t.Errorf("got %v, want ErrNoModel", err)
	}
	if _, err := stack.NewService(context.Background(), "nothing", cfg); err == nil {
		t.Error("an unknown service was built")
	}
}

func tableNames() []string {
	var out []string
	for _, svc := range stack.Services() {
		out = append(out, svc.Name)
	}
	return out
}

func dialAPI(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	if addr == "" {
		t.Fatal("no router built")
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// startModel starts the scripted model for the test and returns its URL.
func startModel(t *testing.T) string {
	t.Helper()
	m := scriptedmodel.New(scriptedmodel.DefaultScript())
	url, err := m.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	return url
}
