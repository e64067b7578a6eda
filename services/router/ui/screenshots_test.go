package ui_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/scriptedmodel"
	"github.com/agentmesh/agentmesh/services/executor/llm"
	"github.com/agentmesh/agentmesh/services/stack"
	"github.com/chromedp/chromedp"
)

// TestScreenshots takes the README's pictures of the dashboard (it is a
// tool, not a check: it runs only when asked, and checks nothing beyond
// the pages drawing):
//
//	make screenshots    # AGENTMESH_UI_SCREENSHOTS=docs/images go test -run TestScreenshots ./services/router/ui/
//
// A stack like agentmesh dev's (the default scripted model with a price, so
// tasks cost something) gets a few tasks of every kind — done, failed,
// cancelled, a delegation tree, a dependency graph, one waiting for an
// approval — and headless Chromium photographs the pages at 1366×860.
func TestScreenshots(t *testing.T) {
	dir := os.Getenv("AGENTMESH_UI_SCREENSHOTS")
	if dir == "" {
		t.Skip("set AGENTMESH_UI_SCREENSHOTS=DIR (make screenshots) to take the dashboard's pictures")
	}
	exe := chromium(t)
	prices, err := llm.ParsePrices("scripted=2.50/10.00")
	if err != nil {
		t.Fatal(err)
	}
	d := startStack(t, func(c *stack.Config) {
		c.Script = scriptedmodel.DefaultScript()
		c.Executor.Model.Prices = prices
	})
	d.startBrowser(t, exe)
	roots := seedShowcase(t, d)
	tab := d.tab(t)
	d.signIn(t, tab, "k-acme")
	shoot := func(name, path, ready string) {
		t.Helper()
		if err := chromedp.Do(tab, chromedp.Navigate(d.url+path)); err != nil {
			t.Fatal(err)
		}
		waitFor(t, tab, name, ready)
		time.Sleep(700 * time.Millisecond) // fonts and the last frame
		png, err := chromedp.Run(tab, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "dashboard-"+name+".png"), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	shoot("tasks", "/ui/tasks", "document.querySelectorAll('table.tasks tbody tr').length >= 10")
	shoot("task", "/ui/tasks/"+roots["plan"], "document.querySelector('svg.graph') && document.querySelector('#task-status .st-completed') && document.querySelectorAll('li.ev-step').length >= 5")
	shoot("graph", "/ui/tasks/"+roots["report"], "document.querySelector('svg.graph')")
	shoot("approvals", "/ui/approvals", "document.querySelector('[data-approval]')")
	shoot("metrics", "/ui/metrics?window=5m", "document.querySelectorAll('figure.chart-box svg').length >= 6")
	shoot("executors", "/ui/executors", "document.querySelector('article.node')")
}

// seedShowcase submits the tasks the pictures show and waits for them to
// settle; it returns a few ids by name.
func seedShowcase(t *testing.T, d *dash) map[string]string {
	t.Helper()
	ctx, cancel := keyCtx("k-acme", 10*time.Minute)
	defer cancel()
	agents := agentmeshv1.NewAgentServiceClient(d.conn)
	for _, a := range []*agentmeshv1.Agent{
		{Name: "careful", Description: "Asks before it checks the clock.", Tools: []string{"current_time"}, Skills: []string{"general"},
			ToolPolicies: map[string]agentmeshv1.ToolPolicy{"current_time": agentmeshv1.ToolPolicy_TOOL_POLICY_REQUIRE_APPROVAL}},
		{Name: "writer", Description: "Writes short reports.", Tools: []string{"current_time", "echo"}, Skills: []string{"general"}, MaxConcurrency: 4},
		{Name: "planner", Description: "Splits work between assistants.", Tools: []string{"call_agent", "wait_tasks"}, Skills: []string{"general"}},
	} {
		if _, err := agents.CreateAgent(ctx, &agentmeshv1.CreateAgentRequest{Agent: a}); err != nil {
			t.Fatal(err)
		}
	}
	ids := map[string]string{}
	seedRoutine(t, d, ctx)
	for i, title := range []string{"Summarise the Q3 sales report", "Draft the release notes", "Check the on-call rota", "Translate the FAQ",
		"Triage yesterday's tickets", "Compare the two vendor quotes", "List open pull requests", "Answer the customer email"} {
		agent := "assistant"
		if i%3 == 1 {
			agent = "writer"
		}
		d.submit(t, "k-acme", &agentmeshv1.SubmitTaskRequest{Title: title, Input: title + ", please.", Agent: agent,
			Tags: []string{[]string{"sales", "docs", "ops", "support"}[i%4]}, Priority: agentmeshv1.Priority(2 + i%4)})
	}
	ids["plan"] = d.submit(t, "k-acme", &agentmeshv1.SubmitTaskRequest{Title: "Plan the offsite", Input: "plan: the team offsite", Agent: "planner", Tags: []string{"ops"}}).Id
	graph, err := agentmeshv1.NewTaskGraphServiceClient(d.conn).SubmitTasks(ctx, &agentmeshv1.SubmitTasksRequest{Tasks: []*agentmeshv1.GraphTask{
		{Ref: "fetch", Task: &agentmeshv1.SubmitTaskRequest{Title: "Fetch the figures", Input: "fetch the figures", Tags: []string{"report"}}},
		{Ref: "charts", Task: &agentmeshv1.SubmitTaskRequest{Title: "Draw the charts", Input: "draw", DependsOn: []string{"ref:fetch"}, Tags: []string{"report"}}},
		{Ref: "text", Task: &agentmeshv1.SubmitTaskRequest{Title: "Write the text", Input: "write", DependsOn: []string{"ref:fetch"}, Agent: "writer", Tags: []string{"report"}}},
		{Ref: "report", Task: &agentmeshv1.SubmitTaskRequest{Title: "Assemble the report", Input: "assemble", DependsOn: []string{"ref:charts", "ref:text"}, Tags: []string{"report"}}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tk := range graph.GetTasks() {
		if tk.GetTitle() == "Assemble the report" {
			ids["report"] = tk.GetId()
		}
	}
	ids["careful"] = d.submit(t, "k-acme", &agentmeshv1.SubmitTaskRequest{Title: "What time is it in Tokyo?", Input: "what time is it in Tokyo?", Agent: "careful", Priority: agentmeshv1.Priority_PRIORITY_HIGH}).Id
	// A cancelled task, and one that fails because a parent it needs was cancelled.
	held := d.submit(t, "k-acme", &agentmeshv1.SubmitTaskRequest{Title: "Book the venue", Input: "book it", Agent: "careful"})
	failing := d.submit(t, "k-acme", &agentmeshv1.SubmitTaskRequest{Title: "Send the invitations", Input: "send them", DependsOn: []string{held.Id}})
	time.Sleep(2 * time.Second)
	tasks := agentmeshv1.NewTaskServiceClient(d.conn)
	if _, err := tasks.CancelTask(ctx, &agentmeshv1.CancelTaskRequest{Id: held.Id, Reason: "the venue is closed that week"}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{ids["plan"], ids["report"], failing.Id} {
		deadline := time.Now().Add(60 * time.Second)
		for {
			resp, err := tasks.GetTask(ctx, &agentmeshv1.GetTaskRequest{Id: id})
			if err == nil && resp.GetTask().GetFinishedAt() != nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("task %s did not finish: %v %v", id, resp, err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	t.Logf("seeded: %s", fmt.Sprint(ids))
	return ids
}

// seedRoutine is a couple of minutes of steady work, so the metrics have a
// shape: a task every 2 s, some of them failing (a cancelled parent).
func seedRoutine(t *testing.T, d *dash, ctx context.Context) {
	t.Helper()
	for i := range 60 {
		req := &agentmeshv1.SubmitTaskRequest{Title: fmt.Sprintf("Routine check %d", i+1), Input: "routine check", Tags: []string{"routine"},
			Agent: []string{"assistant", "writer"}[i%2], Priority: agentmeshv1.Priority(1 + i%5)}
		if i%9 == 4 {
			gate := d.submit(t, "k-acme", &agentmeshv1.SubmitTaskRequest{Title: "A check nobody needs", Input: "x", Agent: "careful"})
			req.DependsOn = []string{gate.Id}
			d.submit(t, "k-acme", req)
			time.Sleep(time.Second)
			if _, err := agentmeshv1.NewTaskServiceClient(d.conn).CancelTask(ctx, &agentmeshv1.CancelTaskRequest{Id: gate.Id, Reason: "not needed"}); err != nil {
				t.Fatal(err)
			}
			continue
		}
		d.submit(t, "k-acme", req)
		time.Sleep(2 * time.Second)
	}
}
