package executor

import (
	"fmt"
	"strings"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
)

// maxDependencyContext bounds the parents' results put before a task's
// input; each result gets an equal share and longer ones are cut.
const maxDependencyContext = 128 << 10

// inputWithDependencies is the text the agent gets: the results of the
// tasks it depends on (in the order they finished), then its own input.
// A task without parents gets its input unchanged.
func inputWithDependencies(task *agentmeshv1.Task) string {
	deps := task.GetDependencyResults()
	if len(deps) == 0 {
		return task.GetInput()
	}
	share := maxDependencyContext / len(deps)
	var b strings.Builder
	b.WriteString("Results of the tasks this task depends on:\n")
	for _, d := range deps {
		title := ""
		if d.Title != "" {
			title = fmt.Sprintf(" %q", d.Title)
		}
		text := d.Result
		if d.Status != taskstate.Completed {
			text = d.Error
		}
		if len(text) > share {
			text = text[:share] + fmt.Sprintf("\n[... cut: %d of %d bytes shown]", share, len(text))
		}
		fmt.Fprintf(&b, "\n--- task %s%s (%s) ---\n%s\n", d.TaskId, title, taskstate.Name(d.Status), text)
	}
	b.WriteString("\n--- your task ---\n")
	b.WriteString(task.GetInput())
	return b.String()
}
