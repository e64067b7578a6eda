package store

import (
	"context"
	"strconv"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Skills is the skill catalogue and the agents' version history.
//
// Skills are keyed by (org, name) like agents: a name is unique within its
// org, and org "" holds the shared skills. Every create or update of an
// agent stores a copy of it as that version; deleting the agent drops its
// versions (tasks keep the settings they ran with in their agent_spec).
type Skills interface {
	// PutSkill creates (create=true; already_exists if present) or
	// replaces (not_found if absent; failed_precondition if
	// expectedVersion > 0 and differs) the skill sk.Org owns named
	// sk.Name. It sets times and version.
	PutSkill(ctx context.Context, sk *agentmeshv1.Skill, create bool, expectedVersion int64) (*agentmeshv1.Skill, error)
	// GetSkill returns org's skill named name (org "" is a shared one) or
	// not_found; it never falls back from one org to another.
	GetSkill(ctx context.Context, org, name string) (*agentmeshv1.Skill, error)
	// ListSkills returns, one page, q.Org's skills and the shared ones,
	// ordered by name then org (a shared skill before an org's own).
	ListSkills(ctx context.Context, q SkillQuery) (skills []*agentmeshv1.Skill, nextPageToken string, err error)
	// DeleteSkill removes org's skill named name or answers not_found.
	// It does not look at the agents (the state service does).
	DeleteSkill(ctx context.Context, org, name string) error
	// AgentsOffering returns at most limit agents offering skill, ordered
	// by name then org: org's own agents, or with org "" the agents of
	// every org (those that may resolve a shared skill).
	AgentsOffering(ctx context.Context, org, skill string, limit int) ([]*agentmeshv1.Agent, error)

	// GetAgentVersion returns version of org's agent named name, or
	// not_found.
	GetAgentVersion(ctx context.Context, org, name string, version int64) (*agentmeshv1.Agent, error)
	// ListAgentVersions returns org's agent's versions newest first, one
	// page (not_found when the agent has none).
	ListAgentVersions(ctx context.Context, org, name string, pageSize int, pageToken string) ([]*agentmeshv1.Agent, string, error)
}

// SkillQuery filters ListSkills.
type SkillQuery struct {
	// Org whose skills are listed with the shared ones ("" = shared only).
	Org       string
	PageSize  int
	PageToken string
}

// PlanSkill returns the skill to store for a create or replace.
func PlanSkill(cur, next *agentmeshv1.Skill, create bool, expectedVersion int64, now time.Time) (*agentmeshv1.Skill, error) {
	if create && cur != nil {
		return nil, bus.Errorf(bus.CodeAlreadyExists, "skill %q already exists", next.Name)
	}
	if !create && cur == nil {
		return nil, SkillNotFound(next.Name)
	}
	if !create && expectedVersion > 0 && cur.Version != expectedVersion {
		return nil, bus.Errorf(bus.CodeFailedPrecondition, "skill %q is at version %d, not %d", next.Name, cur.Version, expectedVersion)
	}
	sk := proto.Clone(next).(*agentmeshv1.Skill)
	ts := timestamppb.New(now)
	sk.UpdatedAt = ts
	if create {
		sk.CreatedAt = ts
		sk.Version = 1
	} else {
		sk.CreatedAt = cur.CreatedAt
		sk.Version = cur.Version + 1
	}
	return sk, nil
}

// SkillNotFound is the error for an unknown skill.
func SkillNotFound(name string) error {
	return bus.Errorf(bus.CodeNotFound, "skill %q not found", name)
}

// AgentVersionNotFound is the error for an unknown version of an agent.
func AgentVersionNotFound(name string, version int64) error {
	return bus.Errorf(bus.CodeNotFound, "agent %q has no version %d", name, version)
}

// VersionToken is the page token of ListAgentVersions after version v.
func VersionToken(v int64) string { return EncodeToken(strconv.FormatInt(v, 10)) }

// DecodeVersionToken returns the version a ListAgentVersions page token
// carries (0 = from the newest).
func DecodeVersionToken(tok string) (int64, error) {
	k, err := DecodeToken(tok)
	if err != nil || k == "" {
		return 0, err
	}
	v, err := strconv.ParseInt(k, 10, 64)
	if err != nil || v <= 0 {
		return 0, bus.FieldError("page_token", "malformed page token")
	}
	return v, nil
}

func (i instrumented) PutSkill(ctx context.Context, sk *agentmeshv1.Skill, create bool, expectedVersion int64) (out *agentmeshv1.Skill, err error) {
	defer func(start time.Time) { observe("put_skill", start, err) }(time.Now())
	return i.s.PutSkill(ctx, sk, create, expectedVersion)
}

func (i instrumented) GetSkill(ctx context.Context, org, name string) (out *agentmeshv1.Skill, err error) {
	defer func(start time.Time) { observe("get_skill", start, err) }(time.Now())
	return i.s.GetSkill(ctx, org, name)
}

func (i instrumented) ListSkills(ctx context.Context, q SkillQuery) (out []*agentmeshv1.Skill, next string, err error) {
	defer func(start time.Time) { observe("list_skills", start, err) }(time.Now())
	return i.s.ListSkills(ctx, q)
}

func (i instrumented) DeleteSkill(ctx context.Context, org, name string) (err error) {
	defer func(start time.Time) { observe("delete_skill", start, err) }(time.Now())
	return i.s.DeleteSkill(ctx, org, name)
}

func (i instrumented) AgentsOffering(ctx context.Context, org, skill string, limit int) (out []*agentmeshv1.Agent, err error) {
	defer func(start time.Time) { observe("agents_offering", start, err) }(time.Now())
	return i.s.AgentsOffering(ctx, org, skill, limit)
}

func (i instrumented) GetAgentVersion(ctx context.Context, org, name string, version int64) (out *agentmeshv1.Agent, err error) {
	defer func(start time.Time) { observe("get_agent_version", start, err) }(time.Now())
	return i.s.GetAgentVersion(ctx, org, name, version)
}

func (i instrumented) ListAgentVersions(ctx context.Context, org, name string, pageSize int, pageToken string) (out []*agentmeshv1.Agent, next string, err error) {
	defer func(start time.Time) { observe("list_agent_versions", start, err) }(time.Now())
	return i.s.ListAgentVersions(ctx, org, name, pageSize, pageToken)
}
