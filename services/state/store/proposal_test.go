package store

import (
	"errors"
	"testing"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
)

func proposedTask(t *testing.T) *agentmeshv1.Task {
	t.Helper()
	now := time.Now()
	task, evs := PlanCreate(&agentmeshv1.Task{Org: "acme", Agent: "tr-agent", Input: "translate",
		PendingProposal: &agentmeshv1.Proposal{Id: "forged", Status: agentmeshv1.ProposalStatus_PROPOSAL_STATUS_APPROVED,
			Agent: &agentmeshv1.Agent{Name: "tr-agent", Skills: []string{"translation"}}, Reason: "none fits"}}, now)
	p := task.GetPendingProposal()
	if task.Status != taskstate.Blocked || task.BlockedOn != agentmeshv1.BlockedOn_BLOCKED_ON_PROPOSAL || len(evs) != 2 ||
		evs[1].GetProposal().GetId() != taskstate.ProposalID(task.Id) ||
		p.GetStatus() != agentmeshv1.ProposalStatus_PROPOSAL_STATUS_PENDING || p.GetId() != task.Id+"-p" || p.GetTaskId() != task.Id || p.GetOrg() != "acme" {
		t.Fatalf("created with a proposal: %v / %v; want blocked on a pending proposal the record names", task, evs)
	}
	return task
}

func TestPlanCreateWithoutProposalQueues(t *testing.T) {
	task, evs := PlanCreate(&agentmeshv1.Task{Org: "acme", Agent: "a"}, time.Now())
	if task.Status != taskstate.Queued || task.PendingProposal != nil || evs[1].Proposal != nil {
		t.Fatalf("plain create: %v", task)
	}
}

func TestPlanProposalDecisions(t *testing.T) {
	cur := proposedTask(t)
	approved := &agentmeshv1.Agent{Name: "tr-agent", Skills: []string{"translation"}, Ephemeral: true, Org: "acme"}
	tests := []struct {
		name string
		tr   Transition
		code string
	}{
		{"approve", Transition{To: taskstate.Queued, Proposal: &agentmeshv1.Proposal{Status: agentmeshv1.ProposalStatus_PROPOSAL_STATUS_APPROVED, DecidedBy: "alice", Agent: approved}}, ""},
		{"reject", Transition{To: taskstate.Failed, Proposal: &agentmeshv1.Proposal{Status: agentmeshv1.ProposalStatus_PROPOSAL_STATUS_REJECTED, Comment: "no"}}, ""},
		{"approve to failed", Transition{To: taskstate.Failed, Proposal: &agentmeshv1.Proposal{Status: agentmeshv1.ProposalStatus_PROPOSAL_STATUS_APPROVED, Agent: approved}}, bus.CodeInvalidArgument},
		{"reject to queued", Transition{To: taskstate.Queued, Proposal: &agentmeshv1.Proposal{Status: agentmeshv1.ProposalStatus_PROPOSAL_STATUS_REJECTED}}, bus.CodeInvalidArgument},
		{"another name", Transition{To: taskstate.Queued, Proposal: &agentmeshv1.Proposal{Status: agentmeshv1.ProposalStatus_PROPOSAL_STATUS_APPROVED, Agent: &agentmeshv1.Agent{Name: "other"}}}, bus.CodeInvalidArgument},
		{"another id", Transition{To: taskstate.Queued, Proposal: &agentmeshv1.Proposal{Id: "x-p", Status: agentmeshv1.ProposalStatus_PROPOSAL_STATUS_APPROVED, Agent: approved}}, bus.CodeFailedPrecondition},
		{"pending is no decision", Transition{To: taskstate.Queued, Proposal: &agentmeshv1.Proposal{Status: agentmeshv1.ProposalStatus_PROPOSAL_STATUS_PENDING}}, bus.CodeInvalidArgument},
		{"queued without a decision", Transition{To: taskstate.Queued}, bus.CodeFailedPrecondition},
		{"failed without a decision", Transition{To: taskstate.Failed}, bus.CodeFailedPrecondition},
		{"cancel", Transition{To: taskstate.Cancelled}, ""},
		{"an approval decision", Transition{To: taskstate.Queued, Approval: &agentmeshv1.Approval{Id: "a", Status: agentmeshv1.ApprovalStatus_APPROVAL_STATUS_APPROVED}}, bus.CodeFailedPrecondition},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := tt.tr
			tr.TaskID, tr.From = cur.Id, taskstate.Blocked
			next, ev, err := PlanTransition(cur, tr, time.Now())
			if tt.code != "" {
				if bus.CodeOf(err) != tt.code {
					t.Fatalf("got %v, want %s", err, tt.code)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tt.tr.Proposal == nil {
				return
			}
			p := next.GetPendingProposal()
			if p.GetStatus() != tt.tr.Proposal.Status || p.GetDecidedAt() == nil || ev.GetProposal().GetStatus() != p.GetStatus() || next.BlockedOn != agentmeshv1.BlockedOn_BLOCKED_ON_UNSPECIFIED {
				t.Fatalf("decided: %v", next)
			}
			if p.Status == agentmeshv1.ProposalStatus_PROPOSAL_STATUS_APPROVED && (!next.GetAgentSpec().GetEphemeral() || next.Agent != "tr-agent" || p.DecidedBy != "alice") {
				t.Errorf("approved: agent %s spec %v by %q", next.Agent, next.AgentSpec, p.DecidedBy)
			}
			// Deciding again is refused, whatever the decision.
			_, _, err = PlanTransition(next, Transition{TaskID: cur.Id, To: taskstate.Queued,
				Proposal: &agentmeshv1.Proposal{Status: agentmeshv1.ProposalStatus_PROPOSAL_STATUS_APPROVED_PERMANENT, Agent: approved}}, time.Now())
			if !errors.Is(err, bus.ErrFailedPrecondition) {
				t.Errorf("decided twice: %v, want failed_precondition", err)
			}
			// The history note carries the decision.
			noted, note, err := PlanProposalEvent(next, time.Now())
			if err != nil || note.Type != agentmeshv1.EventType_EVENT_TYPE_PROPOSAL || note.Status != next.Status || noted.Status != next.Status ||
				note.GetProposal().GetStatus() != p.Status {
				t.Errorf("proposal note: %v %v", note, err)
			}
		})
	}
}
