package scheduler

import (
	"testing"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
)

func noLimit(string) int { return 0 }

func queued(id, org string, p agentmeshv1.Priority, at time.Time, seq int64) update {
	return update{id: id, org: org, agent: "a", prio: p, status: taskstate.Queued, seq: seq, at: at}
}

func TestAgingLetsBacklogOvertakeFreshCriticalWork(t *testing.T) {
	now := time.Now()
	tests := []struct {
		name  string
		aging time.Duration
		want  string
	}{
		{"aging on: 5 minutes of waiting beat 4 levels", time.Minute, "old-backlog"},
		{"aging off: strict priority", 0, "new-critical"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := newModel(tt.aging, noLimit, noLimit)
			m.heartbeat("n", 1, false, nil, time.Minute, now)
			m.apply(queued("old-backlog", "o", agentmeshv1.Priority_PRIORITY_BACKLOG, now.Add(-5*time.Minute), 2), now)
			m.apply(queued("new-critical", "o", agentmeshv1.Priority_PRIORITY_CRITICAL, now, 2), now)
			if got := m.next(now); got == nil || got.id != tt.want {
				t.Fatalf("got %v, want %s", got, tt.want)
			}
		})
	}
}

func TestDrainingAndLostNodesTakeNoWork(t *testing.T) {
	now := time.Now()
	m := newModel(time.Minute, noLimit, noLimit)
	m.heartbeat("draining", 4, true, nil, time.Minute, now)
	m.heartbeat("silent", 4, false, nil, time.Second, now.Add(-time.Minute))
	m.lostNodes(now, now, time.Time{}, time.Second)
	m.apply(queued("t1", "o", agentmeshv1.Priority_PRIORITY_NORMAL, now, 2), now)
	if got := m.next(now); got != nil {
		t.Fatalf("dispatched %s with only a draining and a lost node", got.id)
	}
	m.heartbeat("silent", 4, false, nil, time.Second, now) // it came back
	if got := m.next(now); got == nil || got.id != "t1" {
		t.Fatalf("got %v, want t1 once a node is live", got)
	}
}

// A node's silence counts only from when the scheduler could hear it: a
// scheduler whose own connection came back (a NATS restart longer than the
// ttl) does not find every node lost, and fail their live attempts, before
// their next heartbeat.
func TestSilenceCountsOnlyWhileTheSchedulerHears(t *testing.T) {
	now := time.Now()
	m := newModel(time.Minute, noLimit, noLimit)
	m.heartbeat("n", 4, false, nil, 15*time.Second, now.Add(-20*time.Second))
	m.apply(queued("t1", "o", agentmeshv1.Priority_PRIORITY_NORMAL, now, 2), now)
	m.apply(update{id: "t1", org: "o", agent: "a", status: taskstate.Running, seq: 3, node: "n"}, now)
	if lost, orphans := m.lostNodes(now, now.Add(-time.Hour), now.Add(-2*time.Second), time.Minute); len(lost) != 0 || len(orphans) != 0 {
		t.Fatalf("heard again 2s ago: lost %v, orphans %d; want none", lost, len(orphans))
	}
	if lost, orphans := m.lostNodes(now.Add(14*time.Second), now.Add(-time.Hour), now.Add(-2*time.Second), time.Minute); len(lost) != 1 || len(orphans) != 1 {
		t.Fatalf("silent 16s since it could be heard: lost %v, orphans %d; want the node and its task", lost, len(orphans))
	}
}

func TestCountersFollowEvents(t *testing.T) {
	now := time.Now()
	m := newModel(time.Minute, noLimit, func(string) int { return 1 })
	m.heartbeat("n", 10, false, nil, time.Minute, now)
	m.apply(queued("t1", "o", agentmeshv1.Priority_PRIORITY_NORMAL, now, 2), now)
	m.apply(queued("t2", "o", agentmeshv1.Priority_PRIORITY_NORMAL, now, 2), now)
	if e := m.next(now); e == nil || e.id != "t1" {
		t.Fatalf("first pick %v, want t1", e)
	}
	if e := m.next(now); e != nil {
		t.Fatalf("picked %s past the agent's limit of 1", e.id)
	}
	m.apply(update{id: "t1", org: "o", agent: "a", status: taskstate.Assigned, seq: 3}, now)
	m.apply(update{id: "t1", org: "o", agent: "a", status: taskstate.Running, seq: 4, node: "n"}, now)
	m.apply(update{id: "t1", org: "o", agent: "a", status: taskstate.Running, seq: 4, node: "n"}, now) // a replay
	if m.agents["a"].running != 1 || m.nodes["n"].running != 1 || m.unplaced != 0 {
		t.Fatalf("agent running %d, node running %d, unplaced %d; want 1, 1, 0", m.agents["a"].running, m.nodes["n"].running, m.unplaced)
	}
	if !m.apply(update{id: "t1", org: "o", agent: "a", status: taskstate.Completed, seq: 5}, now) {
		t.Fatal("completion did not report freed capacity")
	}
	if e := m.next(now); e == nil || e.id != "t2" {
		t.Fatalf("after t1 completed: %v, want t2", e)
	}
}
