package scheduler

import (
	"fmt"
	"testing"
	"time"

	busv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/bus/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/cronspec"
	"github.com/agentmesh/agentmesh/pkg/poll"
	"github.com/agentmesh/agentmesh/pkg/schedule"
	"github.com/agentmesh/agentmesh/pkg/subjects"
)

var nextSchedule int

func (e *opsEnv) createSchedule(t *testing.T, cron string, catchup agentmeshv1.CatchupPolicy, agent string) *agentmeshv1.Schedule {
	t.Helper()
	nextSchedule++
	sc := &agentmeshv1.Schedule{Id: fmt.Sprintf("sch_%d%d", time.Now().UnixNano(), nextSchedule), Name: "report",
		Spec:      &agentmeshv1.ScheduleSpec{Cron: cron, Catchup: catchup, Overlap: agentmeshv1.OverlapPolicy_OVERLAP_POLICY_ALLOW},
		Template:  &agentmeshv1.TaskTemplate{Input: "the nightly report", Agent: agent},
		CreatedBy: "acme:ci", CreatorRole: "operator"}
	var resp busv1.ScheduleResponse
	e.call(t, subjects.StateCreateSchedule, &busv1.PutScheduleRequest{Org: "acme", Schedule: sc}, &resp)
	return resp.Schedule
}

// slotKeys are the idempotency keys of the runs: one per slot.
func slotKeys(sc *agentmeshv1.Schedule, slots ...time.Time) map[string]bool {
	out := map[string]bool{}
	for _, s := range slots {
		out[schedule.IdempotencyKey(sc.Id, s, false)] = true
	}
	return out
}

// A schedule's slots, on a fake clock, fire once each while the leader is
// killed (its lease expires) and another takes over, and again when that
// one stops and a restarted replica leads: three slots, three runs, each
// with its slot's idempotency key, none twice.
func TestScheduleFiresEachSlotOnceAcrossKillAndLeaderChange(t *testing.T) {
	e := startOps(t)
	sc := e.createSchedule(t, "* * * * *", agentmeshv1.CatchupPolicy_CATCHUP_POLICY_NONE, "writer")
	clock := newFakeClock(sc.HandledThrough.AsTime())
	cfg := Config{LeaseTTL: 600 * time.Millisecond, Clock: clock}
	a := startReplica(t, e, cfg)
	waitLeader(t, a)
	b := startReplica(t, e, cfg)
	base := sc.HandledThrough.AsTime().Truncate(time.Minute)
	slot := func(n int) time.Time { return base.Add(time.Duration(n) * time.Minute) }

	clock.Set(slot(1).Add(time.Second))
	e.waitRuns(t, sc, 1)

	a.kill()
	waitLeader(t, b)
	clock.Set(slot(2).Add(2 * time.Second))
	e.waitRuns(t, sc, 2)

	a2 := startReplica(t, e, cfg)
	b.stop()
	waitLeader(t, a2)
	clock.Set(slot(3).Add(3 * time.Second))
	e.waitRuns(t, sc, 3)
	// Let the new leader settle: nothing more is due until slot 4.
	poll.Until(t, 10*time.Second, func() error {
		if got := e.getSchedule(t, "acme", sc.Id); !got.HandledThrough.AsTime().Equal(slot(3)) {
			return fmt.Errorf("handled through %s, want %s", got.HandledThrough.AsTime(), slot(3))
		}
		return nil
	})
	runs := e.runs(t, sc)
	want := slotKeys(sc, slot(1), slot(2), slot(3))
	if len(runs) != 3 {
		t.Fatalf("%d runs, want 3", len(runs))
	}
	for _, r := range runs {
		if !want[r.IdempotencyKey] {
			t.Errorf("run %s has key %q, not one of the three slots'", r.Id, r.IdempotencyKey)
		}
		delete(want, r.IdempotencyKey)
	}
	got := e.getSchedule(t, "acme", sc.Id)
	if got.Runs != 3 || got.Missed != 0 || !got.NextRunAt.AsTime().Equal(slot(4)) || !got.LastRun.Slot.AsTime().Equal(slot(3)) {
		t.Errorf("schedule: runs %d missed %d next %s last %s; want 3, 0, %s, %s", got.Runs, got.Missed,
			got.NextRunAt.AsTime(), got.LastRun.Slot.AsTime(), slot(4), slot(3))
	}
}

// After ten minutes with no scheduler, a scheduler that starts fires, by
// each catch-up policy: none — the slot on time only; last — the newest;
// all — all ten. The others are recorded missed.
func TestScheduleCatchupPolicies(t *testing.T) {
	e := startOps(t)
	none := e.createSchedule(t, "* * * * *", agentmeshv1.CatchupPolicy_CATCHUP_POLICY_NONE, "writer")
	last := e.createSchedule(t, "* * * * *", agentmeshv1.CatchupPolicy_CATCHUP_POLICY_LAST, "writer")
	all := e.createSchedule(t, "* * * * *", agentmeshv1.CatchupPolicy_CATCHUP_POLICY_ALL, "writer")
	late := e.createSchedule(t, "*/2 * * * *", agentmeshv1.CatchupPolicy_CATCHUP_POLICY_NONE, "writer")
	base := late.HandledThrough.AsTime().Truncate(time.Minute)
	// 10 minute slots have passed, the newest 5 s ago; the every-two-
	// minutes one's newest was a minute and 5 s ago (late, under none).
	now := base.Add(10*time.Minute + 5*time.Second)
	if base.Add(10*time.Minute).Minute()%2 == 0 {
		now = now.Add(time.Minute)
	}
	startReplica(t, e, Config{Clock: newFakeClock(now)})
	tests := []struct {
		sc           *agentmeshv1.Schedule
		runs, missed int64
	}{
		{none, 1, -1}, {last, 1, -1}, {all, -1, 0}, {late, 0, -1},
	}
	for _, tc := range tests {
		slots := 0
		spec := mustSpec(t, tc.sc)
		for s := schedule.Next(tc.sc, spec, tc.sc.HandledThrough.AsTime()); !s.After(now); s = schedule.Next(tc.sc, spec, s) {
			slots++
		}
		if tc.runs < 0 {
			tc.runs = int64(slots) - tc.missed
		}
		if tc.missed < 0 {
			tc.missed = int64(slots) - tc.runs
		}
		poll.Until(t, 20*time.Second, func() error {
			got := e.getSchedule(t, "acme", tc.sc.Id)
			if got.Runs+got.Missed != int64(slots) {
				return fmt.Errorf("%s: %d runs, %d missed of %d slots", tc.sc.Spec.Catchup, got.Runs, got.Missed, slots)
			}
			if got.Runs != tc.runs || got.Missed != tc.missed {
				return fmt.Errorf("%s (%s): %d runs, %d missed; want %d, %d", tc.sc.Spec.Catchup, tc.sc.Spec.Cron, got.Runs, got.Missed, tc.runs, tc.missed)
			}
			return nil
		})
		if n := len(e.runs(t, tc.sc)); int64(n) != tc.runs {
			t.Errorf("%s (%s): %d tasks, want %d", tc.sc.Spec.Catchup, tc.sc.Spec.Cron, n, tc.runs)
		}
	}
}

func mustSpec(t *testing.T, sc *agentmeshv1.Schedule) *cronspec.Spec {
	t.Helper()
	s, err := schedule.Parse(sc)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// A run whose agent is gone fails cleanly: recorded failed with the
// reason, no task, the schedule goes on.
func TestScheduleRunWithTheAgentGone(t *testing.T) {
	e := startOps(t)
	sc := e.createSchedule(t, "* * * * *", agentmeshv1.CatchupPolicy_CATCHUP_POLICY_NONE, "gone")
	clock := newFakeClock(sc.HandledThrough.AsTime())
	startReplica(t, e, Config{Clock: clock})
	clock.Set(sc.HandledThrough.AsTime().Truncate(time.Minute).Add(time.Minute + time.Second))
	poll.Until(t, 20*time.Second, func() error {
		got := e.getSchedule(t, "acme", sc.Id)
		if got.Failed != 1 {
			return fmt.Errorf("failed runs: %d", got.Failed)
		}
		if r := got.LastRun; r.Outcome != agentmeshv1.ScheduleRunOutcome_SCHEDULE_RUN_OUTCOME_FAILED || r.TaskId != "" || got.NextRunAt == nil {
			return fmt.Errorf("last run %v, next %v", r, got.NextRunAt)
		}
		return nil
	})
	if n := len(e.runs(t, sc)); n != 0 {
		t.Errorf("%d tasks for a schedule whose agent is gone", n)
	}
}
