package registry

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/agentmesh/agentmesh/pkg/agentspec"
	busv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/bus/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/subjects"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Routing methods recorded in agentmeshv1.Routing.method.
const (
	MethodNamed   = "named"
	MethodDefault = "default"
	MethodScored  = "scored"
)

// Weights weigh the parts of a candidate's score.
type Weights struct {
	Capability, Workload, Priority, Affinity float64
}

// DefaultWeights are seed 002's: capability 0.4, workload 0.3, priority
// 0.2, affinity 0.1.
var DefaultWeights = Weights{Capability: 0.4, Workload: 0.3, Priority: 0.2, Affinity: 0.1}

func (w Weights) sum() float64 { return w.Capability + w.Workload + w.Priority + w.Affinity }

// Proto returns w as recorded on a task.
func (w Weights) Proto() *agentmeshv1.MatchWeights {
	return &agentmeshv1.MatchWeights{Capability: w.Capability, Workload: w.Workload, Priority: w.Priority, Affinity: w.Affinity}
}

// ParseWeights reads AGENTMESH_MATCH_WEIGHTS:
// "capability=0.4,workload=0.3,priority=0.2,affinity=0.1". A weight not
// named is 0; each must be a finite number ≥ 0, and their sum > 0. The
// score is the weighted mean of the parts, so weights need not sum to 1.
// An empty string gives DefaultWeights.
func ParseWeights(s string) (Weights, error) {
	if strings.TrimSpace(s) == "" {
		return DefaultWeights, nil
	}
	var w Weights
	seen := map[string]bool{}
	for _, part := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		k = strings.TrimSpace(k)
		if !ok {
			return Weights{}, fmt.Errorf("match weight %q: want name=value", part)
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
			return Weights{}, fmt.Errorf("match weight %s: %q is not a number", k, v)
		}
		if f < 0 {
			return Weights{}, fmt.Errorf("match weight %s: %v is negative", k, f)
		}
		if seen[k] {
			return Weights{}, fmt.Errorf("match weight %s: given twice", k)
		}
		seen[k] = true
		switch k {
		case "capability":
			w.Capability = f
		case "workload":
			w.Workload = f
		case "priority":
			w.Priority = f
		case "affinity":
			w.Affinity = f
		default:
			return Weights{}, fmt.Errorf("match weight %q: unknown (capability, workload, priority, affinity)", k)
		}
	}
	if !(w.sum() > 0) {
		return Weights{}, errors.New("match weights: at least one must be above 0")
	}
	return w, nil
}

// Parts of a score, each in [0, 1].

// Capability is the coverage of the required skills (matched/required)
// times 0.8 + 0.2 × the share of the agent's skills that were asked for:
// full coverage first, and of two agents covering alike, the one with
// fewer unrelated skills (the specialist) scores higher.
func Capability(matched, required, offered int) float64 {
	if matched == 0 || required == 0 || offered == 0 {
		return 0
	}
	return float64(matched) / float64(required) * (0.8 + 0.2*float64(matched)/float64(offered))
}

// Workload is 1 - running/max_concurrency (floored at 0), or
// 1/(1+running) for an agent without a limit.
func Workload(running, maxConcurrency int32) float64 {
	if maxConcurrency > 0 {
		return 1 - float64(min(running, maxConcurrency))/float64(maxConcurrency)
	}
	return 1 / (1 + float64(max(running, 0)))
}

// Priority is the agent's routing_priority/100; unset (0) is 0.5.
func Priority(p int32) float64 {
	if p <= 0 {
		return 0.5
	}
	return float64(min(p, agentspec.MaxRoutingPriority)) / agentspec.MaxRoutingPriority
}

// Affinity is (completed+1)/(completed+failed+2): how well the agent
// served the org lately, 0.5 without history.
func Affinity(completed, failed int32) float64 {
	return (float64(completed) + 1) / (float64(completed) + float64(failed) + 2)
}

// Score ranks agents for the required (normalised) skills with their
// stats (by index; nil = no load, no history). Agents offering none of
// the skills are left out. Ties go by name, then the org's own before a
// shared one. It returns the candidates best first and, parallel to them,
// the agents.
func Score(agents []*agentmeshv1.Agent, stats []*busv1.AgentStats, required []string, w Weights) ([]*agentmeshv1.RoutingCandidate, []*agentmeshv1.Agent) {
	want := make(map[string]bool, len(required))
	for _, s := range required {
		want[s] = true
	}
	type scored struct {
		a *agentmeshv1.Agent
		c *agentmeshv1.RoutingCandidate
	}
	list := make([]scored, 0, len(agents))
	total := w.sum()
	for i, a := range agents {
		var matched []string
		has := make(map[string]bool, len(a.Skills))
		for _, sk := range a.Skills {
			has[sk] = true
			if want[sk] {
				matched = append(matched, sk)
			}
		}
		if len(matched) == 0 {
			continue
		}
		var missing []string
		for _, sk := range required {
			if !has[sk] {
				missing = append(missing, sk)
			}
		}
		var st *busv1.AgentStats
		if i < len(stats) {
			st = stats[i]
		}
		c := &agentmeshv1.RoutingCandidate{
			Agent: a.Name, AgentOrg: a.Org, MatchedSkills: matched, MissingSkills: missing,
			Running: st.GetRunning(), MaxConcurrency: a.MaxConcurrency,
			RecentCompleted: st.GetCompleted(), RecentFailed: st.GetFailed(),
			Capability: Capability(len(matched), len(want), len(a.Skills)),
			Workload:   Workload(st.GetRunning(), a.MaxConcurrency),
			Priority:   Priority(a.RoutingPriority),
			Affinity:   Affinity(st.GetCompleted(), st.GetFailed()),
		}
		if total > 0 {
			c.Score = (w.Capability*c.Capability + w.Workload*c.Workload + w.Priority*c.Priority + w.Affinity*c.Affinity) / total
		}
		list = append(list, scored{a, c})
	}
	sort.SliceStable(list, func(i, j int) bool {
		ci, cj := list[i].c, list[j].c
		if ci.Score != cj.Score {
			return ci.Score > cj.Score
		}
		if ci.Agent != cj.Agent {
			return ci.Agent < cj.Agent
		}
		return ci.AgentOrg > cj.AgentOrg
	})
	cands := make([]*agentmeshv1.RoutingCandidate, len(list))
	out := make([]*agentmeshv1.Agent, len(list))
	for i := range list {
		cands[i], out[i] = list[i].c, list[i].a
	}
	return cands, out
}

// ---- the bus side ----

// namedAgent returns the agent named name as org sees it (its own, else
// the shared one), from the candidate cache when it holds it.
func (s *Service) namedAgent(ctx context.Context, org, name string) (*agentmeshv1.Agent, error) {
	k := namedKey(org, name)
	cached, gen, ok := s.cands.get(k, time.Now())
	if ok {
		return cached[0], nil
	}
	var resp busv1.GetAgentResponse
	if err := s.stateReq(ctx, subjects.StateGetAgent, &busv1.GetAgentRequest{Name: name, Org: org}, &resp); err != nil {
		return nil, err
	}
	if resp.Agent == nil {
		return nil, fmt.Errorf("agent %q: state answered without it", name)
	}
	s.cands.put(k, []*agentmeshv1.Agent{resp.Agent}, gen, time.Now())
	return resp.Agent, nil
}

// candidates lists, through the store's skill filter, the org's agents
// and the shared ones offering any of the required skills; an org's own
// agent hides a shared one of the same name.
func (s *Service) candidates(ctx context.Context, org string, required []string) ([]*agentmeshv1.Agent, error) {
	ck := keyOf(org, required)
	cached, gen, ok := s.cands.get(ck, time.Now())
	if ok {
		return cached, nil
	}
	out, err := s.listCandidates(ctx, org, required)
	if err != nil {
		return nil, err
	}
	s.cands.put(ck, out, gen, time.Now())
	return out, nil
}

// listCandidates lists the agents org sees offering any of required: one
// listing per skill (the store's skill filter).
func (s *Service) listCandidates(ctx context.Context, org string, required []string) ([]*agentmeshv1.Agent, error) {
	type key struct{ org, name string }
	found := map[key]*agentmeshv1.Agent{}
	for _, sk := range required {
		token := ""
		for {
			var resp busv1.ListAgentsResponse
			if err := s.stateReq(ctx, subjects.StateListAgents, &busv1.ListAgentsRequest{Org: org, Skill: sk, PageSize: 1000, PageToken: token}, &resp); err != nil {
				return nil, err
			}
			for _, a := range resp.Agents {
				found[key{a.Org, a.Name}] = a
			}
			if resp.NextPageToken == "" {
				break
			}
			token = resp.NextPageToken
		}
	}
	out := make([]*agentmeshv1.Agent, 0, len(found))
	for k, a := range found {
		if k.org == "" && org != "" {
			if _, own := found[key{org, k.name}]; own {
				continue
			}
			// An own agent offering none of the skills still hides
			// the shared one: ask state which one the org sees.
			var resp busv1.GetAgentResponse
			if err := s.stateReq(ctx, subjects.StateGetAgent, &busv1.GetAgentRequest{Org: org, Name: k.name}, &resp); err != nil {
				return nil, err
			}
			if resp.Agent.GetOrg() != "" {
				continue
			}
		}
		out = append(out, a)
	}
	return out, nil
}

// statsBatch is the most agents one state.agent.stats request names
// (state's limit).
const statsBatch = 1000

// scoredMatch ranks the candidates for required (normalised) skills; with
// propose, it drafts an agent when none fits (proposals.go).
func (s *Service) scoredMatch(ctx context.Context, org string, required []string, limit int32, propose bool) (*busv1.MatchResponse, error) {
	agents, err := s.candidates(ctx, org, required)
	if err != nil {
		return nil, err
	}
	propose = propose && !s.proposals.off && org != ""
	if len(agents) == 0 {
		refusal := &bus.Error{Code: bus.CodeFailedPrecondition, Field: "required_skills",
			Message: fmt.Sprintf("no agent offers any of the skills %s", strings.Join(required, ", "))}
		if !propose {
			return nil, refusal
		}
		resp, err := s.propose(ctx, org, required, &agentmeshv1.Routing{
			Method: MethodScored, RequiredSkills: required, Weights: s.weights.Proto(), DecidedAt: timestamppb.Now()})
		if errors.Is(err, errNotDraftable) {
			refusal.Message += fmt.Sprintf(", and no agent can be proposed: the skill catalogue has no skill %s (amctl skills create)", strings.TrimPrefix(err.Error(), errNotDraftable.Error()+": "))
			return nil, refusal
		}
		return resp, err
	}
	var stats []*busv1.AgentStats
	if org != "" {
		if stats, err = s.statsOf(ctx, org, agents); err != nil {
			return nil, err
		}
	}
	cands, ranked := Score(agents, stats, required, s.weights)
	routing := &agentmeshv1.Routing{
		Method: MethodScored, RequiredSkills: required, Weights: s.weights.Proto(),
		Candidates: cands, Chosen: ranked[0].Name, DecidedAt: timestamppb.Now(),
	}
	if limit > 0 && len(routing.Candidates) > int(limit) {
		routing.Candidates = routing.Candidates[:limit]
	}
	if propose && !s.proposals.fit(cands) {
		resp, err := s.propose(ctx, org, required, routing)
		if err == nil || !errors.Is(err, errNotDraftable) {
			return resp, err
		}
		// Nothing to draft from: the best of the unfit candidates runs it.
		routing.Method, routing.Chosen = MethodScored, ranked[0].Name
	}
	legacy := make([]*busv1.MatchCandidate, len(routing.Candidates))
	for i, c := range routing.Candidates {
		legacy[i] = &busv1.MatchCandidate{Agent: c.Agent, Score: c.Score, MatchedSkills: c.MatchedSkills}
	}
	s.log.Debug("matched", "org", org, "skills", required, "agent", ranked[0].Name, "score", cands[0].Score)
	return &busv1.MatchResponse{Agent: ranked[0], Candidates: legacy, Routing: routing}, nil
}
