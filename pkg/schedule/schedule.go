// Package schedule holds what the router, the state service and the
// scheduler share about schedules (agentmesh.v1.Schedule): when a schedule's
// next slot is (its cron spec within start_at and end_at), which due slots a
// scheduler fires after downtime (the catch-up policy), the task a run
// submits (from the template and the matched agent), and the tag and
// idempotency key of a run. Cron expressions are read by pkg/cronspec.
package schedule

import (
	"errors"
	"fmt"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/budget"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/cronspec"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Bounds and defaults of a schedule's spec.
const (
	// OnTimeGrace: a slot fires under catch-up policy none only within
	// this long after its time and jitter (a leader take-over fits).
	OnTimeGrace = 15 * time.Second
	// MaxCatchup bounds the slots policy all fires at once.
	MaxCatchup = 100
	// DefaultCatchupWindow and MaxCatchupWindow bound how far back a missed
	// slot fires under policies last and all.
	DefaultCatchupWindow = time.Hour
	MaxCatchupWindow     = 30 * 24 * time.Hour
	// MaxJitter bounds a spec's jitter.
	MaxJitter = time.Hour
)

// TagPrefix starts the tag every run of a schedule carries.
const TagPrefix = "schedule:"

// Tag is the tag of every run of schedule id ("schedule:<id>").
func Tag(id string) string { return TagPrefix + id }

// IdempotencyKey is the idempotency key of the task of a slot: the slot's
// Unix second for a cron slot, so the slot fires once however many times it
// is fired; a trigger's instant in nanoseconds (one run per trigger).
func IdempotencyKey(id string, slot time.Time, manual bool) string {
	if manual {
		return fmt.Sprintf("schedule:%s:now:%d", id, slot.UnixNano())
	}
	return fmt.Sprintf("schedule:%s:%d", id, slot.Unix())
}

// Parse reads a schedule's cron spec.
func Parse(sc *agentmeshv1.Schedule) (*cronspec.Spec, error) {
	return cronspec.Parse(sc.GetSpec().GetCron(), sc.GetSpec().GetTimeZone())
}

// Next returns the schedule's first slot after `after` within its bounds
// (start_at inclusive, end_at exclusive), or the zero time when none is
// left.
func Next(sc *agentmeshv1.Schedule, spec *cronspec.Spec, after time.Time) time.Time {
	sp := sc.GetSpec()
	if start := sp.GetStartAt(); start != nil && after.Before(start.AsTime()) {
		after = start.AsTime().Add(-time.Nanosecond)
	}
	next := spec.Next(after)
	if end := sp.GetEndAt(); end != nil && !next.IsZero() && !next.Before(end.AsTime()) {
		return time.Time{}
	}
	return next
}

// FireAt is when slot fires: the slot plus its jitter.
func FireAt(sc *agentmeshv1.Schedule, slot time.Time) time.Time {
	return slot.Add(cronspec.Jitter(sc.GetId(), slot, sc.GetSpec().GetJitter().AsDuration()))
}

// CatchupWindow is the spec's window, or the default.
func CatchupWindow(sc *agentmeshv1.Schedule) time.Duration {
	if w := sc.GetSpec().GetCatchupWindow(); w != nil && w.AsDuration() > 0 {
		return w.AsDuration()
	}
	return DefaultCatchupWindow
}

// Plan is what a scheduler does with a schedule's due slots at one moment.
type Plan struct {
	// Missed slots are recorded, not fired: how many, and the newest.
	Missed        int64
	MissedThrough time.Time
	// Fire are the slots to fire, oldest first.
	Fire []time.Time
	// Next is the first slot not due yet (zero: none left).
	Next time.Time
}

// PlanDue decides, at now, what becomes of the slots after the schedule's
// handled_through whose fire time (slot and jitter) has come: under
// catch-up policy none only a slot on time (within OnTimeGrace of its fire
// time) fires; under last the newest within the catch-up window; under all
// each within the window, at most MaxCatchup. The others are missed. A
// slot whose fire time has not come stops the plan there, so slots are
// handled in order.
func PlanDue(sc *agentmeshv1.Schedule, spec *cronspec.Spec, now time.Time) Plan {
	var p Plan
	after := sc.GetHandledThrough().AsTime()
	var kept []time.Time // the newest MaxCatchup due slots
	var total int64
	for t := Next(sc, spec, after); ; t = Next(sc, spec, t) {
		if t.IsZero() || FireAt(sc, t).After(now) {
			p.Next = t
			break
		}
		total++
		if len(kept) == MaxCatchup {
			kept = kept[1:]
		}
		kept = append(kept, t)
	}
	if total == 0 {
		return p
	}
	newest := kept[len(kept)-1]
	window := CatchupWindow(sc)
	switch sc.GetSpec().GetCatchup() {
	case agentmeshv1.CatchupPolicy_CATCHUP_POLICY_LAST:
		if now.Sub(newest) <= window {
			p.Fire = []time.Time{newest}
		}
	case agentmeshv1.CatchupPolicy_CATCHUP_POLICY_ALL:
		for _, t := range kept {
			if now.Sub(t) <= window {
				p.Fire = append(p.Fire, t)
			}
		}
	default: // none
		if now.Sub(FireAt(sc, newest)) <= OnTimeGrace {
			p.Fire = []time.Time{newest}
		}
	}
	p.Missed = total - int64(len(p.Fire))
	if p.Missed > 0 {
		p.MissedThrough = newest
		if len(p.Fire) > 0 {
			p.MissedThrough = lastBefore(kept, p.Fire[0], after)
		}
	}
	return p
}

// lastBefore returns the slot of kept just before first, or (when first is
// the oldest kept) the newest slot dropped from kept, which lies after
// `after`: callers record it as handled.
func lastBefore(kept []time.Time, first, after time.Time) time.Time {
	for i, t := range kept {
		if t.Equal(first) {
			if i > 0 {
				return kept[i-1]
			}
			return first.Add(-time.Nanosecond)
		}
	}
	return after
}

// RunTask is the task a run of sc submits with the agent matching its
// template chose: the template's fields, the agent's budget under the
// template's, the schedule's org, its tag with the template's tags, and
// created_by the key that created the schedule. The state service sets its
// idempotency key.
func RunTask(sc *agentmeshv1.Schedule, agent *agentmeshv1.Agent, routing *agentmeshv1.Routing) *agentmeshv1.Task {
	tpl := sc.GetTemplate()
	prio := tpl.GetPriority()
	if prio == agentmeshv1.Priority_PRIORITY_UNSPECIFIED {
		prio = agentmeshv1.Priority_PRIORITY_NORMAL
	}
	title := tpl.GetTitle()
	if title == "" {
		title = sc.GetName()
	}
	return &agentmeshv1.Task{
		Org:            sc.GetOrg(),
		Title:          title,
		Input:          tpl.GetInput(),
		Agent:          agent.GetName(),
		RequiredSkills: tpl.GetRequiredSkills(),
		Priority:       prio,
		Metadata:       tpl.GetMetadata(),
		AgentSpec:      agent,
		Budget:         budget.Merge(tpl.GetBudget(), agent.GetBudget()),
		RetryPolicy:    tpl.GetRetryPolicy(),
		QueueTimeout:   tpl.GetQueueTimeout(),
		Routing:        routing,
		Tags:           append(append([]string(nil), tpl.GetTags()...), Tag(sc.GetId())),
		CreatedBy:      sc.GetCreatedBy(),
	}
}

// CheckSpec refuses a spec the schedule cannot run, naming the field
// ("spec.cron" and the position of what is wrong in it, "spec.time_zone",
// "spec.jitter", ...); it returns the parsed cron spec.
func CheckSpec(sp *agentmeshv1.ScheduleSpec) (*cronspec.Spec, error) {
	if sp == nil {
		return nil, bus.FieldError("spec", "a spec (cron, time_zone, ...) is required")
	}
	spec, err := cronspec.Parse(sp.GetCron(), sp.GetTimeZone())
	var ce *cronspec.Error
	if errors.As(err, &ce) {
		return nil, bus.FieldError("spec."+ce.Field, "%v", ce)
	}
	if err != nil {
		return nil, bus.FieldError("spec.cron", "%v", err)
	}
	for _, d := range []struct {
		field string
		v     *durationpb.Duration
		max   time.Duration
	}{{"spec.jitter", sp.GetJitter(), MaxJitter}, {"spec.catchup_window", sp.GetCatchupWindow(), MaxCatchupWindow}} {
		if d.v == nil {
			continue
		}
		if err := d.v.CheckValid(); err != nil || d.v.AsDuration() < 0 || d.v.AsDuration() > d.max {
			return nil, bus.FieldError(d.field, "must be between 0 and %s", d.max)
		}
	}
	for _, ts := range []struct {
		field string
		v     *timestamppb.Timestamp
	}{{"spec.start_at", sp.GetStartAt()}, {"spec.end_at", sp.GetEndAt()}} {
		if ts.v != nil && ts.v.CheckValid() != nil {
			return nil, bus.FieldError(ts.field, "not a valid time")
		}
	}
	if sp.GetStartAt() != nil && sp.GetEndAt() != nil && !sp.GetEndAt().AsTime().After(sp.GetStartAt().AsTime()) {
		return nil, bus.FieldError("spec.end_at", "must be after start_at")
	}
	if _, ok := agentmeshv1.OverlapPolicy_name[int32(sp.GetOverlap())]; !ok {
		return nil, bus.FieldError("spec.overlap", "unknown overlap policy %d", int32(sp.GetOverlap()))
	}
	if _, ok := agentmeshv1.CatchupPolicy_name[int32(sp.GetCatchup())]; !ok {
		return nil, bus.FieldError("spec.catchup", "unknown catch-up policy %d", int32(sp.GetCatchup()))
	}
	return spec, nil
}

// CanSubmit reports whether a key of role may submit tasks: what the
// creator of a schedule must be able to do for its runs to start.
func CanSubmit(role string) bool { return role == "operator" || role == "admin" }
