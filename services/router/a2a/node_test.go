package a2a

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/agentmesh/agentmesh/services/doortest"
)

// exampleDir is the Node A2A example (examples/a2a-node).
var exampleDir = filepath.Join("..", "..", "..", "examples", "a2a-node")

// The official A2A JavaScript SDK's client (examples/a2a-node, pinned
// @a2a-js/sdk) reads the card, sends a message and gets the answer,
// streams one to its answer, and cancels one.
func TestNodeA2AClient(t *testing.T) {
	node := doortest.NodeExample(t, exampleDir, "@a2a-js/sdk")
	e := start(t)
	steps := doortest.RunNode(t, node, exampleDir, []string{
		"AGENTMESH_URL=" + e.srv.URL,
		"AGENTMESH_API_KEY=" + doortest.Secret(t, "a-op"),
		"AGENTMESH_AGENT=" + doortest.AgentPlain,
		"AGENTMESH_CANCEL_TASK=slow from node",
	}, "hello from node")
	for _, tt := range []struct{ step, field, want string }{
		{"card", "skills", "[run-task agent:careful agent:plain]"},
		{"send", "state", "completed"},
		{"send", "answer", "final answer: hello from node"},
		{"stream", "answer", "final answer: hello from node"},
		{"cancel", "state", "canceled"},
	} {
		if got := fmt.Sprint(steps[tt.step][tt.field]); got != tt.want {
			t.Errorf("%s.%s = %q, want %q (all: %v)", tt.step, tt.field, got, tt.want, steps[tt.step])
		}
	}
	events := fmt.Sprint(steps["stream"]["events"])
	if events[:len("[task:")] != "[task:" || events[len(events)-len("artifact status:completed]"):] != "artifact status:completed]" {
		t.Errorf("the stream's events: %s", events)
	}
}
