package pgstore

import (
	"context"
	"errors"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/services/state/store"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// The skill catalogue (table skills, one column per field) and the agents'
// versions (table agent_versions, written by a trigger on agents:
// migrations/00060_skills.sql).

const skillColumns = `org, name, description, required_tools, prompt_template, config, version, created_at, updated_at`

func scanSkill(row pgx.Row) (*agentmeshv1.Skill, error) {
	sk := &agentmeshv1.Skill{}
	var created, updated time.Time
	var config map[string]string
	if err := row.Scan(&sk.Org, &sk.Name, &sk.Description, &sk.RequiredTools, &sk.PromptTemplate, &config, &sk.Version, &created, &updated); err != nil {
		return nil, err
	}
	if len(sk.RequiredTools) == 0 {
		sk.RequiredTools = nil
	}
	if len(config) > 0 {
		sk.Config = config
	}
	sk.CreatedAt, sk.UpdatedAt = timestamppb.New(created), timestamppb.New(updated)
	return sk, nil
}

func (s *Store) getSkill(ctx context.Context, org, name string) (*agentmeshv1.Skill, error) {
	sk, err := scanSkill(s.pool.QueryRow(ctx, `SELECT `+skillColumns+` FROM skills WHERE org = $1 AND name = $2`, org, name))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, dbError("get skill", err)
	}
	return sk, nil
}

// PutSkill creates or replaces a skill (see store.Skills).
func (s *Store) PutSkill(ctx context.Context, sk *agentmeshv1.Skill, create bool, expectedVersion int64) (*agentmeshv1.Skill, error) {
	if sk == nil || sk.Name == "" {
		return nil, bus.FieldError("skill.name", "a name is required")
	}
	return versioned[*agentmeshv1.Skill]{
		kind: "skill", name: sk.Name,
		get: func(ctx context.Context) (*agentmeshv1.Skill, error) { return s.getSkill(ctx, sk.Org, sk.Name) },
		plan: func(cur *agentmeshv1.Skill) (*agentmeshv1.Skill, error) {
			return store.PlanSkill(cur, sk, create, expectedVersion, s.now())
		},
		write: s.writeSkill,
	}.put(ctx)
}

// writeSkill inserts next (cur nil) or updates cur's version to next, and
// reports whether it wrote the row.
func (s *Store) writeSkill(ctx context.Context, cur, next *agentmeshv1.Skill) (bool, error) {
	tools := next.RequiredTools
	if tools == nil {
		tools = []string{}
	}
	config := next.Config
	if config == nil {
		config = map[string]string{}
	}
	var tag pgconn.CommandTag
	var err error
	if cur == nil {
		tag, err = s.pool.Exec(ctx, `INSERT INTO skills (`+skillColumns+`) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) ON CONFLICT (org, name) DO NOTHING`,
			next.Org, next.Name, next.Description, tools, next.PromptTemplate, config, next.Version, next.CreatedAt.AsTime(), next.UpdatedAt.AsTime())
	} else {
		tag, err = s.pool.Exec(ctx, `UPDATE skills SET description = $3, required_tools = $4, prompt_template = $5, config = $6, version = $7, updated_at = $8
			WHERE org = $1 AND name = $2 AND version = $9`,
			next.Org, next.Name, next.Description, tools, next.PromptTemplate, config, next.Version, next.UpdatedAt.AsTime(), cur.Version)
	}
	if err != nil {
		return false, dbError("put skill", err)
	}
	return tag.RowsAffected() == 1, nil
}

// GetSkill returns org's skill or not_found.
func (s *Store) GetSkill(ctx context.Context, org, name string) (*agentmeshv1.Skill, error) {
	sk, err := s.getSkill(ctx, org, name)
	if err != nil {
		return nil, err
	}
	if sk == nil {
		return nil, store.SkillNotFound(name)
	}
	return sk, nil
}

// ListSkills returns q.Org's skills and the shared ones by name, one page.
func (s *Store) ListSkills(ctx context.Context, q store.SkillQuery) ([]*agentmeshv1.Skill, string, error) {
	tok, err := store.DecodeToken(q.PageToken)
	if err != nil {
		return nil, "", err
	}
	afterOrg, afterName := store.SplitAgentPos(tok)
	n := store.PageSize(q.PageSize)
	rows, err := s.pool.Query(ctx, `SELECT `+skillColumns+` FROM skills
		WHERE org IN ('', $1) AND (name COLLATE "C", org COLLATE "C") > ($2 COLLATE "C", $3 COLLATE "C")
		ORDER BY name COLLATE "C", org COLLATE "C" LIMIT $4`,
		q.Org, afterName, afterOrg, n+1)
	if err != nil {
		return nil, "", dbError("list skills", err)
	}
	defer rows.Close()
	var out []*agentmeshv1.Skill
	for rows.Next() {
		sk, err := scanSkill(rows)
		if err != nil {
			return nil, "", dbError("list skills", err)
		}
		out = append(out, sk)
	}
	if err := rows.Err(); err != nil {
		return nil, "", dbError("list skills", err)
	}
	next := ""
	if len(out) > n {
		out = out[:n]
		next = store.EncodeToken(store.AgentPos(out[n-1].Org, out[n-1].Name))
	}
	return out, next, nil
}

// DeleteSkill removes org's skill or answers not_found.
func (s *Store) DeleteSkill(ctx context.Context, org, name string) error {
	tag, err := s.pool.Exec(ctx, `DELETE FROM skills WHERE org = $1 AND name = $2`, org, name)
	if err != nil {
		return dbError("delete skill", err)
	}
	if tag.RowsAffected() == 0 {
		return store.SkillNotFound(name)
	}
	return nil
}

// AgentsOffering returns agents offering skill through the skills index.
func (s *Store) AgentsOffering(ctx context.Context, org, skill string, limit int) ([]*agentmeshv1.Agent, error) {
	rows, err := s.pool.Query(ctx, `SELECT org, data FROM agents WHERE ($1 = '' OR org = $1) AND $2 = ANY(skills)
		ORDER BY name COLLATE "C", org COLLATE "C" LIMIT $3`, org, skill, store.PageSize(limit))
	if err != nil {
		return nil, dbError("agents offering", err)
	}
	return collectAgents(rows, "agents offering")
}

func collectAgents(rows pgx.Rows, op string) ([]*agentmeshv1.Agent, error) {
	type row struct {
		Org  string
		Data []byte
	}
	datas, err := pgx.CollectRows(rows, pgx.RowToStructByPos[row])
	if err != nil {
		return nil, dbError(op, err)
	}
	out := make([]*agentmeshv1.Agent, len(datas))
	for i, d := range datas {
		a := &agentmeshv1.Agent{}
		if err := proto.Unmarshal(d.Data, a); err != nil {
			return nil, dbError("decode agent", err)
		}
		a.Org = d.Org
		out[i] = a
	}
	return out, nil
}

// GetAgentVersion returns one recorded version of org's agent.
func (s *Store) GetAgentVersion(ctx context.Context, org, name string, version int64) (*agentmeshv1.Agent, error) {
	rows, err := s.pool.Query(ctx, `SELECT org, data FROM agent_versions WHERE org = $1 AND name = $2 AND version = $3`, org, name, version)
	if err != nil {
		return nil, dbError("get agent version", err)
	}
	out, err := collectAgents(rows, "get agent version")
	if err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, store.AgentVersionNotFound(name, version)
	}
	return out[0], nil
}

// ListAgentVersions returns org's agent's versions newest first, one page.
func (s *Store) ListAgentVersions(ctx context.Context, org, name string, pageSize int, pageToken string) ([]*agentmeshv1.Agent, string, error) {
	before, err := store.DecodeVersionToken(pageToken)
	if err != nil {
		return nil, "", err
	}
	n := store.PageSize(pageSize)
	rows, err := s.pool.Query(ctx, `SELECT org, data FROM agent_versions WHERE org = $1 AND name = $2 AND ($3 = 0 OR version < $3)
		ORDER BY version DESC LIMIT $4`, org, name, before, n+1)
	if err != nil {
		return nil, "", dbError("list agent versions", err)
	}
	out, err := collectAgents(rows, "list agent versions")
	if err != nil {
		return nil, "", err
	}
	if len(out) == 0 && before == 0 {
		return nil, "", store.AgentNotFound(name)
	}
	next := ""
	if len(out) > n {
		out = out[:n]
		next = store.VersionToken(out[n-1].Version)
	}
	return out, next, nil
}
