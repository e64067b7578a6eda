package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/natstest"
	"github.com/agentmesh/agentmesh/pkg/poll"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
)

// blipScript: turn 1 is an answer that streams for ~3 s (38 chunks, 80 ms
// apart), turn 2 a slow one.
var blipScript = `{"scenarios": [{"turns": [
  {"content": "first", "tool_calls": [{"name": "echo", "arguments": {"text": "x"}}]},
  {"content": "` + strings.Repeat("streamed words ", 40) + `", "chunk_delay_ms": 80, "tool_calls": [{"name": "echo", "arguments": {"text": "y"}}]},
  {"content": "done: {{last_tool_result}}", "delay_ms": 2000}
]}]}`

// Answers across bus blips (issue 26, item 5): NATS restarts while eight
// tasks' answers are streaming in — down longer than the executors'
// AckWait, on a stack whose services all dial it over TCP, with two
// executors, the second of which reconnects 2 s after the others (its
// connection goes through a proxy of the test's). The answers come in
// while the bus is down; each is held and checkpointed once the bus is
// back, and no model turn is asked again. Before, the second executor's
// work, which JetStream redelivered at the restart (its in-progress
// signals had not arrived in time), went to the first, which failed the
// live attempts as lost: the answers they held were refused and asked
// again.
func TestNATSRestartMidStreamAsksNothingAgain(t *testing.T) {
	node := natstest.StartNode(t)
	e := start(t, opts{node: node, ackWait: 3 * time.Second, script: blipScript})
	slow := natstest.NewProxy(t, strings.TrimPrefix(node.URL(), "nats://"))
	e.addExecutor(t, "node-2", slow)
	e.createAgent(t, "blip")
	const n = 8
	var ids []string
	for i := range n {
		ids = append(ids, e.submit(t, &agentmeshv1.SubmitTaskRequest{Input: fmt.Sprintf("stream across a restart %d", i), Agent: "blip"}).Id)
	}
	poll.Until(t, 30*time.Second, func() error {
		if got := e.model.RequestsAt(1); got < n {
			return fmt.Errorf("%d of %d streamed answers started", got, n)
		}
		return nil
	})
	time.Sleep(300 * time.Millisecond) // into the stream
	node.Stop()
	slow.Cut()
	time.Sleep(5 * time.Second) // the outage: past AckWait, past the streams' end
	node.Start()
	time.Sleep(2 * time.Second) // node-2 is back later than the others
	slow.Heal()
	for _, id := range ids {
		if got := e.waitStatus(t, id, taskstate.Completed, 120*time.Second); got.Result != "done: y" {
			t.Errorf("task %s: result %q", id, got.Result)
		}
	}
	for turn := range 3 {
		if got := e.model.RequestsAt(turn); got != n {
			t.Errorf("model turn %d asked %d times, want %d (once per task)", turn, got, n)
		}
	}
}
