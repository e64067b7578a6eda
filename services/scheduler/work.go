package scheduler

import (
	busv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/bus/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
)

// workItem is the work of a task's current attempt: the task's id, org and
// agent and the attempt — not the whole task (its input, agent spec,
// metadata): the executor gets the task from state with its move to
// running, so the work stream carries a few dozen bytes per task instead
// of up to the task's full size.
func workItem(task *agentmeshv1.Task) *busv1.WorkItem {
	return &busv1.WorkItem{Task: &agentmeshv1.Task{Id: task.Id, Org: task.Org, Agent: task.Agent}, Attempt: task.Attempt}
}
