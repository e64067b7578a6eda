package kvstore

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/services/state/store"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"
)

// The skill catalogue and the agents' versions in two more buckets:
//
//	<P>_STORE_SKILLS          KV: skill (org, name) → agentmesh.v1.Skill,
//	                          keyed like agents (agentKey)
//	<P>_STORE_AGENT_VERSIONS  KV: "<org>.<name>.<version>" → agentmesh.v1.Agent
//	                          (org "=" for a shared agent; each part as in
//	                          agentKey)
//
// ListSkills is served from an in-memory index kept by a watcher, like
// ListAgents. An agent's version is written after the agent itself: a
// crash between the two leaves the newest version unrecorded, and
// GetAgentVersion answers it from the agent while it is the current one.

const (
	skillsBucket   = "skills"
	versionsBucket = "agent_versions"
)

// skillStore is the Store's part for skills and versions.
type skillStore struct {
	skillsKV   jetstream.KeyValue
	versionsKV jetstream.KeyValue
	skillIndex *index[*agentmeshv1.Skill]
}

// openSkills opens the two buckets, loads the skill index, and backfills
// what stores written before skills were entities lack: each agent's
// current version, and a bare catalogue entry for every skill an agent
// offers that is in neither its org's catalogue nor the shared one.
func (s *Store) openSkills(ctx, wctx context.Context, bucket func(name, desc string) (jetstream.KeyValue, error)) error {
	var err error
	if s.skillsKV, err = bucket(skillsBucket, "agentmesh skills ((org, name) → agentmesh.v1.Skill)"); err != nil {
		return err
	}
	if s.versionsKV, err = bucket(versionsBucket, "agentmesh agent versions ((org, name, version) → agentmesh.v1.Agent)"); err != nil {
		return err
	}
	s.skillIndex = newIndex[*agentmeshv1.Skill]()
	if err := watch(ctx, wctx, s, s.skillsKV, s.onSkill); err != nil {
		return err
	}
	return s.backfillSkills(ctx)
}

func (s *Store) onSkill(e jetstream.KeyValueEntry) {
	if e.Operation() != jetstream.KeyValuePut {
		if org, name, ok := decodeAgentKey(e.Key()); ok {
			s.skillIndex.del(store.AgentPos(org, name), e.Revision())
		}
		return
	}
	sk := &agentmeshv1.Skill{}
	if err := proto.Unmarshal(e.Value(), sk); err != nil || sk.Name == "" {
		return
	}
	if org, _, ok := decodeAgentKey(e.Key()); ok {
		sk.Org = org
	}
	s.skillIndex.put(store.AgentPos(sk.Org, sk.Name), sk, e.Revision())
}

func (s *Store) backfillSkills(ctx context.Context) error {
	var agents []*agentmeshv1.Agent
	s.agentIndex.ascend("", func(_ string, a *agentmeshv1.Agent) bool {
		agents = append(agents, a)
		return true
	})
	for _, a := range agents {
		if _, err := s.versionsKV.Get(ctx, versionKey(a.Org, a.Name, a.Version)); errors.Is(err, jetstream.ErrKeyNotFound) {
			s.recordVersion(ctx, a)
		}
		for _, name := range a.Skills {
			if _, ok := s.skillIndex.get(store.AgentPos(a.Org, name)); ok {
				continue
			}
			if _, ok := s.skillIndex.get(store.AgentPos("", name)); ok {
				continue
			}
			_, err := s.PutSkill(ctx, &agentmeshv1.Skill{Org: a.Org, Name: name}, true, 0)
			if err != nil && !errors.Is(err, bus.ErrAlreadyExists) {
				return err
			}
		}
	}
	return nil
}

func (s *Store) getSkill(ctx context.Context, org, name string) (*agentmeshv1.Skill, uint64, error) {
	e, err := s.skillsKV.Get(ctx, agentKey(org, name))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, kvError("get skill", err)
	}
	sk := &agentmeshv1.Skill{}
	if err := proto.Unmarshal(e.Value(), sk); err != nil {
		return nil, 0, kvError("decode skill", err)
	}
	sk.Org = org
	return sk, e.Revision(), nil
}

// PutSkill creates or replaces a skill (see store.Skills).
func (s *Store) PutSkill(ctx context.Context, sk *agentmeshv1.Skill, create bool, expectedVersion int64) (*agentmeshv1.Skill, error) {
	if sk == nil || sk.Name == "" {
		return nil, bus.FieldError("skill.name", "a name is required")
	}
	next, rev, err := s.skillEntries().put(ctx, sk.Org, sk.Name, func(cur *agentmeshv1.Skill) (*agentmeshv1.Skill, error) {
		return store.PlanSkill(cur, sk, create, expectedVersion, s.now())
	})
	if err != nil {
		return nil, err
	}
	s.skillIndex.put(store.AgentPos(next.Org, next.Name), next, rev)
	return next, nil
}

// GetSkill returns org's skill or not_found.
func (s *Store) GetSkill(ctx context.Context, org, name string) (*agentmeshv1.Skill, error) {
	sk, _, err := s.getSkill(ctx, org, name)
	if err != nil {
		return nil, err
	}
	if sk == nil {
		return nil, store.SkillNotFound(name)
	}
	return sk, nil
}

// ListSkills returns skills by name, one page, from the index.
func (s *Store) ListSkills(_ context.Context, q store.SkillQuery) ([]*agentmeshv1.Skill, string, error) {
	return listOrgPage(s.skillIndex, q.Org, q.PageToken, q.PageSize, nil)
}

// DeleteSkill removes org's skill or answers not_found.
func (s *Store) DeleteSkill(ctx context.Context, org, name string) error {
	rev, err := s.skillEntries().delete(ctx, org, name)
	if err != nil {
		return err
	}
	s.skillIndex.del(store.AgentPos(org, name), rev+1)
	return nil
}

// AgentsOffering scans the agent index for agents offering skill.
func (s *Store) AgentsOffering(_ context.Context, org, skill string, limit int) ([]*agentmeshv1.Agent, error) {
	n := store.PageSize(limit)
	var out []*agentmeshv1.Agent
	s.agentIndex.ascend("", func(_ string, a *agentmeshv1.Agent) bool {
		if (org == "" || a.Org == org) && slices.Contains(a.Skills, skill) {
			out = append(out, proto.Clone(a).(*agentmeshv1.Agent))
		}
		return len(out) < n
	})
	return out, nil
}

// ---- agent versions ----

func versionPrefix(org, name string) string {
	o := "="
	if org != "" {
		o = keyPart(org)
	}
	return o + "." + keyPart(name) + "."
}

func versionKey(org, name string, version int64) string {
	return versionPrefix(org, name) + strconv.FormatInt(version, 10)
}

// recordVersion stores a as its version. A failure is not the write's
// (the agent is stored): GetAgentVersion answers the current version
// from the agent itself.
func (s *Store) recordVersion(ctx context.Context, a *agentmeshv1.Agent) {
	data, err := marshal(a)
	if err != nil {
		return
	}
	_, _ = s.versionsKV.Put(ctx, versionKey(a.Org, a.Name, a.Version), data)
}

// dropVersions deletes every recorded version of org's agent.
func (s *Store) dropVersions(ctx context.Context, org, name string) {
	keys, err := s.versionKeys(ctx, org, name)
	if err != nil {
		return
	}
	for _, k := range keys {
		_ = s.versionsKV.Purge(ctx, k)
	}
}

// versionKeys lists the keys of org's agent's versions, newest first.
func (s *Store) versionKeys(ctx context.Context, org, name string) ([]string, error) {
	prefix := versionPrefix(org, name)
	lister, err := s.versionsKV.ListKeysFiltered(ctx, prefix+"*")
	if err != nil {
		return nil, kvError("list agent versions", err)
	}
	defer lister.Stop() //nolint:errcheck
	var keys []string
	seen := map[string]bool{}
	for k := range lister.Keys() {
		if !seen[k] && strings.HasPrefix(k, prefix) {
			seen[k] = true
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys, func(a, b string) int {
		va, _ := strconv.ParseInt(strings.TrimPrefix(a, prefix), 10, 64)
		vb, _ := strconv.ParseInt(strings.TrimPrefix(b, prefix), 10, 64)
		return int(vb - va)
	})
	return keys, nil
}

func (s *Store) getVersion(ctx context.Context, key, org string) (*agentmeshv1.Agent, error) {
	e, err := s.versionsKV.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, kvError("get agent version", err)
	}
	a, err := DecodeAgent(e.Value())
	if err != nil {
		return nil, err
	}
	a.Org = org
	return a, nil
}

// GetAgentVersion returns one recorded version of org's agent.
func (s *Store) GetAgentVersion(ctx context.Context, org, name string, version int64) (*agentmeshv1.Agent, error) {
	a, err := s.getVersion(ctx, versionKey(org, name, version), org)
	if err != nil || a != nil {
		return a, err
	}
	if cur, _, err := s.getAgent(ctx, org, name); err == nil && cur != nil && cur.Version == version {
		return cur, nil
	}
	return nil, store.AgentVersionNotFound(name, version)
}

// ListAgentVersions returns org's agent's versions newest first, one page.
func (s *Store) ListAgentVersions(ctx context.Context, org, name string, pageSize int, pageToken string) ([]*agentmeshv1.Agent, string, error) {
	before, err := store.DecodeVersionToken(pageToken)
	if err != nil {
		return nil, "", err
	}
	keys, err := s.versionKeys(ctx, org, name)
	if err != nil {
		return nil, "", err
	}
	if len(keys) == 0 && before == 0 {
		return nil, "", store.AgentNotFound(name)
	}
	prefix := versionPrefix(org, name)
	n := store.PageSize(pageSize)
	var out []*agentmeshv1.Agent
	more := false
	for _, k := range keys {
		if v, _ := strconv.ParseInt(strings.TrimPrefix(k, prefix), 10, 64); before > 0 && v >= before {
			continue
		}
		if len(out) == n {
			more = true
			break
		}
		a, err := s.getVersion(ctx, k, org)
		if err != nil {
			return nil, "", err
		}
		if a != nil {
			out = append(out, a)
		}
	}
	next := ""
	if more {
		next = store.VersionToken(out[len(out)-1].Version)
	}
	return out, next, nil
}
