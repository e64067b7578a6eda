package registry

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
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Agent proposals (docs/proposals.md): when a match asks for one
// (MatchRequest.propose, SubmitTask's) and no candidate's capability is
// above the threshold — no candidate at all counts too — the registry
// drafts an agent from the skill catalogue: the required skills, a system
// prompt from their descriptions and prompt templates, their required
// tools, the configured default model. It answers the draft in
// MatchResponse.proposal; the router records the task blocked on it. A
// required skill the catalogue does not hold cannot be drafted from: the
// match is then refused as before, saying so.

// MethodProposal is the routing method of a task waiting on a proposal.
const MethodProposal = "proposal"

// proposals is the registry's proposal settings, checked.
type proposals struct {
	off       bool
	threshold float64
	model     string
}

// newProposals checks the settings and takes them.
func newProposals(cfg ProposalConfig) (proposals, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return proposals{}, fmt.Errorf("registry: %w", err)
	}
	return proposals{off: cfg.Off, threshold: *cfg.Threshold, model: cfg.Model}, nil
}

// errNotDraftable: a required skill is not in the catalogue.
var errNotDraftable = errors.New("not draftable")

// propose drafts an agent for required (normalised) skills, or answers
// failed_precondition naming the skills the catalogue lacks. routing is
// the scored decision so far (candidates below the threshold, or none).
func (s *Service) propose(ctx context.Context, org string, required []string, routing *agentmeshv1.Routing) (*busv1.MatchResponse, error) {
	skills := make([]*agentmeshv1.Skill, 0, len(required))
	var missing []string
	for _, name := range required {
		var resp busv1.GetSkillResponse
		err := s.stateReq(ctx, subjects.StateGetSkill, &busv1.GetSkillRequest{Org: org, Name: name}, &resp)
		switch {
		case errors.Is(err, bus.ErrNotFound):
			missing = append(missing, name)
		case err != nil:
			return nil, fmt.Errorf("proposal: skill %s: %w", name, err)
		default:
			skills = append(skills, resp.Skill)
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("%w: %s", errNotDraftable, strings.Join(missing, ", "))
	}
	name, err := s.freeName(ctx, org, DraftName(required))
	if err != nil {
		return nil, err
	}
	a := Draft(name, skills, s.proposals.model)
	a.Org = org
	if err := agentspec.Agent(a); err != nil {
		return nil, fmt.Errorf("proposal: drafted agent: %w", err)
	}
	best := "no agent offers any of them"
	if len(routing.Candidates) > 0 {
		c := routing.Candidates[0]
		best = fmt.Sprintf("the best candidate, %s, covers %d of %d (capability %.2f, not above the threshold %.2f)",
			c.Agent, len(c.MatchedSkills), len(required), c.Capability, s.proposals.threshold)
	}
	routing.Method, routing.Chosen = MethodProposal, name
	p := &agentmeshv1.Proposal{
		Org: org, Status: agentmeshv1.ProposalStatus_PROPOSAL_STATUS_PENDING, Agent: a,
		Reason: fmt.Sprintf("the task needs the skills %s and %s", strings.Join(required, ", "), best), CreatedAt: timestamppb.Now(),
	}
	s.log.Info("agent proposed", "org", org, "agent", name, "skills", required)
	return &busv1.MatchResponse{Proposal: p, Routing: routing}, nil
}

// DraftName names a drafted agent after its skills: "translation-agent",
// "sql-review-agent"; characters an agent name does not take become "-".
func DraftName(skills []string) string {
	var b strings.Builder
	for _, sk := range skills {
		if b.Len() > 0 {
			b.WriteByte('-')
		}
		for _, r := range sk {
			switch {
			case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '_', r == '-':
				b.WriteRune(r)
			default:
				b.WriteByte('-')
			}
		}
	}
	name := strings.Trim(b.String(), "-_")
	if len(name) > 48 {
		name = strings.TrimRight(name[:48], "-_")
	}
	if name == "" {
		return "proposed-agent"
	}
	return name + "-agent"
}

// freeName returns base, or base-2 … base-99, whichever no agent the org
// sees (its own or a shared one) has.
func (s *Service) freeName(ctx context.Context, org, base string) (string, error) {
	for i := 1; i < 100; i++ {
		name := base
		if i > 1 {
			name = fmt.Sprintf("%s-%d", base, i)
		}
		var resp busv1.GetAgentResponse
		err := s.stateReq(ctx, subjects.StateGetAgent, &busv1.GetAgentRequest{Org: org, Name: name}, &resp)
		if errors.Is(err, bus.ErrNotFound) {
			return name, nil
		}
		if err != nil {
			return "", fmt.Errorf("proposal: agent name %s: %w", name, err)
		}
	}
	return "", bus.Errorf(bus.CodeFailedPrecondition, "proposal: agents %s to %s-99 all exist; name one", base, base)
}

// Draft builds the proposed agent from its skills: a system prompt from
// their descriptions and prompt templates, the union of their required
// tools, and model ("" = the executor's default).
func Draft(name string, skills []*agentmeshv1.Skill, model string) *agentmeshv1.Agent {
	var names, tools []string
	var prompt strings.Builder
	prompt.WriteString("You are an agent proposed for tasks that need these skills:\n")
	for _, sk := range skills {
		names = append(names, sk.Name)
		fmt.Fprintf(&prompt, "- %s", sk.Name)
		if sk.Description != "" {
			fmt.Fprintf(&prompt, ": %s", sk.Description)
		}
		prompt.WriteByte('\n')
		tools = append(tools, sk.RequiredTools...)
	}
	for _, sk := range skills {
		if t := agentspec.Template(sk); t != "" {
			prompt.WriteString("\n")
			prompt.WriteString(t)
			prompt.WriteString("\n")
		}
	}
	slices.Sort(tools)
	a := &agentmeshv1.Agent{
		Name:         name,
		Description:  "proposed for the skills " + strings.Join(names, ", "),
		SystemPrompt: strings.TrimSpace(prompt.String()),
		Tools:        slices.Compact(tools),
		Skills:       names,
	}
	if model != "" {
		a.Model = &agentmeshv1.ModelSettings{Model: model}
	}
	return a
}

// fit reports whether any candidate's capability is above the threshold.
func (p proposals) fit(cands []*agentmeshv1.RoutingCandidate) bool {
	return slices.ContainsFunc(cands, func(c *agentmeshv1.RoutingCandidate) bool { return c.Capability > p.threshold })
}
