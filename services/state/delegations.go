package state

import (
	"context"
	"sort"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"github.com/agentmesh/agentmesh/services/state/store"
)

// delegations counts, for GetMetrics, the sub-tasks of a window by (parent
// agent, child agent): created in the window, and finished in it by how.
// The parent's agent comes from the scan when the parent is in it, else
// from the record (read once per parent).
type delegations struct {
	start, end time.Time
	agentOf    map[string]string // task id → agent, of the scanned tasks
	subs       []*agentmeshv1.Task
}

func newDelegations(start, end time.Time) *delegations {
	return &delegations{start: start, end: end, agentOf: map[string]string{}}
}

func (d *delegations) add(t *agentmeshv1.Task) {
	d.agentOf[t.Id] = t.Agent
	if t.ParentTaskId != "" && (in(t.CreatedAt, d.start, d.end) || (taskstate.Terminal(t.Status) && in(t.FinishedAt, d.start, d.end))) {
		d.subs = append(d.subs, t)
	}
}

// result returns the pairs ordered by parent then child agent.
func (d *delegations) result(ctx context.Context, get store.GetFunc) []*agentmeshv1.DelegationMetrics {
	type pair struct{ parent, child string }
	acc := map[pair]*agentmeshv1.DelegationMetrics{}
	for _, t := range d.subs {
		pa, ok := d.agentOf[t.ParentTaskId]
		if !ok {
			if p, err := get(ctx, t.ParentTaskId); err == nil && p.Org == t.Org {
				pa = p.Agent
			}
			d.agentOf[t.ParentTaskId] = pa
		}
		if pa == "" {
			continue // the parent is gone: no pair to count it in
		}
		k := pair{pa, t.Agent}
		m := acc[k]
		if m == nil {
			m = &agentmeshv1.DelegationMetrics{ParentAgent: pa, ChildAgent: t.Agent}
			acc[k] = m
		}
		if in(t.CreatedAt, d.start, d.end) {
			m.Submitted++
		}
		if taskstate.Terminal(t.Status) && in(t.FinishedAt, d.start, d.end) {
			switch t.Status {
			case taskstate.Completed:
				m.Completed++
			case taskstate.Failed:
				m.Failed++
			case taskstate.Cancelled:
				m.Cancelled++
			}
		}
	}
	out := make([]*agentmeshv1.DelegationMetrics, 0, len(acc))
	for _, m := range acc {
		if n := m.Completed + m.Failed + m.Cancelled; n > 0 {
			m.SuccessRate = float64(m.Completed) / float64(n)
		}
		out = append(out, m)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].ParentAgent != out[j].ParentAgent {
			return out[i].ParentAgent < out[j].ParentAgent
		}
		return out[i].ChildAgent < out[j].ChildAgent
	})
	return out
}
