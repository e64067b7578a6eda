package state

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	busv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/bus/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/schedule"
	"github.com/agentmesh/agentmesh/pkg/subjects"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"github.com/agentmesh/agentmesh/services/state/store"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Schedules (schedule.<op>): the router creates, changes, reads and
// triggers them for an org; the scheduler's leader lists them and fires
// their slots (schedule.fire). A slot's run is a task created here with
// idempotency key schedule:<id>:<slot>, after the overlap policy had its
// say, and the slot is recorded in the schedule (handled_through, last_run)
// with compare-and-set; a slot fired again (a new leader, a retry after a
// lost reply) finds the task its key names and changes nothing twice.
// Creations, changes and deletions, and runs that failed, are announced on
// <p>.evt.<org>.schedule.<id> (agentmesh.v1.ScheduleEvent).

// MaxFiresPerRequest bounds the slots one schedule.fire request carries.
const MaxFiresPerRequest = 500

// fireConcurrency is how many slots of one request are handled at once.
const fireConcurrency = 64

func checkOrgRequired(org string) error {
	if org == "" || !subjects.ValidToken(org) || org == subjects.NoOrg || org == subjects.SharedOrg {
		return bus.FieldError("org", "an org is required")
	}
	return nil
}

// nextRun sets sc's next slot after `after` (none while paused).
func nextRun(sc *agentmeshv1.Schedule, after time.Time) {
	sc.NextRunAt = nil
	if sc.Paused {
		return
	}
	spec, err := schedule.Parse(sc)
	if err != nil {
		return
	}
	if h := sc.GetHandledThrough().AsTime(); h.After(after) {
		after = h
	}
	if next := schedule.Next(sc, spec, after); !next.IsZero() {
		sc.NextRunAt = timestamppb.New(next)
	}
}

func (s *Service) createSchedule(ctx context.Context, req *busv1.PutScheduleRequest) (*busv1.ScheduleResponse, error) {
	ops, err := s.opsStore()
	if err != nil {
		return nil, err
	}
	sc := proto.Clone(req.GetSchedule()).(*agentmeshv1.Schedule)
	switch {
	case checkOrgRequired(req.Org) != nil:
		return nil, checkOrgRequired(req.Org)
	case !store.ValidRecordID(sc.GetId(), "sch"):
		return nil, bus.FieldError("schedule.id", "%q is not a schedule id (sch_ and letters or digits)", sc.GetId())
	case sc.GetTemplate() == nil:
		return nil, bus.FieldError("schedule.template", "a task template is required")
	}
	if _, err := schedule.CheckSpec(sc.GetSpec()); err != nil {
		return nil, err
	}
	now := time.Now()
	sc.Org, sc.CreatedAt, sc.UpdatedAt = req.Org, timestamppb.New(now), timestamppb.New(now)
	// Slots before the creation are not caught up.
	sc.HandledThrough = timestamppb.New(now)
	sc.LastRun, sc.LastTaskId, sc.Runs, sc.Skipped, sc.Failed, sc.Missed = nil, "", 0, 0, 0, 0
	nextRun(sc, now)
	got, err := ops.PutSchedule(ctx, sc, true, 0)
	if err != nil {
		return nil, fmt.Errorf("create schedule: %w", err)
	}
	s.publishSchedule(ctx, got, "created")
	return &busv1.ScheduleResponse{Schedule: got}, nil
}

// changeSchedule reads org's schedule id, lets change change it (false:
// nothing to change) and puts it, then announces action. With expected >
// 0 the schedule must be at that version.
// Six parameters: the one read-change-put of every schedule mutation (address, version, action, change).
func (s *Service) changeSchedule(ctx context.Context, org, id string, expected int64, action string, change func(*agentmeshv1.Schedule) (bool, error)) (*busv1.ScheduleResponse, error) {
	ops, err := s.opsStore()
	if err != nil {
		return nil, err
	}
	if err := checkOrgRequired(org); err != nil {
		return nil, err
	}
	if id == "" {
		return nil, bus.FieldError("id", "a schedule id is required")
	}
	got, changed, err := update(ctx, expected > 0,
		func(ctx context.Context) (*agentmeshv1.Schedule, error) { return ops.GetSchedule(ctx, org, id) },
		func(cur *agentmeshv1.Schedule) (*agentmeshv1.Schedule, bool, error) {
			if expected > 0 && cur.Version != expected {
				return nil, false, bus.Errorf(bus.CodeFailedPrecondition, "schedule %s is at version %d, not %d", id, cur.Version, expected)
			}
			next := proto.Clone(cur).(*agentmeshv1.Schedule)
			changed, err := change(next)
			next.UpdatedAt = timestamppb.Now()
			return next, changed, err
		},
		func(ctx context.Context, sc *agentmeshv1.Schedule) (*agentmeshv1.Schedule, error) {
			return ops.PutSchedule(ctx, sc, false, sc.Version)
		})
	if err != nil {
		return nil, fmt.Errorf("%s schedule %s: %w", action, id, err)
	}
	if changed {
		s.publishSchedule(ctx, got, action)
	}
	return &busv1.ScheduleResponse{Schedule: got}, nil
}

func (s *Service) updateSchedule(ctx context.Context, req *busv1.PutScheduleRequest) (*busv1.ScheduleResponse, error) {
	in := req.GetSchedule()
	if in.GetTemplate() == nil {
		return nil, bus.FieldError("schedule.template", "a task template is required")
	}
	if _, err := schedule.CheckSpec(in.GetSpec()); err != nil {
		return nil, err
	}
	return s.changeSchedule(ctx, req.Org, in.GetId(), req.ExpectedVersion, "updated", func(sc *agentmeshv1.Schedule) (bool, error) {
		sc.Name, sc.Description, sc.Spec, sc.Template = in.Name, in.Description, in.Spec, in.Template
		// Slots before the change are not caught up under the new spec.
		now := time.Now()
		if now.After(sc.GetHandledThrough().AsTime()) {
			sc.HandledThrough = timestamppb.New(now)
		}
		nextRun(sc, now)
		return true, nil
	})
}

func (s *Service) pauseSchedule(ctx context.Context, req *busv1.PauseScheduleRequest) (*busv1.ScheduleResponse, error) {
	action := "resumed"
	if req.Paused {
		action = "paused"
	}
	return s.changeSchedule(ctx, req.Org, req.Id, 0, action, func(sc *agentmeshv1.Schedule) (bool, error) {
		if sc.Paused == req.Paused {
			return false, nil
		}
		sc.Paused, sc.PauseReason = req.Paused, req.Reason
		now := time.Now()
		if !req.Paused && now.After(sc.GetHandledThrough().AsTime()) {
			// Slots while paused are not caught up.
			sc.HandledThrough, sc.PauseReason = timestamppb.New(now), ""
		}
		nextRun(sc, now)
		return true, nil
	})
}

func (s *Service) getSchedule(ctx context.Context, req *busv1.GetScheduleRequest) (*busv1.ScheduleResponse, error) {
	ops, err := s.opsStore()
	if err != nil {
		return nil, err
	}
	if err := checkOrgRequired(req.Org); err != nil {
		return nil, err
	}
	sc, err := ops.GetSchedule(ctx, req.Org, req.Id)
	if err != nil {
		return nil, err
	}
	return &busv1.ScheduleResponse{Schedule: sc}, nil
}

func (s *Service) listSchedules(ctx context.Context, req *busv1.ListSchedulesRequest) (*busv1.ListSchedulesResponse, error) {
	ops, err := s.opsStore()
	if err != nil {
		return nil, err
	}
	if !req.AnyOrg {
		if err := checkOrgRequired(req.Org); err != nil {
			return nil, err
		}
	}
	if req.PageSize < 0 {
		return nil, bus.FieldError("page_size", "must not be negative")
	}
	scs, next, err := ops.ListSchedules(ctx, store.RecordQuery{Org: req.Org, AnyOrg: req.AnyOrg, PageSize: int(req.PageSize), PageToken: req.PageToken})
	if err != nil {
		return nil, err
	}
	return &busv1.ListSchedulesResponse{Schedules: scs, NextPageToken: next}, nil
}

func (s *Service) deleteSchedule(ctx context.Context, req *busv1.GetScheduleRequest) (*busv1.ScheduleResponse, error) {
	ops, err := s.opsStore()
	if err != nil {
		return nil, err
	}
	if err := checkOrgRequired(req.Org); err != nil {
		return nil, err
	}
	sc, err := ops.GetSchedule(ctx, req.Org, req.Id)
	if err != nil {
		return nil, err
	}
	if err := ops.DeleteSchedule(ctx, req.Org, req.Id); err != nil {
		return nil, fmt.Errorf("delete schedule %s: %w", req.Id, err)
	}
	s.publishRecord(ctx, s.names.ScheduleEvent(sc.Org, sc.Id), fmt.Sprintf("schedule:%s:%d:deleted", sc.Id, sc.Version),
		&agentmeshv1.ScheduleEvent{Schedule: sc, Action: "deleted"})
	return &busv1.ScheduleResponse{Schedule: sc}, nil
}

func (s *Service) publishSchedule(ctx context.Context, sc *agentmeshv1.Schedule, action string) {
	s.publishRecord(ctx, s.names.ScheduleEvent(sc.Org, sc.Id), fmt.Sprintf("schedule:%s:%d", sc.Id, sc.Version),
		&agentmeshv1.ScheduleEvent{Schedule: sc, Action: action})
}

// ---- firing ----

// fireSchedules handles the slots of a schedule.fire request (the
// scheduler's leader), each on its own: one answer per slot.
func (s *Service) fireSchedules(ctx context.Context, req *busv1.FireSchedulesRequest) (*busv1.FireSchedulesResponse, error) {
	if len(req.Fires) > MaxFiresPerRequest {
		return nil, bus.FieldError("fires", "%d slots; at most %d in one request", len(req.Fires), MaxFiresPerRequest)
	}
	out := &busv1.FireSchedulesResponse{Results: make([]*busv1.FireScheduleResult, len(req.Fires))}
	sem := make(chan struct{}, fireConcurrency)
	var wg sync.WaitGroup
	for i, f := range req.Fires {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			resp, err := s.fire(ctx, f, false)
			if err != nil {
				out.Results[i] = &busv1.FireScheduleResult{Error: bus.ToProto(err)}
				return
			}
			out.Results[i] = &busv1.FireScheduleResult{Response: resp}
		})
	}
	wg.Wait()
	return out, nil
}

// triggerSchedule runs a schedule now (the router's TriggerSchedule): its
// slot is this moment, apart from the cron slots.
func (s *Service) triggerSchedule(ctx context.Context, req *busv1.FireScheduleRequest) (*busv1.FireScheduleResponse, error) {
	if req.Missed != 0 || req.NextRunAt != nil {
		return nil, bus.FieldError("missed", "a trigger records no missed slots and moves no cron slot")
	}
	req.Slot = timestamppb.Now()
	return s.fire(ctx, req, true)
}

// fire handles one slot: read the schedule, run the slot (runSlot) and
// record it with compare-and-set; a lost race reads and runs it again,
// which finds the task its idempotency key names.
func (s *Service) fire(ctx context.Context, f *busv1.FireScheduleRequest, manual bool) (*busv1.FireScheduleResponse, error) {
	ops, err := s.opsStore()
	if err != nil {
		return nil, err
	}
	switch {
	case checkOrgRequired(f.GetOrg()) != nil:
		return nil, checkOrgRequired(f.GetOrg())
	case f.GetScheduleId() == "":
		return nil, bus.FieldError("schedule_id", "a schedule id is required")
	case f.GetSlot() == nil || f.GetSlot().CheckValid() != nil:
		return nil, bus.FieldError("slot", "a valid slot time is required")
	case f.GetMissed() < 0:
		return nil, bus.FieldError("missed", "must not be negative")
	}
	slot := f.Slot.AsTime()
	for range maxUpdateTries {
		sc, err := ops.GetSchedule(ctx, f.Org, f.ScheduleId)
		if err != nil {
			return nil, err
		}
		if !manual && !slot.After(sc.GetHandledThrough().AsTime()) {
			return &busv1.FireScheduleResponse{Schedule: sc, Run: sc.LastRun, Already: true}, nil
		}
		if !manual && sc.Paused {
			return nil, bus.Errorf(bus.CodeFailedPrecondition, "schedule %s is paused", sc.Id)
		}
		next := proto.Clone(sc).(*agentmeshv1.Schedule)
		run, task, err := s.runSlot(ctx, next, f, manual)
		if err != nil {
			return nil, err
		}
		next.LastRun = run
		if !manual {
			next.HandledThrough, next.NextRunAt = f.Slot, f.NextRunAt
		}
		got, err := ops.PutSchedule(ctx, next, false, sc.Version)
		if errors.Is(err, bus.ErrFailedPrecondition) {
			continue // changed meanwhile: read and run it again
		}
		if err != nil {
			return nil, fmt.Errorf("record slot of schedule %s: %w", sc.Id, err)
		}
		if run.Outcome == agentmeshv1.ScheduleRunOutcome_SCHEDULE_RUN_OUTCOME_FAILED {
			s.log.Warn("schedule run failed", "schedule", sc.Id, "org", sc.Org, "slot", slot, "reason", run.Reason)
			s.publishRecord(ctx, s.names.ScheduleEvent(got.Org, got.Id), fmt.Sprintf("schedule:%s:%d", got.Id, got.Version),
				&agentmeshv1.ScheduleEvent{Schedule: got, Action: "run_failed"})
		}
		return &busv1.FireScheduleResponse{Schedule: got, Run: run, Task: task}, nil
	}
	return nil, bus.Errorf(bus.CodeConflict, "schedule %s changed %d times while its slot was recorded; retry", f.ScheduleId, maxUpdateTries)
}

// runSlot does what slot f of sc does — record missed slots, record a
// failure the caller met, skip, or create the run's task after the overlap
// policy — and counts it in sc. A passing failure to create the task is
// returned (the caller fires the slot again); any other is the run's.
func (s *Service) runSlot(ctx context.Context, sc *agentmeshv1.Schedule, f *busv1.FireScheduleRequest, manual bool) (*agentmeshv1.ScheduleRun, *agentmeshv1.Task, error) {
	run := &agentmeshv1.ScheduleRun{Slot: f.Slot, FiredAt: timestamppb.Now(), Manual: manual}
	fail := func(reason string) (*agentmeshv1.ScheduleRun, *agentmeshv1.Task, error) {
		run.Outcome, run.Reason = agentmeshv1.ScheduleRunOutcome_SCHEDULE_RUN_OUTCOME_FAILED, reason
		sc.Failed++
		return run, nil, nil
	}
	switch {
	case f.Missed > 0:
		run.Outcome = agentmeshv1.ScheduleRunOutcome_SCHEDULE_RUN_OUTCOME_MISSED
		run.Reason = fmt.Sprintf("%d slot(s) through %s missed while no scheduler fired them (catch-up policy %s)",
			f.Missed, f.Slot.AsTime().UTC().Format(time.RFC3339), sc.GetSpec().GetCatchup())
		sc.Missed += f.Missed
		return run, nil, nil
	case f.Task == nil:
		return fail(f.Failure)
	case !schedule.CanSubmit(sc.CreatorRole):
		return fail(fmt.Sprintf("the schedule's creator (key %q, role %s) may not submit tasks", sc.CreatedBy, sc.CreatorRole))
	}
	key := schedule.IdempotencyKey(sc.Id, f.Slot.AsTime(), manual)
	task := proto.Clone(f.Task).(*agentmeshv1.Task)
	if skip := s.overlap(ctx, sc, task, key); skip != "" {
		run.Outcome, run.Reason = agentmeshv1.ScheduleRunOutcome_SCHEDULE_RUN_OUTCOME_SKIPPED, skip
		sc.Skipped++
		return run, nil, nil
	}
	// Rights only narrow: the run is the schedule's org's, made by its
	// creator, whatever the request said.
	task.Org, task.IdempotencyKey, task.CreatedBy = sc.Org, key, sc.CreatedBy
	task.ParentTaskId, task.RootTaskId, task.ContinueFrom = "", "", ""
	if tag := schedule.Tag(sc.Id); !contains(task.Tags, tag) {
		task.Tags = append(task.Tags, tag)
	}
	created, err := s.createTask(ctx, &busv1.CreateTaskRequest{Task: task})
	switch {
	case err != nil && passing(err):
		return nil, nil, err
	case err != nil:
		return fail(fmt.Sprintf("task not created: %v", err))
	}
	run.Outcome, run.TaskId = agentmeshv1.ScheduleRunOutcome_SCHEDULE_RUN_OUTCOME_STARTED, created.Task.Id
	sc.Runs++
	sc.LastTaskId = created.Task.Id
	return run, created.Task, nil
}

// passing reports whether err may pass if the request is made again.
func passing(err error) bool {
	switch bus.CodeOf(err) {
	case bus.CodeUnavailable, bus.CodeConflict, bus.CodeInternal:
		return true
	}
	return false
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// overlap applies sc's overlap policy to the run about to be created with
// idempotency key key, given the schedule's latest run: it returns why the
// slot is skipped ("" to go on), cancels the latest run (cancel_previous)
// or makes the new run wait for it (enqueue). A latest run that is this
// slot's own task (a slot fired again) does not overlap.
func (s *Service) overlap(ctx context.Context, sc *agentmeshv1.Schedule, task *agentmeshv1.Task, key string) string {
	policy := sc.GetSpec().GetOverlap()
	if policy == agentmeshv1.OverlapPolicy_OVERLAP_POLICY_ALLOW || sc.LastTaskId == "" {
		return ""
	}
	prev, err := s.store.GetTask(ctx, sc.LastTaskId)
	if err != nil || prev.Org != sc.Org || taskstate.Terminal(prev.Status) || prev.IdempotencyKey == key {
		return ""
	}
	switch policy {
	case agentmeshv1.OverlapPolicy_OVERLAP_POLICY_CANCEL_PREVIOUS:
		_, err := s.transition(ctx, &busv1.TransitionRequest{TaskId: prev.Id, Org: sc.Org, To: taskstate.Cancelled,
			Reason: fmt.Sprintf("cancelled by schedule %s: a new run started (overlap policy cancel_previous)", sc.Id)})
		if err != nil && !errors.Is(err, bus.ErrFailedPrecondition) {
			s.log.Warn("overlap: previous run not cancelled", "schedule", sc.Id, "task", prev.Id, "err", err)
		}
		return ""
	case agentmeshv1.OverlapPolicy_OVERLAP_POLICY_ENQUEUE:
		task.DependsOn = []string{prev.Id}
		task.DependencyPolicy = agentmeshv1.DependencyPolicy_DEPENDENCY_POLICY_RUN_ANYWAY
		return ""
	}
	return fmt.Sprintf("run %s has not finished (overlap policy skip)", prev.Id)
}
