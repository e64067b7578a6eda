// Package router serves agentmesh's public gRPC API and translates it into
// requests on the bus. It owns no data: every answer comes from the state
// service or the registry.
//
// RPCs served (proto/agentmesh/v1):
//
//	agentmesh.v1.TaskService   SubmitTask, GetTask, ListTasks, CancelTask,
//	                           WatchTask (server stream), GetTaskHistory,
//	                           WatchTasks (server stream, feed.go)
//	agentmesh.v1.TaskGraphService  SubmitTasks, UpdateTask, DeleteTask,
//	                           CancelTasks (graph.go)
//	agentmesh.v1.MetricsService    GetMetrics (graph.go)
//	agentmesh.v1.ExecutorService   ListExecutors (executors.go, from the
//	                           executors' heartbeats)
//	agentmesh.v1.AgentService  CreateAgent, GetAgent, ListAgents,
//	                           UpdateAgent, DeleteAgent
//	agentmesh.v1.RunService    StartRun, GetRun, CancelRun: seed 004's
//	                           runs as tasks (runs.go)
//	agentmesh.v1.VersionService GetVersion (version.go)
//	agentmesh.v1.KeyService    keys kept by state (keyservice.go), loaded
//	                           and followed by every router (apikeys.go)
//	agentmesh.v1.ScheduleService, WebhookService  (schedules.go, webhooks.go)
//	grpc.health.v1.Health      SERVING while Run runs, NOT_SERVING on shutdown
//	grpc.reflection.v1[alpha]  so `grpcurl -plaintext HOST:PORT list` works
//
// SubmitTask takes an agent by name, or required skills, or neither (the
// registry then picks its default agent).
//
// Every agentmesh RPC needs an API key (metadata `authorization: Bearer
// <key>` or `x-api-key: <key>`), which names the caller's org and role
// (keys.go: hashed, from AGENTMESH_API_KEYS or a reloaded keys file); the
// role must satisfy the method's entry in MethodRoles (roles.go), else
// PermissionDenied names the role needed. With no keys configured
// authentication is off and every caller is an admin of org "default".
// Health and reflection need no key. The edge (edge.go, tls.go): TLS and
// mutual TLS, a connection cap that evicts never-authenticated
// connections first, a deadline to authenticate, per-org request rates and
// WatchTask streams.
//
// Bus subjects it requests (see package subjects), all protobuf:
//
//	<p>.registry.match              busv1.MatchRequest          (SubmitTask, SubmitTasks, MatchAgents)
//	<p>.registry.agents.create|get|list|update|delete
//	                                agentmeshv1.*AgentRequest    (AgentService)
//	<p>.state.task.create           busv1.CreateTaskRequest     (SubmitTask)
//	<p>.state.task.get              busv1.GetTaskRequest        (GetTask, WatchTask)
//	<p>.state.task.list             busv1.ListTasksRequest      (ListTasks)
//	<p>.state.task.cancel|decide    busv1.TransitionRequest     (CancelTask, approvals)
//	<p>.state.taps.create           busv1.CreateTapRequest      (CreateTap)
//	<p>.state.task.history          busv1.HistoryRequest        (GetTaskHistory, WatchTask)
//	<p>.state.task.create_graph     busv1.CreateTasksRequest    (SubmitTasks)
//	<p>.state.task.update|delete    busv1.UpdateTaskRequest, DeleteTaskRequest
//	<p>.state.task.metrics          busv1.MetricsRequest        (GetMetrics)
//	<p>.state.key.*, schedule.*, webhook.*   bus.v1 ops.proto (KeyService,
//	                                ScheduleService, WebhookService)
//
// Subjects it subscribes to (core NATS, one subscription each for all
// streams, hub.go):
//
//	<p>.evt.*.task.>                agentmeshv1.TaskEvent (WatchTask, WatchTasks)
//	<p>.live.*.task.*.token         agentmeshv1.TaskEvent (WatchTask's tokens)
//	<p>.exec.heartbeat.*            busv1.ExecutorHeartbeat (ListExecutors)
//
// and it follows <p>.evt.*.key.* (the key changes) with an ordered consumer
// of the events stream.
//
// Errors are converted to gRPC status codes in one place, toStatus.
//
// With Config.HTTPListen it also serves HTTP (http.go): REST/JSON and SSE
// (package rest) and the doors mounted with Mount, each call a call of the
// API above through the same interceptors (inproc.go).
package router

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/netguard"
	"github.com/agentmesh/agentmesh/pkg/subjects"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"
)

// DefaultOrg is the org of every caller when authentication is off.
const DefaultOrg = "default"

// Deps are the router's dependencies.
type Deps struct {
	NC  *nats.Conn
	Log *slog.Logger
}

// Service is a running router.
type Service struct {
	cfg     Config
	nc      *nats.Conn
	log     *slog.Logger
	names   subjects.Names
	keys    *keySource
	authOff bool
	conns   *connLimiter
	limiter *orgLimiter
	watches *watchSlots
	lis     net.Listener
	srv     *grpc.Server
	health  *health.Server

	stopOnce sync.Once
	stopping chan struct{} // closed when Run begins to stop

	hub *hub // feeds the WatchTask and WatchTasks streams (hub.go, feed.go)

	executors executorTable // the nodes' last heartbeats (executors.go)

	doors *httpDoors // the in-process API and the HTTP listener (http.go)
	// js follows the key events (apikeys.go); guard is the address policy
	// of webhook endpoints (webhooks.go).
	js    jetstream.JetStream
	guard *netguard.Guard
}

// New validates cfg, opens the listener and builds the gRPC server.
// New is a little over 80 lines: the server's parts built in order, each undone on a later failure.
func New(ctx context.Context, cfg Config, deps Deps) (*Service, error) {
	if deps.NC == nil {
		return nil, errors.New("router: Deps.NC is required")
	}
	if deps.Log == nil {
		return nil, errors.New("router: Deps.Log is required")
	}
	names, err := subjects.New(cfg.Prefix)
	if err != nil {
		return nil, fmt.Errorf("router: %w", err)
	}
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("router: %w", err)
	}
	keys, authOff, err := keysOf(cfg, deps.Log)
	if err != nil {
		return nil, fmt.Errorf("router: %w", err)
	}
	tlsConf, err := serverTLS(cfg)
	if err != nil {
		return nil, fmt.Errorf("router: %w", err)
	}
	js, err := jetstream.New(deps.NC)
	if err != nil {
		return nil, fmt.Errorf("router: %w", err)
	}
	guard, err := netguard.New(cfg.WebhookAllow, netguard.Options{})
	if err != nil {
		return nil, fmt.Errorf("router: %s: %w", EnvWebhookAllow, err)
	}

	inner, err := (&net.ListenConfig{}).Listen(ctx, "tcp", cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("router: listen on %s: %w", cfg.Listen, err)
	}
	maxConns := connLimit(cfg.MaxConnections)
	if maxConns < cfg.MaxConnections {
		deps.Log.Warn("router: connection cap lowered to fit the open-file limit", "configured", cfg.MaxConnections, "cap", maxConns)
	}
	lis := newConnLimiter(inner, maxConns, cfg.AuthTimeout, deps.Log)
	s := &Service{
		cfg:      cfg,
		nc:       deps.NC,
		log:      deps.Log,
		names:    names,
		keys:     keys,
		authOff:  authOff,
		conns:    lis,
		limiter:  orgLimiterFor(authOff, cfg),
		watches:  &watchSlots{max: cfg.MaxWatchesPerOrg, n: map[string]int{}},
		lis:      lis,
		health:   health.NewServer(),
		stopping: make(chan struct{}),
		js:       js,
		guard:    guard,
	}
	s.hub = newHub(s)
	if err := s.executors.start(s); err != nil {
		_ = lis.Close()
		return nil, fmt.Errorf("router: %w", err)
	}
	opts := append(s.interceptors(),
		grpc.ConnectionTimeout(cfg.HandshakeTimeout),
		grpc.MaxConcurrentStreams(cfg.MaxStreamsPerConn),
		grpc.MaxHeaderListSize(MaxHeaderBytes), // as the HTTP doors' (config.go)
		// Watch streams can idle for long: ping so dead peers are noticed;
		// connections without RPCs are closed after IdleTimeout.
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 30 * time.Second, Timeout: 10 * time.Second, MaxConnectionIdle: cfg.IdleTimeout}),
		// Clients pinging more often than every 10 s are sent GOAWAY.
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
	)
	if tlsConf != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(tlsConf)))
	}
	s.srv = grpc.NewServer(opts...)
	s.register(requestDecoding{s.srv})
	healthpb.RegisterHealthServer(s.srv, s.health)
	reflection.Register(s.srv)
	s.setServing(healthpb.HealthCheckResponse_NOT_SERVING)
	if err := s.newHTTP(ctx, tlsConf); err != nil { // http.go
		s.executors.stop()
		_ = lis.Close()
		return nil, fmt.Errorf("router: %w", err)
	}
	return s, nil
}

// register serves the agentmesh API on srv: the network server, the
// in-memory one and the in-process table of the HTTP doors (http.go,
// inproc.go) serve the same.
func (s *Service) register(srv grpc.ServiceRegistrar) {
	agentmeshv1.RegisterTaskServiceServer(srv, &taskServer{s: s})
	agentmeshv1.RegisterAgentServiceServer(srv, &agentServer{s: s})
	agentmeshv1.RegisterSkillServiceServer(srv, &skillServer{s: s})
	agentmeshv1.RegisterApprovalServiceServer(srv, &approvalServer{s: s})
	agentmeshv1.RegisterProposalServiceServer(srv, &proposalServer{s: s})
	agentmeshv1.RegisterToolServiceServer(srv, &toolServer{})
	agentmeshv1.RegisterTapServiceServer(srv, &tapServer{s: s})
	agentmeshv1.RegisterTaskGraphServiceServer(srv, &graphServer{s: s})
	agentmeshv1.RegisterMetricsServiceServer(srv, &metricsServer{s: s})
	agentmeshv1.RegisterRunServiceServer(srv, &runServer{s: s})
	agentmeshv1.RegisterVersionServiceServer(srv, &versionServer{s: s})
	agentmeshv1.RegisterExecutorServiceServer(srv, &executorServer{s: s})
	agentmeshv1.RegisterKeyServiceServer(srv, &keyServer{s: s})
	agentmeshv1.RegisterScheduleServiceServer(srv, &scheduleServer{s: s})
	agentmeshv1.RegisterWebhookServiceServer(srv, &webhookServer{s: s})
	agentmeshv1.RegisterMemoryServiceServer(srv, &memoryServer{s: s})
	agentmeshv1.RegisterThreadServiceServer(srv, &threadServer{s: s})
}

// interceptors are the authentication (keys, roles, orgs, rates) and the
// sub-task id checks every agentmesh RPC passes, on every door.
func (s *Service) interceptors() []grpc.ServerOption {
	return append(traceOptions(), // tracing.go
		grpc.MaxRecvMsgSize(s.cfg.MaxRequestBytes),
		grpc.ForceServerCodecV2(newRequestCodec()), // decode.go
		grpc.ChainUnaryInterceptor(s.unaryInterceptors()...),
		grpc.ChainStreamInterceptor(s.streamInterceptors()...),
	)
}

// unaryInterceptors are the unary RPCs' interceptors, in order: the gRPC
// servers chain them, and the doors' in-process calls run them (inproc.go).
func (s *Service) unaryInterceptors() []grpc.UnaryServerInterceptor {
	return []grpc.UnaryServerInterceptor{s.unaryAuth, s.unarySubtaskIDs}
}

// streamInterceptors are the stream RPCs' interceptors, in order: the gRPC
// servers chain them, and the HTTP doors' event streams run them in
// process (http.go).
func (s *Service) streamInterceptors() []grpc.StreamServerInterceptor {
	return []grpc.StreamServerInterceptor{s.streamAuth, s.streamSubtaskIDs}
}

func orgLimiterFor(authOff bool, cfg Config) *orgLimiter {
	if authOff {
		return nil
	}
	return newOrgLimiter(cfg.OrgRate, cfg.OrgBurst)
}

// Addr returns the address the router listens on.
func (s *Service) Addr() string { return s.lis.Addr().String() }

func (s *Service) setServing(st healthpb.HealthCheckResponse_ServingStatus) {
	s.health.SetServingStatus("", st)
	s.health.SetServingStatus(agentmeshv1.TaskService_ServiceDesc.ServiceName, st)
	s.health.SetServingStatus(agentmeshv1.AgentService_ServiceDesc.ServiceName, st)
}

// Run serves until ctx ends, then reports NOT_SERVING, ends open watch
// streams (Unavailable: the client reconnects with its cursor), stops
// gracefully within StopTimeout and returns nil.
func (s *Service) Run(ctx context.Context) error {
	s.setServing(healthpb.HealthCheckResponse_SERVING)
	errc := make(chan error, 1)
	go func() { errc <- s.srv.Serve(s.lis) }()
	httpErrc := s.serveHTTP() // http.go; nil without an HTTP listener
	s.log.Info("router serving", "addr", s.Addr(), "http", s.HTTPAddr(), "prefix", s.names.Prefix(), "tls", s.cfg.TLSCert != "", "mtls", s.cfg.TLSClientCA != "")
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if s.cfg.KeysFile != "" {
		go s.watchKeys(rctx)
	}
	if !s.authOff {
		go s.followKeys(rctx)
	}

	var serveErr error
	select {
	case <-ctx.Done():
	case err := <-errc:
		s.setServing(healthpb.HealthCheckResponse_NOT_SERVING)
		s.closeHTTP()
		return fmt.Errorf("router: serve: %w", err)
	case err := <-httpErrc:
		serveErr = fmt.Errorf("router: serve HTTP: %w", err)
	}
	s.health.Shutdown() // NOT_SERVING for every service, and stays so
	s.stopOnce.Do(func() { close(s.stopping) })
	stopped := make(chan struct{})
	timer := time.NewTimer(s.cfg.StopTimeout)
	defer timer.Stop()
	go func() {
		// The HTTP doors first: their calls go through the in-process server.
		s.shutdownHTTP(s.cfg.StopTimeout)
		s.srv.GracefulStop()
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-timer.C:
		s.log.Warn("router: graceful stop timed out; closing connections", "timeout", s.cfg.StopTimeout)
		s.closeHTTP()
		s.srv.Stop()
		<-stopped
	}
	<-errc
	s.executors.stop()
	if serveErr != nil {
		return serveErr
	}
	s.log.Info("router stopped")
	return nil
}
