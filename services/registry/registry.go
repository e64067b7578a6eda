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
// agent by the share of the required skills it offers (full scored matching
// with load, priority and affinity comes later); ties go to the agent with
// fewer skills (the more specialised), then by name.
package registry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"regexp"
	"sort"
	"strings"
	"time"

	busv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/bus/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/budget"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/mcp"
	"github.com/agentmesh/agentmesh/pkg/subjects"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"github.com/agentmesh/agentmesh/pkg/tools"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"google.golang.org/protobuf/proto"
)

// Version of the registry service, reported by micro.
const Version = "0.1.0"

// Config of the registry.
type Config struct {
	// Prefix of every subject ("" = subjects.DefaultPrefix).
	Prefix  string
	Streams bus.StreamOptions
	// Concurrency bounds requests served at once (default 256).
	Concurrency int
	// DefaultAgent runs tasks that name neither an agent nor skills
	// (default "assistant"; it must exist in the catalogue).
	DefaultAgent string
}

// Deps are the registry's required dependencies.
type Deps struct {
	NC  *nats.Conn
	Log *slog.Logger
}

// Service is a running registry.
type Service struct {
	defaultAgent string
	names        subjects.Names
	nc           *nats.Conn
	log          *slog.Logger
	svc          micro.Service
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
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 256
	}
	if cfg.DefaultAgent == "" {
		cfg.DefaultAgent = DefaultAgent
	}
	s := &Service{defaultAgent: cfg.DefaultAgent, names: names, nc: deps.NC, log: deps.Log.With("service", "registry")}
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
	sem := make(chan struct{}, cfg.Concurrency)
	add := func(op string, h micro.Handler) error {
		return svc.AddEndpoint(strings.ReplaceAll(op, ".", "-"), bus.Async(deps.NC, sem, bus.Audited(deps.NC, names.Audit(names.Registry(op)), h)),
			micro.WithEndpointSubject(names.Registry(op)), micro.WithEndpointQueueGroup(subjects.QueueRegistry))
	}
	endpoints := []struct {
		op string
		h  micro.Handler
	}{
		{subjects.RegistryMatch, bus.Handler(s.log, func() *busv1.MatchRequest { return &busv1.MatchRequest{} }, s.match)},
		{subjects.RegistryCreateAgent, bus.Handler(s.log, func() *busv1.AgentOp { return &busv1.AgentOp{} }, s.createAgent)},
		{subjects.RegistryGetAgent, bus.Handler(s.log, func() *busv1.AgentOp { return &busv1.AgentOp{} }, s.getAgent)},
		{subjects.RegistryListAgents, bus.Handler(s.log, func() *busv1.AgentOp { return &busv1.AgentOp{} }, s.listAgents)},
		{subjects.RegistryUpdateAgent, bus.Handler(s.log, func() *busv1.AgentOp { return &busv1.AgentOp{} }, s.updateAgent)},
		{subjects.RegistryDeleteAgent, bus.Handler(s.log, func() *busv1.AgentOp { return &busv1.AgentOp{} }, s.deleteAgent)},
	}
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
	return s, nil
}

// Run serves until ctx ends, then stops serving and returns nil.
func (s *Service) Run(ctx context.Context) error {
	<-ctx.Done()
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

func (s *Service) createAgent(ctx context.Context, op *busv1.AgentOp) (*agentmeshv1.CreateAgentResponse, error) {
	org, err := scope(op)
	if err != nil {
		return nil, err
	}
	if op.GetCreate() == nil {
		return nil, wrongOp("create")
	}
	if err := ValidateAgent(op.GetCreate().GetAgent()); err != nil {
		return nil, err
	}
	a := proto.Clone(op.GetCreate().GetAgent()).(*agentmeshv1.Agent)
	a.Org = org
	var resp busv1.PutAgentResponse
	if err := s.stateReq(ctx, subjects.StatePutAgent, &busv1.PutAgentRequest{Agent: a, Create: true}, &resp); err != nil {
		return nil, err
	}
	s.log.Info("agent created", "org", org, "agent", resp.Agent.GetName())
	return &agentmeshv1.CreateAgentResponse{Agent: resp.Agent}, nil
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
	if err := ValidateAgent(req.GetAgent()); err != nil {
		return nil, err
	}
	a := proto.Clone(req.GetAgent()).(*agentmeshv1.Agent)
	a.Org = org
	var resp busv1.PutAgentResponse
	if err := s.stateReq(ctx, subjects.StatePutAgent, &busv1.PutAgentRequest{Agent: a, ExpectedVersion: req.ExpectedVersion}, &resp); err != nil {
		return nil, err
	}
	s.log.Info("agent updated", "org", org, "agent", resp.Agent.GetName(), "version", resp.Agent.GetVersion())
	return &agentmeshv1.UpdateAgentResponse{Agent: resp.Agent}, nil
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
	if err := validateName("name", req.GetName()); err != nil {
		return nil, err
	}
	var resp busv1.GetAgentResponse
	if err := s.stateReq(ctx, subjects.StateGetAgent, &busv1.GetAgentRequest{Name: req.Name, Org: org}, &resp); err != nil {
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
	if err := validateName("name", req.GetName()); err != nil {
		return nil, err
	}
	if err := s.stateReq(ctx, subjects.StateDeleteAgent, &busv1.DeleteAgentRequest{Name: req.Name, Org: org}, &busv1.DeleteAgentResponse{}); err != nil {
		return nil, err
	}
	s.log.Info("agent deleted", "org", org, "agent", req.Name)
	return &agentmeshv1.DeleteAgentResponse{}, nil
}

// ---- matching ----

// DefaultAgent is the agent that runs tasks naming neither an agent nor
// skills, unless configured otherwise.
const DefaultAgent = "assistant"

func (s *Service) match(ctx context.Context, req *busv1.MatchRequest) (*busv1.MatchResponse, error) {
	if req.Agent == "" && len(req.RequiredSkills) == 0 {
		resp, err := s.match(ctx, &busv1.MatchRequest{Agent: s.defaultAgent, Org: req.Org})
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
		var resp busv1.GetAgentResponse
		err := s.stateReq(ctx, subjects.StateGetAgent, &busv1.GetAgentRequest{Name: req.Agent, Org: req.Org}, &resp)
		if errors.Is(err, bus.ErrNotFound) {
			return nil, &bus.Error{Code: bus.CodeFailedPrecondition, Field: "agent", Message: fmt.Sprintf("no agent named %q", req.Agent)}
		}
		if err != nil {
			return nil, err
		}
		return &busv1.MatchResponse{Agent: resp.Agent, Candidates: []*busv1.MatchCandidate{{Agent: resp.Agent.Name, Score: 1}}}, nil
	}
	agents, err := s.allAgents(ctx, req.Org)
	if err != nil {
		return nil, err
	}
	best, cands := Rank(agents, req.RequiredSkills)
	if best == nil {
		return nil, &bus.Error{Code: bus.CodeFailedPrecondition, Field: "required_skills",
			Message: fmt.Sprintf("no agent offers any of the skills %s", strings.Join(req.RequiredSkills, ", "))}
	}
	s.log.Debug("matched", "skills", req.RequiredSkills, "agent", best.Name, "score", cands[0].Score)
	return &busv1.MatchResponse{Agent: best, Candidates: cands}, nil
}

// allAgents lists org's agents and the shared ones; an org's own agent
// hides a shared one of the same name.
func (s *Service) allAgents(ctx context.Context, org string) ([]*agentmeshv1.Agent, error) {
	var all []*agentmeshv1.Agent
	token := ""
	for {
		var resp busv1.ListAgentsResponse
		if err := s.stateReq(ctx, subjects.StateListAgents, &busv1.ListAgentsRequest{Org: org, PageSize: 1000, PageToken: token}, &resp); err != nil {
			return nil, err
		}
		all = append(all, resp.Agents...)
		if resp.NextPageToken == "" {
			own := map[string]bool{}
			for _, a := range all {
				if a.Org != "" {
					own[a.Name] = true
				}
			}
			out := all[:0]
			for _, a := range all {
				if a.Org != "" || !own[a.Name] {
					out = append(out, a)
				}
			}
			return out, nil
		}
		token = resp.NextPageToken
	}
}

// Rank scores every agent against the required skills: the share of the
// required skills it offers. It returns the best agent (nil when no agent
// offers any) and the candidates that offer at least one, best first.
func Rank(agents []*agentmeshv1.Agent, required []string) (*agentmeshv1.Agent, []*busv1.MatchCandidate) {
	type scored struct {
		a     *agentmeshv1.Agent
		c     *busv1.MatchCandidate
		extra int
	}
	want := map[string]bool{}
	for _, s := range required {
		want[strings.ToLower(strings.TrimSpace(s))] = true
	}
	var list []scored
	for _, a := range agents {
		var matched []string
		for _, sk := range a.Skills {
			if want[strings.ToLower(sk)] {
				matched = append(matched, sk)
			}
		}
		if len(matched) == 0 {
			continue
		}
		list = append(list, scored{a: a, extra: len(a.Skills) - len(matched), c: &busv1.MatchCandidate{
			Agent: a.Name, Score: float64(len(matched)) / float64(len(want)), MatchedSkills: matched,
		}})
	}
	sort.SliceStable(list, func(i, j int) bool {
		if list[i].c.Score != list[j].c.Score {
			return list[i].c.Score > list[j].c.Score
		}
		if list[i].extra != list[j].extra {
			return list[i].extra < list[j].extra
		}
		return list[i].a.Name < list[j].a.Name
	})
	if len(list) == 0 {
		return nil, nil
	}
	cands := make([]*busv1.MatchCandidate, len(list))
	for i := range list {
		cands[i] = list[i].c
	}
	return list[0].a, cands
}

// ---- validation ----

var (
	nameRE  = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)
	skillRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_.:/-]{0,63}$`)
)

// Limits of an agent definition.
const (
	MaxSystemPrompt = 64 << 10
	MaxDescription  = 4 << 10
	MaxSkills       = 64
	MaxTools        = 64
	MaxSteps        = 1000
)

func validateName(field, name string) error {
	if name == "" {
		return bus.FieldError(field, "required")
	}
	if !nameRE.MatchString(name) {
		return bus.FieldError(field, "must match [a-z0-9][a-z0-9_-]{0,62}, got %q", name)
	}
	return nil
}

// ValidateAgent checks an agent definition and names the first bad field.
func ValidateAgent(a *agentmeshv1.Agent) error {
	if a == nil {
		return bus.FieldError("agent", "required")
	}
	if err := validateName("agent.name", a.Name); err != nil {
		return err
	}
	if len(a.Description) > MaxDescription {
		return &bus.Error{Code: bus.CodeResourceExhausted, Field: "agent.description", Message: fmt.Sprintf("longer than %d bytes", MaxDescription)}
	}
	if len(a.SystemPrompt) > MaxSystemPrompt {
		return &bus.Error{Code: bus.CodeResourceExhausted, Field: "agent.system_prompt", Message: fmt.Sprintf("longer than %d bytes", MaxSystemPrompt)}
	}
	if len(a.Skills) > MaxSkills {
		return &bus.Error{Code: bus.CodeResourceExhausted, Field: "agent.skills", Message: fmt.Sprintf("more than %d skills", MaxSkills)}
	}
	seen := map[string]bool{}
	for i, sk := range a.Skills {
		if !skillRE.MatchString(sk) {
			return bus.FieldError(fmt.Sprintf("agent.skills[%d]", i), "must be lower-case letters, digits and _.:/- (1-64), got %q", sk)
		}
		if seen[sk] {
			return bus.FieldError(fmt.Sprintf("agent.skills[%d]", i), "duplicate skill %q", sk)
		}
		seen[sk] = true
	}
	if len(a.Tools) > MaxTools {
		return &bus.Error{Code: bus.CodeResourceExhausted, Field: "agent.tools", Message: fmt.Sprintf("more than %d tools", MaxTools)}
	}
	for i, t := range a.Tools {
		if _, ok := tools.Lookup(t); !ok {
			return &bus.Error{Code: bus.CodeFailedPrecondition, Field: fmt.Sprintf("agent.tools[%d]", i), Message: fmt.Sprintf("unknown tool %q", t)}
		}
	}
	if len(a.McpServers) > mcp.MaxServers {
		return &bus.Error{Code: bus.CodeResourceExhausted, Field: "agent.mcp_servers", Message: fmt.Sprintf("more than %d MCP servers", mcp.MaxServers)}
	}
	servers := map[string]bool{}
	for i, m := range a.McpServers {
		if err := mcp.Validate(m); err != nil {
			return bus.FieldError(fmt.Sprintf("agent.mcp_servers[%d]", i), "%v", err)
		}
		if servers[m.Name] {
			return bus.FieldError(fmt.Sprintf("agent.mcp_servers[%d]", i), "duplicate MCP server %q", m.Name)
		}
		servers[m.Name] = true
	}
	if a.MaxConcurrency < 0 {
		return bus.FieldError("agent.max_concurrency", "must not be negative")
	}
	if err := taskstate.ValidateRetryPolicy("agent.retry_policy", a.RetryPolicy); err != nil {
		return err
	}
	if err := taskstate.ValidateQueueTimeout("agent.queue_timeout", a.QueueTimeout); err != nil {
		return err
	}
	if a.MaxSteps < 0 || a.MaxSteps > MaxSteps {
		return bus.FieldError("agent.max_steps", "must be between 0 and %d", MaxSteps)
	}
	if err := budget.Validate("agent.budget", a.Budget); err != nil {
		return err
	}
	if m := a.Model; m != nil {
		if m.BaseUrl != "" {
			u, err := url.Parse(m.BaseUrl)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				return bus.FieldError("agent.model.base_url", "must be an http or https URL, got %q", m.BaseUrl)
			}
		}
		if m.Temperature != nil && (*m.Temperature < 0 || *m.Temperature > 2) {
			return bus.FieldError("agent.model.temperature", "must be between 0 and 2")
		}
		if m.MaxTokens < 0 {
			return bus.FieldError("agent.model.max_tokens", "must not be negative")
		}
		if len(m.Model) > 256 {
			return bus.FieldError("agent.model.model", "longer than 256 bytes")
		}
	}
	return nil
}
