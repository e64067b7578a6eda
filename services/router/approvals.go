package router

import (
	"context"
	"errors"
	"fmt"

	busv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/bus/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/subjects"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"github.com/agentmesh/agentmesh/pkg/tools"
)

// approvalServer implements agentmeshv1.ApprovalService. An approval is
// carried by its task: a task blocked on one holds it as pending_approval,
// and the decision is the transition that takes the task out of blocked
// (to queued, so the scheduler dispatches the next attempt, which resumes
// exactly where the last one stopped).
type approvalServer struct {
	agentmeshv1.UnimplementedApprovalServiceServer
	s *Service
}

// MaxCommentBytes bounds an approval's comment.
const MaxCommentBytes = 4 << 10

func (a *approvalServer) ListApprovals(ctx context.Context, req *agentmeshv1.ListApprovalsRequest) (*agentmeshv1.ListApprovalsResponse, error) {
	resp, err := a.s.listApprovals(ctx, req)
	return resp, toStatus(a.s.log, "ListApprovals", err)
}

func (a *approvalServer) ApproveToolCall(ctx context.Context, req *agentmeshv1.ApproveToolCallRequest) (*agentmeshv1.ApproveToolCallResponse, error) {
	ap, task, err := a.s.decide(ctx, req.GetApprovalId(), req.GetComment(), agentmeshv1.ApprovalStatus_APPROVAL_STATUS_APPROVED)
	if err != nil {
		return nil, toStatus(a.s.log, "ApproveToolCall", err)
	}
	return &agentmeshv1.ApproveToolCallResponse{Approval: ap, Task: task}, nil
}

func (a *approvalServer) RejectToolCall(ctx context.Context, req *agentmeshv1.RejectToolCallRequest) (*agentmeshv1.RejectToolCallResponse, error) {
	ap, task, err := a.s.decide(ctx, req.GetApprovalId(), req.GetComment(), agentmeshv1.ApprovalStatus_APPROVAL_STATUS_REJECTED)
	if err != nil {
		return nil, toStatus(a.s.log, "RejectToolCall", err)
	}
	return &agentmeshv1.RejectToolCallResponse{Approval: ap, Task: task}, nil
}

func (s *Service) listApprovals(ctx context.Context, req *agentmeshv1.ListApprovalsRequest) (*agentmeshv1.ListApprovalsResponse, error) {
	if req.GetPageSize() < 0 || req.GetPageSize() > 1000 {
		return nil, bus.FieldError("page_size", "must be between 0 and 1000")
	}
	if id := req.GetTaskId(); id != "" {
		task, err := s.getTask(ctx, id)
		if err != nil {
			return nil, err
		}
		resp := &agentmeshv1.ListApprovalsResponse{}
		if p := task.GetPendingApproval(); p != nil && task.Status == taskstate.Blocked {
			resp.Approvals = append(resp.Approvals, p)
		}
		return resp, nil
	}
	var resp busv1.ListTasksResponse
	if err := bus.Request(ctx, s.nc, s.names.State(subjects.StateListTasks), &busv1.ListTasksRequest{
		Org: orgFrom(ctx), Statuses: []agentmeshv1.TaskStatus{taskstate.Blocked},
		PageSize: req.GetPageSize(), PageToken: req.GetPageToken(),
	}, &resp); err != nil {
		return nil, err
	}
	out := &agentmeshv1.ListApprovalsResponse{NextPageToken: resp.GetNextPageToken()}
	for _, t := range resp.GetTasks() {
		if p := t.GetPendingApproval(); p != nil {
			out.Approvals = append(out.Approvals, p)
		}
	}
	return out, nil
}

func (s *Service) decide(ctx context.Context, id, comment string, status agentmeshv1.ApprovalStatus) (*agentmeshv1.Approval, *agentmeshv1.Task, error) {
	if id == "" {
		return nil, nil, bus.FieldError("approval_id", "required")
	}
	taskID, ok := taskstate.TaskOfApproval(id)
	if !ok || checkID("approval_id", taskID) != nil {
		return nil, nil, bus.FieldError("approval_id", "not an approval id: %q", id)
	}
	if len(comment) > MaxCommentBytes {
		return nil, nil, &bus.Error{Code: bus.CodeResourceExhausted, Field: "comment", Message: fmt.Sprintf("longer than %d bytes", MaxCommentBytes)}
	}
	var resp busv1.TransitionResponse
	err := bus.Request(ctx, s.nc, s.names.State(subjects.StateDecide), &busv1.TransitionRequest{
		TaskId: taskID, Org: orgFrom(ctx), From: taskstate.Blocked, To: taskstate.Queued,
		Reason:   "approval " + id + " " + approvalVerb(status),
		Approval: &agentmeshv1.Approval{Id: id, Status: status, DecidedBy: keyNameFrom(ctx), Comment: comment},
	}, &resp)
	if errors.Is(err, bus.ErrNotFound) {
		return nil, nil, bus.Errorf(bus.CodeNotFound, "approval %q not found", id)
	}
	if errors.Is(err, bus.ErrFailedPrecondition) {
		return nil, nil, bus.Errorf(bus.CodeFailedPrecondition, "approval %q is not pending (already decided, expired, or its task moved on)", id)
	}
	if err != nil {
		return nil, nil, err
	}
	taskLog(ctx, s.log, resp.GetTask()).Info("approval decided", "approval", id, "decision", approvalVerb(status), "org", orgFrom(ctx), "by", keyNameFrom(ctx))
	return resp.GetEvent().GetApproval(), resp.GetTask(), nil
}

func approvalVerb(s agentmeshv1.ApprovalStatus) string {
	if s == agentmeshv1.ApprovalStatus_APPROVAL_STATUS_APPROVED {
		return "approved"
	}
	return "rejected"
}

// toolServer implements agentmeshv1.ToolService from the tool registry.
type toolServer struct {
	agentmeshv1.UnimplementedToolServiceServer
}

func (toolServer) ListTools(context.Context, *agentmeshv1.ListToolsRequest) (*agentmeshv1.ListToolsResponse, error) {
	resp := &agentmeshv1.ListToolsResponse{}
	for _, t := range tools.Builtin() {
		resp.Tools = append(resp.Tools, &agentmeshv1.Tool{
			Name: t.Name, Description: t.Description, ParametersJson: string(t.Parameters),
			Category: string(t.Category), Risk: string(t.Risk), NeedsApproval: t.NeedsApproval, RunsIn: string(t.Runs),
		})
	}
	return resp, nil
}
