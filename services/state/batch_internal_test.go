package state

import (
	"strings"
	"testing"

	busv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/bus/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"google.golang.org/protobuf/proto"
)

// A batch's reply that would not fit keeps every item's event and leaves
// out the tasks past the budget, saying so.
func TestFitDispatchBatch(t *testing.T) {
	item := func(id string) *busv1.DispatchBatchItem {
		return &busv1.DispatchBatchItem{Response: &busv1.TransitionResponse{
			Task:  &agentmeshv1.Task{Id: id, Input: strings.Repeat("x", 1000)},
			Event: &agentmeshv1.TaskEvent{TaskId: id, Seq: 3},
		}}
	}
	items := []*busv1.DispatchBatchItem{item("a"), item("b"), item("c"), {Error: &busv1.Error{Code: "not_found"}}}
	budget := 2*(proto.Size(items[0])+8) + 10
	fitDispatchBatch(items, budget)
	for i, want := range []bool{false, false, true} {
		it := items[i]
		if it.TaskOmitted != want || (it.Response.GetTask() == nil) != want {
			t.Errorf("item %d: omitted %v, task %v; want omitted %v", i, it.TaskOmitted, it.Response.GetTask() != nil, want)
		}
	}
	if items[2].Response.GetEvent().GetTaskId() != "c" {
		t.Errorf("the item whose task was left out lost its event too")
	}
	if it := items[3]; it.Error == nil || it.TaskOmitted {
		t.Errorf("an error item changed: %v", it)
	}
	all := []*busv1.DispatchBatchItem{item("a"), item("b")}
	fitDispatchBatch(all, 1<<20)
	for i, it := range all {
		if it.TaskOmitted || it.Response.Task == nil {
			t.Errorf("item %d within the budget lost its task", i)
		}
	}
}
