// Package registry is the skill registry: the catalogue of agents and the
// matching of a task to the agent that should run it.
//
// It serves (micro service "agentmesh-registry", queue group "registry"):
//
//	<p>.registry.match           busv1.MatchRequest → busv1.MatchResponse
//	<p>.registry.agents.create   busv1.AgentOp{create} → agentmeshv1.CreateAgentResponse
//	<p>.registry.agents.get      busv1.AgentOp{get} → agentmeshv1.GetAgentResponse
//	<p>.registry.agents.list     busv1.AgentOp{list} → agentmeshv1.ListAgentsResponse
//	<p>.registry.agents.update   busv1.AgentOp{update} → agentmeshv1.UpdateAgentResponse
//	<p>.registry.agents.delete   busv1.AgentOp{delete} → agentmeshv1.DeleteAgentResponse
//
// Agents belong to orgs: every agent operation names the org it acts for
// (AgentOp.org, from the caller's API key) and touches only that org's
// agents; the shared agents (org "") are read by every org and changed only
// by an AgentOp with shared set (a platform key). Matching considers the
// submitting org's agents and the shared ones; an org's own agent wins over
// a shared one of the same name.
//
// It validates agent definitions and stores them through the state service
// (<p>.state.agent.*), which owns the record. Matching by skills scores each
// agent by capability, workload, priority and affinity (match.go) with
// configurable weights; ties go by name. Candidates come from the store's
// skill filter (one listing per required skill), not the whole catalogue,
// cached per org and skill set (agentcache.go); their live load and recent
// record from the workload figure kept from the task events (workload.go).
// A task naming neither agent nor skills is analysed for its skills first
// (analysis.go, over the catalogue of catalogue.go). Every answer carries
// the decision as an agentmeshv1.Routing, which the router records on the
// task, and the chosen agent with its skills applied (effective.go).
package registry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/agentmesh/agentmesh/pkg/agentspec"
	busv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/bus/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/subjects"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Version of the registry service, reported by micro.
const Version = "0.1.0"

// Deps are the registry's required dependencies.
type Deps struct {
	NC  *nats.Conn
	Log *slog.Logger
	// Skills is the skill catalogue task analysis reads (nil: the state
	// service's, over NC, cached per org: NewBusCatalog).
	Skills SkillCatalog
}

// Service is a running registry.
type Service struct {
	weights        Weights
	affinityWindow time.Duration
	defaultAgent   string
	names          subjects.Names
	nc             *nats.Conn
	log            *slog.Logger
	svc            micro.Service
	audit          *bus.Auditor
	work           *workload
	analyzer       *analyzer
	skills         SkillCatalog
	cands          *candidateCache
	proposals      proposals
	stopFollow     context.CancelFunc
	followed       chan struct{}
}

// New validates cfg, ensures the bus streams and starts serving requests.
func New(ctx context.Context, cfg Config, deps Deps) (*Service, error) {
	if deps.NC == nil {
		return nil, errors.New("registry: Deps.NC is required")
	}
	if deps.Log == nil {
		return nil, errors.New("registry: Deps.Log is required")
	}
	names, err := subjects.New(cfg.Prefix)
	if err != nil {
		return nil, fmt.Errorf("registry: %w", err)
	}
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("registry: %w", err)
	}
	props, err := newProposals(cfg.Proposals)
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(deps.NC)
	if err != nil {
		return nil, fmt.Errorf("registry: jetstream: %w", err)
	}
	s := &Service{weights: *cfg.Weights, affinityWindow: cfg.AffinityWindow, defaultAgent: cfg.DefaultAgent, names: names, nc: deps.NC, log: deps.Log.With("service", "registry"),
		proposals: props}
	svc, err := micro.AddService(deps.NC, micro.Config{
		Name:        "agentmesh-registry",
		Version:     Version,
		Description: "agentmesh skill registry: agent catalogue and matching",
		QueueGroup:  subjects.QueueRegistry,
	})
	if err != nil {
		return nil, fmt.Errorf("registry: add micro service: %w", err)
	}
	s.svc = svc
	s.work = newWorkload(cfg.AffinityWindow)
	s.cands = newCandidateCache(cfg.CandidateTTL)
	s.analyzer, s.skills = newAnalyzer(cfg.Analysis, s.log), deps.Skills
	if s.skills == nil {
		s.skills = NewBusCatalog(deps.NC, names, 0)
	}
	sem := make(chan struct{}, cfg.Concurrency)
	s.audit = bus.NewAuditor(deps.NC, names.AuditService(subjects.ServiceRegistry))
	add := func(op string, h micro.Handler) error {
		return svc.AddEndpoint(strings.ReplaceAll(op, ".", "-"), bus.Async(deps.NC, sem, s.audit.Wrap(h)),
			micro.WithEndpointSubject(names.Registry(op)), micro.WithEndpointQueueGroup(subjects.QueueRegistry))
	}
	endpoints := []struct {
		op string
		h  micro.Handler
	}{
		{subjects.RegistryMatch, bus.Handler(s.log, func() *busv1.MatchRequest { return &busv1.MatchRequest{} }, s.matchEffective)},
		{subjects.RegistryCreateAgent, bus.Handler(s.log, func() *busv1.AgentOp { return &busv1.AgentOp{} }, s.createAgent)},
		{subjects.RegistryGetAgent, bus.Handler(s.log, func() *busv1.AgentOp { return &busv1.AgentOp{} }, s.getAgent)},
		{subjects.RegistryListAgents, bus.Handler(s.log, func() *busv1.AgentOp { return &busv1.AgentOp{} }, s.listAgents)},
		{subjects.RegistryUpdateAgent, bus.Handler(s.log, func() *busv1.AgentOp { return &busv1.AgentOp{} }, s.updateAgent)},
		{subjects.RegistryDeleteAgent, bus.Handler(s.log, func() *busv1.AgentOp { return &busv1.AgentOp{} }, s.deleteAgent)},
	}
	endpoints = append(endpoints, s.skillEndpoints()...)
	for _, e := range endpoints {
		if err := add(e.op, e.h); err != nil {
			_ = svc.Stop()
			return nil, fmt.Errorf("registry: add endpoint %s: %w", e.op, err)
		}
	}
	// The server has the subscriptions once the flush returns.
	if err := deps.NC.FlushTimeout(10 * time.Second); err != nil {
		_ = svc.Stop()
		return nil, fmt.Errorf("registry: flush subscriptions: %w", err)
	}
	s.startFollowing(ctx, js)
	return s, nil
}

// startFollowing keeps the workload model and the candidate cache current
// (workload.go, agentcache.go) until Run stops them.
func (s *Service) startFollowing(ctx context.Context, js jetstream.JetStream) {
	followCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	s.stopFollow, s.followed = stop, make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { s.follow(followCtx, js) })
	wg.Go(func() { s.followAgents(followCtx, js) })
	go func() {
		wg.Wait()
		close(s.followed)
	}()
}

// Run serves until ctx ends, then stops serving and returns nil.
func (s *Service) Run(ctx context.Context) error {
	<-ctx.Done()
	s.stopFollow()
	<-s.followed
	// Handlers still finishing publish their records at once, alone.
	defer s.audit.Close()
	if err := s.svc.Stop(); err != nil {
		return fmt.Errorf("registry: stop: %w", err)
	}
	return nil
}

func (s *Service) stateReq(ctx context.Context, op string, req, resp proto.Message) error {
	return bus.Request(ctx, s.nc, s.names.State(op), req, resp)
}

// ---- catalogue ----

// scope returns the org an AgentOp acts for ("" = the shared agents).
func scope(op *busv1.AgentOp) (string, error) {
	switch {
	case op.GetShared() && op.GetOrg() != "":
		return "", bus.FieldError("org", "a shared agent operation names no org")
	case op.GetShared():
		return "", nil
	case op.GetOrg() == "":
		return "", bus.FieldError("org", "an agent operation must name the org it acts for")
	case !subjects.ValidToken(op.GetOrg()):
		return "", bus.FieldError("org", "%q is not a valid org", op.GetOrg())
	}
	return op.GetOrg(), nil
}

func wrongOp(want string) error {
	return bus.FieldError("op", "this subject takes an AgentOp with %s set", want)
}

// putAgent checks and stores org's agent a (create, or update at expected:
// 0 = any version), as putSkill does a skill.
func (s *Service) putAgent(ctx context.Context, org string, a *agentmeshv1.Agent, create bool, expected int64) (*agentmeshv1.Agent, error) {
	if err := agentspec.Agent(a); err != nil {
		return nil, err
	}
	a = proto.Clone(a).(*agentmeshv1.Agent)
	a.Org = org
	var resp busv1.PutAgentResponse
	if err := s.stateReq(ctx, subjects.StatePutAgent, &busv1.PutAgentRequest{Agent: a, Create: create, ExpectedVersion: expected}, &resp); err != nil {
		return nil, err
	}
	s.cands.invalidate(org)
	if create {
		s.log.Info("agent created", "org", org, "agent", resp.Agent.GetName())
	} else {
		s.log.Info("agent updated", "org", org, "agent", resp.Agent.GetName(), "version", resp.Agent.GetVersion())
	}
	return resp.Agent, nil
}

func (s *Service) createAgent(ctx context.Context, op *busv1.AgentOp) (*agentmeshv1.CreateAgentResponse, error) {
	org, err := scope(op)
	if err != nil {
		return nil, err
	}
	if op.GetCreate() == nil {
		return nil, wrongOp("create")
	}
	a, err := s.putAgent(ctx, org, op.GetCreate().GetAgent(), true, 0)
	if err != nil {
		return nil, err
	}
	return &agentmeshv1.CreateAgentResponse{Agent: a}, nil
}

func (s *Service) updateAgent(ctx context.Context, op *busv1.AgentOp) (*agentmeshv1.UpdateAgentResponse, error) {
	org, err := scope(op)
	if err != nil {
		return nil, err
	}
	req := op.GetUpdate()
	if req == nil {
		return nil, wrongOp("update")
	}
	a, err := s.putAgent(ctx, org, req.GetAgent(), false, req.ExpectedVersion)
	if err != nil {
		return nil, err
	}
	return &agentmeshv1.UpdateAgentResponse{Agent: a}, nil
}

func (s *Service) getAgent(ctx context.Context, op *busv1.AgentOp) (*agentmeshv1.GetAgentResponse, error) {
	org, err := scope(op)
	if err != nil {
		return nil, err
	}
	req := op.GetGet()
	if req == nil {
		return nil, wrongOp("get")
	}
	if err := agentspec.Name("name", req.GetName()); err != nil {
		return nil, err
	}
	if req.GetVersion() < 0 {
		return nil, bus.FieldError("version", "must not be negative")
	}
	var resp busv1.GetAgentResponse
	if err := s.stateReq(ctx, subjects.StateGetAgent, &busv1.GetAgentRequest{Name: req.Name, Org: org, Version: req.Version}, &resp); err != nil {
		return nil, err
	}
	return &agentmeshv1.GetAgentResponse{Agent: resp.Agent}, nil
}

func (s *Service) listAgents(ctx context.Context, op *busv1.AgentOp) (*agentmeshv1.ListAgentsResponse, error) {
	org, err := scope(op)
	if err != nil {
		return nil, err
	}
	req := op.GetList()
	if req == nil {
		return nil, wrongOp("list")
	}
	if req.PageSize < 0 || req.PageSize > 1000 {
		return nil, bus.FieldError("page_size", "must be between 0 and 1000")
	}
	var resp busv1.ListAgentsResponse
	if err := s.stateReq(ctx, subjects.StateListAgents, &busv1.ListAgentsRequest{Org: org, Skill: req.Skill, PageSize: req.PageSize, PageToken: req.PageToken}, &resp); err != nil {
		return nil, err
	}
	return &agentmeshv1.ListAgentsResponse{Agents: resp.Agents, NextPageToken: resp.NextPageToken}, nil
}

func (s *Service) deleteAgent(ctx context.Context, op *busv1.AgentOp) (*agentmeshv1.DeleteAgentResponse, error) {
	org, err := scope(op)
	if err != nil {
		return nil, err
	}
	req := op.GetDelete()
	if req == nil {
		return nil, wrongOp("delete")
	}
	if err := agentspec.Name("name", req.GetName()); err != nil {
		return nil, err
	}
	if err := s.stateReq(ctx, subjects.StateDeleteAgent, &busv1.DeleteAgentRequest{Name: req.Name, Org: org}, &busv1.DeleteAgentResponse{}); err != nil {
		return nil, err
	}
	s.cands.invalidate(org)
	s.log.Info("agent deleted", "org", org, "agent", req.Name)
	return &agentmeshv1.DeleteAgentResponse{}, nil
}

// ---- matching ----

// DefaultAgent is the agent that runs tasks naming neither an agent nor
// skills, unless configured otherwise.
const DefaultAgent = "assistant"

func (s *Service) match(ctx context.Context, req *busv1.MatchRequest) (*busv1.MatchResponse, error) {
	if req.Agent == "" && len(req.RequiredSkills) == 0 {
		analysis, err := s.analyze(ctx, req)
		if err != nil {
			return nil, err
		}
		if len(analysis.GetSkills()) > 0 {
			resp, err := s.scoredMatch(ctx, req.Org, analysis.Skills, req.Limit, req.Propose)
			if err == nil {
				resp.Routing.Analysis = analysis
				return resp, nil
			}
			if !errors.Is(err, bus.ErrFailedPrecondition) {
				return nil, err
			}
			// No agent offers the skills found: the default agent runs
			// it, as for a task the catalogue says nothing about.
		}
		resp, err := s.match(ctx, &busv1.MatchRequest{Agent: s.defaultAgent, Org: req.Org})
		if err == nil {
			resp.Routing.Method = MethodDefault
			resp.Routing.Analysis = analysis
		}
		if errors.Is(err, bus.ErrFailedPrecondition) {
			return nil, &bus.Error{Code: bus.CodeFailedPrecondition, Field: "agent",
				Message: fmt.Sprintf("no agent or skills given and no default agent %q; name one, or create it (amctl agents create %s)", s.defaultAgent, s.defaultAgent)}
		}
		return resp, err
	}
	if req.Agent != "" {
		if len(req.RequiredSkills) > 0 {
			return nil, bus.FieldError("agent", "give an agent or required skills, not both")
		}
		agent, err := s.namedAgent(ctx, req.Org, req.Agent)
		if errors.Is(err, bus.ErrNotFound) {
			return nil, &bus.Error{Code: bus.CodeFailedPrecondition, Field: "agent", Message: fmt.Sprintf("no agent named %q", req.Agent)}
		}
		if err != nil {
			return nil, err
		}
		return &busv1.MatchResponse{Agent: agent, Candidates: []*busv1.MatchCandidate{{Agent: agent.Name, Score: 1}},
			Routing: &agentmeshv1.Routing{Method: MethodNamed, Chosen: agent.Name, Weights: s.weights.Proto(), DecidedAt: timestamppb.Now()}}, nil
	}
	required := agentspec.NormalizeSkills(req.RequiredSkills)
	if err := agentspec.Skills("required_skills", required); err != nil {
		return nil, err
	}
	return s.scoredMatch(ctx, req.Org, required, req.Limit, req.Propose)
}

// analyze runs the task analysis of a task naming neither agent nor
// skills: nil without a catalogue or an input.
func (s *Service) analyze(ctx context.Context, req *busv1.MatchRequest) (*agentmeshv1.TaskAnalysis, error) {
	if s.analyzer.cfg.Off || strings.TrimSpace(req.Input) == "" {
		return nil, nil
	}
	catalogue, err := s.skills.List(ctx, req.Org)
	if err != nil {
		return nil, fmt.Errorf("task analysis: skill catalogue: %w", err)
	}
	if len(catalogue) == 0 {
		return nil, nil
	}
	a := s.analyzer.Analyze(ctx, req.Input, catalogue)
	s.log.Debug("task analysed", "org", req.Org, "method", a.Method, "skills", a.Skills, "model_error", a.ModelError)
	return a, nil
}
