package router

import (
	"context"
	"crypto/tls"
	"io"
	"math"
	"net"
	"strings"
	"testing"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/natstest"
	"github.com/agentmesh/agentmesh/pkg/poll"
	"github.com/agentmesh/agentmesh/pkg/testlog"
	"github.com/agentmesh/agentmesh/pkg/tlstest"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// holdIdle opens n raw TCP connections to addr that never say anything,
// and closes them at cleanup.
func holdIdle(t *testing.T, addr string, n int) []net.Conn {
	t.Helper()
	conns := make([]net.Conn, 0, n)
	t.Cleanup(func() {
		for _, c := range conns {
			_ = c.Close()
		}
	})
	for range n {
		c, err := net.DialTimeout("tcp", addr, 10*time.Second)
		if err != nil {
			t.Fatalf("dial idle connection %d: %v", len(conns), err)
		}
		conns = append(conns, c)
	}
	return conns
}

// freshGet is a new client's GetTask; the deadline is a hang detector.
func freshGet(t *testing.T, addr, id string) (*agentmeshv1.GetTaskResponse, error) {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	return agentmeshv1.NewTaskServiceClient(conn).GetTask(ctx, &agentmeshv1.GetTaskRequest{Id: id})
}

// While 2,000 idle TCP connections are held open, a fresh client's GetTask
// still answers — with the default cap, and with a cap below 2,000, where
// the idle connections (which never authenticated) make room.
func TestIdleConnectionsDoNotStarveNewClients(t *testing.T) {
	for _, tc := range []struct {
		name     string
		maxConns int
	}{{"default cap", 0}, {"cap below the idle connections", 500}} {
		t.Run(tc.name, func(t *testing.T) {
			e := start(t, Config{MaxConnections: tc.maxConns, AuthTimeout: time.Minute, HandshakeTimeout: time.Minute})
			task := e.fake.AddTask(&agentmeshv1.Task{Agent: "helper", Input: "x"})
			holdIdle(t, e.svc.Addr(), 2000)
			resp, err := freshGet(t, e.svc.Addr(), task.Id)
			if err != nil || resp.GetTask().GetId() != task.Id {
				t.Fatalf("fresh GetTask with 2,000 idle connections held: %v, %v", resp, err)
			}
			if tc.maxConns > 0 {
				if n := e.svc.conns.open(); n > tc.maxConns {
					t.Errorf("connections held: %d, over the cap %d", n, tc.maxConns)
				}
			}
		})
	}
}

// A connection that never makes an authenticated RPC is closed after
// AuthTimeout; one that did stays.
func TestUnauthenticatedConnectionsAreClosed(t *testing.T) {
	e := start(t, Config{APIKeys: map[string]string{"k": "acme:reader"}, AuthTimeout: 300 * time.Millisecond, HandshakeTimeout: time.Minute})
	task := e.fake.AddTask(&agentmeshv1.Task{Agent: "helper", Input: "x", Org: "acme"})
	if _, err := e.tasks.GetTask(withKey(testCtx(t), "x-api-key", "k"), &agentmeshv1.GetTaskRequest{Id: task.Id}); err != nil {
		t.Fatal(err)
	}
	idle := holdIdle(t, e.svc.Addr(), 50)
	poll.Until(t, 30*time.Second, func() error {
		if n := e.svc.conns.open(); n != 1 {
			return status.Errorf(codes.Unknown, "%d connections held, want only the authenticated one", n)
		}
		return nil
	})
	// The server closed them: after its HTTP/2 preface, a read ends (EOF
	// or reset), not by the deadline.
	_ = idle[0].SetReadDeadline(time.Now().Add(20 * time.Second))
	_, err := io.Copy(io.Discard, idle[0])
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Error("an idle connection is still open")
	}
	if _, err := e.tasks.GetTask(withKey(testCtx(t), "x-api-key", "k"), &agentmeshv1.GetTaskRequest{Id: task.Id}); err != nil {
		t.Fatalf("the authenticated client after the idle ones were closed: %v", err)
	}
}

func TestTLSAndMutualTLS(t *testing.T) {
	pki := tlstest.New(t)
	dial := func(t *testing.T, addr string, creds credentials.TransportCredentials) error {
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = conn.Close() }()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_, err = agentmeshv1.NewToolServiceClient(conn).ListTools(ctx, &agentmeshv1.ListToolsRequest{})
		return err
	}
	clientTLS := func(t *testing.T, ca, cert, key string) credentials.TransportCredentials {
		c, err := credentials.NewClientTLSFromFile(ca, "")
		if err != nil {
			t.Fatal(err)
		}
		if cert == "" {
			return c
		}
		cfg, err := mtlsConfig(ca, cert, key)
		if err != nil {
			t.Fatal(err)
		}
		return credentials.NewTLS(cfg)
	}
	t.Run("tls", func(t *testing.T) {
		e := start(t, Config{TLSCert: pki.ServerCert, TLSKey: pki.ServerKey})
		if err := dial(t, e.svc.Addr(), clientTLS(t, pki.CA, "", "")); err != nil {
			t.Fatalf("TLS client: %v", err)
		}
		if err := dial(t, e.svc.Addr(), insecure.NewCredentials()); err == nil {
			t.Fatal("a plaintext client was served by a TLS router")
		}
	})
	t.Run("mtls", func(t *testing.T) {
		e := start(t, Config{TLSCert: pki.ServerCert, TLSKey: pki.ServerKey, TLSClientCA: pki.CA})
		if err := dial(t, e.svc.Addr(), clientTLS(t, pki.CA, pki.ClientCert, pki.ClientKey)); err != nil {
			t.Fatalf("client with a certificate: %v", err)
		}
		if err := dial(t, e.svc.Addr(), clientTLS(t, pki.CA, "", "")); err == nil {
			t.Fatal("a client without a certificate was served")
		}
		if err := dial(t, e.svc.Addr(), clientTLS(t, pki.CA, pki.OtherClientCert, pki.OtherClientKey)); err == nil {
			t.Fatal("a client with another CA's certificate was served")
		}
	})
	t.Run("bad configuration", func(t *testing.T) {
		nc := natstest.Connect(t, natstest.Start(t))
		for _, cfg := range []Config{
			{TLSCert: pki.ServerCert},
			{TLSClientCA: pki.CA},
			{TLSCert: pki.ServerCert, TLSKey: pki.ClientKey},
			{TLSCert: pki.ServerCert, TLSKey: pki.ServerKey, TLSClientCA: pki.ServerKey},
		} {
			cfg.Listen = "127.0.0.1:0"
			if _, err := New(context.Background(), cfg, Deps{NC: nc, Log: testlog.New(t)}); err == nil {
				t.Errorf("New(%+v) accepted", cfg)
			}
		}
	})
}

// Requests over an org's rate get ResourceExhausted with a RetryInfo
// detail; other orgs are not affected.
func TestOrgRateLimit(t *testing.T) {
	e := start(t, Config{APIKeys: map[string]string{"a": "acme:reader", "g": "globex:reader"}, OrgRate: 1, OrgBurst: 2})
	task := e.fake.AddTask(&agentmeshv1.Task{Agent: "helper", Input: "x", Org: "acme"})
	get := func(key string) error {
		_, err := e.tasks.GetTask(withKey(testCtx(t), "x-api-key", key), &agentmeshv1.GetTaskRequest{Id: task.Id})
		return err
	}
	var limited error
	for range 5 {
		if err := get("a"); status.Code(err) == codes.ResourceExhausted {
			limited = err
			break
		}
	}
	if limited == nil {
		t.Fatal("5 requests at once with rate 1/s burst 2: none limited")
	}
	st := status.Convert(limited)
	var retry *errdetails.RetryInfo
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			retry = ri
		}
	}
	if retry == nil || retry.GetRetryDelay().AsDuration() <= 0 || !strings.Contains(st.Message(), `org "acme"`) {
		t.Fatalf("limited: %v %q details %v, want RetryInfo with a delay", st.Code(), st.Message(), st.Details())
	}
	if err := get("g"); status.Code(err) != codes.NotFound {
		t.Fatalf("globex, not rate limited, asking for acme's task: %v, want NotFound", err)
	}
}

// An org holds at most MaxWatchesPerOrg WatchTask streams.
func TestWatchStreamsPerOrgCapped(t *testing.T) {
	e := start(t, Config{APIKeys: map[string]string{"a": "acme:reader", "a2": "acme:reader", "g": "globex:reader"}, MaxWatchesPerOrg: 1})
	task := e.fake.AddTask(&agentmeshv1.Task{Agent: "helper", Input: "x", Org: "acme"})
	other := e.fake.AddTask(&agentmeshv1.Task{Agent: "helper", Input: "x", Org: "globex"})
	watch := func(ctx context.Context, key, id string) (grpc.ServerStreamingClient[agentmeshv1.WatchTaskResponse], error) {
		s, err := e.tasks.WatchTask(withKey(ctx, "x-api-key", key), &agentmeshv1.WatchTaskRequest{Id: id})
		if err != nil {
			return nil, err
		}
		_, err = s.Recv() // the created event, or the refusal
		return s, err
	}
	ctx, cancel := context.WithCancel(testCtx(t))
	if _, err := watch(ctx, "a", task.Id); err != nil {
		t.Fatalf("first watch: %v", err)
	}
	if _, err := watch(testCtx(t), "a2", task.Id); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("second watch of the org: %v, want ResourceExhausted", err)
	}
	if _, err := watch(testCtx(t), "g", other.Id); err != nil {
		t.Fatalf("another org's watch: %v", err)
	}
	cancel()
	poll.Until(t, 20*time.Second, func() error {
		_, err := watch(testCtx(t), "a2", task.Id)
		return err
	})
}

// Budgets must be positive, finite and bounded; a bad one is refused
// naming the field, and nothing is created.
func TestBadBudgetsRefused(t *testing.T) {
	e := start(t, Config{})
	for _, tc := range []struct {
		name  string
		b     *agentmeshv1.Budget
		field string
	}{
		{"negative steps", &agentmeshv1.Budget{MaxSteps: -1}, "budget.max_steps"},
		{"negative tokens", &agentmeshv1.Budget{MaxTokens: -1}, "budget.max_tokens"},
		{"absurd tokens", &agentmeshv1.Budget{MaxTokens: math.MaxInt64}, "budget.max_tokens"},
		{"NaN cost", &agentmeshv1.Budget{MaxCostUsd: math.NaN()}, "budget.max_cost_usd"},
		{"infinite cost", &agentmeshv1.Budget{MaxCostUsd: math.Inf(1)}, "budget.max_cost_usd"},
		{"negative cost", &agentmeshv1.Budget{MaxCostUsd: -1}, "budget.max_cost_usd"},
		{"negative wall time", &agentmeshv1.Budget{MaxWallTime: durationpb.New(-time.Minute)}, "budget.max_wall_time"},
		{"absurd wall time", &agentmeshv1.Budget{MaxWallTime: durationpb.New(10000 * time.Hour)}, "budget.max_wall_time"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := e.fake.count("create")
			_, err := e.tasks.SubmitTask(testCtx(t), &agentmeshv1.SubmitTaskRequest{Input: "x", Budget: tc.b})
			st := status.Convert(err)
			if st.Code() != codes.InvalidArgument || !strings.HasPrefix(st.Message(), tc.field+":") {
				t.Fatalf("got %v %q, want InvalidArgument on %s", st.Code(), st.Message(), tc.field)
			}
			if e.fake.count("create") != before {
				t.Error("a task was created")
			}
		})
	}
	_, err := e.agents.CreateAgent(testCtx(t), &agentmeshv1.CreateAgentRequest{Agent: &agentmeshv1.Agent{Name: "spendy", Budget: &agentmeshv1.Budget{MaxCostUsd: math.Inf(1)}}})
	if st := status.Convert(err); st.Code() != codes.InvalidArgument || !strings.HasPrefix(st.Message(), "agent.budget.max_cost_usd:") {
		t.Fatalf("agent with an infinite budget: %v %q", st.Code(), st.Message())
	}
}

// mtlsConfig trusts ca and presents cert/key.
func mtlsConfig(ca, cert, key string) (*tls.Config, error) {
	pool, err := loadCAs(ca)
	if err != nil {
		return nil, err
	}
	c, err := tls.LoadX509KeyPair(cert, key)
	if err != nil {
		return nil, err
	}
	return &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{c}, MinVersion: tls.VersionTLS12}, nil
}

// The headers of one request are bounded on the gRPC door as on the HTTP
// ones (MaxHeaderBytes): gRPC's own default took 16 MiB of metadata per
// stream, before authentication, from anyone who could connect.
func TestRequestHeadersBounded(t *testing.T) {
	e := start(t, Config{})
	task := e.fake.AddTask(&agentmeshv1.Task{Org: DefaultOrg, Agent: "helper", Input: "x"})
	call := func(padding int) error {
		md := metadata.Pairs("x-pad", strings.Repeat("p", padding))
		ctx := metadata.NewOutgoingContext(testCtx(t), md)
		_, err := e.tasks.GetTask(ctx, &agentmeshv1.GetTaskRequest{Id: task.Id})
		return err
	}
	if err := call(MaxHeaderBytes / 2); err != nil {
		t.Fatalf("GetTask with %d bytes of metadata: %v, want it served", MaxHeaderBytes/2, err)
	}
	// The server announces its limit (SETTINGS_MAX_HEADER_LIST_SIZE): a
	// gRPC client refuses to send more; a raw one has the stream reset.
	if err := call(2 * MaxHeaderBytes); err == nil {
		t.Fatalf("GetTask with %d bytes of metadata was served, want it refused", 2*MaxHeaderBytes)
	}
	// The connection is still good for the next request.
	if err := call(0); err != nil {
		t.Fatalf("GetTask after a refused one: %v", err)
	}
}
