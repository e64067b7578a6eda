package store

import (
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
)

// planCachedCreate makes the second event of a task answered from the
// result cache (the state service set cached_from and the result it takes,
// issue 30) a move to completed carrying them: created, then completed —
// one event per transition, committed together, so the task is durable and
// finished when the submit returns. No executor runs and no model is asked;
// the task's usage stays zero.
func planCachedCreate(in *agentmeshv1.Task, task *agentmeshv1.Task, second *agentmeshv1.TaskEvent) {
	if in.CachedFrom == "" || len(in.DependsOn) > 0 || in.PendingProposal != nil {
		task.CachedFrom = ""
		return
	}
	second.Status = taskstate.Completed
	second.Result = in.Result
	second.CachedFrom = in.CachedFrom
	second.Reason = "answered from the result cache: the result of task " + in.CachedFrom +
		" (same org, agent version, tools, model and input); no model was asked"
}
