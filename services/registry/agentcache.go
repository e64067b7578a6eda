package registry

import (
	"context"
	"strings"
	"sync"
	"time"

	busv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/bus/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/nats-io/nats.go/jetstream"
)

// The candidate cache: the agents an org sees for a set of required
// skills (the store's skill filter, one listing per skill), kept so that
// matching the same skills again costs no listing, and the agent a name
// resolves to, so a task submitted to a named agent costs no agent read. An entry is dropped
// when an agent of its org changes (a shared agent's change drops every
// org's): at once for changes made through this registry, and on the
// agent event (<p>.evt.<org>.agent.<name>, followed from the events
// stream) for changes made through another replica or state itself.
// Entries live at most CandidateTTL in any case, and none is used while
// the agent events are not followed.

// CandidateTTL bounds how long cached candidates are used.
const CandidateTTL = 30 * time.Second

// maxCandidateEntries bounds the cache; past it, it starts over.
const maxCandidateEntries = 10000

type candidateKey struct {
	org, skills string
}

type candidateEntry struct {
	agents []*agentmeshv1.Agent
	at     time.Time
}

type candidateCache struct {
	ttl     time.Duration // < 0: no cache
	mu      sync.Mutex
	gen     uint64 // grows on every invalidation
	ready   bool   // the agent events are followed
	entries map[candidateKey]candidateEntry
}

func newCandidateCache(ttl time.Duration) *candidateCache {
	if ttl == 0 {
		ttl = CandidateTTL
	}
	return &candidateCache{ttl: ttl, entries: map[candidateKey]candidateEntry{}}
}

func keyOf(org string, required []string) candidateKey {
	return candidateKey{org, strings.Join(required, "\x00")}
}

// namedKey is the key of the agent a named match resolves to for org (its
// own, else the shared one): a skills key never starts with \x01 (skill
// names are lower-case words).
func namedKey(org, name string) candidateKey {
	return candidateKey{org, "\x01" + name}
}

// get returns the cached candidates and the generation to put with.
func (c *candidateCache) get(k candidateKey, now time.Time) ([]*agentmeshv1.Agent, uint64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[k]
	if !c.ready || !ok || now.Sub(e.at) >= c.ttl {
		return nil, c.gen, false
	}
	return e.agents, c.gen, true
}

// put caches agents unless an invalidation came since gen was read.
func (c *candidateCache) put(k candidateKey, agents []*agentmeshv1.Agent, gen uint64, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.ready || c.gen != gen || c.ttl < 0 {
		return
	}
	if len(c.entries) >= maxCandidateEntries {
		clear(c.entries)
	}
	c.entries[k] = candidateEntry{agents: agents, at: now}
}

// invalidate drops org's entries, or every entry for a shared agent.
func (c *candidateCache) invalidate(org string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	if org == "" {
		clear(c.entries)
		return
	}
	for k := range c.entries {
		if k.org == org {
			delete(c.entries, k)
		}
	}
}

// setReady turns the cache on or off (off: emptied).
func (c *candidateCache) setReady(ready bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	c.ready = ready
	clear(c.entries)
}

// followAgents keeps the candidate cache coherent with the agent events
// until ctx ends: the cache is on while they are followed (it reads the
// record lazily, so nothing is listed first).
func (s *Service) followAgents(ctx context.Context, js jetstream.JetStream) {
	bus.Follow{
		Stream: s.names.EventsStream(), Filters: []string{s.names.AgentEvents()}, Handle: s.onAgentEvent,
		Failed: func(err error) { s.log.Debug("agent events: follow failed; retrying", "err", err) },
	}.Run(ctx, js, func(ctx context.Context) {
		s.cands.setReady(true)
		<-ctx.Done()
		s.cands.setReady(false)
	})
}

// onAgentEvent drops the cached candidates of the agent's org.
func (s *Service) onAgentEvent(m jetstream.Msg) {
	var ev busv1.AgentEvent
	if err := bus.DecodeEvent(m.Data(), &ev); err != nil {
		s.log.Warn("malformed agent event: every cached candidate dropped", "subject", m.Subject(), "err", err)
		s.cands.invalidate("")
		return
	}
	s.cands.invalidate(ev.GetAgent().GetOrg())
}
