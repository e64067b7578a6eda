package router

import (
	"context"
	"strings"
	"testing"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/subjects"
	"github.com/agentmesh/agentmesh/pkg/testlog"
)

// BenchmarkHubDeliver is the router's cost of one task event (a model
// turn's step, as every router receives for every task): of a task nobody
// watches here, and of a watched one.
//
//	go test -run '^$' -bench HubDeliver ./services/router/
func BenchmarkHubDeliver(b *testing.B) {
	names := subjects.Must("am")
	ev := &agentmeshv1.TaskEvent{TaskId: "T1", Org: "acme", Seq: 7, Type: agentmeshv1.EventType_EVENT_TYPE_STEP,
		Step: &agentmeshv1.Step{Index: 2, Kind: agentmeshv1.StepKind_STEP_KIND_MODEL_TURN, Content: strings.Repeat("the model's answer ", 40)}}
	msg, err := bus.NewEventMsg(context.Background(), names.TaskEvent("acme", "T1", subjects.EventStep), ev)
	if err != nil {
		b.Fatal(err)
	}
	for _, watched := range []bool{false, true} {
		name := "unwatched"
		if watched {
			name = "watched"
		}
		b.Run(name, func(b *testing.B) {
			h := newHub(&Service{log: testlog.New(b)})
			w := &watcher{id: "T1", org: "acme", wake: make(chan struct{}, 1)}
			if watched {
				h.watchers["T1"] = map[*watcher]struct{}{w: {}}
			}
			for b.Loop() {
				h.deliver(msg)
				w.mu.Lock()
				w.box = w.box[:0]
				w.mu.Unlock()
			}
		})
	}
}
