// Package router serves agentmesh's public gRPC API and translates it into
// requests on the bus. It owns no data: every answer comes from the state
// service or the registry.
//
// RPCs served (proto/agentmesh/v1):
//
//	agentmesh.v1.TaskService   SubmitTask, GetTask, ListTasks, CancelTask,
//	                           WatchTask (server stream), GetTaskHistory
//	agentmesh.v1.AgentService  CreateAgent, GetAgent, ListAgents,
//	                           UpdateAgent, DeleteAgent
//	grpc.health.v1.Health      SERVING while Run runs, NOT_SERVING on shutdown
//	grpc.reflection.v1[alpha]  so `grpcurl -plaintext HOST:PORT list` works
//
// SubmitTask takes an agent by name, or required skills, or neither (the
// registry then picks its default agent).
//
// Every agentmesh RPC needs an API key (metadata `authorization: Bearer
// <key>` or `x-api-key: <key>`), which names the caller's org; with no keys
// configured authentication is off and every caller is org "default".
// Health and reflection need no key.
//
// Bus subjects it requests (see package subjects), all protobuf:
//
//	<p>.registry.match              busv1.MatchRequest          (SubmitTask)
//	<p>.registry.agents.create|get|list|update|delete
//	                                agentmeshv1.*AgentRequest    (AgentService)
//	<p>.state.task.create           busv1.CreateTaskRequest     (SubmitTask)
//	<p>.state.task.get              busv1.GetTaskRequest        (GetTask, WatchTask)
//	<p>.state.task.list             busv1.ListTasksRequest      (ListTasks)
//	<p>.state.task.transition       busv1.TransitionRequest     (CancelTask)
//	<p>.state.task.history          busv1.HistoryRequest        (GetTaskHistory, WatchTask)
//
// Subjects it subscribes to (core NATS, one subscription per WatchTask
// stream):
//
//	<p>.evt.task.<id>.>             agentmeshv1.TaskEvent
//
// Errors are converted to gRPC status codes in one place, toStatus.
package router

import (
	"context"
	"crypto/sha256"
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
	// APIKeys maps an API key to its org. Empty means authentication is
	// off and every caller is org "default" (development only).
	APIKeys map[string]string
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
}

// Deps are the router's dependencies.
type Deps struct {
	NC  *nats.Conn
	Log *slog.Logger
}

// Service is a running router.
type Service struct {
	cfg    Config
	nc     *nats.Conn
	log    *slog.Logger
	names  subjects.Names
	keys   map[[sha256.Size]byte]string // sha256(key) → org
	lis    net.Listener
	srv    *grpc.Server
	health *health.Server

	stopOnce sync.Once
	stopping chan struct{} // closed when Run begins to stop

	hub *hub // feeds the WatchTask streams (hub.go)
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
	keys := make(map[[sha256.Size]byte]string, len(cfg.APIKeys))
	for k, org := range cfg.APIKeys {
		if k == "" || org == "" {
			return nil, errors.New("router: APIKeys must not hold an empty key or org")
		}
		keys[sha256.Sum256([]byte(k))] = org
	}
	if len(keys) == 0 {
		deps.Log.Warn("router: no API keys configured; authentication is OFF and every caller is org " + DefaultOrg + " (development only)")
	}

	lis, err := (&net.ListenConfig{}).Listen(ctx, "tcp", cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("router: listen on %s: %w", cfg.Listen, err)
	}
	s := &Service{
		cfg:      cfg,
		nc:       deps.NC,
		log:      deps.Log,
		names:    names,
		keys:     keys,
		lis:      lis,
		health:   health.NewServer(),
		stopping: make(chan struct{}),
	}
	s.hub = newHub(s)
	s.srv = grpc.NewServer(
		grpc.StatsHandler(otelgrpc.NewServerHandler(otelgrpc.WithPropagators(bus.Propagator()))),
		grpc.MaxRecvMsgSize(cfg.MaxRequestBytes),
		grpc.ChainUnaryInterceptor(s.unaryAuth),
		grpc.ChainStreamInterceptor(s.streamAuth),
		// Watch streams can idle for long: ping so dead peers are noticed.
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 30 * time.Second, Timeout: 10 * time.Second}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
	)
	agentmeshv1.RegisterTaskServiceServer(s.srv, &taskServer{s: s})
	agentmeshv1.RegisterAgentServiceServer(s.srv, &agentServer{s: s})
	agentmeshv1.RegisterApprovalServiceServer(s.srv, &approvalServer{s: s})
	agentmeshv1.RegisterToolServiceServer(s.srv, &toolServer{})
	healthpb.RegisterHealthServer(s.srv, s.health)
	reflection.Register(s.srv)
	s.setServing(healthpb.HealthCheckResponse_NOT_SERVING)
	return s, nil
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
	s.log.Info("router serving", "addr", s.Addr(), "prefix", s.names.Prefix())

	select {
	case <-ctx.Done():
	case err := <-errc:
		s.setServing(healthpb.HealthCheckResponse_NOT_SERVING)
		return fmt.Errorf("router: serve: %w", err)
	}
	s.health.Shutdown() // NOT_SERVING for every service, and stays so
	s.stopOnce.Do(func() { close(s.stopping) })
	stopped := make(chan struct{})
	go func() { s.srv.GracefulStop(); close(stopped) }()
	timer := time.NewTimer(s.cfg.StopTimeout)
	defer timer.Stop()
	select {
	case <-stopped:
	case <-timer.C:
		s.log.Warn("router: graceful stop timed out; closing connections", "timeout", s.cfg.StopTimeout)
		s.srv.Stop()
		<-stopped
	}
	<-errc
	s.log.Info("router stopped")
	return nil
}
