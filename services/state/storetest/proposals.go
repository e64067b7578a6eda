package storetest

import (
	"errors"
	"testing"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"github.com/agentmesh/agentmesh/services/state/store"
)

var proposalTests = []struct {
	name string
	fn   func(t *testing.T, s store.Store)
}{
	{"ProposalLifecycle", testProposalLifecycle},
}

// A task created with a proposal is stored blocked on it; the decision
// and the PROPOSAL notes are recorded and read back; deciding twice is
// refused.
func testProposalLifecycle(t *testing.T, s store.Store) {
	in := newTask("acme", "tr-agent", "")
	in.PendingProposal = &agentmeshv1.Proposal{Agent: &agentmeshv1.Agent{Name: "tr-agent", Skills: []string{"translation"}}, Reason: "none fits"}
	task := create(t, s, in)
	if _, _, err := s.RecordProposal(ctxT(t), task.Id); err != nil {
		t.Fatalf("RecordProposal: %v", err)
	}
	got, err := s.GetTask(ctxT(t), task.Id)
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != taskstate.Blocked || got.BlockedOn != agentmeshv1.BlockedOn_BLOCKED_ON_PROPOSAL ||
		got.GetPendingProposal().GetId() != taskstate.ProposalID(task.Id) || got.LastEventSeq != 3 {
		t.Fatalf("stored: %v", got)
	}
	blocked, _, err := s.ListTasks(ctxT(t), store.TaskQuery{Org: "acme", Statuses: []agentmeshv1.TaskStatus{taskstate.Blocked}, Agent: "tr-agent"})
	if err != nil || len(blocked) != 1 {
		t.Fatalf("blocked tasks of tr-agent: %v %v", blocked, err)
	}
	decide := store.Transition{TaskID: task.Id, From: taskstate.Blocked, To: taskstate.Queued, Proposal: &agentmeshv1.Proposal{
		Status: agentmeshv1.ProposalStatus_PROPOSAL_STATUS_APPROVED, DecidedBy: "alice",
		Agent: &agentmeshv1.Agent{Name: "tr-agent", Skills: []string{"translation"}, Ephemeral: true}}}
	if _, _, err := s.Transition(ctxT(t), decide); err != nil {
		t.Fatalf("approve: %v", err)
	}
	if _, _, err := s.RecordProposal(ctxT(t), task.Id); err != nil {
		t.Fatalf("RecordProposal after the decision: %v", err)
	}
	decide.From = taskstate.Queued
	if _, _, err := s.Transition(ctxT(t), decide); !errors.Is(err, bus.ErrFailedPrecondition) {
		t.Errorf("decided twice: %v, want failed_precondition", err)
	}
	got, err = s.GetTask(ctxT(t), task.Id)
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != taskstate.Queued || !got.GetAgentSpec().GetEphemeral() || got.GetPendingProposal().GetDecidedBy() != "alice" || got.BlockedOn != agentmeshv1.BlockedOn_BLOCKED_ON_UNSPECIFIED {
		t.Errorf("approved: %v", got)
	}
	evs, err := s.History(ctxT(t), task.Id, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var notes []agentmeshv1.ProposalStatus
	for _, ev := range evs {
		if ev.Type == agentmeshv1.EventType_EVENT_TYPE_PROPOSAL {
			notes = append(notes, ev.GetProposal().GetStatus())
		}
	}
	if len(notes) != 2 || notes[0] != agentmeshv1.ProposalStatus_PROPOSAL_STATUS_PENDING || notes[1] != agentmeshv1.ProposalStatus_PROPOSAL_STATUS_APPROVED {
		t.Errorf("proposal notes = %v, want pending then approved", notes)
	}
	plain := create(t, s, newTask("acme", "a", ""))
	if _, _, err := s.RecordProposal(ctxT(t), plain.Id); !errors.Is(err, bus.ErrFailedPrecondition) {
		t.Errorf("RecordProposal of a task without one: %v", err)
	}
}
