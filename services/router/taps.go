package router

import (
	"context"
	"time"

	busv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/bus/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/busauth"
	"github.com/agentmesh/agentmesh/pkg/subjects"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// tapServer implements agentmeshv1.TapService: subscribe-only bus
// credentials of the caller's org, minted by the state service (which
// holds the scoped tap signing key) on state op taps.create.
type tapServer struct {
	agentmeshv1.UnimplementedTapServiceServer
	s *Service
}

// requireAdmin allows an admin key of org only: the role check of API keys
// (MethodRoles already demands admin for TapService; this holds it where
// the org is known) and the org must be the caller's own.
func requireAdmin(ctx context.Context, org string) error {
	if err := RequireRole(ctx, RoleAdmin); err != nil {
		return err
	}
	if caller := orgFrom(ctx); org != caller {
		return status.Errorf(codes.PermissionDenied, "org %q: an admin key of that org is required", org)
	}
	return nil
}

func (t *tapServer) CreateTap(ctx context.Context, req *agentmeshv1.CreateTapRequest) (*agentmeshv1.CreateTapResponse, error) {
	org := req.GetOrg()
	if org == "" {
		org = orgFrom(ctx)
	}
	if err := requireAdmin(ctx, org); err != nil {
		return nil, err
	}
	resp, err := t.s.createTap(ctx, org, req)
	return resp, toStatus(t.s.log, "CreateTap", err)
}

func (s *Service) createTap(ctx context.Context, org string, req *agentmeshv1.CreateTapRequest) (*agentmeshv1.CreateTapResponse, error) {
	if !subjects.ValidToken(org) {
		return nil, bus.FieldError("org", "%q is not an org", org)
	}
	var ttl time.Duration
	if d := req.GetTtl(); d != nil {
		if err := d.CheckValid(); err != nil {
			return nil, bus.FieldError("ttl", "%v", err)
		}
		ttl = d.AsDuration()
		if ttl <= 0 || ttl > busauth.MaxTapTTL {
			return nil, bus.FieldError("ttl", "must be positive and at most %s", busauth.MaxTapTTL)
		}
	}
	var resp busv1.CreateTapResponse
	if err := bus.Request(ctx, s.nc, s.names.State(subjects.StateCreateTap), &busv1.CreateTapRequest{
		Org: org, TtlSeconds: int64(ttl / time.Second),
	}, &resp); err != nil {
		return nil, err
	}
	s.log.Info("tap created", "org", org, "expires", time.Unix(resp.GetExpires(), 0).UTC())
	return &agentmeshv1.CreateTapResponse{
		Org: org, Creds: resp.GetCreds(), ExpiresAt: timestamppb.New(time.Unix(resp.GetExpires(), 0)),
		Subjects: resp.GetSubjects(),
	}, nil
}
