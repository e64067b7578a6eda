package router

import (
	"context"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/subjects"
	"google.golang.org/protobuf/proto"
)

// agentServer implements agentmeshv1.AgentService by forwarding the API's
// own messages to the registry, which validates and stores agents.
type agentServer struct {
	agentmeshv1.UnimplementedAgentServiceServer
	s *Service
}

// registry sends req to a registry operation after check passes.
func registry[Resp proto.Message](ctx context.Context, s *Service, method, op string, check error, req proto.Message, resp Resp) (Resp, error) {
	var zero Resp
	if check != nil {
		return zero, toStatus(s.log, method, check)
	}
	if err := bus.Request(ctx, s.nc, s.names.Registry(op), req, resp); err != nil {
		return zero, toStatus(s.log, method, err)
	}
	return resp, nil
}

func (a *agentServer) CreateAgent(ctx context.Context, req *agentmeshv1.CreateAgentRequest) (*agentmeshv1.CreateAgentResponse, error) {
	return registry(ctx, a.s, "CreateAgent", subjects.RegistryCreateAgent,
		validateAgent(req.GetAgent()), req, &agentmeshv1.CreateAgentResponse{})
}

func (a *agentServer) GetAgent(ctx context.Context, req *agentmeshv1.GetAgentRequest) (*agentmeshv1.GetAgentResponse, error) {
	return registry(ctx, a.s, "GetAgent", subjects.RegistryGetAgent,
		checkName("name", req.GetName()), req, &agentmeshv1.GetAgentResponse{})
}

func (a *agentServer) ListAgents(ctx context.Context, req *agentmeshv1.ListAgentsRequest) (*agentmeshv1.ListAgentsResponse, error) {
	check := checkPageSize("page_size", req.GetPageSize())
	if check == nil {
		check = checkPageToken(req.GetPageToken())
	}
	if check == nil && req.GetSkill() != "" && checkSkills("skill", []string{req.GetSkill()}) != nil {
		check = bus.FieldError("skill", "must be 1-%d bytes without spaces or control characters", maxSkillBytes)
	}
	return registry(ctx, a.s, "ListAgents", subjects.RegistryListAgents, check, req, &agentmeshv1.ListAgentsResponse{})
}

func (a *agentServer) UpdateAgent(ctx context.Context, req *agentmeshv1.UpdateAgentRequest) (*agentmeshv1.UpdateAgentResponse, error) {
	check := validateAgent(req.GetAgent())
	if check == nil && req.GetExpectedVersion() < 0 {
		check = bus.FieldError("expected_version", "must not be negative")
	}
	return registry(ctx, a.s, "UpdateAgent", subjects.RegistryUpdateAgent, check, req, &agentmeshv1.UpdateAgentResponse{})
}

func (a *agentServer) DeleteAgent(ctx context.Context, req *agentmeshv1.DeleteAgentRequest) (*agentmeshv1.DeleteAgentResponse, error) {
	return registry(ctx, a.s, "DeleteAgent", subjects.RegistryDeleteAgent,
		checkName("name", req.GetName()), req, &agentmeshv1.DeleteAgentResponse{})
}
