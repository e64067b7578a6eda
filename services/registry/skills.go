package registry

import (
	"context"

	"github.com/agentmesh/agentmesh/pkg/agentspec"
	busv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/bus/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/subjects"
	"github.com/nats-io/nats.go/micro"
	"google.golang.org/protobuf/proto"
)

// The skill catalogue (seed 001's AgentSkill):
//
//	<p>.registry.skills.create   busv1.SkillOp{create} → agentmeshv1.CreateSkillResponse
//	<p>.registry.skills.get      busv1.SkillOp{get} → agentmeshv1.GetSkillResponse
//	<p>.registry.skills.list     busv1.SkillOp{list} → agentmeshv1.ListSkillsResponse
//	<p>.registry.skills.update   busv1.SkillOp{update} → agentmeshv1.UpdateSkillResponse
//	<p>.registry.skills.delete   busv1.SkillOp{delete} → agentmeshv1.DeleteSkillResponse
//	<p>.registry.agents.versions busv1.AgentOp{versions} → agentmeshv1.ListAgentVersionsResponse
//
// Skills belong to orgs as agents do (SkillOp.org from the caller's key;
// shared for a platform key). The registry checks them with
// agentspec.Skill and stores them through the state service.

func (s *Service) skillEndpoints() []struct {
	op string
	h  micro.Handler
} {
	newOp := func() *busv1.SkillOp { return &busv1.SkillOp{} }
	return []struct {
		op string
		h  micro.Handler
	}{
		{subjects.RegistryCreateSkill, bus.Handler(s.log, newOp, s.createSkill)},
		{subjects.RegistryGetSkill, bus.Handler(s.log, newOp, s.getSkill)},
		{subjects.RegistryListSkills, bus.Handler(s.log, newOp, s.listSkills)},
		{subjects.RegistryUpdateSkill, bus.Handler(s.log, newOp, s.updateSkill)},
		{subjects.RegistryDeleteSkill, bus.Handler(s.log, newOp, s.deleteSkill)},
		{subjects.RegistryAgentVersions, bus.Handler(s.log, func() *busv1.AgentOp { return &busv1.AgentOp{} }, s.agentVersions)},
	}
}

// skillScope returns the org a SkillOp acts for ("" = the shared skills).
func skillScope(op *busv1.SkillOp) (string, error) {
	return scope(&busv1.AgentOp{Org: op.GetOrg(), Shared: op.GetShared()})
}

func wrongSkillOp(want string) error {
	return bus.FieldError("op", "this subject takes a SkillOp with %s set", want)
}

func (s *Service) putSkill(ctx context.Context, org string, sk *agentmeshv1.Skill, create bool, expected int64) (*agentmeshv1.Skill, error) {
	if err := agentspec.Skill(sk); err != nil {
		return nil, err
	}
	if expected < 0 {
		return nil, bus.FieldError("expected_version", "must not be negative")
	}
	sk = proto.Clone(sk).(*agentmeshv1.Skill)
	sk.Org = org
	var resp busv1.PutSkillResponse
	if err := s.stateReq(ctx, subjects.StatePutSkill, &busv1.PutSkillRequest{Skill: sk, Create: create, ExpectedVersion: expected}, &resp); err != nil {
		return nil, err
	}
	s.skillsChanged(org)
	s.log.Info("skill stored", "org", org, "skill", resp.Skill.GetName(), "version", resp.Skill.GetVersion())
	return resp.Skill, nil
}

func (s *Service) createSkill(ctx context.Context, op *busv1.SkillOp) (*agentmeshv1.CreateSkillResponse, error) {
	org, err := skillScope(op)
	if err != nil {
		return nil, err
	}
	if op.GetCreate() == nil {
		return nil, wrongSkillOp("create")
	}
	sk, err := s.putSkill(ctx, org, op.GetCreate().GetSkill(), true, 0)
	if err != nil {
		return nil, err
	}
	return &agentmeshv1.CreateSkillResponse{Skill: sk}, nil
}

func (s *Service) updateSkill(ctx context.Context, op *busv1.SkillOp) (*agentmeshv1.UpdateSkillResponse, error) {
	org, err := skillScope(op)
	if err != nil {
		return nil, err
	}
	req := op.GetUpdate()
	if req == nil {
		return nil, wrongSkillOp("update")
	}
	sk, err := s.putSkill(ctx, org, req.GetSkill(), false, req.GetExpectedVersion())
	if err != nil {
		return nil, err
	}
	return &agentmeshv1.UpdateSkillResponse{Skill: sk}, nil
}

func (s *Service) getSkill(ctx context.Context, op *busv1.SkillOp) (*agentmeshv1.GetSkillResponse, error) {
	org, err := skillScope(op)
	if err != nil {
		return nil, err
	}
	req := op.GetGet()
	if req == nil {
		return nil, wrongSkillOp("get")
	}
	if err := agentspec.SkillName("name", req.GetName()); err != nil {
		return nil, err
	}
	var resp busv1.GetSkillResponse
	if err := s.stateReq(ctx, subjects.StateGetSkill, &busv1.GetSkillRequest{Org: org, Name: req.Name}, &resp); err != nil {
		return nil, err
	}
	return &agentmeshv1.GetSkillResponse{Skill: resp.Skill}, nil
}

func (s *Service) listSkills(ctx context.Context, op *busv1.SkillOp) (*agentmeshv1.ListSkillsResponse, error) {
	org, err := skillScope(op)
	if err != nil {
		return nil, err
	}
	req := op.GetList()
	if req == nil {
		return nil, wrongSkillOp("list")
	}
	if req.PageSize < 0 || req.PageSize > 1000 {
		return nil, bus.FieldError("page_size", "must be between 0 and 1000")
	}
	var resp busv1.ListSkillsResponse
	if err := s.stateReq(ctx, subjects.StateListSkills, &busv1.ListSkillsRequest{Org: org, PageSize: req.PageSize, PageToken: req.PageToken}, &resp); err != nil {
		return nil, err
	}
	return &agentmeshv1.ListSkillsResponse{Skills: resp.Skills, NextPageToken: resp.NextPageToken}, nil
}

func (s *Service) deleteSkill(ctx context.Context, op *busv1.SkillOp) (*agentmeshv1.DeleteSkillResponse, error) {
	org, err := skillScope(op)
	if err != nil {
		return nil, err
	}
	req := op.GetDelete()
	if req == nil {
		return nil, wrongSkillOp("delete")
	}
	if err := agentspec.SkillName("name", req.GetName()); err != nil {
		return nil, err
	}
	if err := s.stateReq(ctx, subjects.StateDeleteSkill, &busv1.DeleteSkillRequest{Org: org, Name: req.Name}, &busv1.DeleteSkillResponse{}); err != nil {
		return nil, err
	}
	s.skillsChanged(org)
	s.log.Info("skill deleted", "org", org, "skill", req.Name)
	return &agentmeshv1.DeleteSkillResponse{}, nil
}

func (s *Service) agentVersions(ctx context.Context, op *busv1.AgentOp) (*agentmeshv1.ListAgentVersionsResponse, error) {
	org, err := scope(op)
	if err != nil {
		return nil, err
	}
	req := op.GetVersions()
	if req == nil {
		return nil, wrongOp("versions")
	}
	if err := agentspec.Name("name", req.GetName()); err != nil {
		return nil, err
	}
	if req.PageSize < 0 || req.PageSize > 1000 {
		return nil, bus.FieldError("page_size", "must be between 0 and 1000")
	}
	var resp busv1.ListAgentVersionsResponse
	err = s.stateReq(ctx, subjects.StateAgentVersions, &busv1.ListAgentVersionsRequest{Org: org, Name: req.Name, PageSize: req.PageSize, PageToken: req.PageToken}, &resp)
	if err != nil {
		return nil, err
	}
	return &agentmeshv1.ListAgentVersionsResponse{Versions: resp.Versions, NextPageToken: resp.NextPageToken}, nil
}
