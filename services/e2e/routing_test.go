package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/poll"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func candNames(r *agentmeshv1.Routing) string {
	var out []string
	for _, c := range r.GetCandidates() {
		out = append(out, c.Agent)
	}
	return strings.Join(out, ",")
}

// Scored matching on the whole stack: candidates come from the store's
// skill filter, the live load from state; a specialist beats a
// generalist, an idle agent beats a saturated one of equal skill, and the
// decision is recorded on the task.
func TestMatchAgentsAndRouting(t *testing.T) {
	stores(t, func(t *testing.T, o opts) {
		e := start(t, o)
		mk := func(name string, maxConc int32, skills ...string) {
			t.Helper()
			e.ensureSkills(t, skills...)
			_, err := e.agents.CreateAgent(ctxT(t), &agentmeshv1.CreateAgentRequest{Agent: &agentmeshv1.Agent{
				Name: name, SystemPrompt: "You are a test agent.", Tools: []string{"echo"}, Skills: skills, MaxConcurrency: maxConc,
			}})
			if err != nil {
				t.Fatalf("create agent %s: %v", name, err)
			}
		}
		mk("generalist", 0, "sql", "python", "web", "writing")
		mk("sql-expert", 0, "sql", "postgres")
		mk("sql-busy", 1, "sql")
		mk("sql-idle", 1, "sql")
		mk("assistant", 0, "general")
		mk("unrelated", 0, "cooking")

		// Saturate sql-busy with one slow task.
		slow := e.submit(t, &agentmeshv1.SubmitTaskRequest{Input: "slow task", Agent: "sql-busy"})
		if slow.GetRouting().GetMethod() != "named" || slow.GetRouting().GetChosen() != "sql-busy" {
			t.Fatalf("named routing = %v", slow.GetRouting())
		}
		e.waitStatus(t, slow.Id, taskstate.Running, 60*time.Second)

		// The registry's workload model follows the events: it sees the
		// slow task running shortly after the record does.
		var r *agentmeshv1.Routing
		poll.Until(t, 30*time.Second, func() error {
			resp, err := e.agents.MatchAgents(ctxT(t), &agentmeshv1.MatchAgentsRequest{RequiredSkills: []string{" SQL "}})
			if err != nil {
				return err
			}
			r = resp.Routing
			if got := candNames(r); got != "sql-idle,sql-expert,generalist,sql-busy" {
				return fmt.Errorf("candidates = %s", got)
			}
			return nil
		})
		if got := candNames(r); got != "sql-idle,sql-expert,generalist,sql-busy" {
			t.Fatalf("candidates = %s, want sql-idle,sql-expert,generalist,sql-busy", got)
		}
		byName := map[string]*agentmeshv1.RoutingCandidate{}
		for _, c := range r.Candidates {
			byName[c.Agent] = c
		}
		busy, idle, expert, gen := byName["sql-busy"], byName["sql-idle"], byName["sql-expert"], byName["generalist"]
		if busy.Running != 1 || busy.Workload != 0 || idle.Workload != 1 || idle.Capability != busy.Capability {
			t.Errorf("idle vs saturated: idle %v, busy %v", idle, busy)
		}
		if !(expert.Capability > gen.Capability) {
			t.Errorf("specialist capability %v not above generalist's %v", expert.Capability, gen.Capability)
		}
		if r.Method != "scored" || r.Chosen != "sql-idle" || r.Weights.GetCapability() != 0.4 || strings.Join(r.RequiredSkills, ",") != "sql" {
			t.Errorf("routing = %v", r)
		}

		// Submit by skills: the routing is stored and read back.
		task := e.submit(t, &agentmeshv1.SubmitTaskRequest{Input: "hello", RequiredSkills: []string{"sql", "postgres"}})
		got, err := e.tasks.GetTask(ctxT(t), &agentmeshv1.GetTaskRequest{Id: task.Id})
		if err != nil {
			t.Fatal(err)
		}
		gr := got.Task.GetRouting()
		if got.Task.Agent != "sql-expert" || gr.GetChosen() != "sql-expert" || gr.GetMethod() != "scored" || len(gr.GetCandidates()) < 2 ||
			gr.Candidates[0].Agent != "sql-expert" || strings.Join(gr.Candidates[1].MissingSkills, ",") != "postgres" || gr.GetDecidedAt() == nil {
			t.Fatalf("stored routing = %v (agent %s)", gr, got.Task.Agent)
		}
		def := e.submit(t, &agentmeshv1.SubmitTaskRequest{Input: "hello"})
		if def.Agent != "assistant" || def.GetRouting().GetMethod() != "default" {
			t.Fatalf("default routing: agent %s routing %v", def.Agent, def.GetRouting())
		}

		// A graph's tasks carry their routing too.
		gr2, err := e.graph().SubmitTasks(ctxT(t), &agentmeshv1.SubmitTasksRequest{Tasks: []*agentmeshv1.GraphTask{
			{Ref: "a", Task: &agentmeshv1.SubmitTaskRequest{Input: "first", RequiredSkills: []string{"postgres", "sql"}}},
			{Ref: "b", Task: &agentmeshv1.SubmitTaskRequest{Input: "second", Agent: "generalist", DependsOn: []string{"ref:a"}}},
		}})
		if err != nil {
			t.Fatalf("SubmitTasks: %v", err)
		}
		for i, want := range []string{"scored:sql-expert", "named:generalist"} {
			got, err := e.tasks.GetTask(ctxT(t), &agentmeshv1.GetTaskRequest{Id: gr2.Tasks[i].Id})
			if err != nil {
				t.Fatal(err)
			}
			if r := got.Task.GetRouting(); r.GetMethod()+":"+r.GetChosen() != want {
				t.Errorf("graph task %d routing = %v, want %s", i, r, want)
			}
		}

		// Bad input.
		for _, tt := range []struct {
			req  *agentmeshv1.MatchAgentsRequest
			code codes.Code
			msg  string
		}{
			{&agentmeshv1.MatchAgentsRequest{}, codes.InvalidArgument, "required_skills"},
			{&agentmeshv1.MatchAgentsRequest{RequiredSkills: []string{"a b"}}, codes.InvalidArgument, "required_skills[0]"},
			{&agentmeshv1.MatchAgentsRequest{RequiredSkills: []string{"sql"}, Limit: -1}, codes.InvalidArgument, "limit"},
			{&agentmeshv1.MatchAgentsRequest{RequiredSkills: []string{"juggling"}}, codes.FailedPrecondition, "juggling"},
		} {
			_, err := e.agents.MatchAgents(ctxT(t), tt.req)
			if st := status.Convert(err); st.Code() != tt.code || !strings.Contains(st.Message(), tt.msg) {
				t.Errorf("MatchAgents(%v) = %v %q, want %v naming %s", tt.req, st.Code(), st.Message(), tt.code, tt.msg)
			}
		}
		if _, err := e.tasks.CancelTask(ctxT(t), &agentmeshv1.CancelTaskRequest{Id: slow.Id}); err != nil {
			t.Fatal(err)
		}
	})
}

// Matching across orgs: an org sees its own agents and the shared ones,
// never another org's; its own agent hides a shared one of the same name
// even when it does not offer the skill; affinity counts the org's own
// finished tasks.
func TestMatchAgentsAcrossOrgs(t *testing.T) {
	stores(t, func(t *testing.T, o opts) {
		o.keysFile = tenancyKeysFile(t)
		e := start(t, o)
		mk := func(who, name string, skills ...string) {
			t.Helper()
			mkSkills(t, as(t, who), e.skills, skills...)
			if _, err := e.agents.CreateAgent(as(t, who), &agentmeshv1.CreateAgentRequest{Agent: &agentmeshv1.Agent{
				Name: name, Tools: []string{"echo"}, Skills: skills,
			}}); err != nil {
				t.Fatalf("%s creates %s: %v", who, name, err)
			}
		}
		mk("ops", "translator", "sql")
		mk("ops", "dup", "sql")
		mk("a-admin", "dup", "web")
		mk("a-admin", "a-sql", "sql")
		mk("b-admin", "b-sql", "sql")
		match := func(who string) *agentmeshv1.Routing {
			t.Helper()
			resp, err := e.agents.MatchAgents(as(t, who), &agentmeshv1.MatchAgentsRequest{RequiredSkills: []string{"sql"}})
			if err != nil {
				t.Fatalf("%s matches: %v", who, err)
			}
			return resp.Routing
		}
		if got := candNames(match("a-reader")); got != "a-sql,translator" {
			t.Errorf("org A candidates = %s, want a-sql,translator", got)
		}
		if got := candNames(match("b-admin")); got != "b-sql,dup,translator" {
			t.Errorf("org B candidates = %s, want b-sql,dup,translator", got)
		}
		// A's finished task raises a-sql's affinity for A only.
		sub, err := e.tasks.SubmitTask(as(t, "a-op"), &agentmeshv1.SubmitTaskRequest{Input: "hello", Agent: "a-sql"})
		if err != nil {
			t.Fatal(err)
		}
		waitAs(t, e, "a-reader", sub.Task.Id, taskstate.Completed)
		poll.Until(t, 30*time.Second, func() error {
			if c := match("a-reader").Candidates[0]; c.Agent != "a-sql" || c.RecentCompleted != 1 || c.Affinity <= 0.5 || c.AgentOrg != "org-a" {
				return fmt.Errorf("after a completed task: %v", c)
			}
			return nil
		})
		for _, c := range match("b-admin").Candidates {
			if c.RecentCompleted != 0 || c.Affinity != 0.5 {
				t.Errorf("org B sees A's history: %v", c)
			}
		}
	})
}
