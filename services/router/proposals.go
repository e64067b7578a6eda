package router

import (
	"context"
	"errors"
	"fmt"
	"slices"

	busv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/bus/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/subjects"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"google.golang.org/protobuf/proto"
)

// proposalServer implements agentmeshv1.ProposalService
// (docs/proposals.md). A proposal is carried by its task, as an approval
// is: the task holds it in pending_proposal (pending, then decided), and
// the decision is the transition that takes the task out of blocked —
// to queued on the approved agent, or to failed.
type proposalServer struct {
	agentmeshv1.UnimplementedProposalServiceServer
	s *Service
}

func (p *proposalServer) ListProposals(ctx context.Context, req *agentmeshv1.ListProposalsRequest) (*agentmeshv1.ListProposalsResponse, error) {
	resp, err := p.s.listProposals(ctx, req)
	return resp, toStatus(p.s.log, "ListProposals", err)
}

func (p *proposalServer) GetProposal(ctx context.Context, req *agentmeshv1.GetProposalRequest) (*agentmeshv1.GetProposalResponse, error) {
	task, err := p.s.proposalTask(ctx, req.GetId())
	if err != nil {
		return nil, toStatus(p.s.log, "GetProposal", err)
	}
	return &agentmeshv1.GetProposalResponse{Proposal: task.GetPendingProposal(), Task: task}, nil
}

func (p *proposalServer) ApproveProposal(ctx context.Context, req *agentmeshv1.ApproveProposalRequest) (*agentmeshv1.ApproveProposalResponse, error) {
	prop, task, err := p.s.approveProposal(ctx, req)
	if err != nil {
		return nil, toStatus(p.s.log, "ApproveProposal", err)
	}
	return &agentmeshv1.ApproveProposalResponse{Proposal: prop, Task: task}, nil
}

func (p *proposalServer) RejectProposal(ctx context.Context, req *agentmeshv1.RejectProposalRequest) (*agentmeshv1.RejectProposalResponse, error) {
	prop, task, err := p.s.rejectProposal(ctx, req)
	if err != nil {
		return nil, toStatus(p.s.log, "RejectProposal", err)
	}
	return &agentmeshv1.RejectProposalResponse{Proposal: prop, Task: task}, nil
}

// proposalTask reads the task a proposal id names (the caller's org's
// only: another org's is not found), which must carry a proposal.
func (s *Service) proposalTask(ctx context.Context, id string) (*agentmeshv1.Task, error) {
	if id == "" {
		return nil, bus.FieldError("id", "required")
	}
	taskID, ok := taskstate.TaskOfProposal(id)
	if !ok || checkID("id", taskID) != nil {
		return nil, bus.FieldError("id", "not a proposal id: %.80q", id)
	}
	task, err := s.getTask(ctx, taskID)
	if errors.Is(err, bus.ErrNotFound) || err == nil && task.GetPendingProposal() == nil {
		return nil, bus.Errorf(bus.CodeNotFound, "proposal %q not found", id)
	}
	return task, err
}

// listStatuses are the task statuses a proposal of a status may be found
// in (a pending one only in blocked; a rejected one only in failed).
func listStatuses(st agentmeshv1.ProposalStatus) []agentmeshv1.TaskStatus {
	switch st {
	case agentmeshv1.ProposalStatus_PROPOSAL_STATUS_PENDING:
		return []agentmeshv1.TaskStatus{taskstate.Blocked}
	case agentmeshv1.ProposalStatus_PROPOSAL_STATUS_REJECTED:
		return []agentmeshv1.TaskStatus{taskstate.Failed}
	}
	return nil
}

func (s *Service) listProposals(ctx context.Context, req *agentmeshv1.ListProposalsRequest) (*agentmeshv1.ListProposalsResponse, error) {
	if err := checkPageSize("page_size", req.GetPageSize()); err != nil {
		return nil, err
	}
	want := req.GetStatus()
	if want == agentmeshv1.ProposalStatus_PROPOSAL_STATUS_UNSPECIFIED {
		want = agentmeshv1.ProposalStatus_PROPOSAL_STATUS_PENDING
	}
	if _, ok := agentmeshv1.ProposalStatus_name[int32(want)]; !ok {
		return nil, bus.FieldError("status", "%d is not a proposal status", want)
	}
	var resp busv1.ListTasksResponse
	if err := bus.Request(ctx, s.nc, s.names.State(subjects.StateListTasks), &busv1.ListTasksRequest{
		Org: orgFrom(ctx), Statuses: listStatuses(want), PageSize: req.GetPageSize(), PageToken: req.GetPageToken(),
	}, &resp); err != nil {
		return nil, err
	}
	out := &agentmeshv1.ListProposalsResponse{NextPageToken: resp.GetNextPageToken()}
	for _, t := range resp.GetTasks() {
		p := t.GetPendingProposal()
		if p == nil || p.Status != want || want == agentmeshv1.ProposalStatus_PROPOSAL_STATUS_PENDING && !taskstate.ProposalPending(t) {
			continue
		}
		out.Proposals = append(out.Proposals, p)
	}
	return out, nil
}

// pendingProposal reads the proposal id names and checks it waits for a
// decision.
func (s *Service) pendingProposal(ctx context.Context, id string) (*agentmeshv1.Task, error) {
	task, err := s.proposalTask(ctx, id)
	if err != nil {
		return nil, err
	}
	p := task.GetPendingProposal()
	if p.Status != agentmeshv1.ProposalStatus_PROPOSAL_STATUS_PENDING {
		by := ""
		if p.DecidedBy != "" {
			by = " by " + p.DecidedBy
		}
		return nil, bus.Errorf(bus.CodeFailedPrecondition, "proposal %s was already decided: %s%s", p.Id, proposalVerb(p.Status), by)
	}
	if !taskstate.ProposalPending(task) {
		return nil, bus.Errorf(bus.CodeFailedPrecondition, "proposal %s can no longer be decided: its task is %s", p.Id, taskstate.Name(task.Status))
	}
	return task, nil
}

func (s *Service) approveProposal(ctx context.Context, req *agentmeshv1.ApproveProposalRequest) (*agentmeshv1.Proposal, *agentmeshv1.Task, error) {
	if len(req.GetComment()) > MaxCommentBytes {
		return nil, nil, &bus.Error{Code: bus.CodeResourceExhausted, Field: "comment", Message: fmt.Sprintf("longer than %d bytes", MaxCommentBytes)}
	}
	task, err := s.pendingProposal(ctx, req.GetId())
	if err != nil {
		return nil, nil, err
	}
	p := task.GetPendingProposal()
	org := orgFrom(ctx)
	agent := proto.Clone(p.GetAgent()).(*agentmeshv1.Agent)
	status := agentmeshv1.ProposalStatus_PROPOSAL_STATUS_APPROVED
	created := false
	if req.GetPermanent() {
		status = agentmeshv1.ProposalStatus_PROPOSAL_STATUS_APPROVED_PERMANENT
		if agent, created, err = s.saveProposed(ctx, org, agent); err != nil {
			return nil, nil, err
		}
	} else {
		agent.Ephemeral, agent.Org = true, org
	}
	var resp busv1.TransitionResponse
	err = bus.Request(ctx, s.nc, s.names.State(subjects.StateApproveProposal), &busv1.TransitionRequest{
		TaskId: task.Id, Org: org, From: taskstate.Blocked, To: taskstate.Queued,
		Reason:   fmt.Sprintf("proposal %s %s by %s: runs on agent %s", p.Id, proposalVerb(status), orUnnamed(keyNameFrom(ctx)), agent.Name),
		Proposal: &agentmeshv1.Proposal{Id: p.Id, Status: status, DecidedBy: keyNameFrom(ctx), Comment: req.GetComment(), Agent: agent},
	}, &resp)
	if err != nil {
		if created {
			// Decided meanwhile by someone else: the agent saved for this
			// decision goes again.
			if derr := bus.Request(context.WithoutCancel(ctx), s.nc, s.names.Registry(subjects.RegistryDeleteAgent),
				&busv1.AgentOp{Org: org, Op: &busv1.AgentOp_Delete{Delete: &agentmeshv1.DeleteAgentRequest{Name: agent.Name}}}, &agentmeshv1.DeleteAgentResponse{}); derr != nil {
				s.log.Warn("agent saved for a proposal that was not approved stays", "agent", agent.Name, "err", derr)
			}
		}
		return nil, nil, decisionError(p.Id, err)
	}
	taskLog(ctx, s.log, resp.GetTask()).Info("proposal approved", "proposal", p.Id, "agent", agent.Name, "permanent", req.GetPermanent(), "org", org, "by", keyNameFrom(ctx))
	return resp.GetTask().GetPendingProposal(), resp.GetTask(), nil
}

// saveProposed saves a proposed agent to the org's catalogue under its
// proposed name. When that name was taken since the proposal was drafted
// (another proposal for the same skills approved first, or an agent
// created), an agent of that name offering every proposed skill is used
// as it is; another is a clash the approver must resolve.
func (s *Service) saveProposed(ctx context.Context, org string, a *agentmeshv1.Agent) (*agentmeshv1.Agent, bool, error) {
	a.Ephemeral, a.Org, a.Version, a.CreatedAt, a.UpdatedAt = false, "", 0, nil, nil
	var created agentmeshv1.CreateAgentResponse
	err := bus.Request(ctx, s.nc, s.names.Registry(subjects.RegistryCreateAgent),
		&busv1.AgentOp{Org: org, Op: &busv1.AgentOp_Create{Create: &agentmeshv1.CreateAgentRequest{Agent: a}}}, &created)
	if err == nil {
		return created.Agent, true, nil
	}
	if !errors.Is(err, bus.ErrAlreadyExists) {
		return nil, false, fmt.Errorf("save the proposed agent %s: %w", a.Name, err)
	}
	var got agentmeshv1.GetAgentResponse
	if err := bus.Request(ctx, s.nc, s.names.Registry(subjects.RegistryGetAgent),
		&busv1.AgentOp{Org: org, Op: &busv1.AgentOp_Get{Get: &agentmeshv1.GetAgentRequest{Name: a.Name}}}, &got); err != nil {
		return nil, false, fmt.Errorf("save the proposed agent %s: %w", a.Name, err)
	}
	for _, sk := range a.Skills {
		if !slices.Contains(got.Agent.GetSkills(), sk) {
			return nil, false, bus.Errorf(bus.CodeFailedPrecondition,
				"the proposed agent's name %q was taken since the proposal was drafted, by an agent that does not offer the skill %s: approve it for this task only (without permanent), or reject it",
				a.Name, sk)
		}
	}
	return got.Agent, false, nil
}

func (s *Service) rejectProposal(ctx context.Context, req *agentmeshv1.RejectProposalRequest) (*agentmeshv1.Proposal, *agentmeshv1.Task, error) {
	reason := req.GetReason()
	switch {
	case reason == "":
		return nil, nil, bus.FieldError("reason", "required: the task fails with it")
	case len(reason) > MaxCommentBytes:
		return nil, nil, &bus.Error{Code: bus.CodeResourceExhausted, Field: "reason", Message: fmt.Sprintf("longer than %d bytes", MaxCommentBytes)}
	}
	task, err := s.pendingProposal(ctx, req.GetId())
	if err != nil {
		return nil, nil, err
	}
	p := task.GetPendingProposal()
	var resp busv1.TransitionResponse
	err = bus.Request(ctx, s.nc, s.names.State(subjects.StateRejectProposal), &busv1.TransitionRequest{
		TaskId: task.Id, Org: orgFrom(ctx), From: taskstate.Blocked, To: taskstate.Failed,
		FailureKind: agentmeshv1.FailureKind_FAILURE_KIND_PROPOSAL,
		Reason:      fmt.Sprintf("proposed agent %s rejected by %s: %s", p.GetAgent().GetName(), orUnnamed(keyNameFrom(ctx)), reason),
		Proposal:    &agentmeshv1.Proposal{Id: p.Id, Status: agentmeshv1.ProposalStatus_PROPOSAL_STATUS_REJECTED, DecidedBy: keyNameFrom(ctx), Comment: reason},
	}, &resp)
	if err != nil {
		return nil, nil, decisionError(p.Id, err)
	}
	taskLog(ctx, s.log, resp.GetTask()).Info("proposal rejected", "proposal", p.Id, "org", orgFrom(ctx), "by", keyNameFrom(ctx))
	return resp.GetTask().GetPendingProposal(), resp.GetTask(), nil
}

// decisionError names the proposal in a refused decision.
func decisionError(id string, err error) error {
	switch {
	case errors.Is(err, bus.ErrNotFound):
		return bus.Errorf(bus.CodeNotFound, "proposal %q not found", id)
	case errors.Is(err, bus.ErrFailedPrecondition):
		var be *bus.Error
		msg := "it is no longer pending"
		if errors.As(err, &be) && be.Message != "" {
			msg = be.Message
		}
		return bus.Errorf(bus.CodeFailedPrecondition, "proposal %s cannot be decided: %s", id, msg)
	}
	return err
}

func proposalVerb(st agentmeshv1.ProposalStatus) string {
	switch st {
	case agentmeshv1.ProposalStatus_PROPOSAL_STATUS_APPROVED:
		return "approved for this task"
	case agentmeshv1.ProposalStatus_PROPOSAL_STATUS_APPROVED_PERMANENT:
		return "approved permanently"
	case agentmeshv1.ProposalStatus_PROPOSAL_STATUS_REJECTED:
		return "rejected"
	}
	return "pending"
}

func orUnnamed(name string) string {
	if name == "" {
		return "an unnamed key"
	}
	return name
}
