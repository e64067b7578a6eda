package executor

import (
	"strings"
	"testing"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
)

func TestInputWithDependencies(t *testing.T) {
	if got := inputWithDependencies(&agentmeshv1.Task{Input: "just this"}); got != "just this" {
		t.Errorf("no parents: %q", got)
	}
	big := strings.Repeat("x", maxDependencyContext)
	got := inputWithDependencies(&agentmeshv1.Task{Input: "merge them", DependencyResults: []*agentmeshv1.DependencyResult{
		{TaskId: "01A", Title: "fetch", Status: taskstate.Completed, Result: "page text"},
		{TaskId: "01B", Status: taskstate.Failed, Error: "it broke"},
		{TaskId: "01C", Status: taskstate.Completed, Result: big},
	}})
	for _, want := range []string{
		"--- task 01A \"fetch\" (completed) ---\npage text\n",
		"--- task 01B (failed) ---\nit broke\n",
		"[... cut: 43690 of 131072 bytes shown]",
		"\n--- your task ---\nmerge them",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("input lacks %q", want)
		}
	}
	if strings.Index(got, "01A") > strings.Index(got, "01B") || !strings.HasSuffix(got, "merge them") {
		t.Errorf("order: parents as they finished, then the input")
	}
	if len(got) > maxDependencyContext+4096 {
		t.Errorf("input of %d bytes, over the cap", len(got))
	}
}
