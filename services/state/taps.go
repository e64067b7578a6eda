package state

import (
	"context"
	"time"

	busv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/bus/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/busauth"
	"github.com/agentmesh/agentmesh/pkg/subjects"
)

// createTap mints a subscribe-only tap credential of one org with the
// account's scoped tap signing key (taps.create; only the router's
// identity may ask, on behalf of an org admin). The key's scope, not this
// code, bounds what the credential may do.
func (s *Service) createTap(_ context.Context, req *busv1.CreateTapRequest) (*busv1.CreateTapResponse, error) {
	switch {
	case s.taps == nil:
		return nil, bus.Errorf(bus.CodeFailedPrecondition, "taps are not configured: the state service has no tap signing key (AGENTMESH_NATS_TAP_SIGNER)")
	case req.Org == "":
		return nil, bus.FieldError("org", "an org is required")
	case !subjects.ValidToken(req.Org) || req.Org == subjects.NoOrg || req.Org == subjects.SharedOrg:
		return nil, bus.FieldError("org", "%q is not an org", req.Org)
	case req.TtlSeconds < 0 || time.Duration(req.TtlSeconds)*time.Second > busauth.MaxTapTTL:
		return nil, bus.FieldError("ttl_seconds", "must be between 0 (the default, %s) and %d", busauth.DefaultTapTTL, int64(busauth.MaxTapTTL/time.Second))
	}
	tap, err := s.taps.Mint(req.Org, time.Duration(req.TtlSeconds)*time.Second)
	if err != nil {
		return nil, err
	}
	s.log.Info("tap credential minted", "org", req.Org, "expires", tap.Expires)
	return &busv1.CreateTapResponse{
		Creds: string(tap.Creds), Expires: tap.Expires.Unix(),
		Subjects: s.names.TapPermissions(req.Org).Sub,
	}, nil
}

// agentOrg is the org token of an agent's events: its org, or
// subjects.SharedOrg for the shared catalogue (agents of no org).
func agentOrg(a *agentmeshv1.Agent) string {
	if a.GetOrg() == "" {
		return subjects.SharedOrg
	}
	return a.GetOrg()
}
