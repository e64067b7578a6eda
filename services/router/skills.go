package router

import (
	"context"

	"github.com/agentmesh/agentmesh/pkg/agentspec"
	busv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/bus/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/subjects"
)

// skillServer implements agentmeshv1.SkillService by forwarding the API's
// messages to the registry in a busv1.SkillOp naming the caller's org (a
// platform key: the shared skills), as agentServer does for agents. Every
// request is checked first with the one validator, pkg/agentspec.
type skillServer struct {
	agentmeshv1.UnimplementedSkillServiceServer
	s *Service
}

// skillOp wraps a request for the registry with the caller's scope.
func skillOp(ctx context.Context, op any) *busv1.SkillOp {
	out := &busv1.SkillOp{}
	out.Org, out.Shared = callerScope(ctx)
	switch o := op.(type) {
	case *busv1.SkillOp_Create:
		out.Op = o
	case *busv1.SkillOp_Get:
		out.Op = o
	case *busv1.SkillOp_List:
		out.Op = o
	case *busv1.SkillOp_Update:
		out.Op = o
	case *busv1.SkillOp_Delete:
		out.Op = o
	}
	return out
}

// ValidateSkillRequest checks a skill write (create or update) as the
// router does before anything goes on the bus.
func ValidateSkillRequest(sk *agentmeshv1.Skill, expectedVersion int64) error {
	if expectedVersion < 0 {
		return bus.FieldError("expected_version", "must not be negative")
	}
	return agentspec.Skill(sk)
}

func (k *skillServer) CreateSkill(ctx context.Context, req *agentmeshv1.CreateSkillRequest) (*agentmeshv1.CreateSkillResponse, error) {
	return registry(ctx, k.s, call{"CreateSkill", subjects.RegistryCreateSkill, ValidateSkillRequest(req.GetSkill(), 0)},
		skillOp(ctx, &busv1.SkillOp_Create{Create: req}), &agentmeshv1.CreateSkillResponse{})
}

func (k *skillServer) GetSkill(ctx context.Context, req *agentmeshv1.GetSkillRequest) (*agentmeshv1.GetSkillResponse, error) {
	return registry(ctx, k.s, call{"GetSkill", subjects.RegistryGetSkill, agentspec.SkillName("name", req.GetName())},
		skillOp(ctx, &busv1.SkillOp_Get{Get: req}), &agentmeshv1.GetSkillResponse{})
}

func (k *skillServer) ListSkills(ctx context.Context, req *agentmeshv1.ListSkillsRequest) (*agentmeshv1.ListSkillsResponse, error) {
	check := checkPageSize("page_size", req.GetPageSize())
	if check == nil {
		check = checkPageToken(req.GetPageToken())
	}
	return registry(ctx, k.s, call{"ListSkills", subjects.RegistryListSkills, check},
		skillOp(ctx, &busv1.SkillOp_List{List: req}), &agentmeshv1.ListSkillsResponse{})
}

func (k *skillServer) UpdateSkill(ctx context.Context, req *agentmeshv1.UpdateSkillRequest) (*agentmeshv1.UpdateSkillResponse, error) {
	return registry(ctx, k.s, call{"UpdateSkill", subjects.RegistryUpdateSkill, ValidateSkillRequest(req.GetSkill(), req.GetExpectedVersion())},
		skillOp(ctx, &busv1.SkillOp_Update{Update: req}), &agentmeshv1.UpdateSkillResponse{})
}

func (k *skillServer) DeleteSkill(ctx context.Context, req *agentmeshv1.DeleteSkillRequest) (*agentmeshv1.DeleteSkillResponse, error) {
	return registry(ctx, k.s, call{"DeleteSkill", subjects.RegistryDeleteSkill, agentspec.SkillName("name", req.GetName())},
		skillOp(ctx, &busv1.SkillOp_Delete{Delete: req}), &agentmeshv1.DeleteSkillResponse{})
}

// ListAgentVersions lists an agent's recorded versions, newest first.
func (a *agentServer) ListAgentVersions(ctx context.Context, req *agentmeshv1.ListAgentVersionsRequest) (*agentmeshv1.ListAgentVersionsResponse, error) {
	check := checkName("name", req.GetName())
	if check == nil {
		check = checkPageSize("page_size", req.GetPageSize())
	}
	if check == nil {
		check = checkPageToken(req.GetPageToken())
	}
	return registry(ctx, a.s, call{"ListAgentVersions", subjects.RegistryAgentVersions, check},
		agentOp(ctx, &busv1.AgentOp_Versions{Versions: req}), &agentmeshv1.ListAgentVersionsResponse{})
}
