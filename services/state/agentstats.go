package state

import (
	"context"
	"fmt"
	"time"

	busv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/bus/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/subjects"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"github.com/agentmesh/agentmesh/services/state/store"
)

// Bounds of an agent stats request.
const (
	maxStatsAgents       = 1000
	defaultStatsWindow   = time.Hour
	maxStatsWindowSecond = 7 * 24 * 3600
)

type agentKey struct{ org, name string }

// agentStats answers the registry's scored matching: for each agent asked
// about, the tasks assigned to or running on it now (in every org for a
// shared agent, since its max_concurrency is cluster-wide) and the asking
// org's tasks of it that completed or failed within the window.
//
// It reads the store with two scans (the live tasks, the org's recently
// finished ones); its cost grows with the live tasks of the cluster.
func (s *Service) agentStats(ctx context.Context, req *busv1.AgentStatsRequest) (*busv1.AgentStatsResponse, error) {
	switch {
	case req.Org == "":
		return nil, bus.FieldError("org", "an org is required")
	case !subjects.ValidToken(req.Org):
		return nil, bus.FieldError("org", "%q is not a valid org", req.Org)
	case len(req.Agents) > maxStatsAgents:
		return nil, &bus.Error{Code: bus.CodeResourceExhausted, Field: "agents", Message: fmt.Sprintf("%d agents is over the limit of %d", len(req.Agents), maxStatsAgents)}
	case req.WindowSeconds < 0 || req.WindowSeconds > maxStatsWindowSecond:
		return nil, bus.FieldError("window_seconds", "must be between 0 and %d", maxStatsWindowSecond)
	}
	window := defaultStatsWindow
	if req.WindowSeconds > 0 {
		window = time.Duration(req.WindowSeconds) * time.Second
	}
	stats := make(map[agentKey]*busv1.AgentStats, len(req.Agents))
	out := &busv1.AgentStatsResponse{Stats: make([]*busv1.AgentStats, len(req.Agents))}
	for i, a := range req.Agents {
		if a.GetName() == "" {
			return nil, bus.FieldError(fmt.Sprintf("agents[%d].name", i), "required")
		}
		k := agentKey{a.GetOrg(), a.GetName()}
		st := stats[k]
		if st == nil {
			st = &busv1.AgentStats{Agent: &busv1.AgentRef{Org: k.org, Name: k.name}}
			stats[k] = st
		}
		out.Stats[i] = st
	}
	if len(stats) == 0 {
		return out, nil
	}
	err := s.store.ScanTasks(ctx, store.TaskQuery{Statuses: []agentmeshv1.TaskStatus{taskstate.Assigned, taskstate.Running}}, func(t *agentmeshv1.Task) bool {
		if st := stats[agentKey{t.GetAgentSpec().GetOrg(), t.Agent}]; st != nil {
			st.Running++
		}
		return ctx.Err() == nil
	})
	if err != nil {
		return nil, fmt.Errorf("agent stats: live tasks: %w", err)
	}
	err = s.store.ScanTasks(ctx, store.TaskQuery{Org: req.Org, Statuses: []agentmeshv1.TaskStatus{taskstate.Completed, taskstate.Failed},
		UpdatedAfter: time.Now().Add(-window)}, func(t *agentmeshv1.Task) bool {
		if st := stats[agentKey{t.GetAgentSpec().GetOrg(), t.Agent}]; st != nil {
			if t.Status == taskstate.Completed {
				st.Completed++
			} else {
				st.Failed++
			}
		}
		return ctx.Err() == nil
	})
	if err != nil {
		return nil, fmt.Errorf("agent stats: finished tasks: %w", err)
	}
	return out, ctx.Err()
}
