package e2e

import (
	"strings"
	"testing"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"github.com/agentmesh/agentmesh/services/registry"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// proposalEvents returns the task's EVENT_TYPE_PROPOSAL events.
func proposalEvents(t *testing.T, e *env, id string) []*agentmeshv1.TaskEvent {
	t.Helper()
	resp, err := e.tasks.GetTaskHistory(as(t, "a-reader"), &agentmeshv1.GetTaskHistoryRequest{Id: id})
	if err != nil {
		t.Fatalf("history: %v", err)
	}
	var out []*agentmeshv1.TaskEvent
	for _, ev := range resp.Events {
		if ev.Type == agentmeshv1.EventType_EVENT_TYPE_PROPOSAL {
			out = append(out, ev)
		}
	}
	return out
}

func wantCode(t *testing.T, what string, err error, want codes.Code, mention string) {
	t.Helper()
	if status.Code(err) != want || !strings.Contains(status.Convert(err).Message(), mention) {
		t.Errorf("%s: got %v, want %s mentioning %q", what, err, want, mention)
	}
}

// A task no agent fits waits on a proposed agent; a person approves it
// for the task (it runs and the agent goes), permanently (the catalogue
// keeps it and the next task matches it directly) or rejects it (the
// task fails). Deciding twice, another org, the wrong role and skills the
// catalogue lacks are refused.
func TestProposals(t *testing.T) {
	stores(t, func(t *testing.T, o opts) {
		o.keysFile = tenancyKeysFile(t)
		e := start(t, o)
		skills := agentmeshv1.NewSkillServiceClient(e.conn)
		props := agentmeshv1.NewProposalServiceClient(e.conn)
		for _, sk := range []*agentmeshv1.Skill{
			{Name: "translation", Description: "translate text between languages", RequiredTools: []string{"echo"}, PromptTemplate: "Translate faithfully; keep the tone."},
			{Name: "glossary", Description: "keep a glossary of terms", PromptTemplate: "Use the glossary's terms."},
		} {
			if _, err := skills.CreateSkill(as(t, "a-admin"), &agentmeshv1.CreateSkillRequest{Skill: sk}); err != nil {
				t.Fatalf("create skill %s: %v", sk.Name, err)
			}
		}
		submit := func(input string, skills ...string) *agentmeshv1.Task {
			t.Helper()
			resp, err := e.tasks.SubmitTask(as(t, "a-op"), &agentmeshv1.SubmitTaskRequest{Input: input, RequiredSkills: skills})
			if err != nil {
				t.Fatalf("submit %q: %v", input, err)
			}
			return resp.Task
		}
		get := func(id string) *agentmeshv1.Task {
			t.Helper()
			resp, err := e.tasks.GetTask(as(t, "a-reader"), &agentmeshv1.GetTaskRequest{Id: id})
			if err != nil {
				t.Fatalf("get %s: %v", id, err)
			}
			return resp.Task
		}
		agentNames := func() map[string]*agentmeshv1.Agent {
			t.Helper()
			resp, err := e.agents.ListAgents(as(t, "a-reader"), &agentmeshv1.ListAgentsRequest{})
			if err != nil {
				t.Fatalf("list agents: %v", err)
			}
			out := map[string]*agentmeshv1.Agent{}
			for _, a := range resp.Agents {
				out[a.Name] = a
			}
			return out
		}

		// 1. Approved for this task only.
		task := submit("translate this into French", "translation")
		p := task.GetPendingProposal()
		if task.Status != taskstate.Blocked || task.BlockedOn != agentmeshv1.BlockedOn_BLOCKED_ON_PROPOSAL ||
			p.GetStatus() != agentmeshv1.ProposalStatus_PROPOSAL_STATUS_PENDING || p.GetId() != task.Id+"-p" {
			t.Fatalf("submitted task: status %s blocked on %s, proposal %v; want blocked on a pending proposal", taskstate.Name(task.Status), task.BlockedOn, p)
		}
		a := p.GetAgent()
		if a.GetName() != "translation-agent" || !strings.Contains(a.GetSystemPrompt(), "Translate faithfully") ||
			len(a.GetTools()) != 1 || a.GetTools()[0] != "echo" || len(a.GetSkills()) != 1 || a.GetSkills()[0] != "translation" {
			t.Errorf("drafted agent = %v, want translation-agent with the skill's prompt and tools", a)
		}
		if r := task.GetRouting(); r.GetMethod() != registry.MethodProposal || r.GetChosen() != "translation-agent" {
			t.Errorf("routing = %v, want method proposal choosing translation-agent", r)
		}
		if evs := proposalEvents(t, e, task.Id); len(evs) != 1 || evs[0].GetProposal().GetStatus() != agentmeshv1.ProposalStatus_PROPOSAL_STATUS_PENDING {
			t.Errorf("proposal events after submit = %v, want one pending", evs)
		}
		list, err := props.ListProposals(as(t, "a-reader"), &agentmeshv1.ListProposalsRequest{})
		if err != nil || len(list.Proposals) != 1 || list.Proposals[0].Id != p.Id {
			t.Fatalf("ListProposals = %v, %v; want the one pending proposal", list, err)
		}
		_, err = props.ApproveProposal(as(t, "a-op"), &agentmeshv1.ApproveProposalRequest{Id: p.Id})
		wantCode(t, "operator approves", err, codes.PermissionDenied, "approver")
		_, err = props.GetProposal(as(t, "b-admin"), &agentmeshv1.GetProposalRequest{Id: p.Id})
		wantCode(t, "another org reads", err, codes.NotFound, "not found")
		_, err = props.ApproveProposal(as(t, "b-admin"), &agentmeshv1.ApproveProposalRequest{Id: p.Id})
		wantCode(t, "another org approves", err, codes.NotFound, "not found")
		_, err = props.ApproveProposal(as(t, "alice"), &agentmeshv1.ApproveProposalRequest{Id: "no such id!"})
		wantCode(t, "malformed id", err, codes.InvalidArgument, "id")

		approved, err := props.ApproveProposal(as(t, "alice"), &agentmeshv1.ApproveProposalRequest{Id: p.Id, Comment: "go"})
		if err != nil {
			t.Fatalf("approve: %v", err)
		}
		if approved.Proposal.GetStatus() != agentmeshv1.ProposalStatus_PROPOSAL_STATUS_APPROVED || approved.Proposal.GetDecidedBy() != "alice" {
			t.Errorf("approved proposal = %v", approved.Proposal)
		}
		_, err = props.ApproveProposal(as(t, "alice"), &agentmeshv1.ApproveProposalRequest{Id: p.Id, Permanent: true})
		wantCode(t, "approve twice", err, codes.FailedPrecondition, "already decided")
		_, err = props.RejectProposal(as(t, "alice"), &agentmeshv1.RejectProposalRequest{Id: p.Id, Reason: "changed my mind"})
		wantCode(t, "reject after approve", err, codes.FailedPrecondition, "already decided")

		done := waitAs(t, e, "a-reader", task.Id, taskstate.Completed)
		if done.Agent != "translation-agent" || !done.GetAgentSpec().GetEphemeral() || !strings.HasPrefix(done.Result, "final answer:") {
			t.Errorf("done: agent %s ephemeral %v result %q; want the ephemeral translation-agent's answer", done.Agent, done.GetAgentSpec().GetEphemeral(), done.Result)
		}
		if _, ok := agentNames()["translation-agent"]; ok {
			t.Errorf("the agent approved for one task is listed in the catalogue")
		}
		evs := proposalEvents(t, e, task.Id)
		if len(evs) != 2 || evs[1].GetProposal().GetStatus() != agentmeshv1.ProposalStatus_PROPOSAL_STATUS_APPROVED || evs[1].GetProposal().GetDecidedBy() != "alice" {
			t.Errorf("proposal events = %v, want pending then approved by alice", evs)
		}

		// 2. Rejected: the task fails with the reason.
		rej := submit("translate this into German", "translation")
		_, err = props.RejectProposal(as(t, "alice"), &agentmeshv1.RejectProposalRequest{Id: rej.GetPendingProposal().GetId()})
		wantCode(t, "reject without a reason", err, codes.InvalidArgument, "reason")
		if _, err := props.RejectProposal(as(t, "alice"), &agentmeshv1.RejectProposalRequest{Id: rej.Id, Reason: "use a vendor"}); err != nil {
			t.Fatalf("reject: %v", err)
		}
		failed := get(rej.Id)
		if failed.Status != taskstate.Failed || failed.FailureKind != agentmeshv1.FailureKind_FAILURE_KIND_PROPOSAL || !strings.Contains(failed.Error, "use a vendor") {
			t.Errorf("rejected task: %s %s %q; want failed, kind proposal, the reason", taskstate.Name(failed.Status), failed.FailureKind, failed.Error)
		}
		rejected, err := props.ListProposals(as(t, "a-reader"), &agentmeshv1.ListProposalsRequest{Status: agentmeshv1.ProposalStatus_PROPOSAL_STATUS_REJECTED})
		if err != nil || len(rejected.Proposals) != 1 || rejected.Proposals[0].GetComment() != "use a vendor" {
			t.Errorf("rejected proposals = %v, %v", rejected, err)
		}

		// 3. Approved permanently: saved to the catalogue, and the next
		// task needing the skill matches it directly.
		perm := submit("translate this into Spanish", "translation")
		if _, err := props.ApproveProposal(as(t, "alice"), &agentmeshv1.ApproveProposalRequest{Id: perm.GetPendingProposal().GetId(), Permanent: true}); err != nil {
			t.Fatalf("approve permanently: %v", err)
		}
		waitAs(t, e, "a-reader", perm.Id, taskstate.Completed)
		saved, ok := agentNames()["translation-agent"]
		if !ok || saved.Ephemeral || saved.Org != "org-a" {
			t.Fatalf("catalogue after a permanent approval: %v, want org-a's translation-agent", saved)
		}
		next := submit("translate this into Italian", "translation")
		if next.Status != taskstate.Queued || next.PendingProposal != nil || next.Agent != "translation-agent" || next.GetRouting().GetMethod() != registry.MethodScored {
			t.Errorf("next task: %s on %s, proposal %v, routing %v; want queued on translation-agent by scoring", taskstate.Name(next.Status), next.Agent, next.PendingProposal, next.GetRouting())
		}
		waitAs(t, e, "a-reader", next.Id, taskstate.Completed)

		// 4. Another org sees none of it; a skill the catalogue lacks
		// cannot be drafted from: the old refusal, saying so.
		other, err := props.ListProposals(as(t, "b-admin"), &agentmeshv1.ListProposalsRequest{Status: agentmeshv1.ProposalStatus_PROPOSAL_STATUS_APPROVED_PERMANENT})
		if err != nil || len(other.Proposals) != 0 {
			t.Errorf("org B's proposals = %v, %v; want none", other, err)
		}
		_, err = e.tasks.SubmitTask(as(t, "a-op"), &agentmeshv1.SubmitTaskRequest{Input: "x", RequiredSkills: []string{"astrology"}})
		wantCode(t, "unknown skill", err, codes.FailedPrecondition, "skill catalogue has no skill astrology")

		// 5. A candidate covering too little of the skills (capability
		// not above the threshold) gets a proposal too, naming it.
		part := submit("translate with the glossary", "translation", "glossary")
		if part.GetPendingProposal() == nil || !strings.Contains(part.GetPendingProposal().GetReason(), "translation-agent") ||
			part.GetPendingProposal().GetAgent().GetName() != "translation-glossary-agent" {
			t.Errorf("partly fitting: proposal %v, want one for translation-glossary-agent naming the best candidate", part.GetPendingProposal())
		}
		if _, err := e.tasks.CancelTask(as(t, "a-op"), &agentmeshv1.CancelTaskRequest{Id: part.Id}); err != nil {
			t.Fatalf("cancel: %v", err)
		}
		_, err = props.ApproveProposal(as(t, "alice"), &agentmeshv1.ApproveProposalRequest{Id: part.Id})
		wantCode(t, "approve a cancelled task's proposal", err, codes.FailedPrecondition, "cancelled")
	})
}

// AGENTMESH_PROPOSALS=off keeps the refusal.
func TestProposalsOff(t *testing.T) {
	e := start(t, opts{registry: registry.Config{Proposals: registry.ProposalConfig{Off: true}}})
	if _, err := agentmeshv1.NewSkillServiceClient(e.conn).CreateSkill(ctxT(t), &agentmeshv1.CreateSkillRequest{Skill: &agentmeshv1.Skill{Name: "translation"}}); err != nil {
		t.Fatal(err)
	}
	_, err := e.tasks.SubmitTask(ctxT(t), &agentmeshv1.SubmitTaskRequest{Input: "translate", RequiredSkills: []string{"translation"}})
	wantCode(t, "proposals off", err, codes.FailedPrecondition, "no agent offers")
	list, err := agentmeshv1.NewProposalServiceClient(e.conn).ListProposals(ctxT(t), &agentmeshv1.ListProposalsRequest{})
	if err != nil || len(list.Proposals) != 0 {
		t.Errorf("proposals = %v, %v; want none", list, err)
	}
}

// An agent approved for one task serves that task's sub-tasks too (named,
// or by the skills it offers) and is never in the catalogue.
func TestProposalServesSubtasks(t *testing.T) {
	stores(t, func(t *testing.T, o opts) {
		o.script = `{"scenarios": [
		  {"match": "^orchestrate", "turns": [
		    {"content": "Fanning out.", "tool_calls": [
		      {"name": "call_agent", "arguments": {"agent": "orchestration-agent", "input": "part one", "title": "one"}},
		      {"name": "call_agent", "arguments": {"skills": ["orchestration"], "input": "part two", "title": "two"}}
		    ]},
		    {"content": "Waiting.", "tool_calls": [{"name": "wait_tasks", "arguments": {}}]},
		    {"content": "combined: {{last_tool_result}}"}
		  ]},
		  {"match": "^part", "turns": [{"content": "done({{input}})"}]},
		  {"turns": [{"content": "final answer: {{input}}"}]}
		]}`
		e := start(t, o)
		if _, err := agentmeshv1.NewSkillServiceClient(e.conn).CreateSkill(ctxT(t), &agentmeshv1.CreateSkillRequest{Skill: &agentmeshv1.Skill{
			Name: "orchestration", Description: "split work into sub-tasks", RequiredTools: delegationTools,
		}}); err != nil {
			t.Fatal(err)
		}
		task := e.submit(t, &agentmeshv1.SubmitTaskRequest{Input: "orchestrate the release", RequiredSkills: []string{"orchestration"}})
		if task.GetPendingProposal() == nil {
			t.Fatalf("submitted: %v, want a proposal", task)
		}
		if _, err := agentmeshv1.NewProposalServiceClient(e.conn).ApproveProposal(ctxT(t), &agentmeshv1.ApproveProposalRequest{Id: task.PendingProposal.Id}); err != nil {
			t.Fatalf("approve: %v", err)
		}
		done := e.waitStatus(t, task.Id, taskstate.Completed, 60*time.Second)
		if !strings.Contains(done.Result, "done(part one)") || !strings.Contains(done.Result, "done(part two)") {
			t.Errorf("result = %q, want both parts", done.Result)
		}
		subs := e.subtasks(t, task.Id)
		if len(subs) != 2 {
			t.Fatalf("%d sub-tasks, want 2", len(subs))
		}
		for _, s := range subs {
			if s.Agent != "orchestration-agent" || !s.GetAgentSpec().GetEphemeral() || s.Status != taskstate.Completed {
				t.Errorf("sub-task %s: agent %s ephemeral %v %s; want the ephemeral agent, completed", s.Title, s.Agent, s.GetAgentSpec().GetEphemeral(), taskstate.Name(s.Status))
			}
		}
		resp, err := e.agents.ListAgents(ctxT(t), &agentmeshv1.ListAgentsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range resp.Agents {
			if a.Name == "orchestration-agent" {
				t.Errorf("the ephemeral agent is in the catalogue")
			}
		}
	})
}
