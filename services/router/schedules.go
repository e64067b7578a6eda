package router

import (
	"context"
	"errors"
	"fmt"
	"strings"

	busv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/bus/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/schedule"
	"github.com/agentmesh/agentmesh/pkg/subjects"
	"github.com/oklog/ulid/v2"
)

// scheduleServer implements agentmeshv1.ScheduleService: schedules kept by
// the state service (schedule.<op>) for the caller's org. A schedule's
// template is checked as SubmitTask checks a request (field names under
// "template."), its spec by pkg/schedule (an invalid cron expression or
// time zone is InvalidArgument naming spec.cron and the position, or
// spec.time_zone), and its agent matched once at create and update, so a
// schedule that could never run is refused then. The scheduler's leader
// fires the slots; TriggerSchedule runs one now from here.
type scheduleServer struct {
	agentmeshv1.UnimplementedScheduleServiceServer
	s *Service
}

// Bounds of a schedule's texts.
const (
	maxScheduleName        = 200
	maxScheduleDescription = 1024
)

// checkTemplate checks a schedule's task template as SubmitTask checks a
// request; errors name "template.<field>".
func (s *Service) checkTemplate(tpl *agentmeshv1.TaskTemplate) error {
	if tpl == nil {
		return bus.FieldError("template", "a task template is required")
	}
	req := &agentmeshv1.SubmitTaskRequest{Title: tpl.Title, Input: tpl.Input, Agent: tpl.Agent, RequiredSkills: tpl.RequiredSkills,
		Priority: tpl.Priority, Metadata: tpl.Metadata, Budget: tpl.Budget, Tags: tpl.Tags, RetryPolicy: tpl.RetryPolicy, QueueTimeout: tpl.QueueTimeout}
	_, err := validateSubmit(req, s.limits())
	if err == nil {
		err = checkTags("tags", tpl.Tags)
	}
	for i, t := range tpl.Tags {
		if err == nil && strings.HasPrefix(t, schedule.TagPrefix) {
			err = bus.FieldError(fmt.Sprintf("tags[%d]", i), "%q: tags starting with %q are the schedules' own", t, schedule.TagPrefix)
		}
	}
	var be *bus.Error
	if errors.As(err, &be) && be.Field != "" {
		c := *be
		c.Field = "template." + be.Field
		c.Message = strings.Replace(c.Message, be.Field, c.Field, 1)
		return &c
	}
	tpl.RequiredSkills = req.RequiredSkills // normalised
	return err
}

// checkSchedule checks what a caller sets on a schedule.
func (s *Service) checkSchedule(name, description string, spec *agentmeshv1.ScheduleSpec, tpl *agentmeshv1.TaskTemplate) error {
	switch {
	case len(name) > maxScheduleName:
		return bus.FieldError("name", "longer than %d bytes", maxScheduleName)
	case len(description) > maxScheduleDescription:
		return bus.FieldError("description", "longer than %d bytes", maxScheduleDescription)
	}
	if err := printable("name", name); err != nil {
		return err
	}
	if _, err := schedule.CheckSpec(spec); err != nil {
		return err
	}
	return s.checkTemplate(tpl)
}

// matchTemplate asks the registry for the agent a run of tpl gets in org.
func (s *Service) matchTemplate(ctx context.Context, org string, tpl *agentmeshv1.TaskTemplate) (*busv1.MatchResponse, error) {
	var match busv1.MatchResponse
	err := bus.Request(ctx, s.nc, s.names.Registry(subjects.RegistryMatch), &busv1.MatchRequest{
		Agent: tpl.GetAgent(), RequiredSkills: tpl.GetRequiredSkills(), Org: org, Limit: submitRoutingCandidates,
		Input: tpl.GetInput(),
	}, &match)
	if err == nil && match.GetAgent().GetName() == "" {
		err = bus.ErrNotFound
	}
	if err != nil {
		err = matchError(&agentmeshv1.SubmitTaskRequest{Agent: tpl.GetAgent(), RequiredSkills: tpl.GetRequiredSkills()}, err)
		var be *bus.Error
		if errors.As(err, &be) && be.Field != "" {
			c := *be
			c.Field = "template." + be.Field
			return nil, &c
		}
		return nil, err
	}
	return &match, nil
}

func (sv *scheduleServer) CreateSchedule(ctx context.Context, req *agentmeshv1.CreateScheduleRequest) (*agentmeshv1.CreateScheduleResponse, error) {
	resp, err := sv.s.createSchedule(ctx, req)
	return resp, toStatus(sv.s.log, "CreateSchedule", err)
}

func (s *Service) createSchedule(ctx context.Context, req *agentmeshv1.CreateScheduleRequest) (*agentmeshv1.CreateScheduleResponse, error) {
	if err := s.checkSchedule(req.GetName(), req.GetDescription(), req.GetSpec(), req.GetTemplate()); err != nil {
		return nil, err
	}
	if _, err := s.matchTemplate(ctx, orgFrom(ctx), req.GetTemplate()); err != nil {
		return nil, err
	}
	c, _ := CallerFrom(ctx)
	sc := &agentmeshv1.Schedule{
		Id: "sch_" + ulid.Make().String(), Name: req.GetName(), Description: req.GetDescription(),
		Spec: req.GetSpec(), Template: req.GetTemplate(), Paused: req.GetPaused(),
		CreatedBy: createdBy(ctx), CreatorRole: string(c.Role),
	}
	var resp busv1.ScheduleResponse
	if err := bus.Request(ctx, s.nc, s.names.State(subjects.StateCreateSchedule), &busv1.PutScheduleRequest{Org: orgFrom(ctx), Schedule: sc}, &resp); err != nil {
		return nil, err
	}
	return &agentmeshv1.CreateScheduleResponse{Schedule: resp.Schedule}, nil
}

func (sv *scheduleServer) GetSchedule(ctx context.Context, req *agentmeshv1.GetScheduleRequest) (*agentmeshv1.GetScheduleResponse, error) {
	sc, err := sv.s.getSchedule(ctx, req.GetId())
	if err != nil {
		return nil, toStatus(sv.s.log, "GetSchedule", err)
	}
	return &agentmeshv1.GetScheduleResponse{Schedule: sc}, nil
}

func (s *Service) getSchedule(ctx context.Context, id string) (*agentmeshv1.Schedule, error) {
	if id == "" {
		return nil, bus.FieldError("id", "a schedule id is required")
	}
	var resp busv1.ScheduleResponse
	if err := bus.Request(ctx, s.nc, s.names.State(subjects.StateGetSchedule), &busv1.GetScheduleRequest{Id: id, Org: orgFrom(ctx)}, &resp); err != nil {
		return nil, err
	}
	return resp.Schedule, nil
}

func (sv *scheduleServer) ListSchedules(ctx context.Context, req *agentmeshv1.ListSchedulesRequest) (*agentmeshv1.ListSchedulesResponse, error) {
	if req.GetPageSize() < 0 {
		return nil, toStatus(sv.s.log, "ListSchedules", bus.FieldError("page_size", "must not be negative"))
	}
	var resp busv1.ListSchedulesResponse
	err := bus.Request(ctx, sv.s.nc, sv.s.names.State(subjects.StateListSchedules), &busv1.ListSchedulesRequest{
		Org: orgFrom(ctx), PageSize: req.GetPageSize(), PageToken: req.GetPageToken(),
	}, &resp)
	if err != nil {
		return nil, toStatus(sv.s.log, "ListSchedules", err)
	}
	return &agentmeshv1.ListSchedulesResponse{Schedules: resp.Schedules, NextPageToken: resp.NextPageToken}, nil
}

func (sv *scheduleServer) UpdateSchedule(ctx context.Context, req *agentmeshv1.UpdateScheduleRequest) (*agentmeshv1.UpdateScheduleResponse, error) {
	resp, err := sv.s.updateSchedule(ctx, req)
	return resp, toStatus(sv.s.log, "UpdateSchedule", err)
}

func (s *Service) updateSchedule(ctx context.Context, req *agentmeshv1.UpdateScheduleRequest) (*agentmeshv1.UpdateScheduleResponse, error) {
	if req.GetId() == "" {
		return nil, bus.FieldError("id", "a schedule id is required")
	}
	if req.GetExpectedVersion() < 0 {
		return nil, bus.FieldError("expected_version", "must not be negative")
	}
	if err := s.checkSchedule(req.GetName(), req.GetDescription(), req.GetSpec(), req.GetTemplate()); err != nil {
		return nil, err
	}
	if _, err := s.getSchedule(ctx, req.GetId()); err != nil {
		return nil, err // another org's: not found, before the template's agent is looked up
	}
	if _, err := s.matchTemplate(ctx, orgFrom(ctx), req.GetTemplate()); err != nil {
		return nil, err
	}
	var resp busv1.ScheduleResponse
	err := bus.Request(ctx, s.nc, s.names.State(subjects.StateUpdateSchedule), &busv1.PutScheduleRequest{
		Org: orgFrom(ctx), ExpectedVersion: req.GetExpectedVersion(),
		Schedule: &agentmeshv1.Schedule{Id: req.GetId(), Name: req.GetName(), Description: req.GetDescription(), Spec: req.GetSpec(), Template: req.GetTemplate()},
	}, &resp)
	if err != nil {
		return nil, err
	}
	return &agentmeshv1.UpdateScheduleResponse{Schedule: resp.Schedule}, nil
}

func (s *Service) pauseSchedule(ctx context.Context, id string, paused bool, reason string) (*agentmeshv1.Schedule, error) {
	if id == "" {
		return nil, bus.FieldError("id", "a schedule id is required")
	}
	if len(reason) > maxScheduleDescription {
		return nil, bus.FieldError("reason", "longer than %d bytes", maxScheduleDescription)
	}
	var resp busv1.ScheduleResponse
	err := bus.Request(ctx, s.nc, s.names.State(subjects.StatePauseSchedule), &busv1.PauseScheduleRequest{
		Id: id, Org: orgFrom(ctx), Paused: paused, Reason: reason,
	}, &resp)
	return resp.Schedule, err
}

func (sv *scheduleServer) PauseSchedule(ctx context.Context, req *agentmeshv1.PauseScheduleRequest) (*agentmeshv1.PauseScheduleResponse, error) {
	sc, err := sv.s.pauseSchedule(ctx, req.GetId(), true, req.GetReason())
	if err != nil {
		return nil, toStatus(sv.s.log, "PauseSchedule", err)
	}
	return &agentmeshv1.PauseScheduleResponse{Schedule: sc}, nil
}

func (sv *scheduleServer) ResumeSchedule(ctx context.Context, req *agentmeshv1.ResumeScheduleRequest) (*agentmeshv1.ResumeScheduleResponse, error) {
	sc, err := sv.s.pauseSchedule(ctx, req.GetId(), false, "")
	if err != nil {
		return nil, toStatus(sv.s.log, "ResumeSchedule", err)
	}
	return &agentmeshv1.ResumeScheduleResponse{Schedule: sc}, nil
}

func (sv *scheduleServer) DeleteSchedule(ctx context.Context, req *agentmeshv1.DeleteScheduleRequest) (*agentmeshv1.DeleteScheduleResponse, error) {
	if req.GetId() == "" {
		return nil, toStatus(sv.s.log, "DeleteSchedule", bus.FieldError("id", "a schedule id is required"))
	}
	err := bus.Request(ctx, sv.s.nc, sv.s.names.State(subjects.StateDeleteSchedule), &busv1.GetScheduleRequest{Id: req.GetId(), Org: orgFrom(ctx)}, &busv1.ScheduleResponse{})
	if err != nil {
		return nil, toStatus(sv.s.log, "DeleteSchedule", err)
	}
	return &agentmeshv1.DeleteScheduleResponse{}, nil
}

func (sv *scheduleServer) TriggerSchedule(ctx context.Context, req *agentmeshv1.TriggerScheduleRequest) (*agentmeshv1.TriggerScheduleResponse, error) {
	resp, err := sv.s.triggerSchedule(ctx, req.GetId())
	return resp, toStatus(sv.s.log, "TriggerSchedule", err)
}

// triggerSchedule runs the schedule now: its template matched as the
// schedule's org, the run made by state under the overlap policy. A
// template whose agent is gone is a failed run, recorded and answered.
func (s *Service) triggerSchedule(ctx context.Context, id string) (*agentmeshv1.TriggerScheduleResponse, error) {
	sc, err := s.getSchedule(ctx, id)
	if err != nil {
		return nil, err
	}
	f := &busv1.FireScheduleRequest{ScheduleId: sc.Id, Org: sc.Org, Manual: true}
	match, err := s.matchTemplate(ctx, sc.Org, sc.Template)
	switch {
	case err == nil:
		f.Task = schedule.RunTask(sc, match.GetAgent(), match.GetRouting())
	case bus.CodeOf(err) == bus.CodeFailedPrecondition || bus.CodeOf(err) == bus.CodeNotFound || bus.CodeOf(err) == bus.CodeInvalidArgument:
		f.Failure = err.Error()
	default:
		return nil, err
	}
	var resp busv1.FireScheduleResponse
	if err := bus.Request(ctx, s.nc, s.names.State(subjects.StateTriggerSchedule), f, &resp); err != nil {
		return nil, err
	}
	return &agentmeshv1.TriggerScheduleResponse{Run: resp.Run, Task: resp.Task}, nil
}
