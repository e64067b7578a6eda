package llm

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/modeltable"
)

// Where a call goes. The agent's model.model names a model of the
// operator's table (AGENTMESH_MODELS): its provider, base URL, key,
// limits. An agent with its own model.base_url calls that URL, in its
// model.provider's format, with the key its api_key_secret names (never
// the operator's). Any other model is one at the executor's default
// endpoint (AGENTMESH_MODEL_BASE_URL, AGENTMESH_MODEL_PROVIDER), with its
// key; an empty model is the default model (AGENTMESH_MODEL). The route
// is that model, then its fallbacks in order: the agent's
// model.fallbacks, else the table entry's; each a table name or a model
// at the default endpoint. A fallback is tried when the model before it
// is out (its retries spent on 5xx, 529, timeouts, resets) or over its
// rate limit — never when it refused the request (a fallback would hide
// a 401 or a bad request).

// route is the call's route: its model, then its fallbacks.
func (m *Models) route(req Request) ([]Endpoint, error) {
	s := req.Settings
	primary, fallbacks, err := m.resolve(s.GetModel(), s, req, true)
	if err != nil {
		return nil, err
	}
	out := []Endpoint{primary}
	if names := s.GetFallbacks(); len(names) > 0 {
		fallbacks = names
	}
	for _, name := range fallbacks {
		ep, _, err := m.resolve(name, s, req, false)
		if err != nil {
			return nil, fmt.Errorf("fallback %s: %w", name, err)
		}
		if !routed(out, ep) {
			out = append(out, ep)
		}
	}
	return out, nil
}

// routed reports whether ep is on the route already.
func routed(route []Endpoint, ep Endpoint) bool {
	for _, r := range route {
		if r.BaseURL == ep.BaseURL && r.Model == ep.Model && r.Key == ep.Key {
			return true
		}
	}
	return false
}

// resolve is the endpoint of model name (the agent's own model when
// primary) and the table entry's fallbacks.
func (m *Models) resolve(name string, s *agentmeshv1.ModelSettings, req Request, primary bool) (Endpoint, []string, error) {
	ep := Endpoint{ReAct: false, ToolCallsInText: s.GetToolCallsInText()}
	switch p := strings.ToLower(strings.TrimSpace(s.GetToolProtocol())); p {
	case "", ToolProtocolNative:
	case ToolProtocolReAct:
		ep.ReAct = true
	default:
		return ep, nil, fmt.Errorf("unknown model tool_protocol %q (want %q or %q)", s.GetToolProtocol(), ToolProtocolNative, ToolProtocolReAct)
	}
	var fallbacks []string
	own := primary && s.GetBaseUrl() != "" && s.GetBaseUrl() != m.cfg.BaseURL
	entry, inTable := m.cfg.Table.Lookup(name)
	switch {
	case own:
		ep.Name, ep.Model, ep.BaseURL = name, name, s.GetBaseUrl()
		ep.Provider = s.GetProvider()
		if ep.Provider == "" {
			ep.Provider = modeltable.ProviderOpenAI
		}
		if ep.Model == "" {
			ep.Model, ep.Name = m.cfg.Model, m.cfg.Model
		}
	case inTable:
		ep.Name, ep.Model, ep.BaseURL, ep.Provider = name, entry.ModelName(name), entry.BaseURL, entry.ProviderOf()
		ep.Key, ep.MaxTokens, ep.Limits = m.keys[name], entry.MaxTokens, entry.Limits
		ep.ToolCallsInText = ep.ToolCallsInText || entry.ToolCallsInText
		ep.LimitKey = m.cfg.Table.LimitKey(name)
		fallbacks = entry.Fallbacks
	default:
		if name == "" {
			name = m.cfg.Model
		}
		ep.Name, ep.Model, ep.BaseURL, ep.Key, ep.Provider = name, name, m.cfg.BaseURL, m.cfg.APIKey, m.cfg.Provider
	}
	if primary && req.HasKey {
		ep.Key = req.Key // the agent's own key pays for its own model
	}
	if p := s.GetProvider(); p != "" && !own && p != ep.Provider {
		return ep, nil, fmt.Errorf("the agent's model.provider is %q but model %s is spoken to in %q (the operator's model table or AGENTMESH_MODEL_PROVIDER)", p, ep.Name, ep.Provider)
	}
	if !modeltable.ValidProvider(ep.Provider) {
		return ep, nil, fmt.Errorf("unknown model provider %q (want %s)", ep.Provider, strings.Join(modeltable.Providers, " or "))
	}
	switch {
	case ep.BaseURL == "":
		return ep, nil, errors.New("no model base URL configured (set the agent's model.base_url, name a model of the model table, or set the executor's default)")
	case ep.Model == "":
		return ep, nil, errors.New("no model configured (set the agent's model.model or the executor's default)")
	}
	if ep.LimitKey == "" {
		// A model outside the table: its own budget, per endpoint, key and
		// model (providers limit per model), learned from its headers.
		ep.LimitKey = endpointKey(ep)
	}
	return ep, fallbacks, nil
}

// endpointKey names the budget of a model outside the table.
func endpointKey(ep Endpoint) string {
	h := sha256.Sum256([]byte(ep.BaseURL + "\x00" + ep.Key + "\x00" + ep.Model))
	return "ep-" + hex.EncodeToString(h[:8])
}
