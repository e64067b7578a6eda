// Package stack builds the five agentmesh services over one bus: an
// embedded nats-server with JetStream (or a given NATS URL), the embedded
// store or Postgres, and the scripted model when no real model is
// configured. `agentmesh dev` and the end-to-end tests use it.
//
// Each service gets its own NATS connection, as its own bus identity
// (package busauth: permissions from subjects.Permissions), and talks to
// the others only over the bus. Services start in order — state, registry, scheduler,
// executor, router — and stop in reverse.
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
	"github.com/agentmesh/agentmesh/services/state/kvstore"
	"github.com/agentmesh/agentmesh/services/state/pgstore"
	"github.com/agentmesh/agentmesh/services/state/store"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Config of a whole stack.
type Config struct {
	Prefix string
	// DataDir holds the embedded NATS server's JetStream data. Required
	// unless NATSURL is set.
	DataDir string
	// NATSURL of an existing server; empty starts an embedded one.
	NATSURL string
	// Auth holds the bus identities: the embedded server trusts them and
	// each service connects as its own. Required with NATSURL; nil with the
	// embedded server creates a fresh in-memory bundle.
	Auth *busauth.Bundle
	// NATSHost/NATSPort of the embedded server's loopback client listener,
	// so outside NATS clients can look in (Port -1: a random free port).
	NATSHost string
	NATSPort int
	// PostgresURL of the system of record; empty uses the embedded store.
	PostgresURL string
	// Router settings (Listen, APIKeys, limits). Prefix is set from above.
	Router router.Config
	// Executor settings. When Executor.Model.BaseURL is empty a scripted
	// model server is started on ScriptedListen with Script.
	Executor       executor.Config
	Script         *scriptedmodel.Script
	ScriptedListen string
	// Scheduler settings.
	Scheduler scheduler.Config
	// Registry settings (Prefix and Streams are the stack's).
	Registry registry.Config
	// State settings (Retention). Prefix and Streams are set from above.
	State   state.Config
	Streams bus.StreamOptions
	Log     *slog.Logger
	// SeedAgents are created through the registry at start when absent
	// (dev seeds the default "assistant").
	SeedAgents []*agentmeshv1.Agent
	// SeedSkills are created (shared) before SeedAgents, when absent.
	SeedSkills []*agentmeshv1.Skill
}

// Stack is a built stack, ready to Run.
type Stack struct {
	cfg   Config
	log   *slog.Logger
	nats  *embednats.Server
	conns []*nats.Conn
	store store.Store
	model *scriptedmodel.Server

	modelURL string
	runners  []runner // in start order
	router   *router.Service
	executor *executor.Service
}

type runner struct {
	name string
	run  func(context.Context) error
}

// New builds every service; when it returns the stack is serving requests.
// Call Run to run it and Close if Run is never called.
func New(ctx context.Context, cfg Config) (_ *Stack, err error) {
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	names, err := subjects.New(cfg.Prefix)
	if err != nil {
		return nil, err
	}
	s := &Stack{cfg: cfg, log: cfg.Log}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	connect := func(name string) (*nats.Conn, error) {
		var nc *nats.Conn
		var err error
		if s.nats != nil {
			nc, err = s.nats.ConnectAs(name)
		} else {
			var creds []byte
			var opts []nats.Option
			if creds, err = cfg.Auth.Creds(name); err == nil {
				opts, err = busauth.ClientOptions(creds, name, cfg.Log)
			}
			if err == nil {
				nc, err = nats.Connect(cfg.NATSURL, append(opts, nats.Name("agentmesh-"+name), nats.MaxReconnects(-1))...)
			}
		}
		if err != nil {
			return nil, fmt.Errorf("connect %s to nats: %w", name, err)
		}
		s.conns = append(s.conns, nc)
		return nc, nil
	}

	if cfg.NATSURL == "" {
		if cfg.DataDir == "" {
			return nil, errors.New("stack: DataDir is required with the embedded NATS server")
		}
		s.nats, err = embednats.Start(embednats.Config{
			StoreDir: cfg.DataDir, Host: cfg.NATSHost, Port: cfg.NATSPort,
			Auth: cfg.Auth, Prefix: cfg.Prefix, Log: cfg.Log,
		})
		if err != nil {
			return nil, err
		}
		s.cfg.Auth = s.nats.Auth()
	} else if cfg.Auth == nil {
		return nil, errors.New("stack: Auth (the bus identities) is required with NATSURL")
	}
	cfg.Auth = s.cfg.Auth

	// state
	nc, err := connect("state")
	if err != nil {
		return nil, err
	}
	if cfg.PostgresURL != "" {
		var pg *pgstore.Store
		if pg, err = pgstore.Open(ctx, cfg.PostgresURL); err == nil {
			s.store = pg
		}
	} else {
		var js jetstream.JetStream
		js, err = jetstream.New(nc)
		if err == nil {
			var kv *kvstore.Store
			if kv, err = kvstore.Open(ctx, js, names, kvstore.Options{Replicas: cfg.Streams.Replicas, Memory: cfg.Streams.Memory,
				// With its own NATS server this is the only state service.
				SoleWriter: cfg.NATSURL == ""}); err == nil {
				s.store = kv
			}
		}
	}
	if err != nil {
		return nil, fmt.Errorf("stack: open store: %w", err)
	}
	stateCfg := cfg.State
	stateCfg.Prefix, stateCfg.Streams, stateCfg.Taps = cfg.Prefix, cfg.Streams, cfg.Auth.TapSigner()
	st, err := state.New(ctx, stateCfg, state.Deps{NC: nc, Store: s.store, Log: cfg.Log})
	if err != nil {
		return nil, err
	}
	s.runners = append(s.runners, runner{"state", st.Run})

	// the model: a real one by configuration, else the scripted one
	execCfg := cfg.Executor
	execCfg.Prefix, execCfg.Streams = cfg.Prefix, cfg.Streams
	if execCfg.Model.BaseURL == "" {
		script := cfg.Script
		if script == nil {
			script = scriptedmodel.DefaultScript()
		}
		s.model = scriptedmodel.New(script)
		listen := cfg.ScriptedListen
		if listen == "" {
			listen = "127.0.0.1:0"
		}
		url, err := s.model.Start(listen)
		if err != nil {
			return nil, fmt.Errorf("stack: start scripted model: %w", err)
		}
		execCfg.Model.BaseURL = url
		if execCfg.Model.Model == "" {
			execCfg.Model.Model = "scripted"
		}
		cfg.Log.Warn("no model configured: using the SCRIPTED model server (a testing and demo aid, not a language model)", "url", url)
	}
	s.modelURL = execCfg.Model.BaseURL

	// registry
	if nc, err = connect("registry"); err != nil {
		return nil, err
	}
	regCfg := cfg.Registry
	regCfg.Prefix, regCfg.Streams = cfg.Prefix, cfg.Streams
	if regCfg.Analysis.BaseURL == "" && !regCfg.Analysis.Off && !regCfg.Analysis.FallbackOnly && s.model != nil && scriptAnalyses(cfg.Script) {
		// The scripted model answers task analysis only when its script
		// says how (a "task_analysis" scenario); else the fallback.
		regCfg.Analysis.BaseURL, regCfg.Analysis.Model = s.modelURL, "scripted"
	}
	reg, err := registry.New(ctx, regCfg, registry.Deps{NC: nc, Log: cfg.Log})
	if err != nil {
		return nil, err
	}
	s.runners = append(s.runners, runner{"registry", reg.Run})

	// scheduler
	if nc, err = connect("scheduler"); err != nil {
		return nil, err
	}
	schedCfg := cfg.Scheduler
	schedCfg.Prefix, schedCfg.Streams = cfg.Prefix, cfg.Streams
	sch, err := scheduler.New(ctx, schedCfg, scheduler.Deps{NC: nc, Log: cfg.Log})
	if err != nil {
		return nil, err
	}
	s.runners = append(s.runners, runner{"scheduler", sch.Run})

	// executor
	if nc, err = connect("executor"); err != nil {
		return nil, err
	}
	ex, err := executor.New(ctx, execCfg, executor.Deps{NC: nc, Log: cfg.Log})
	if err != nil {
		return nil, err
	}
	s.executor = ex
	s.runners = append(s.runners, runner{"executor", ex.Run})

	// router
	if nc, err = connect("router"); err != nil {
		return nil, err
	}
	rcfg := cfg.Router
	rcfg.Prefix = cfg.Prefix
	rt, err := router.New(ctx, rcfg, router.Deps{NC: nc, Log: cfg.Log})
	if err != nil {
		return nil, err
	}
	s.router = rt
	s.runners = append(s.runners, runner{"router", rt.Run})

	// Seed skills and agents through the registry, over the bus like any
	// client, as shared ones (every org may use them, none may change
	// them); the skills first, as the agents offer them.
	for _, sk := range cfg.SeedSkills {
		err := bus.Request(ctx, nc, names.Registry(subjects.RegistryCreateSkill),
			&busv1.SkillOp{Shared: true, Op: &busv1.SkillOp_Create{Create: &agentmeshv1.CreateSkillRequest{Skill: sk}}}, &agentmeshv1.CreateSkillResponse{})
		if err != nil && !errors.Is(err, bus.ErrAlreadyExists) {
			return nil, fmt.Errorf("stack: seed skill %s: %w", sk.Name, err)
		}
	}
	for _, a := range cfg.SeedAgents {
		err := bus.Request(ctx, nc, names.Registry(subjects.RegistryCreateAgent),
			&busv1.AgentOp{Shared: true, Op: &busv1.AgentOp_Create{Create: &agentmeshv1.CreateAgentRequest{Agent: a}}}, &agentmeshv1.CreateAgentResponse{})
		if err != nil && !errors.Is(err, bus.ErrAlreadyExists) {
			return nil, fmt.Errorf("stack: seed agent %s: %w", a.Name, err)
		}
	}
	return s, nil
}

// scriptAnalyses says whether script answers the registry's task analysis.
func scriptAnalyses(script *scriptedmodel.Script) bool {
	if script == nil {
		return false
	}
	for _, sc := range script.Scenarios {
		if sc.Format == "task_analysis" {
			return true
		}
	}
	return false
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

// Addr is the gRPC API's address.
func (s *Stack) Addr() string { return s.router.Addr() }

// HTTPAddr is the HTTP API's address ("" when Router.HTTPListen is empty).
func (s *Stack) HTTPAddr() string { return s.router.HTTPAddr() }

// Router is the stack's router: the other HTTP doors mount on it
// (router.Service.Mount) and call its API in process (Conn).
func (s *Stack) Router() *router.Service { return s.router }

// NATSURL is the loopback URL of the embedded NATS server ("" if external).
func (s *Stack) NATSURL() string {
	if s.nats == nil {
		return s.cfg.NATSURL
	}
	return s.nats.URL()
}

// Auth returns the bus identities the stack runs with.
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
