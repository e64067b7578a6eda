package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	busv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/bus/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/poll"
	"github.com/agentmesh/agentmesh/pkg/subjects"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// clockScript: a "clock" task calls current_time, then answers with it.
const clockScript = `{
  "scenarios": [
    {"match": "^clock", "turns": [
      {"content": "checking", "tool_calls": [{"name": "current_time", "arguments": {"timezone": "UTC"}}]},
      {"content": "time: {{last_tool_result}}"}
    ]},
    {"turns": [{"content": "done: {{input}}"}]}
  ]
}`

// A task runs with its agent's effective settings: the skills' prompt
// templates end the system prompt and their required tools join the
// agent's (a tool its policies deny stays out); the task records the
// agent and skill versions it was accepted with, and a later change to
// either applies only to later tasks. GetAgent answers earlier versions.
func TestSkillsEffectiveSettingsAndVersions(t *testing.T) {
	stores(t, func(t *testing.T, o opts) {
		o.script = clockScript
		e := start(t, o)
		if _, err := e.skills.CreateSkill(ctxT(t), &agentmeshv1.CreateSkillRequest{Skill: &agentmeshv1.Skill{
			Name: "timekeeping", Description: "Tell the time.", RequiredTools: []string{"current_time", "web_fetch"},
			PromptTemplate: "Always give the time in {{config.zone}}.", Config: map[string]string{"zone": "UTC"},
		}}); err != nil {
			t.Fatal(err)
		}
		// Unknown skills are refused, named.
		_, err := e.agents.CreateAgent(ctxT(t), &agentmeshv1.CreateAgentRequest{Agent: &agentmeshv1.Agent{
			Name: "clock", Tools: []string{"echo"}, Skills: []string{"timekeeping", "astrology", "tarot"}}})
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "astrology, tarot") {
			t.Fatalf("unknown skills: %v, want InvalidArgument naming astrology, tarot", err)
		}
		created, err := e.agents.CreateAgent(ctxT(t), &agentmeshv1.CreateAgentRequest{Agent: &agentmeshv1.Agent{
			Name: "clock", SystemPrompt: "You keep time.", Tools: []string{"echo"}, Skills: []string{"timekeeping"},
			ToolPolicies: map[string]agentmeshv1.ToolPolicy{"web_fetch": agentmeshv1.ToolPolicy_TOOL_POLICY_DENY},
		}})
		if err != nil {
			t.Fatal(err)
		}
		if a := created.Agent; len(a.Tools) != 1 || a.SystemPrompt != "You keep time." || a.AppliedSkills != nil {
			t.Errorf("the catalogue's agent carries effective settings: %v", a)
		}

		task := e.submit(t, &agentmeshv1.SubmitTaskRequest{Input: "clock please", Agent: "clock"})
		spec := task.GetAgentSpec()
		if spec.GetVersion() != 1 || spec.GetSystemPrompt() != "You keep time.\n\nAlways give the time in UTC." ||
			strings.Join(spec.GetTools(), ",") != "echo,current_time" {
			t.Errorf("task's agent spec: version %d prompt %q tools %v", spec.GetVersion(), spec.GetSystemPrompt(), spec.GetTools())
		}
		if ap := spec.GetAppliedSkills(); len(ap) != 1 || ap[0].Name != "timekeeping" || ap[0].Version != 1 {
			t.Errorf("applied skills = %v", ap)
		}
		// The tool the skill brings runs (the agent itself lists only echo).
		done := e.waitStatus(t, task.Id, taskstate.Completed, 60*time.Second)
		if !strings.HasPrefix(done.Result, "time: ") || strings.Contains(done.Result, "not") {
			t.Errorf("result = %q, want the time from current_time", done.Result)
		}
		var ran bool
		for _, ev := range e.history(t, task.Id) {
			if s := ev.GetStep(); s.GetKind() == agentmeshv1.StepKind_STEP_KIND_TOOL_RESULT && s.GetToolName() == "current_time" {
				ran = !s.GetIsError()
			}
		}
		if !ran {
			t.Error("current_time did not run without error")
		}

		// Change the skill and the agent: the next task takes both, the
		// first keeps what it was accepted with.
		if _, err := e.skills.UpdateSkill(ctxT(t), &agentmeshv1.UpdateSkillRequest{Skill: &agentmeshv1.Skill{
			Name: "timekeeping", Description: "Tell the time.", RequiredTools: []string{"current_time"}, PromptTemplate: "Be brief.",
		}}); err != nil {
			t.Fatal(err)
		}
		if _, err := e.agents.UpdateAgent(ctxT(t), &agentmeshv1.UpdateAgentRequest{Agent: &agentmeshv1.Agent{
			Name: "clock", SystemPrompt: "You keep time well.", Tools: []string{"echo"}, Skills: []string{"timekeeping"},
		}}); err != nil {
			t.Fatal(err)
		}
		second := e.submit(t, &agentmeshv1.SubmitTaskRequest{Input: "clock again", Agent: "clock"})
		if s := second.GetAgentSpec(); s.GetVersion() != 2 || s.GetSystemPrompt() != "You keep time well.\n\nBe brief." || s.GetAppliedSkills()[0].GetVersion() != 2 {
			t.Errorf("second task's spec: version %d prompt %q applied %v", s.GetVersion(), s.GetSystemPrompt(), s.GetAppliedSkills())
		}
		first, err := e.tasks.GetTask(ctxT(t), &agentmeshv1.GetTaskRequest{Id: task.Id})
		if err != nil || first.Task.GetAgentSpec().GetVersion() != 1 || first.Task.GetAgentSpec().GetAppliedSkills()[0].GetVersion() != 1 {
			t.Errorf("first task's recorded versions changed: %v %v", first.GetTask().GetAgentSpec(), err)
		}
		// GetAgent: the latest, or an earlier version on request.
		old, err := e.agents.GetAgent(ctxT(t), &agentmeshv1.GetAgentRequest{Name: "clock", Version: 1})
		if err != nil || old.Agent.Version != 1 || old.Agent.SystemPrompt != "You keep time." {
			t.Errorf("GetAgent version 1 = %v, %v", old.GetAgent(), err)
		}
		if _, err := e.agents.GetAgent(ctxT(t), &agentmeshv1.GetAgentRequest{Name: "clock", Version: 9}); status.Code(err) != codes.NotFound {
			t.Errorf("GetAgent version 9: %v, want NotFound", err)
		}
		// A skill an agent offers cannot be deleted.
		if _, err := e.skills.DeleteSkill(ctxT(t), &agentmeshv1.DeleteSkillRequest{Name: "timekeeping"}); status.Code(err) != codes.FailedPrecondition {
			t.Errorf("delete an offered skill: %v, want FailedPrecondition", err)
		}
	})
}

// The registry caches the candidates of a skill set; a change made through
// it shows at once, and one made past it (straight to state, as another
// registry replica would) shows once its agent event arrives, long before
// the cache's TTL.
func TestMatchCandidateCacheFollowsAgentChanges(t *testing.T) {
	e := start(t, opts{})
	e.createAgent(t, "first", "sql")
	match := func() string {
		resp, err := e.agents.MatchAgents(ctxT(t), &agentmeshv1.MatchAgentsRequest{RequiredSkills: []string{"sql"}})
		if err != nil {
			t.Fatal(err)
		}
		return candNames(resp.Routing)
	}
	if got := match(); got != "first" {
		t.Fatalf("candidates = %s", got)
	}
	e.createAgent(t, "second", "sql")
	if got := match(); got != "first,second" {
		t.Fatalf("after a create through the registry: %s, want first,second", got)
	}
	// Past the registry: state's own agent.put, as the registry identity.
	c := dialAs(t, e, subjects.ServiceRegistry)
	names := subjects.Must("")
	if err := bus.Request(ctxT(t), c.nc, names.State(subjects.StatePutAgent), &busv1.PutAgentRequest{
		Agent: &agentmeshv1.Agent{Name: "third", Org: "default", Skills: []string{"sql"}}, Create: true}, &busv1.PutAgentResponse{}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 10*time.Second, func() error {
		if got := match(); got != "first,second,third" {
			return fmt.Errorf("candidates = %s", got)
		}
		return nil
	})
}

// The registry caches the agent a name resolves to, so a task submitted to
// a named agent costs no agent read; a change through the registry shows
// at once, one past it once its agent event arrives, and an org's own
// agent created under a shared agent's name takes over the name for that
// org.
func TestNamedAgentCacheFollowsAgentChanges(t *testing.T) {
	e := start(t, opts{})
	e.createAgentWith(t, &agentmeshv1.Agent{Name: "namer", SystemPrompt: "v1", Tools: []string{"echo"}})
	prompt := func() string {
		return e.submit(t, &agentmeshv1.SubmitTaskRequest{Input: "hi", Agent: "namer"}).GetAgentSpec().GetSystemPrompt()
	}
	if got := prompt(); got != "v1" {
		t.Fatalf("first task's prompt %q, want v1", got)
	}
	if _, err := e.agents.UpdateAgent(ctxT(t), &agentmeshv1.UpdateAgentRequest{Agent: &agentmeshv1.Agent{
		Name: "namer", SystemPrompt: "v2", Tools: []string{"echo"}}}); err != nil {
		t.Fatal(err)
	}
	if got := prompt(); got != "v2" {
		t.Fatalf("after an update through the registry: prompt %q, want v2", got)
	}
	// Past the registry: state's own agent.put, as another replica would.
	c := dialAs(t, e, subjects.ServiceRegistry)
	names := subjects.Must("")
	if err := bus.Request(ctxT(t), c.nc, names.State(subjects.StatePutAgent), &busv1.PutAgentRequest{
		Agent: &agentmeshv1.Agent{Name: "namer", Org: "default", SystemPrompt: "v3", Tools: []string{"echo"}}}, &busv1.PutAgentResponse{}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 10*time.Second, func() error {
		if got := prompt(); got != "v3" {
			return fmt.Errorf("prompt %q, want v3", got)
		}
		return nil
	})
}
