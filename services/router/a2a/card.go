package a2a

import (
	"context"
	"net/http"
	"sort"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/services/router/door"
)

// cardPages bounds how many pages of agents and skills an extended card
// reads (100 each).
const cardPages = 10

// serveCard serves the agent card: without a key the public card
// (agentmesh and how to reach it); with a key the extended card (the
// key's org's agents and skills as the card's skills). A key the API does
// not know is 401.
func (s *Server) serveCard(w http.ResponseWriter, r *http.Request) {
	key := door.Key(r)
	if key == "" {
		w.Header().Set("Cache-Control", "public, max-age=300")
		door.WriteJSON(w, http.StatusOK, s.publicCard(r))
		return
	}
	if err := s.checker.Check(r.Context(), key); err != nil {
		door.WriteAuthError(w, err)
		return
	}
	card, rerr := s.extendedCard(door.WithKey(r.Context(), key), r)
	if rerr != nil {
		door.WriteJSON(w, http.StatusBadGateway, door.Response{JSONRPC: "2.0", ID: nullID, Error: rerr})
		return
	}
	w.Header().Set("Cache-Control", "private, no-store")
	door.WriteJSON(w, http.StatusOK, card)
}

// endpoint is the JSON-RPC endpoint's URL: Config.URL, or where the
// request came (scheme, Host) at Config.Path.
func (s *Server) endpoint(r *http.Request) string {
	if s.cfg.URL != "" {
		return s.cfg.URL
	}
	scheme := "http"
	if r != nil && r.TLS != nil {
		scheme = "https"
	}
	host := "127.0.0.1"
	if r != nil && r.Host != "" {
		host = r.Host
	}
	return scheme + "://" + host + s.cfg.Path
}

func (s *Server) publicCard(r *http.Request) *AgentCard {
	url := s.endpoint(r)
	return &AgentCard{
		ProtocolVersion: ProtocolVersion,
		Name:            "agentmesh",
		Description: "agentmesh runs tasks on agents (language-model workers with tools, in sandboxes) of your org: " +
			"send a message and the best-suited agent runs it as a durable task you can follow, stream, answer and cancel. " +
			"Authenticate with an agentmesh API key; the card an API key gets lists your org's agents and skills.",
		URL: url, PreferredTransport: "JSONRPC",
		AdditionalInterfaces: []AgentInterface{{URL: url, Transport: "JSONRPC"}},
		Version:              Version,
		Capabilities:         AgentCapabilities{Streaming: true},
		SecuritySchemes: map[string]SecurityScheme{"apiKey": {Type: "http", Scheme: "bearer",
			Description: "an agentmesh API key: Authorization: Bearer <key>"}},
		Security:           []map[string][]string{{"apiKey": {}}},
		DefaultInputModes:  []string{"text/plain", "application/json"},
		DefaultOutputModes: []string{"text/plain"},
		Skills: []AgentSkill{{
			ID: "run-task", Name: "Run a task",
			Description: `Runs the message as a task on an agent of your org: the one named in the request's metadata {"agent": NAME}, ` +
				`the best one offering {"skills": [...]}, or the org's default agent. A task that needs a person's approval of a ` +
				`tool call is input-required: reply to it with "approve" or "reject".`,
			Tags:     []string{"agentmesh", "delegation", "tasks"},
			Examples: []string{"Summarise these three pages", "Fix this SQL query"},
		}},
		SupportsAuthenticatedExtendedCard: true,
	}
}

// extendedCard is the public card with the key's org's agents and skills
// (shared ones included) as skills: "agent:NAME" and "skill:NAME".
func (s *Server) extendedCard(ctx context.Context, r *http.Request) (*AgentCard, *door.RPCError) {
	card := s.publicCard(r)
	agents, err := s.agents(ctx)
	if err != nil {
		return nil, s.apiError(err, door.CodeInvalidParams)
	}
	skills, err := s.skills(ctx)
	if err != nil {
		return nil, s.apiError(err, door.CodeInvalidParams)
	}
	for _, a := range agents {
		desc := a.GetDescription()
		if desc == "" {
			desc = "The agent " + a.GetName() + "."
		}
		desc += ` Send {"agent": "` + a.GetName() + `"} in the request's metadata to run on it.`
		card.Skills = append(card.Skills, AgentSkill{ID: "agent:" + a.GetName(), Name: a.GetName(), Description: desc,
			Tags: append([]string{"agent"}, a.GetSkills()...)})
	}
	for _, sk := range skills {
		desc := sk.GetDescription()
		if desc == "" {
			desc = "The skill " + sk.GetName() + "."
		}
		desc += ` Send {"skills": ["` + sk.GetName() + `"]} in the request's metadata for the best agent offering it.`
		card.Skills = append(card.Skills, AgentSkill{ID: "skill:" + sk.GetName(), Name: sk.GetName(), Description: desc,
			Tags: []string{"skill"}})
	}
	return card, nil
}

// pages collects up to cardPages pages of a list: a card, not a catalogue.
func pages[T any](ctx context.Context, page func(ctx context.Context, token string) ([]T, string, error)) ([]T, error) {
	var out []T
	token := ""
	for range cardPages {
		cctx, cancel := door.Call(ctx)
		items, next, err := page(cctx, token)
		cancel()
		if err != nil {
			return nil, err
		}
		out = append(out, items...)
		if token = next; token == "" {
			break
		}
	}
	return out, nil
}

func (s *Server) agents(ctx context.Context) ([]*agentmeshv1.Agent, error) {
	out, err := pages(ctx, func(ctx context.Context, token string) ([]*agentmeshv1.Agent, string, error) {
		resp, err := s.api.Agents.ListAgents(ctx, &agentmeshv1.ListAgentsRequest{PageSize: 100, PageToken: token})
		return resp.GetAgents(), resp.GetNextPageToken(), err
	})
	sort.Slice(out, func(i, j int) bool { return out[i].GetName() < out[j].GetName() })
	return out, err
}

func (s *Server) skills(ctx context.Context) ([]*agentmeshv1.Skill, error) {
	out, err := pages(ctx, func(ctx context.Context, token string) ([]*agentmeshv1.Skill, string, error) {
		resp, err := s.api.Skills.ListSkills(ctx, &agentmeshv1.ListSkillsRequest{PageSize: 100, PageToken: token})
		return resp.GetSkills(), resp.GetNextPageToken(), err
	})
	sort.Slice(out, func(i, j int) bool { return out[i].GetName() < out[j].GetName() })
	return out, err
}
