package router

import (
	"context"

	busv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/bus/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/subjects"
)

// GetUsage sums the tokens and cost of the caller's org's tasks created in
// a time range (state op task.usage).
func (t *taskServer) GetUsage(ctx context.Context, req *agentmeshv1.GetUsageRequest) (*agentmeshv1.GetUsageResponse, error) {
	resp, err := t.s.usage(ctx, req)
	return resp, toStatus(t.s.log, "GetUsage", err)
}

func (s *Service) usage(ctx context.Context, req *agentmeshv1.GetUsageRequest) (*agentmeshv1.GetUsageResponse, error) {
	if a := req.GetAgent(); a != "" {
		if err := checkName("agent", a); err != nil {
			return nil, err
		}
	}
	if err := checkTime("created_after", req.GetCreatedAfter()); err != nil {
		return nil, err
	}
	if err := checkTime("created_before", req.GetCreatedBefore()); err != nil {
		return nil, err
	}
	if a, b := req.GetCreatedAfter(), req.GetCreatedBefore(); a != nil && b != nil && !a.AsTime().Before(b.AsTime()) {
		return nil, bus.FieldError("created_before", "must be after created_after")
	}
	var resp busv1.UsageResponse
	if err := bus.Request(ctx, s.nc, s.names.State(subjects.StateUsage), &busv1.UsageRequest{
		Org: orgFrom(ctx), Agent: req.GetAgent(), CreatedAfter: req.GetCreatedAfter(), CreatedBefore: req.GetCreatedBefore(),
	}, &resp); err != nil {
		return nil, err
	}
	u := resp.GetUsage()
	if u == nil {
		u = &agentmeshv1.Usage{}
	}
	return &agentmeshv1.GetUsageResponse{Usage: u, Tasks: resp.GetTasks()}, nil
}
