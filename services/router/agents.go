package router

import (
	"context"

	"github.com/agentmesh/agentmesh/pkg/agentspec"
	busv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/bus/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/subjects"
	"google.golang.org/protobuf/proto"
)

// agentServer implements agentmeshv1.AgentService by forwarding the API's
// own messages to the registry, which validates and stores agents, wrapped
// in a busv1.AgentOp naming the caller's org: an org key acts on its org's
// agents (and reads the shared ones), a platform key on the shared agents.
type agentServer struct {
	agentmeshv1.UnimplementedAgentServiceServer
	s *Service
}

// callerScope is what a catalogue operation (AgentOp, SkillOp) acts for: the
// caller's org, or with a platform key the shared catalogue.
func callerScope(ctx context.Context) (org string, shared bool) {
	c, _ := CallerFrom(ctx)
	if c.Role == RolePlatform {
		return "", true
	}
	return c.Org, false
}

// agentOp wraps a request for the registry with the caller's scope. (Op is
// a oneof whose interface is not exported: hence the switch.)
func agentOp(ctx context.Context, op any) *busv1.AgentOp {
	out := &busv1.AgentOp{}
	out.Org, out.Shared = callerScope(ctx)
	switch o := op.(type) {
	case *busv1.AgentOp_Create:
		out.Op = o
	case *busv1.AgentOp_Get:
		out.Op = o
	case *busv1.AgentOp_List:
		out.Op = o
	case *busv1.AgentOp_Update:
		out.Op = o
	case *busv1.AgentOp_Delete:
		out.Op = o
	case *busv1.AgentOp_Versions:
		out.Op = o
	}
	return out
}

// call is one RPC forwarded to the registry: the API method (for its
// errors), the registry operation, and what the request's checks found.
type call struct {
	method, op string
	check      error
}

// registry sends req (an AgentOp or a SkillOp) to c's registry operation
// after c's check passed.
func registry[Req, Resp proto.Message](ctx context.Context, s *Service, c call, req Req, resp Resp) (Resp, error) {
	var zero Resp
	if c.check != nil {
		return zero, toStatus(s.log, c.method, c.check)
	}
	if err := bus.Request(ctx, s.nc, s.names.Registry(c.op), req, resp); err != nil {
		return zero, toStatus(s.log, c.method, err)
	}
	return resp, nil
}

func (a *agentServer) CreateAgent(ctx context.Context, req *agentmeshv1.CreateAgentRequest) (*agentmeshv1.CreateAgentResponse, error) {
	return registry(ctx, a.s, call{"CreateAgent", subjects.RegistryCreateAgent, validateAgent(req.GetAgent())},
		agentOp(ctx, &busv1.AgentOp_Create{Create: req}), &agentmeshv1.CreateAgentResponse{})
}

func (a *agentServer) GetAgent(ctx context.Context, req *agentmeshv1.GetAgentRequest) (*agentmeshv1.GetAgentResponse, error) {
	check := checkName("name", req.GetName())
	if check == nil && req.GetVersion() < 0 {
		check = bus.FieldError("version", "must not be negative")
	}
	return registry(ctx, a.s, call{"GetAgent", subjects.RegistryGetAgent, check},
		agentOp(ctx, &busv1.AgentOp_Get{Get: req}), &agentmeshv1.GetAgentResponse{})
}

func (a *agentServer) ListAgents(ctx context.Context, req *agentmeshv1.ListAgentsRequest) (*agentmeshv1.ListAgentsResponse, error) {
	check := checkPageSize("page_size", req.GetPageSize())
	if check == nil {
		check = checkPageToken(req.GetPageToken())
	}
	if check == nil && req.GetSkill() != "" {
		req.Skill = agentspec.NormalizeSkills([]string{req.GetSkill()})[0]
		if !agentspec.ValidSkill(req.Skill) {
			check = bus.FieldError("skill", "must match %s", agentspec.SkillPattern)
		}
	}
	return registry(ctx, a.s, call{"ListAgents", subjects.RegistryListAgents, check},
		agentOp(ctx, &busv1.AgentOp_List{List: req}), &agentmeshv1.ListAgentsResponse{})
}

func (a *agentServer) UpdateAgent(ctx context.Context, req *agentmeshv1.UpdateAgentRequest) (*agentmeshv1.UpdateAgentResponse, error) {
	check := validateAgent(req.GetAgent())
	if check == nil && req.GetExpectedVersion() < 0 {
		check = bus.FieldError("expected_version", "must not be negative")
	}
	return registry(ctx, a.s, call{"UpdateAgent", subjects.RegistryUpdateAgent, check},
		agentOp(ctx, &busv1.AgentOp_Update{Update: req}), &agentmeshv1.UpdateAgentResponse{})
}

func (a *agentServer) DeleteAgent(ctx context.Context, req *agentmeshv1.DeleteAgentRequest) (*agentmeshv1.DeleteAgentResponse, error) {
	return registry(ctx, a.s, call{"DeleteAgent", subjects.RegistryDeleteAgent, checkName("name", req.GetName())},
		agentOp(ctx, &busv1.AgentOp_Delete{Delete: req}), &agentmeshv1.DeleteAgentResponse{})
}

// Bounds of MatchAgents.
const (
	defaultMatchLimit = 20
	maxMatchLimit     = 1000
	// submitRoutingCandidates is how many candidates a task's routing
	// keeps (the best ones).
	submitRoutingCandidates = 10
)

// MatchAgents ranks the agents for the required skills as SubmitTask
// would, with every candidate's breakdown, and submits nothing.
func (a *agentServer) MatchAgents(ctx context.Context, req *agentmeshv1.MatchAgentsRequest) (*agentmeshv1.MatchAgentsResponse, error) {
	skills := agentspec.NormalizeSkills(req.GetRequiredSkills())
	var check error
	switch {
	case len(skills) == 0:
		check = bus.FieldError("required_skills", "required")
	case req.GetLimit() < 0 || req.GetLimit() > maxMatchLimit:
		check = bus.FieldError("limit", "must be between 0 and %d", maxMatchLimit)
	default:
		check = agentspec.Skills("required_skills", skills)
	}
	if check != nil {
		return nil, toStatus(a.s.log, "MatchAgents", check)
	}
	limit := req.GetLimit()
	if limit == 0 {
		limit = defaultMatchLimit
	}
	var resp busv1.MatchResponse
	err := bus.Request(ctx, a.s.nc, a.s.names.Registry(subjects.RegistryMatch),
		&busv1.MatchRequest{RequiredSkills: skills, Org: orgFrom(ctx), Limit: limit, RoutingOnly: true}, &resp)
	if err != nil {
		return nil, toStatus(a.s.log, "MatchAgents", err)
	}
	return &agentmeshv1.MatchAgentsResponse{Routing: resp.GetRouting()}, nil
}
