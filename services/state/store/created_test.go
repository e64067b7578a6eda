package store

import (
	"testing"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
)

// The created event tells a live list what it shows of the new task —
// title, tags, parent and root, creator, parents — so WatchTasks and taps
// need not read the task; a root task's root is itself (left empty).
func TestCreatedEventCarriesTheSummary(t *testing.T) {
	_, evs := PlanCreate(&agentmeshv1.Task{Org: "acme", Agent: "a", Title: "<script>x</script>", Tags: []string{"q3", "urgent"},
		ParentTaskId: "P1", RootTaskId: "R1", Depth: 2, CreatedBy: "ci", DependsOn: []string{"D1"}}, time.Now())
	c := evs[0].GetCreated()
	if evs[0].Type != agentmeshv1.EventType_EVENT_TYPE_CREATED || c.GetTitle() != "<script>x</script>" || len(c.GetTags()) != 2 ||
		c.GetParentTaskId() != "P1" || c.GetRootTaskId() != "R1" || c.GetDepth() != 2 || c.GetCreatedBy() != "ci" || len(c.GetDependsOn()) != 1 {
		t.Errorf("created event %v", evs[0])
	}
	_, evs = PlanCreate(&agentmeshv1.Task{Org: "acme", Agent: "a", Title: "root"}, time.Now())
	if c := evs[0].GetCreated(); c.GetTitle() != "root" || c.GetRootTaskId() != "" {
		t.Errorf("a root task's created event %v, want its title and no root id", c)
	}
	if evs[1].GetCreated() != nil {
		t.Errorf("the queued event carries a summary: %v", evs[1])
	}
}
