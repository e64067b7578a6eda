package schedule

import (
	"fmt"
	"testing"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

var t0 = time.Date(2026, 5, 4, 12, 0, 0, 0, time.UTC)

func sched(cron string, policy agentmeshv1.CatchupPolicy, handled time.Time) *agentmeshv1.Schedule {
	return &agentmeshv1.Schedule{Id: "sch_1", Org: "acme",
		Spec:           &agentmeshv1.ScheduleSpec{Cron: cron, Catchup: policy},
		HandledThrough: timestamppb.New(handled)}
}

func clock(ts []time.Time) string {
	var out []string
	for _, t := range ts {
		out = append(out, t.Format("15:04"))
	}
	return fmt.Sprint(out)
}

func TestPlanDue(t *testing.T) {
	none, last, all := agentmeshv1.CatchupPolicy_CATCHUP_POLICY_NONE, agentmeshv1.CatchupPolicy_CATCHUP_POLICY_LAST, agentmeshv1.CatchupPolicy_CATCHUP_POLICY_ALL
	tests := []struct {
		name          string
		sc            *agentmeshv1.Schedule
		now           time.Time
		fire          string
		missed        int64
		missedThrough string
		next          string
	}{
		{"nothing due yet", sched("*/5 * * * *", none, t0), t0.Add(4 * time.Minute), "[]", 0, "", "12:05"},
		{"on time", sched("*/5 * * * *", none, t0), t0.Add(5*time.Minute + 2*time.Second), "[12:05]", 0, "", "12:10"},
		{"none after an hour down: the on-time slot only", sched("*/5 * * * *", none, t0), t0.Add(time.Hour + time.Second), "[13:00]", 11, "12:55", "13:05"},
		{"none: even the newest is late", sched("*/5 * * * *", none, t0), t0.Add(time.Hour + time.Minute), "[]", 12, "13:00", "13:05"},
		{"last: the newest late one", sched("*/5 * * * *", last, t0), t0.Add(time.Hour + time.Minute), "[13:00]", 11, "12:55", "13:05"},
		{"all: every one in the window", sched("*/5 * * * *", all, t0), t0.Add(30*time.Minute + time.Minute), "[12:05 12:10 12:15 12:20 12:25 12:30]", 0, "", "12:35"},
		{"all: older than the window missed", sched("*/5 * * * *", all, t0), t0.Add(2*time.Hour + time.Minute), "[13:05 13:10 13:15 13:20 13:25 13:30 13:35 13:40 13:45 13:50 13:55 14:00]", 12, "13:00", "14:05"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			spec, err := Parse(tc.sc)
			if err != nil {
				t.Fatal(err)
			}
			p := PlanDue(tc.sc, spec, tc.now)
			mt := ""
			if !p.MissedThrough.IsZero() {
				mt = p.MissedThrough.Format("15:04")
			}
			if got := clock(p.Fire); got != tc.fire || p.Missed != tc.missed || mt != tc.missedThrough || p.Next.Format("15:04") != tc.next {
				t.Errorf("got fire %s missed %d through %q next %s, want %s %d %q %s", got, p.Missed, mt, p.Next.Format("15:04"), tc.fire, tc.missed, tc.missedThrough, tc.next)
			}
		})
	}
}

func TestPlanDueAllIsCapped(t *testing.T) {
	sc := sched("@every 1s", agentmeshv1.CatchupPolicy_CATCHUP_POLICY_ALL, t0)
	spec, _ := Parse(sc)
	p := PlanDue(sc, spec, t0.Add(10*time.Minute))
	if len(p.Fire) != MaxCatchup || p.Missed != 600-MaxCatchup || !p.Fire[0].Equal(t0.Add(501*time.Second)) || !p.MissedThrough.Before(p.Fire[0]) {
		t.Errorf("fired %d from %s, missed %d through %s", len(p.Fire), p.Fire[0], p.Missed, p.MissedThrough)
	}
}

func TestPlanDueWaitsForTheJitter(t *testing.T) {
	sc := sched("*/5 * * * *", agentmeshv1.CatchupPolicy_CATCHUP_POLICY_NONE, t0)
	sc.Spec.Jitter = durationpb.New(time.Minute)
	spec, _ := Parse(sc)
	at := FireAt(sc, t0.Add(5*time.Minute))
	if d := at.Sub(t0.Add(5 * time.Minute)); d < 0 || d >= time.Minute {
		t.Fatalf("jitter %s out of [0, 1m)", d)
	}
	if p := PlanDue(sc, spec, at.Add(-time.Millisecond)); len(p.Fire) != 0 {
		t.Errorf("fired before its jitter: %v", p.Fire)
	}
	if p := PlanDue(sc, spec, at); clock(p.Fire) != "[12:05]" {
		t.Errorf("at its fire time: %v", p.Fire)
	}
}

func TestNextWithinBounds(t *testing.T) {
	sc := sched("0 * * * *", agentmeshv1.CatchupPolicy_CATCHUP_POLICY_NONE, t0)
	sc.Spec.StartAt = timestamppb.New(t0.Add(3 * time.Hour))
	sc.Spec.EndAt = timestamppb.New(t0.Add(5 * time.Hour))
	spec, _ := Parse(sc)
	var got []time.Time
	for at := t0; ; {
		at = Next(sc, spec, at)
		if at.IsZero() {
			break
		}
		got = append(got, at)
	}
	if clock(got) != "[15:00 16:00]" {
		t.Errorf("slots within [15:00, 17:00): %s", clock(got))
	}
}
