package e2e

import (
	"fmt"
	"slices"
	"testing"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/poll"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
)

// rightsScript drives the delegation-rights matrix. A parent's input names
// its target: an agent ("t-…", "m-…": call_agent by name) or a skill
// ("skill-…": call_agent by skills); the parent then waits. The sub-task
// (input "run shell") calls shell once and reports. Agents of model
// "deleg-override" pass a tools override naming shell; the middle agent of
// a depth-2 chain (model "deleg-mid") delegates to t-allow.
const rightsScript = `{
  "scenarios": [
    {"model": "deleg-override", "turns": [
      {"tool_calls": [{"name": "call_agent", "arguments": {"agent": "{{input}}", "input": "run shell", "tools": ["shell"]}}]},
      {"tool_calls": [{"name": "wait_tasks", "arguments": {}}]},
      {"content": "parent done: {{last_tool_result}}"}
    ]},
    {"model": "deleg-mid", "turns": [
      {"tool_calls": [{"name": "call_agent", "arguments": {"agent": "t-allow", "input": "run shell"}}]},
      {"tool_calls": [{"name": "wait_tasks", "arguments": {}}]},
      {"content": "middle done: {{last_tool_result}}"}
    ]},
    {"match": "^run shell", "turns": [
      {"tool_calls": [{"name": "shell", "arguments": {"command": "echo ran"}}]},
      {"content": "shell said: {{last_tool_result}}"}
    ]},
    {"match": "^(t|m)-", "turns": [
      {"tool_calls": [{"name": "call_agent", "arguments": {"agent": "{{input}}", "input": "run shell"}}]},
      {"tool_calls": [{"name": "wait_tasks", "arguments": {}}]},
      {"content": "parent done: {{last_tool_result}}"}
    ]},
    {"match": "^skill-", "turns": [
      {"tool_calls": [{"name": "call_agent", "arguments": {"skills": ["{{input}}"], "input": "run shell"}}]},
      {"tool_calls": [{"name": "wait_tasks", "arguments": {}}]},
      {"content": "parent done: {{last_tool_result}}"}
    ]}
  ]
}`

// shellRight is what a task may do with shell.
type shellRight int

const (
	shellAbsent  shellRight = iota // not among its tools
	shellDenied                    // its policy denies it
	shellGated                     // its policy requires a person's approval
	shellAllowed                   // allowed (ALLOW, or the tool's default)
)

func (r shellRight) String() string {
	return [...]string{"absent", "denied", "gated", "allowed"}[r]
}

// shellAgent is an agent named name with right on shell, plus extra tools.
func shellAgent(name string, right shellRight, extra ...string) *agentmeshv1.Agent {
	a := &agentmeshv1.Agent{Name: name, Tools: slices.Clone(extra)}
	policy := map[shellRight]agentmeshv1.ToolPolicy{
		shellDenied: agentmeshv1.ToolPolicy_TOOL_POLICY_DENY, shellGated: agentmeshv1.ToolPolicy_TOOL_POLICY_REQUIRE_APPROVAL,
		shellAllowed: agentmeshv1.ToolPolicy_TOOL_POLICY_ALLOW,
	}
	if right != shellAbsent {
		a.Tools = append(a.Tools, "shell")
		a.ToolPolicies = map[string]agentmeshv1.ToolPolicy{"shell": policy[right]}
	}
	return a
}

var parentTools = []string{"call_agent", "wait_tasks"}

// TestDelegationNeverWidensRights: the matrix through the public
// API, the scripted model driving call_agent. A parent whose shell is
// absent, denied or gated delegates — by name, by skills, with a tools
// override, and through a middle agent (depth 2) — to an agent whose shell
// is allowed or gated; the sub-task that calls shell gets at most its
// parent's right: absent or denied → shell is not among its tools and the
// call is denied, gated → it waits for a person, whatever the target
// allows. A parent that may use shell
// freely passes that on (the control: the matrix can tell).
func TestDelegationNeverWidensRights(t *testing.T) {
	e := start(t, opts{script: rightsScript})
	e.ensureSkills(t, "skill-allow", "skill-gated")
	allowT := shellAgent("t-allow", shellAllowed, "echo")
	allowT.Skills = []string{"skill-allow"}
	gatedT := shellAgent("t-gated", shellGated, "echo")
	gatedT.Skills = []string{"skill-gated"}
	e.createAgentWith(t, allowT)
	e.createAgentWith(t, gatedT)
	for _, r := range []shellRight{shellAbsent, shellDenied, shellGated, shellAllowed} {
		e.createAgentWith(t, shellAgent("p-"+r.String(), r, parentTools...))
	}
	override := shellAgent("p-gated-override", shellGated, parentTools...)
	override.Model = &agentmeshv1.ModelSettings{Model: "deleg-override"}
	e.createAgentWith(t, override)
	mid := shellAgent("m-mid", shellAllowed, parentTools...)
	mid.Model = &agentmeshv1.ModelSettings{Model: "deleg-mid"}
	e.createAgentWith(t, mid)

	type tc struct {
		name, parent, input string
		depth               int // of the sub-task that calls shell
		want                shellRight
	}
	var cases []tc
	for _, p := range []shellRight{shellAbsent, shellDenied, shellGated} {
		for _, target := range []shellRight{shellAllowed, shellGated} {
			want := p
			if p == shellDenied {
				want = shellAbsent // a tool the parent may not use is not passed on
			}
			name, skill := "t-allow", "skill-allow"
			if target == shellGated {
				name, skill = "t-gated", "skill-gated"
			}
			cases = append(cases,
				tc{fmt.Sprintf("%s parent x %s target by name", p, target), "p-" + p.String(), name, 1, want},
				tc{fmt.Sprintf("%s parent x %s target by skills", p, target), "p-" + p.String(), skill, 1, want})
		}
	}
	cases = append(cases,
		tc{"gated parent x allowed target with a tools override", "p-gated-override", "t-allow", 1, shellGated},
		tc{"depth 2: gated root, allowed middle, allowed leaf", "p-gated", "m-mid", 2, shellGated},
		tc{"depth 2: absent root, allowed middle, allowed leaf", "p-absent", "m-mid", 2, shellAbsent},
		tc{"control: allowed parent x allowed target", "p-allowed", "t-allow", 1, shellAllowed},
		tc{"control: allowed parent x gated target", "p-allowed", "t-gated", 1, shellGated},
	)
	roots := make([]string, len(cases))
	for i, c := range cases { // all at once: they run side by side
		roots[i] = e.submit(t, &agentmeshv1.SubmitTaskRequest{Input: c.input, Agent: c.parent}).Id
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			leaf := e.leafAt(t, roots[i], c.depth)
			got := e.shellOutcome(t, leaf)
			if got != c.want {
				t.Errorf("the sub-task's shell call was %s, want %s (its agent_spec: tools %v, policies %v)",
					got, c.want, leaf.GetAgentSpec().GetTools(), leaf.GetAgentSpec().GetToolPolicies())
			}
			// The record carries the rights the sub-task runs with.
			spec := leaf.GetAgentSpec()
			has := slices.Contains(spec.GetTools(), "shell")
			switch {
			case (c.want == shellAbsent || c.want == shellDenied) && has:
				t.Errorf("the sub-task's recorded tools %v hold shell, which its parent may not use", spec.GetTools())
			case c.want == shellGated && spec.GetToolPolicies()["shell"] != agentmeshv1.ToolPolicy_TOOL_POLICY_REQUIRE_APPROVAL:
				t.Errorf("the sub-task's recorded shell policy is %v, want REQUIRE_APPROVAL", spec.GetToolPolicies()["shell"])
			}
			if slices.Contains(spec.GetTools(), "echo") {
				t.Errorf("the sub-task's recorded tools %v hold echo, which no parent has", spec.GetTools())
			}
		})
	}
}

// leafAt returns the one task depth levels below root, once its shell call
// was judged (it ended, or waits for a person).
func (e *env) leafAt(t *testing.T, root string, depth int) *agentmeshv1.Task {
	t.Helper()
	var leaf *agentmeshv1.Task
	poll.Until(t, 90*time.Second, func() error {
		id := root
		for d := 0; d < depth; d++ {
			subs := e.subtasks(t, id)
			if len(subs) != 1 {
				return fmt.Errorf("task %s has %d sub-tasks, want 1", id, len(subs))
			}
			id = subs[0].Id
		}
		got, err := e.tasks.GetTask(ctxShort(t), &agentmeshv1.GetTaskRequest{Id: id})
		if err != nil {
			return err
		}
		leaf = got.Task
		if !taskstate.Terminal(leaf.Status) && leaf.Status != taskstate.Blocked {
			return fmt.Errorf("sub-task %s is %s", id, taskstate.Name(leaf.Status))
		}
		return nil
	})
	if leaf.Status != taskstate.Completed && leaf.Status != taskstate.Blocked {
		t.Fatalf("sub-task %s ended %s (%s)", leaf.Id, taskstate.Name(leaf.Status), leaf.Error)
	}
	return leaf
}

// shellOutcome is what the gate decided on the task's shell call.
func (e *env) shellOutcome(t *testing.T, task *agentmeshv1.Task) shellRight {
	t.Helper()
	for _, ev := range e.history(t, task.Id) {
		st := ev.GetStep()
		if st.GetKind() != agentmeshv1.StepKind_STEP_KIND_TOOL_CALL || st.GetToolName() != "shell" {
			continue
		}
		switch st.GetDecision() {
		case agentmeshv1.ToolDecision_TOOL_DECISION_ALLOWED:
			return shellAllowed
		case agentmeshv1.ToolDecision_TOOL_DECISION_PENDING_APPROVAL:
			if task.Status != taskstate.Blocked || task.GetPendingApproval().GetTool() != "shell" {
				t.Errorf("the shell call waits for approval but the task is %s with approval %v", taskstate.Name(task.Status), task.GetPendingApproval())
			}
			return shellGated
		case agentmeshv1.ToolDecision_TOOL_DECISION_DENIED:
			if slices.Contains(task.GetAgentSpec().GetTools(), "shell") {
				return shellDenied
			}
			return shellAbsent
		default:
			t.Fatalf("shell call decided %v", st.GetDecision())
		}
	}
	t.Fatalf("task %s never called shell", task.Id)
	return 0
}
