package state_test

import (
	"strings"
	"testing"

	busv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/bus/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/subjects"
	"google.golang.org/protobuf/proto"
)

// A page of big tasks is cut to fit one bus message; the rest comes with
// the next pages, nothing lost (the scheduler rebuilds its queue from
// these lists).
func TestListPagesFitInOneMessage(t *testing.T) {
	r := startKV(t)
	const n = 30
	want := map[string]bool{}
	for range n {
		req := newTask("big")
		req.Task.Input = strings.Repeat("x", 60<<10)
		resp := mustCall(t, r.nc, subjects.StateCreateTask, req, &busv1.CreateTaskResponse{})
		want[resp.Task.Id] = true
	}
	pages := 0
	for token := ""; ; {
		resp := mustCall(t, r.nc, subjects.StateListTasks, &busv1.ListTasksRequest{Org: "big", PageSize: 1000, PageToken: token}, &busv1.ListTasksResponse{})
		if size := proto.Size(resp); size > bus.MaxPayload {
			t.Fatalf("page of %d bytes, over the bus limit %d", size, bus.MaxPayload)
		}
		pages++
		for _, task := range resp.Tasks {
			if !want[task.Id] {
				t.Fatalf("task %s listed twice or unknown", task.Id)
			}
			delete(want, task.Id)
		}
		if token = resp.NextPageToken; token == "" {
			break
		}
	}
	if len(want) != 0 || pages < 2 {
		t.Fatalf("%d tasks missing after %d pages; want none missing over ≥ 2 pages", len(want), pages)
	}
}
