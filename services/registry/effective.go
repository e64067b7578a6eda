package registry

import (
	"context"
	"fmt"

	"github.com/agentmesh/agentmesh/pkg/agentspec"
	busv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/bus/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/subjects"
)

// Effective settings: the agent a match answers is the catalogue's agent
// with its skills applied (agentspec.Effective): their prompt templates
// end its system prompt, their required tools join its tools (never one
// its tool policies deny) and applied_skills names each skill's version.
// The router records that agent on the task (Task.agent_spec) when it
// accepts it, so a task keeps the agent and skill versions it was
// accepted with through retries, and a later change to either applies to
// later tasks only. The skills are resolved exactly (<p>.state.skill.
// resolve: the agent's org's skill of each name, else the shared one),
// not from the analysis cache.

// matchEffective is the match endpoint: match, then the chosen agent's
// effective settings unless only the routing is wanted.
func (s *Service) matchEffective(ctx context.Context, req *busv1.MatchRequest) (*busv1.MatchResponse, error) {
	resp, err := s.match(ctx, req)
	if err != nil || req.RoutingOnly || resp.GetAgent() == nil {
		return resp, err
	}
	eff, err := s.effective(ctx, resp.Agent)
	if err != nil {
		return nil, err
	}
	resp.Agent = eff
	return resp, nil
}

// effective applies a's skills to a.
func (s *Service) effective(ctx context.Context, a *agentmeshv1.Agent) (*agentmeshv1.Agent, error) {
	if len(a.GetSkills()) == 0 {
		return agentspec.Effective(a, nil), nil
	}
	var resolved busv1.ResolveSkillsResponse
	if err := s.stateReq(ctx, subjects.StateResolveSkills, &busv1.ResolveSkillsRequest{Org: a.GetOrg(), Names: a.GetSkills()}, &resolved); err != nil {
		return nil, fmt.Errorf("resolve the skills of agent %q: %w", a.GetName(), err)
	}
	return agentspec.Effective(a, resolved.Skills), nil
}
