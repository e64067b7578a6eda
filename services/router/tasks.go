package router

import (
	"context"
	"errors"
	"fmt"

	busv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/bus/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/budget"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/subjects"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"github.com/agentmesh/agentmesh/pkg/telemetry"
)

// taskServer implements agentmeshv1.TaskService.
type taskServer struct {
	agentmeshv1.UnimplementedTaskServiceServer
	s *Service
}

func (t *taskServer) SubmitTask(ctx context.Context, req *agentmeshv1.SubmitTaskRequest) (*agentmeshv1.SubmitTaskResponse, error) {
	resp, err := t.s.submit(ctx, req)
	return resp, toStatus(t.s.log, "SubmitTask", err)
}

func (t *taskServer) GetTask(ctx context.Context, req *agentmeshv1.GetTaskRequest) (*agentmeshv1.GetTaskResponse, error) {
	task, err := t.s.getTask(ctx, req.GetId())
	if err != nil {
		return nil, toStatus(t.s.log, "GetTask", err)
	}
	return &agentmeshv1.GetTaskResponse{Task: task}, nil
}

func (t *taskServer) ListTasks(ctx context.Context, req *agentmeshv1.ListTasksRequest) (*agentmeshv1.ListTasksResponse, error) {
	resp, err := t.s.listTasks(ctx, req)
	return resp, toStatus(t.s.log, "ListTasks", err)
}

func (t *taskServer) CancelTask(ctx context.Context, req *agentmeshv1.CancelTaskRequest) (*agentmeshv1.CancelTaskResponse, error) {
	resp, err := t.s.cancelTask(ctx, req)
	return resp, toStatus(t.s.log, "CancelTask", err)
}

func (t *taskServer) GetTaskHistory(ctx context.Context, req *agentmeshv1.GetTaskHistoryRequest) (*agentmeshv1.GetTaskHistoryResponse, error) {
	resp, err := t.s.taskHistory(ctx, req)
	return resp, toStatus(t.s.log, "GetTaskHistory", err)
}

func (t *taskServer) WatchTask(req *agentmeshv1.WatchTaskRequest, stream agentmeshv1.TaskService_WatchTaskServer) error {
	return toStatus(t.s.log, "WatchTask", t.s.watch(req, stream))
}

func (t *taskServer) WatchTasks(req *agentmeshv1.WatchTasksRequest, stream agentmeshv1.TaskService_WatchTasksServer) error {
	return toStatus(t.s.log, "WatchTasks", t.s.watchTasks(req, stream))
}

func (s *Service) submit(ctx context.Context, req *agentmeshv1.SubmitTaskRequest) (*agentmeshv1.SubmitTaskResponse, error) {
	return s.submitWith(ctx, req, nil)
}

// submitWith is submit with adjust applied to the chosen agent's settings
// (the task's agent_spec) before the task is recorded: the run API's
// model and tools (runs.go). adjust may only narrow (invariant 12).
func (s *Service) submitWith(ctx context.Context, req *agentmeshv1.SubmitTaskRequest, adjust func(*agentmeshv1.Agent) error) (*agentmeshv1.SubmitTaskResponse, error) {
	if p := req.GetParentTaskId(); p != "" {
		req.ParentTaskId = taskstate.NormalizeTaskID(p)
	}
	prio, err := validateSubmit(req, s.limits())
	if err != nil {
		return nil, err
	}
	if err := validateGraphFields(req, false); err != nil {
		return nil, err
	}
	if err := checkMemoryFields(req); err != nil { // memory.go
		return nil, err
	}
	digest := requestDigest(req)
	if err := s.checkParentTask(ctx, req.GetParentTaskId()); err != nil {
		return nil, err
	}
	if err := s.continueFrom(ctx, req); err != nil {
		return nil, err
	}
	if err := s.threadAgent(ctx, req); err != nil {
		return nil, err
	}
	var match busv1.MatchResponse
	err = bus.Request(ctx, s.nc, s.names.Registry(subjects.RegistryMatch),
		&busv1.MatchRequest{Agent: req.GetAgent(), RequiredSkills: req.GetRequiredSkills(), Org: orgFrom(ctx), Limit: submitRoutingCandidates, Input: analysisInput(req),
			Propose: len(req.GetDependsOn()) == 0}, &match)
	if err != nil {
		return nil, matchError(req, err)
	}
	if p := match.GetProposal(); p != nil && p.GetAgent().GetName() != "" {
		// No agent fits: the task waits blocked on the drafted agent
		// (proposals.go).
		match.Agent = p.Agent
	}
	if match.GetAgent().GetName() == "" {
		return nil, matchError(req, bus.ErrNotFound)
	}
	if adjust != nil {
		// In place: a drafted agent is the proposal's too.
		if err := adjust(match.GetAgent()); err != nil {
			return nil, err
		}
	}
	task := &agentmeshv1.Task{
		Org:            orgFrom(ctx),
		Title:          req.GetTitle(),
		Input:          req.GetInput(),
		Agent:          match.GetAgent().GetName(),
		RequiredSkills: req.GetRequiredSkills(),
		Priority:       prio,
		Metadata:       req.GetMetadata(),
		IdempotencyKey: req.GetIdempotencyKey(),
		RequestDigest:  digest,
		AgentSpec:      match.GetAgent(),
		Budget:         budget.Merge(req.GetBudget(), match.GetAgent().GetBudget()),
		RetryPolicy:    req.GetRetryPolicy(),
		QueueTimeout:   req.GetQueueTimeout(),
		Routing:        match.GetRouting(),
		ContinueFrom:   req.GetContinueFrom(),
		// The store records a task with a proposal blocked on it.
		PendingProposal: match.GetProposal(),
	}
	addGraphFields(ctx, task, req)
	task.Traceparent = telemetry.Traceparent(ctx) // the task's trace: this call's (tracing.go)
	addMemoryFields(task, req)
	var created busv1.CreateTaskResponse
	err = bus.Request(ctx, s.nc, s.names.State(subjects.StateCreateTask), &busv1.CreateTaskRequest{Task: task}, &created)
	if err != nil {
		return nil, fmt.Errorf("create task: %w", err)
	}
	return &agentmeshv1.SubmitTaskResponse{Task: created.GetTask(), Created: created.GetCreated()}, nil
}

// matchError turns a failed match into FailedPrecondition naming the
// unknown agent or skills (or the missing default agent); other failures
// keep their code.
func matchError(req *agentmeshv1.SubmitTaskRequest, err error) error {
	code := bus.CodeOf(err)
	if code != bus.CodeNotFound && code != bus.CodeFailedPrecondition {
		return fmt.Errorf("match agent: %w", err)
	}
	field, msg := "agent", fmt.Sprintf("unknown agent %q", req.GetAgent())
	switch {
	case len(req.GetRequiredSkills()) > 0:
		field, msg = "required_skills", fmt.Sprintf("no agent offers the skills %q", req.GetRequiredSkills())
	case req.GetAgent() == "":
		msg = "no agent or skills given and no default agent"
	}
	var be *bus.Error
	if errors.As(err, &be) {
		if be.Message != "" {
			msg = be.Message
		}
		if be.Field != "" {
			field = be.Field
		}
	}
	return &bus.Error{Code: bus.CodeFailedPrecondition, Field: field, Message: msg}
}

func (s *Service) getTask(ctx context.Context, id string) (*agentmeshv1.Task, error) {
	if err := checkID("id", id); err != nil {
		return nil, err
	}
	var resp busv1.GetTaskResponse
	if err := bus.Request(ctx, s.nc, s.names.State(subjects.StateGetTask),
		&busv1.GetTaskRequest{Id: id, Org: orgFrom(ctx)}, &resp); err != nil {
		return nil, err
	}
	return resp.GetTask(), nil
}

func (s *Service) listTasks(ctx context.Context, req *agentmeshv1.ListTasksRequest) (*agentmeshv1.ListTasksResponse, error) {
	if err := validateList(req); err != nil {
		return nil, err
	}
	var resp busv1.ListTasksResponse
	if err := bus.Request(ctx, s.nc, s.names.State(subjects.StateListTasks), &busv1.ListTasksRequest{
		Org:           orgFrom(ctx),
		Statuses:      req.GetStatuses(),
		Agent:         req.GetAgent(),
		CreatedAfter:  req.GetCreatedAfter(),
		CreatedBefore: req.GetCreatedBefore(),
		PageSize:      req.GetPageSize(),
		PageToken:     req.GetPageToken(),
		Tag:           req.GetTag(),
		Priorities:    req.GetPriorities(),
		ParentTaskId:  req.GetParentTaskId(),
		RootTaskId:    req.GetRootTaskId(),
	}, &resp); err != nil {
		return nil, err
	}
	return &agentmeshv1.ListTasksResponse{Tasks: resp.GetTasks(), NextPageToken: resp.GetNextPageToken()}, nil
}

func (s *Service) cancelTask(ctx context.Context, req *agentmeshv1.CancelTaskRequest) (*agentmeshv1.CancelTaskResponse, error) {
	if err := checkID("id", req.GetId()); err != nil {
		return nil, err
	}
	if err := checkReason(req.GetReason()); err != nil {
		return nil, err
	}
	reason := req.GetReason()
	if reason == "" {
		reason = "cancelled by the client"
	}
	var resp busv1.TransitionResponse
	err := bus.Request(ctx, s.nc, s.names.State(subjects.StateCancel), &busv1.TransitionRequest{
		TaskId: req.GetId(),
		To:     taskstate.Cancelled,
		Reason: reason,
		Org:    orgFrom(ctx),
	}, &resp)
	if errors.Is(err, bus.ErrFailedPrecondition) {
		// Say why in the client's terms when the task has already ended.
		if task, gerr := s.getTask(ctx, req.GetId()); gerr == nil && taskstate.Terminal(task.GetStatus()) {
			return nil, bus.Errorf(bus.CodeFailedPrecondition, "task %s already finished (%s)", req.GetId(), statusName(task.GetStatus()))
		}
	}
	if err != nil {
		return nil, err
	}
	return &agentmeshv1.CancelTaskResponse{Task: resp.GetTask()}, nil
}

func (s *Service) taskHistory(ctx context.Context, req *agentmeshv1.GetTaskHistoryRequest) (*agentmeshv1.GetTaskHistoryResponse, error) {
	if err := checkID("id", req.GetId()); err != nil {
		return nil, err
	}
	if err := checkAfterSeq(req.GetAfterSeq()); err != nil {
		return nil, err
	}
	if req.GetLimit() < 0 || req.GetLimit() > maxPageSize {
		return nil, bus.FieldError("limit", "must be between 0 and %d", maxPageSize)
	}
	limit := req.GetLimit()
	if limit == 0 {
		limit = maxPageSize
	}
	hist, err := s.history(ctx, req.GetId(), req.GetAfterSeq(), limit)
	if err != nil {
		return nil, err
	}
	return &agentmeshv1.GetTaskHistoryResponse{Events: hist.GetEvents()}, nil
}

func (s *Service) history(ctx context.Context, id string, after int64, limit int32) (*busv1.HistoryResponse, error) {
	var resp busv1.HistoryResponse
	if err := bus.Request(ctx, s.nc, s.names.State(subjects.StateHistory), &busv1.HistoryRequest{
		TaskId: id, AfterSeq: after, Limit: limit, Org: orgFrom(ctx),
	}, &resp); err != nil {
		return nil, err
	}
	return &resp, nil
}
