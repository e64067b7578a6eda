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
//
// Subjects it subscribes to (core NATS, one subscription each for all
// streams, hub.go):
//
//	<p>.evt.*.task.>                agentmeshv1.TaskEvent (WatchTask, WatchTasks)
//	<p>.live.*.task.*.token         agentmeshv1.TaskEvent (WatchTask's tokens)
//	<p>.exec.heartbeat.*            busv1.ExecutorHeartbeat (ListExecutors)
//
// Errors are converted to gRPC status codes in one place, toStatus.
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
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/subjects"
	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"
)

// Defaults of Config.
const (
	DefaultListen             = "127.0.0.1:7400"
	DefaultMaxInputBytes      = 256 << 10
	DefaultMaxMetadataEntries = 64
	DefaultMaxMetadataBytes   = 16 << 10
	DefaultMaxRequestBytes    = 4 << 20
	DefaultWatchRefetch       = 30 * time.Second
	DefaultStopTimeout        = 10 * time.Second
	DefaultKeysReload         = 2 * time.Second
	DefaultMaxConnections     = 4096
	DefaultHandshakeTimeout   = 10 * time.Second
	DefaultAuthTimeout        = 10 * time.Second
	DefaultIdleTimeout        = 5 * time.Minute
	DefaultMaxStreamsPerConn  = 100
	DefaultMaxWatchesPerOrg   = 256
	DefaultOrgRate            = 100
)

// DefaultOrg is the org of every caller when authentication is off.
const DefaultOrg = "default"

// Config configures the router.
type Config struct {
	// Prefix of the bus subjects ("" means subjects.DefaultPrefix).
	Prefix string
	// Listen is the gRPC listen address; default DefaultListen. New opens
	// the listener, so ":0" works and Addr reports the port.
	Listen string
	// APIKeys maps an API key to "org" (role admin) or "org:role"
	// ("*:platform" for a platform key): the AGENTMESH_API_KEYS form. With
	// neither APIKeys nor KeysFile authentication is off and every caller
	// is an admin of org "default" (development only).
	APIKeys map[string]string
	// KeysFile is a JSON file of hashed keys with names, orgs and roles
	// (see ParseKeysFile). It is re-read when it changes (checked every
	// KeysReload, default 2 s) and on SIGHUP; a file that does not parse
	// leaves the keys as they were (and is logged).
	KeysFile   string
	KeysReload time.Duration
	// TLSCert and TLSKey (PEM files) serve the API over TLS; TLSClientCA
	// (PEM) also requires clients to present a certificate it signed.
	TLSCert, TLSKey, TLSClientCA string
	// MaxConnections caps the connections held (default 4096, and never
	// more than the open-file limit allows); HandshakeTimeout bounds the
	// TLS and HTTP/2 handshake (default 10 s); AuthTimeout closes a
	// connection that made no authenticated RPC that long after it was
	// accepted (default 10 s); IdleTimeout closes a connection without
	// RPCs for that long (default 5 min).
	MaxConnections   int
	HandshakeTimeout time.Duration
	AuthTimeout      time.Duration
	IdleTimeout      time.Duration
	// MaxStreamsPerConn caps concurrent RPCs on one connection (default 100).
	MaxStreamsPerConn uint32
	// MaxWatchesPerOrg caps the WatchTask streams an org holds open at
	// once (default 256).
	MaxWatchesPerOrg int
	// OrgRate is each org's sustained request rate per second (default
	// 100; negative: unlimited) and OrgBurst its burst (default 2×OrgRate).
	// With authentication off there is one org and no rate limit.
	OrgRate  float64
	OrgBurst int
	// MaxInputBytes bounds SubmitTask's input; default 256 KiB.
	MaxInputBytes int
	// MaxMetadataEntries and MaxMetadataBytes (keys plus values) bound a
	// task's metadata; defaults 64 and 16 KiB.
	MaxMetadataEntries int
	MaxMetadataBytes   int
	// MaxRequestBytes is the largest gRPC message accepted; default 4 MiB.
	MaxRequestBytes int
	// WatchRefetch is how long a WatchTask stream waits without news before
	// it asks state for the history again, a safety net for events lost
	// inside NATS (reconnects and dropped messages are noticed by
	// themselves, see hub.go); default 30 s.
	WatchRefetch time.Duration
	// StopTimeout bounds the graceful stop; default 10 s.
	StopTimeout time.Duration
	// WatchTasksInterval is how often WatchTasks streams get the changes
	// gathered since the last time (feed.go); default 250 ms.
	WatchTasksInterval time.Duration

	// HTTPListen is the address of the HTTP listener (http.go): REST/JSON
	// and SSE (package rest) and the doors mounted with Mount, all through
	// the same authentication as gRPC; empty = no HTTP listener. It takes
	// the TLS settings above, MaxConnections, AuthTimeout, IdleTimeout and
	// MaxRequestBytes (the largest request body) as gRPC does.
	HTTPListen string
	// HTTPCORSOrigins are the origins browsers may call the HTTP API from
	// (scheme://host[:port], or "*" for any); empty = no CORS headers.
	HTTPCORSOrigins []string
	// Version is what GetVersion answers: the binary's version.
	Version string
}

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
}

// New validates cfg, opens the listener and builds the gRPC server.
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
	if cfg.Listen == "" {
		cfg.Listen = DefaultListen
	}
	for _, v := range []struct {
		name string
		p    *int
		def  int
	}{
		{"MaxInputBytes", &cfg.MaxInputBytes, DefaultMaxInputBytes},
		{"MaxMetadataEntries", &cfg.MaxMetadataEntries, DefaultMaxMetadataEntries},
		{"MaxMetadataBytes", &cfg.MaxMetadataBytes, DefaultMaxMetadataBytes},
		{"MaxRequestBytes", &cfg.MaxRequestBytes, DefaultMaxRequestBytes},
	} {
		if *v.p < 0 {
			return nil, fmt.Errorf("router: %s must not be negative", v.name)
		}
		if *v.p == 0 {
			*v.p = v.def
		}
	}
	// A task must fit in one bus message, with room for the rest of it.
	if cfg.MaxInputBytes+cfg.MaxMetadataBytes > bus.MaxPayload*3/4 {
		return nil, fmt.Errorf("router: MaxInputBytes+MaxMetadataBytes must stay under %d bytes (the bus payload limit)", bus.MaxPayload*3/4)
	}
	if cfg.WatchRefetch <= 0 {
		cfg.WatchRefetch = DefaultWatchRefetch
	}
	if cfg.StopTimeout <= 0 {
		cfg.StopTimeout = DefaultStopTimeout
	}
	if cfg.WatchTasksInterval <= 0 {
		cfg.WatchTasksInterval = DefaultWatchTasksInterval
	}
	if cfg.KeysReload <= 0 {
		cfg.KeysReload = DefaultKeysReload
	}
	for _, d := range []struct {
		p   *time.Duration
		def time.Duration
	}{{&cfg.HandshakeTimeout, DefaultHandshakeTimeout}, {&cfg.AuthTimeout, DefaultAuthTimeout}, {&cfg.IdleTimeout, DefaultIdleTimeout}} {
		if *d.p <= 0 {
			*d.p = d.def
		}
	}
	if cfg.MaxConnections <= 0 {
		cfg.MaxConnections = DefaultMaxConnections
	}
	if cfg.MaxStreamsPerConn == 0 {
		cfg.MaxStreamsPerConn = DefaultMaxStreamsPerConn
	}
	if cfg.MaxWatchesPerOrg <= 0 {
		cfg.MaxWatchesPerOrg = DefaultMaxWatchesPerOrg
	}
	if cfg.OrgRate == 0 {
		cfg.OrgRate = DefaultOrgRate
	}
	if cfg.OrgBurst <= 0 {
		cfg.OrgBurst = max(1, int(2*cfg.OrgRate))
	}
	envKeys, err := EnvKeys(cfg.APIKeys)
	if err != nil {
		return nil, fmt.Errorf("router: %w", err)
	}
	keys, err := newKeySource(envKeys, cfg.KeysFile)
	if err != nil {
		return nil, fmt.Errorf("router: %w", err)
	}
	authOff := len(cfg.APIKeys) == 0 && cfg.KeysFile == ""
	if authOff {
		deps.Log.Warn("router: no API keys configured; authentication is OFF and every caller is an admin of org " + DefaultOrg + " (development only)")
	}
	tlsConf, err := serverTLS(cfg)
	if err != nil {
		return nil, fmt.Errorf("router: %w", err)
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
	}
	s.hub = newHub(s)
	if err := s.executors.start(s); err != nil {
		_ = lis.Close()
		return nil, fmt.Errorf("router: %w", err)
	}
	opts := append(s.interceptors(),
		grpc.ConnectionTimeout(cfg.HandshakeTimeout),
		grpc.MaxConcurrentStreams(cfg.MaxStreamsPerConn),
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
	s.register(s.srv)
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

// register serves the agentmesh API on srv: the network server and the
// in-process one of the HTTP doors (http.go) serve the same.
func (s *Service) register(srv *grpc.Server) {
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
}

// interceptors are the authentication (keys, roles, orgs, rates) and the
// sub-task id checks every agentmesh RPC passes, on every door.
func (s *Service) interceptors() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.StatsHandler(otelgrpc.NewServerHandler(otelgrpc.WithPropagators(bus.Propagator()))),
		grpc.MaxRecvMsgSize(s.cfg.MaxRequestBytes),
		grpc.ChainUnaryInterceptor(s.unaryAuth, s.unarySubtaskIDs),
		grpc.ChainStreamInterceptor(s.streamInterceptors()...),
	}
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
	if s.cfg.KeysFile != "" {
		rctx, cancel := context.WithCancel(ctx)
		defer cancel()
		go s.watchKeys(rctx)
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
