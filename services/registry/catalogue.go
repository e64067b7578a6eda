package registry

import (
	"context"
	"fmt"
	"sync"
	"time"

	busv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/bus/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/subjects"
	"github.com/nats-io/nats.go"
)

// The skill catalogue task analysis reads: an org's skills and the shared
// ones, listed from the state service (<p>.state.skill.list) and kept per
// org for CatalogueTTL, so that a submit naming neither agent nor skills
// costs no listing while the catalogue is unchanged. A skill created,
// updated or deleted through this registry drops the cached catalogues it
// touches at once (an org's: that org's; a shared one: every org's);
// another registry replica's change is seen within CatalogueTTL.

// CatalogueTTL is how long a cached org catalogue is used.
const CatalogueTTL = 10 * time.Second

// maxCatalogue bounds the skills one org's catalogue holds (its own and
// the shared ones); past it, analysis reads the first ones by name.
const maxCatalogue = 5000

// busCatalog is the SkillCatalog over the bus, with its cache.
type busCatalog struct {
	nc    *nats.Conn
	names subjects.Names
	ttl   time.Duration
	now   func() time.Time

	mu    sync.Mutex
	gen   uint64 // grows on every invalidation, so a listing begun before one is not cached
	byOrg map[string]cachedCatalogue
}

type cachedCatalogue struct {
	skills []*agentmeshv1.Skill
	at     time.Time
}

// NewBusCatalog is the SkillCatalog reading the state service over nc,
// cached for ttl (0 = CatalogueTTL).
func NewBusCatalog(nc *nats.Conn, names subjects.Names, ttl time.Duration) SkillCatalog {
	if ttl <= 0 {
		ttl = CatalogueTTL
	}
	return &busCatalog{nc: nc, names: names, ttl: ttl, now: time.Now, byOrg: map[string]cachedCatalogue{}}
}

// List returns org's catalogue: its own skills and the shared ones (an
// org's skill hides the shared one of its name), by name.
func (c *busCatalog) List(ctx context.Context, org string) ([]*agentmeshv1.Skill, error) {
	c.mu.Lock()
	e, ok := c.byOrg[org]
	gen := c.gen
	c.mu.Unlock()
	if ok && c.now().Sub(e.at) < c.ttl {
		return e.skills, nil
	}
	var out []*agentmeshv1.Skill
	index := map[string]int{}
	token := ""
	for {
		var resp busv1.ListSkillsResponse
		if err := bus.Request(ctx, c.nc, c.names.State(subjects.StateListSkills),
			&busv1.ListSkillsRequest{Org: org, PageSize: 1000, PageToken: token}, &resp); err != nil {
			return nil, fmt.Errorf("list skills: %w", err)
		}
		for _, sk := range resp.Skills {
			if i, dup := index[sk.Name]; dup {
				if sk.Org != "" {
					out[i] = sk // the org's own wins over the shared one
				}
				continue
			}
			index[sk.Name] = len(out)
			out = append(out, sk)
		}
		token = resp.NextPageToken
		if token == "" || len(out) >= maxCatalogue {
			break
		}
	}
	c.mu.Lock()
	if c.gen == gen {
		c.byOrg[org] = cachedCatalogue{skills: out, at: c.now()}
	}
	c.mu.Unlock()
	return out, nil
}

// Invalidate drops the cached catalogue of org, or of every org for a
// shared skill (org "").
func (c *busCatalog) Invalidate(org string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	if org == "" {
		clear(c.byOrg)
		return
	}
	delete(c.byOrg, org)
}

// invalidator is a SkillCatalog that caches.
type invalidator interface {
	Invalidate(org string)
}

// skillsChanged tells the catalogue that org's skills changed.
func (s *Service) skillsChanged(org string) {
	if inv, ok := s.skills.(invalidator); ok {
		inv.Invalidate(org)
	}
}
