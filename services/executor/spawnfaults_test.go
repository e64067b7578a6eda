package executor_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	busv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/bus/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/delegation"
	"github.com/agentmesh/agentmesh/pkg/natstest"
	"github.com/agentmesh/agentmesh/pkg/poll"
	"github.com/agentmesh/agentmesh/pkg/subjects"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/proto"
)

// spawnScript: the parent spawns one worker and reports what call_agent
// returned; the worker answers.
const spawnScript = `{"scenarios": [
  {"match": "^spawn", "turns": [
    {"tool_calls": [{"name": "call_agent", "arguments": {"agent": "worker", "input": "part of the job"}}]},
    {"content": "spawned: {{last_tool_result}}"}
  ]},
  {"turns": [{"content": "done"}]}
]}`

// newFaultyStateEnv is newEnv with the state service connected through a
// proxy that can lose one of its messages, the test driver answering the
// registry's match (worker) as the registry would, and the executor
// running.
func newFaultyStateEnv(t *testing.T) (*env, *natstest.Proxy) {
	t.Helper()
	node := natstest.StartNode(t)
	proxy := natstest.NewProxy(t, strings.TrimPrefix(node.URL(), "nats://"))
	e := newEnvOn(t, node.ConnectAs(t, ""), node.ConnectVia(t, proxy, subjects.ServiceState),
		func(service string) *nats.Conn { return node.ConnectAs(t, service) })
	worker, _ := proto.Marshal(&busv1.MatchResponse{Agent: &agentmeshv1.Agent{Name: "worker", Tools: []string{"echo"}}})
	sub, err := e.nc.Subscribe(e.names.Registry(subjects.RegistryMatch), func(m *nats.Msg) { _ = m.Respond(worker) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	e.useScript(spawnScript)
	e.startExecutor()
	return e, proxy
}

// A sub-task spawn is exactly-once under faults: a spawn state never
// received, and one it created but whose reply was lost on the way back
// (the bus lost it: the state service's connection closed as it sent the
// reply), are sent again with the same key until state answers. The
// sub-task is created once and call_agent reports it once, never an
// error. Before, the model was told "timed out waiting for
// am.state.task.spawn" for a sub-task that existed — and a model that
// called again got a second one.
func TestSpawnExactlyOnceUnderBusFaults(t *testing.T) {
	for _, tc := range []struct {
		name string
		lose func(p *natstest.Proxy, subject string)
	}{
		{"request lost", (*natstest.Proxy).LoseNextRequest},
		{"reply lost", (*natstest.Proxy).LoseNextReply},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, proxy := newFaultyStateEnv(t)
			saved := agent
			agent = &agentmeshv1.Agent{Name: "planner", Tools: []string{"call_agent"}}
			defer func() { agent = saved }()
			tc.lose(proxy, e.names.State(subjects.StateSpawn))
			task := e.submit("spawn one worker")

			var got *agentmeshv1.Task
			poll.Until(t, 60*time.Second, func() error {
				var resp busv1.GetTaskResponse
				if err := bus.Request(context.Background(), e.nc, e.names.State(subjects.StateGetTask), &busv1.GetTaskRequest{Id: task.Id}, &resp); err != nil {
					return err
				}
				if got = resp.Task; !taskstate.Terminal(got.Status) {
					return fmt.Errorf("task is %s", taskstate.Name(got.Status))
				}
				return nil
			})
			if proxy.Lost() != 1 {
				t.Fatalf("the proxy lost %d messages, want 1 (the fault did not happen)", proxy.Lost())
			}
			if got.Status != taskstate.Completed {
				t.Fatalf("task %s (%s), want completed", taskstate.Name(got.Status), got.Error)
			}
			var subs busv1.ListTasksResponse
			if err := bus.Request(context.Background(), e.nc, e.names.State(subjects.StateListTasks), &busv1.ListTasksRequest{ParentTaskId: task.Id}, &subs); err != nil {
				t.Fatal(err)
			}
			if len(subs.Tasks) != 1 {
				t.Fatalf("%d sub-tasks, want exactly 1", len(subs.Tasks))
			}
			if want := "spawned: " + delegation.URI(subs.Tasks[0].Id); got.Result != want {
				t.Errorf("result %q, want %q (the model told of the one sub-task)", got.Result, want)
			}
			results := 0
			for _, st := range steps(e.history(task.Id)) {
				if st.Kind == agentmeshv1.StepKind_STEP_KIND_TOOL_RESULT && st.ToolName == delegation.ToolCallAgent {
					results++
					if st.IsError {
						t.Errorf("call_agent result %q is an error", st.Content)
					}
				}
			}
			if results != 1 {
				t.Errorf("%d call_agent results recorded, want 1", results)
			}
			if n := e.model.RequestsAt(0); n != 1 {
				t.Errorf("the model's turn 0 asked %d times, want once", n)
			}
		})
	}
}
