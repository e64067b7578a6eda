// Package stack builds agentmesh's services from one table (table.go:
// each service's name and bus identity, start order, how its Config is
// read, what it needs, how it is built). `agentmesh dev` and the
// end-to-end tests build every service over an embedded nats-server with
// JetStream (New); `agentmesh <service>` builds one of them against the bus
// its caller dials (NewService). The store is opened in one place
// (openStore: the embedded store or Postgres), and without a configured
// model New starts the scripted one.
//
// Each service gets its own NATS connection, as its own bus identity
// (package busauth: permissions from subjects.Permissions), and talks to
// the others only over the bus. Services start in the table's order —
// state, registry, scheduler, executor, router — and stop in reverse.
package stack

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	busv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/bus/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/busauth"
	"github.com/agentmesh/agentmesh/pkg/embednats"
	"github.com/agentmesh/agentmesh/pkg/scriptedmodel"
	"github.com/agentmesh/agentmesh/pkg/subjects"
	"github.com/agentmesh/agentmesh/services/executor"
	"github.com/agentmesh/agentmesh/services/registry"
	"github.com/agentmesh/agentmesh/services/router"
	"github.com/agentmesh/agentmesh/services/scheduler"
	"github.com/agentmesh/agentmesh/services/state"
	"github.com/agentmesh/agentmesh/services/state/store"
	"github.com/nats-io/nats.go"
)

// Config of a stack: the bus, the store, the model and each service's
// Config (its Prefix and Streams are the stack's).
type Config struct {
	Prefix string
	// Dial connects a service to an outside bus as its own identity
	// (`agentmesh <service>`: a NATS URL and that service's credentials).
	// nil starts an embedded server on DataDir.
	Dial func(ctx context.Context, service string) (*nats.Conn, error)
	// DataDir holds the embedded NATS server's JetStream data. Required
	// without Dial.
	DataDir string
	// Auth holds the bus identities the embedded server trusts and each
	// service connects as; nil loads (or first creates) them in
	// DataDir/bus. With Dial the caller holds them.
	Auth *busauth.Bundle
	// NATSHost/NATSPort of the embedded server's loopback client listener,
	// so outside NATS clients can look in (Port -1: a random free port).
	NATSHost string
	NATSPort int
	// PostgresURL of the system of record; empty uses the embedded store.
	PostgresURL string
	// Router settings (Listen, APIKeys, limits).
	Router router.Config
	// Executor settings. When Executor.Model.BaseURL is empty New starts a
	// scripted model server on ScriptedListen with Script (NewService
	// refuses: ErrNoModel).
	Executor       executor.Config
	Script         *scriptedmodel.Script
	ScriptedListen string
	// Scheduler settings.
	Scheduler scheduler.Config
	// Registry settings.
	Registry registry.Config
	// State settings (Retention, Taps: nil takes Auth's tap signer).
	State   state.Config
	Streams bus.StreamOptions
	Log     *slog.Logger
	// SeedAgents are created through the registry at start when absent
	// (dev seeds the default "assistant").
	SeedAgents []*agentmeshv1.Agent
	// SeedSkills are created (shared) before SeedAgents, when absent.
	SeedSkills []*agentmeshv1.Skill
}

// ErrNoModel: a service that needs a model has none configured, and only
// New starts the scripted one.
var ErrNoModel = errors.New("no model endpoint configured")

// Stack is a built stack, ready to Run.
type Stack struct {
	cfg   Config
	log   *slog.Logger
	names subjects.Names
	nats  *embednats.Server
	conns []*nats.Conn
	store store.Store
	model *scriptedmodel.Server

	modelURL string
	runners  []runner // in start order
	router   *router.Service
	routerNC *nats.Conn
	executor *executor.Service
}

type runner struct {
	name string
	run  func(context.Context) error
}

// New builds every service of the table; when it returns the stack is
// serving requests. Call Run to run it and Close if Run is never called.
func New(ctx context.Context, cfg Config) (*Stack, error) {
	s, err := build(ctx, cfg, Services())
	if err != nil {
		return nil, err
	}
	if err := s.seed(ctx); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// NewService builds the one named service of the table, alone, on the bus
// cfg.Dial connects to.
func NewService(ctx context.Context, name string, cfg Config) (*Stack, error) {
	row, ok := Lookup(name)
	if !ok {
		return nil, fmt.Errorf("stack: no service %q", name)
	}
	if cfg.Dial == nil {
		return nil, errors.New("stack: NewService needs Dial (the bus to join)")
	}
	return build(ctx, cfg, []Service{row})
}

// build builds rows in order: the model they need, the bus, then each on
// its own connection.
func build(ctx context.Context, cfg Config, rows []Service) (_ *Stack, err error) {
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	names, err := subjects.New(cfg.Prefix)
	if err != nil {
		return nil, err
	}
	s := &Stack{cfg: cfg, log: cfg.Log, names: names}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	if err := s.startModel(rows); err != nil {
		return nil, err
	}
	if err := s.startBus(); err != nil {
		return nil, err
	}
	for _, row := range rows {
		nc, err := s.connect(ctx, row.Name)
		if err != nil {
			return nil, err
		}
		run, err := row.build(s, ctx, nc)
		if err != nil {
			return nil, err
		}
		s.runners = append(s.runners, runner{row.Name, run})
	}
	return s, nil
}

// startModel resolves the model endpoint rows need: the configured one,
// else (New only) the scripted model.
func (s *Stack) startModel(rows []Service) error {
	need := false
	for _, row := range rows {
		need = need || row.Needs.Model
	}
	if s.modelURL = s.cfg.Executor.Model.BaseURL; !need || s.modelURL != "" {
		return nil
	}
	if s.cfg.Dial != nil {
		if t := s.cfg.Executor.Model.Table; t != nil && len(t.Models) > 0 {
			return nil // agents name the table's models; an agent that names none is refused when it runs
		}
		return ErrNoModel
	}
	script := s.cfg.Script
	if script == nil {
		script = scriptedmodel.DefaultScript()
	}
	s.model = scriptedmodel.New(script)
	listen := s.cfg.ScriptedListen
	if listen == "" {
		listen = "127.0.0.1:0"
	}
	url, err := s.model.Start(listen)
	if err != nil {
		return fmt.Errorf("stack: start scripted model: %w", err)
	}
	s.modelURL = url
	s.log.Warn("no model configured: using the SCRIPTED model server (a testing and demo aid, not a language model)", "url", url)
	return nil
}

// startBus starts the embedded server unless the caller dials a bus.
func (s *Stack) startBus() error {
	if s.cfg.Dial != nil {
		return nil
	}
	if s.cfg.DataDir == "" {
		return errors.New("stack: DataDir is required with the embedded NATS server")
	}
	var err error
	s.nats, err = embednats.Start(embednats.Config{
		StoreDir: s.cfg.DataDir, Host: s.cfg.NATSHost, Port: s.cfg.NATSPort,
		Auth: s.cfg.Auth, Prefix: s.cfg.Prefix, Log: s.log,
	})
	if err != nil {
		return err
	}
	s.cfg.Auth = s.nats.Auth()
	return nil
}

// connect opens service's own connection to the bus.
func (s *Stack) connect(ctx context.Context, service string) (*nats.Conn, error) {
	var nc *nats.Conn
	var err error
	if s.nats != nil {
		nc, err = s.nats.ConnectAs(service)
	} else {
		nc, err = s.cfg.Dial(ctx, service)
	}
	if err != nil {
		return nil, fmt.Errorf("connect %s to nats: %w", service, err)
	}
	s.conns = append(s.conns, nc)
	return nc, nil
}

// seed creates the seed skills and agents through the registry, over the
// bus like any client, as shared ones (every org may use them, none may
// change them); the skills first, as the agents offer them.
func (s *Stack) seed(ctx context.Context) error {
	if s.routerNC == nil {
		return nil
	}
	for _, sk := range s.cfg.SeedSkills {
		err := bus.Request(ctx, s.routerNC, s.names.Registry(subjects.RegistryCreateSkill),
			&busv1.SkillOp{Shared: true, Op: &busv1.SkillOp_Create{Create: &agentmeshv1.CreateSkillRequest{Skill: sk}}}, &agentmeshv1.CreateSkillResponse{})
		if err != nil && !errors.Is(err, bus.ErrAlreadyExists) {
			return fmt.Errorf("stack: seed skill %s: %w", sk.Name, err)
		}
	}
	for _, a := range s.cfg.SeedAgents {
		err := bus.Request(ctx, s.routerNC, s.names.Registry(subjects.RegistryCreateAgent),
			&busv1.AgentOp{Shared: true, Op: &busv1.AgentOp_Create{Create: &agentmeshv1.CreateAgentRequest{Agent: a}}}, &agentmeshv1.CreateAgentResponse{})
		if err != nil && !errors.Is(err, bus.ErrAlreadyExists) {
			return fmt.Errorf("stack: seed agent %s: %w", a.Name, err)
		}
	}
	return nil
}

// DefaultSkills are the shared skills `agentmesh dev` seeds: "general",
// which the default agent offers.
func DefaultSkills() []*agentmeshv1.Skill {
	return []*agentmeshv1.Skill{{
		Name:        "general",
		Description: "General help: answer questions, explain, summarise and tell the time (seeded by agentmesh dev).",
	}}
}

// DefaultAgent is the agent `agentmesh dev` seeds: the built-in tools and
// the skill "general".
func DefaultAgent() *agentmeshv1.Agent {
	return &agentmeshv1.Agent{
		Name:         registry.DefaultAgent,
		Description:  "General assistant (seeded by agentmesh dev)",
		SystemPrompt: "You are a helpful assistant. Use the tools when they help, then answer.",
		Tools:        []string{"echo", "current_time"},
		Skills:       []string{"general"},
	}
}

// Names lists the services built, in start order.
func (s *Stack) Names() []string {
	out := make([]string, len(s.runners))
	for i, r := range s.runners {
		out[i] = r.name
	}
	return out
}

// Addr is the gRPC API's address ("" without the router).
func (s *Stack) Addr() string {
	if s.router == nil {
		return ""
	}
	return s.router.Addr()
}

// HTTPAddr is the HTTP API's address ("" without the router, or when
// Router.HTTPListen is empty).
func (s *Stack) HTTPAddr() string {
	if s.router == nil {
		return ""
	}
	return s.router.HTTPAddr()
}

// Router is the stack's router (nil without it): the other HTTP doors
// mount on it (router.Service.Mount) and call its API in process (Conn).
func (s *Stack) Router() *router.Service { return s.router }

// NATSURL is the URL of the bus: the embedded server's loopback listener,
// or the server the first connection dialed (redacted).
func (s *Stack) NATSURL() string {
	switch {
	case s.nats != nil:
		return s.nats.URL()
	case len(s.conns) > 0:
		return s.conns[0].ConnectedUrlRedacted()
	}
	return ""
}

// Auth returns the bus identities the stack runs with (nil with Dial).
func (s *Stack) Auth() *busauth.Bundle { return s.cfg.Auth }

// Executor is the stack's executor (tests read its warm pool's figures).
func (s *Stack) Executor() *executor.Service { return s.executor }

// ModelURL is the base URL the executor uses for models.
func (s *Stack) ModelURL() string { return s.modelURL }

// ScriptedModel is the scripted model server, or nil with a real model.
func (s *Stack) ScriptedModel() *scriptedmodel.Server { return s.model }

// Run runs every service until ctx ends, then stops them in reverse order
// (router first, state last), closes the store and the bus, and returns the
// first error a service returned.
func (s *Stack) Run(ctx context.Context) error {
	type running struct {
		cancel context.CancelFunc
		done   chan error
	}
	var rs []running
	var firstErr error
	var once sync.Once
	failed := make(chan struct{})
	for _, r := range s.runners {
		rctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func(r runner) {
			err := r.run(rctx)
			if err != nil {
				s.log.Error("service stopped with an error", "service", r.name, "err", err)
				once.Do(func() { firstErr = fmt.Errorf("%s: %w", r.name, err); close(failed) })
			}
			done <- err
		}(r)
		rs = append(rs, running{cancel, done})
	}
	select {
	case <-ctx.Done():
	case <-failed:
	}
	for i := len(rs) - 1; i >= 0; i-- {
		rs[i].cancel()
		<-rs[i].done
	}
	s.Close()
	return firstErr
}

// Close releases what New built (Run calls it on the way out).
func (s *Stack) Close() {
	for i := len(s.conns) - 1; i >= 0; i-- {
		_ = s.conns[i].Drain()
	}
	s.conns = nil
	if s.store != nil {
		_ = s.store.Close()
		s.store = nil
	}
	if s.model != nil {
		_ = s.model.Close()
		s.model = nil
	}
	if s.nats != nil {
		s.nats.Stop()
		s.nats = nil
	}
}
