package state

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/agentmesh/agentmesh/pkg/agentspec"
	busv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/bus/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/subjects"
	"github.com/agentmesh/agentmesh/services/state/store"
	"github.com/nats-io/nats.go/micro"
)

// The skill catalogue and agent versions (<p>.state.skill.*,
// <p>.state.agent.versions). Skills belong to orgs like agents: an org
// reads its own and the shared ones (org ""), changes only its own; an
// org's skill of a name hides the shared one of that name for the org's
// agents.

// maxOfferingNames bounds the agents a refused skill delete names.
const maxOfferingNames = 10

func (s *Service) skillEndpoints() []struct {
	op string
	h  micro.Handler
} {
	return []struct {
		op string
		h  micro.Handler
	}{
		{subjects.StatePutSkill, bus.Handler(s.log, func() *busv1.PutSkillRequest { return &busv1.PutSkillRequest{} }, s.putSkill)},
		{subjects.StateGetSkill, bus.Handler(s.log, func() *busv1.GetSkillRequest { return &busv1.GetSkillRequest{} }, s.getSkill)},
		{subjects.StateListSkills, bus.Handler(s.log, func() *busv1.ListSkillsRequest { return &busv1.ListSkillsRequest{} }, s.listSkills)},
		{subjects.StateDeleteSkill, bus.Handler(s.log, func() *busv1.DeleteSkillRequest { return &busv1.DeleteSkillRequest{} }, s.deleteSkill)},
		{subjects.StateResolveSkills, bus.Handler(s.log, func() *busv1.ResolveSkillsRequest { return &busv1.ResolveSkillsRequest{} }, s.resolveSkills)},
		{subjects.StateAgentVersions, bus.Handler(s.log, func() *busv1.ListAgentVersionsRequest { return &busv1.ListAgentVersionsRequest{} }, s.listAgentVersions)},
	}
}

func checkOrg(org string) error {
	if org != "" && !subjects.ValidToken(org) {
		return bus.FieldError("org", "%q is not a valid org", org)
	}
	return nil
}

func (s *Service) putSkill(ctx context.Context, req *busv1.PutSkillRequest) (*busv1.PutSkillResponse, error) {
	sk := req.GetSkill()
	switch {
	case sk == nil:
		return nil, bus.FieldError("skill", "a skill is required")
	case sk.Org != "" && !subjects.ValidToken(sk.Org):
		return nil, bus.FieldError("skill.org", "%q is not a valid org", sk.Org)
	case req.ExpectedVersion < 0:
		return nil, bus.FieldError("expected_version", "must not be negative")
	}
	// The one rule for skills (the router and the registry check it too).
	if err := agentspec.Skill(sk); err != nil {
		return nil, err
	}
	got, err := s.store.PutSkill(ctx, sk, req.Create, req.ExpectedVersion)
	if errors.Is(err, bus.ErrNotFound) && !req.Create {
		err = s.sharedSkillOnly(ctx, sk.Org, sk.Name, "change", err)
	}
	if err != nil {
		return nil, fmt.Errorf("put skill %q: %w", sk.Name, err)
	}
	return &busv1.PutSkillResponse{Skill: got}, nil
}

// sharedSkillOnly turns notFound into permission_denied when name is a
// shared skill's: an org reads the shared skills but never changes them.
func (s *Service) sharedSkillOnly(ctx context.Context, org, name, verb string, notFound error) error {
	if org == "" {
		return notFound
	}
	if _, err := s.store.GetSkill(ctx, "", name); err != nil {
		return notFound
	}
	return bus.Errorf(bus.CodePermissionDenied, "skill %q is shared: orgs may offer it but not %s it (a platform key manages shared skills)", name, verb)
}

// skillOf returns org's skill of that name, else the shared one.
func (s *Service) skillOf(ctx context.Context, org, name string) (*agentmeshv1.Skill, error) {
	sk, err := s.store.GetSkill(ctx, org, name)
	if errors.Is(err, bus.ErrNotFound) && org != "" {
		sk, err = s.store.GetSkill(ctx, "", name)
	}
	return sk, err
}

func (s *Service) getSkill(ctx context.Context, req *busv1.GetSkillRequest) (*busv1.GetSkillResponse, error) {
	if err := checkOrg(req.Org); err != nil {
		return nil, err
	}
	if err := agentspec.SkillName("name", req.Name); err != nil {
		return nil, err
	}
	sk, err := s.skillOf(ctx, req.Org, req.Name)
	if err != nil {
		return nil, err
	}
	return &busv1.GetSkillResponse{Skill: sk}, nil
}

func (s *Service) listSkills(ctx context.Context, req *busv1.ListSkillsRequest) (*busv1.ListSkillsResponse, error) {
	if err := checkOrg(req.Org); err != nil {
		return nil, err
	}
	if req.PageSize < 0 {
		return nil, bus.FieldError("page_size", "must not be negative")
	}
	skills, next, err := s.store.ListSkills(ctx, store.SkillQuery{Org: req.Org, PageSize: int(req.PageSize), PageToken: req.PageToken})
	if err != nil {
		return nil, err
	}
	return &busv1.ListSkillsResponse{Skills: skills, NextPageToken: next}, nil
}

// deleteSkill removes a skill no agent relies on: for an org's skill, no
// agent of the org offers it; for a shared one, no shared agent offers it
// and no org agent offers it without its org having its own of that name.
func (s *Service) deleteSkill(ctx context.Context, req *busv1.DeleteSkillRequest) (*busv1.DeleteSkillResponse, error) {
	if err := checkOrg(req.Org); err != nil {
		return nil, err
	}
	if err := agentspec.SkillName("name", req.Name); err != nil {
		return nil, err
	}
	if _, err := s.store.GetSkill(ctx, req.Org, req.Name); err != nil {
		if errors.Is(err, bus.ErrNotFound) {
			err = s.sharedSkillOnly(ctx, req.Org, req.Name, "delete", err)
		}
		return nil, err
	}
	offering, err := s.store.AgentsOffering(ctx, req.Org, req.Name, store.MaxPageSize)
	if err != nil {
		return nil, err
	}
	var users []string
	ownOf := map[string]bool{} // org → it has its own skill of the name
	for _, a := range offering {
		if req.Org == "" && a.Org != "" {
			own, ok := ownOf[a.Org]
			if !ok {
				_, gerr := s.store.GetSkill(ctx, a.Org, req.Name)
				own = gerr == nil
				ownOf[a.Org] = own
			}
			if own {
				continue
			}
		}
		name := a.Name
		if req.Org == "" && a.Org != "" {
			name = a.Org + "/" + a.Name
		}
		users = append(users, name)
	}
	if len(users) > 0 {
		more := ""
		if len(users) > maxOfferingNames {
			more = fmt.Sprintf(" and %d more", len(users)-maxOfferingNames)
			users = users[:maxOfferingNames]
		}
		return nil, &bus.Error{Code: bus.CodeFailedPrecondition, Field: "name",
			Message: fmt.Sprintf("skill %q is offered by the agents %s%s: remove it from them first", req.Name, strings.Join(users, ", "), more)}
	}
	if err := s.store.DeleteSkill(ctx, req.Org, req.Name); err != nil {
		return nil, fmt.Errorf("delete skill %q: %w", req.Name, err)
	}
	return &busv1.DeleteSkillResponse{}, nil
}

// resolveSkills answers the skills an agent of org offering names uses:
// each the org's own of the name, else the shared one; the rest missing.
func (s *Service) resolveSkills(ctx context.Context, req *busv1.ResolveSkillsRequest) (*busv1.ResolveSkillsResponse, error) {
	if err := checkOrg(req.Org); err != nil {
		return nil, err
	}
	if len(req.Names) > agentspec.MaxSkills {
		return nil, &bus.Error{Code: bus.CodeResourceExhausted, Field: "names", Message: fmt.Sprintf("more than %d skills", agentspec.MaxSkills)}
	}
	resp := &busv1.ResolveSkillsResponse{}
	for _, name := range req.Names {
		sk, err := s.skillOf(ctx, req.Org, name)
		switch {
		case errors.Is(err, bus.ErrNotFound):
			if !slices.Contains(resp.Missing, name) {
				resp.Missing = append(resp.Missing, name)
			}
		case err != nil:
			return nil, err
		default:
			resp.Skills = append(resp.Skills, sk)
		}
	}
	return resp, nil
}

// UnknownSkills checks that every skill of an agent of org is in the
// catalogue: invalid_argument naming the unknown ones otherwise.
func (s *Service) unknownSkills(ctx context.Context, a *agentmeshv1.Agent) error {
	resolved, err := s.resolveSkills(ctx, &busv1.ResolveSkillsRequest{Org: a.Org, Names: a.Skills})
	if err != nil {
		return err
	}
	if len(resolved.Missing) == 0 {
		return nil
	}
	where := "the org's or the shared catalogue"
	if a.Org == "" {
		where = "the shared catalogue"
	}
	return bus.FieldError("agent.skills", "unknown skills %s: not in %s (create them first: amctl skills create NAME)", strings.Join(resolved.Missing, ", "), where)
}

// listAgentVersions lists the versions of org's agent of that name, else
// of the shared one.
func (s *Service) listAgentVersions(ctx context.Context, req *busv1.ListAgentVersionsRequest) (*busv1.ListAgentVersionsResponse, error) {
	if err := checkOrg(req.Org); err != nil {
		return nil, err
	}
	if err := agentspec.Name("name", req.Name); err != nil {
		return nil, err
	}
	if req.PageSize < 0 {
		return nil, bus.FieldError("page_size", "must not be negative")
	}
	org := req.Org
	if _, err := s.store.GetAgent(ctx, org, req.Name); errors.Is(err, bus.ErrNotFound) && org != "" {
		org = ""
	}
	versions, next, err := s.store.ListAgentVersions(ctx, org, req.Name, int(req.PageSize), req.PageToken)
	if err != nil {
		return nil, err
	}
	return &busv1.ListAgentVersionsResponse{Versions: versions, NextPageToken: next}, nil
}
