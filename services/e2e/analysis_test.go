package e2e

import (
	"strings"
	"testing"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
)

// analysisScript answers the registry's task analysis (format
// task_analysis) by the input, and every agent's turn with one answer.
const analysisScript = `{
  "scenarios": [
    {"format": "task_analysis", "match": "(?i)french", "turns": [{"content": "{\"skills\": [\"translation\"]}"}]},
    {"format": "task_analysis", "match": "(?i)broken", "turns": [{"status": 500, "content": "down"}]},
    {"format": "task_analysis", "match": "(?i)invent", "turns": [{"content": "{\"skills\": [\"time-travel\"]}"}]},
    {"turns": [{"content": "done: {{input}}"}]}
  ]
}`

// analysisCatalogue creates the skills and agents the analysis tests
// route among: a translator, a coder and the default agent.
func analysisCatalogue(t *testing.T, e *env) {
	t.Helper()
	for _, sk := range []*agentmeshv1.Skill{
		{Name: "translation", Description: "Translate text between languages, e.g. English into French or German."},
		{Name: "sql", Description: "Write and explain SQL queries against relational databases."},
		{Name: "general", Description: "General questions and small talk."},
	} {
		if _, err := e.skills.CreateSkill(ctxT(t), &agentmeshv1.CreateSkillRequest{Skill: sk}); err != nil {
			t.Fatalf("create skill %s: %v", sk.Name, err)
		}
	}
	e.createAgent(t, "translator", "translation")
	e.createAgent(t, "coder", "sql")
	e.createAgent(t, "assistant", "general")
}

// A task naming neither agent nor skills gets its skills from the model's
// structured answer over the org's catalogue; when the model fails or
// names a skill not in the catalogue, the fallback chooses; either way the
// analysis is recorded on the task's routing.
func TestTaskAnalysisWithModel(t *testing.T) {
	stores(t, func(t *testing.T, o opts) {
		o.script = analysisScript
		e := start(t, o)
		analysisCatalogue(t, e)

		task := e.submit(t, &agentmeshv1.SubmitTaskRequest{Input: "Please put this into French: good morning"})
		a := task.GetRouting().GetAnalysis()
		if task.Agent != "translator" || task.GetRouting().GetMethod() != "scored" || a.GetMethod() != "model" ||
			strings.Join(a.GetSkills(), ",") != "translation" || a.GetModel() != "scripted" || a.GetModelError() != "" || a.GetCatalogueSkills() != 3 {
			t.Errorf("model analysis: agent %s routing %v", task.Agent, task.GetRouting())
		}
		// Recorded: GetTask answers the same decision.
		got, err := e.tasks.GetTask(ctxT(t), &agentmeshv1.GetTaskRequest{Id: task.Id})
		if err != nil || got.GetTask().GetRouting().GetAnalysis().GetMethod() != "model" {
			t.Errorf("GetTask routing = %v, %v", got.GetTask().GetRouting(), err)
		}

		// The model fails: the fallback chooses, the error is kept.
		task = e.submit(t, &agentmeshv1.SubmitTaskRequest{Input: "broken model: write a SQL query listing the users"})
		a = task.GetRouting().GetAnalysis()
		if task.Agent != "coder" || a.GetMethod() != "fallback" || a.GetModelError() == "" || strings.Join(a.GetSkills(), ",") != "sql" || len(a.GetScores()) == 0 {
			t.Errorf("failed model: agent %s analysis %v", task.Agent, a)
		}

		// The model names a skill not in the catalogue: refused, and the
		// fallback finds nothing alike either: the default agent.
		task = e.submit(t, &agentmeshv1.SubmitTaskRequest{Input: "invent a machine"})
		a = task.GetRouting().GetAnalysis()
		if task.Agent != "assistant" || task.GetRouting().GetMethod() != "default" || a.GetMethod() != "fallback" ||
			!strings.Contains(a.GetModelError(), "time-travel") || len(a.GetSkills()) != 0 {
			t.Errorf("unknown skill from the model: agent %s routing %v", task.Agent, task.GetRouting())
		}

		// A task naming skills is not analysed.
		task = e.submit(t, &agentmeshv1.SubmitTaskRequest{Input: "into French", RequiredSkills: []string{"sql"}})
		if task.Agent != "coder" || task.GetRouting().GetAnalysis() != nil {
			t.Errorf("named skills: agent %s routing %v", task.Agent, task.GetRouting())
		}
	})
}

// Without a model for analysis (the test script answers no task_analysis
// format), the fallback's similarity of the input to the skills'
// descriptions chooses; a skill created later is seen by the next submit.
func TestTaskAnalysisFallback(t *testing.T) {
	stores(t, func(t *testing.T, o opts) {
		e := start(t, o)
		analysisCatalogue(t, e)

		task := e.submit(t, &agentmeshv1.SubmitTaskRequest{Input: "write a SQL query listing the users"})
		a := task.GetRouting().GetAnalysis()
		if task.Agent != "coder" || a.GetMethod() != "fallback" || a.GetModel() != "" || a.GetModelError() != "" ||
			strings.Join(a.GetSkills(), ",") != "sql" || len(a.GetScores()) == 0 || a.GetScores()[0].GetSkill() != "sql" {
			t.Errorf("fallback: agent %s analysis %v", task.Agent, a)
		}

		task = e.submit(t, &agentmeshv1.SubmitTaskRequest{Input: "bake a cake with cherries"})
		if task.Agent != "assistant" || task.GetRouting().GetMethod() != "default" || task.GetRouting().GetAnalysis().GetMethod() != "fallback" {
			t.Errorf("nothing alike: agent %s routing %v", task.Agent, task.GetRouting())
		}

		// The catalogue the registry caches is refreshed by a skill change.
		if _, err := e.skills.CreateSkill(ctxT(t), &agentmeshv1.CreateSkillRequest{Skill: &agentmeshv1.Skill{
			Name: "baking", Description: "Bake cakes, bread and pastry; write recipes."}}); err != nil {
			t.Fatal(err)
		}
		e.createAgent(t, "baker", "baking")
		task = e.submit(t, &agentmeshv1.SubmitTaskRequest{Input: "bake a cake with cherries"})
		if task.Agent != "baker" || strings.Join(task.GetRouting().GetAnalysis().GetSkills(), ",") != "baking" {
			t.Errorf("after a new skill: agent %s routing %v", task.Agent, task.GetRouting())
		}
	})
}
