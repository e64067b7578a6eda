package e2e

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/poll"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
)

// fanOutScript: a planner that calls call_agent n times in one turn, waits
// for all, and answers; workers answer at once (zero latency).
func fanOutScript(n int) string {
	calls := make([]string, n)
	for i := range calls {
		calls[i] = fmt.Sprintf(`{"name":"call_agent","arguments":{"agent":"worker","input":"part %d"}}`, i)
	}
	return `{"scenarios":[
	  {"match":"^fan","turns":[
	    {"tool_calls":[` + strings.Join(calls, ",") + `]},
	    {"tool_calls":[{"name":"wait_tasks","arguments":{}}]},
	    {"content":"{{last_tool_result}}"}]},
	  {"turns":[{"content":"done({{input}})"}]}]}`
}

// BenchmarkDelegationFanOut100 measures a parent fanning out to 100
// sub-tasks with the zero-latency scripted model, from submit to the
// parent's completion (docs/benchmarks.md):
//
//	CI=true go test -run XXX -bench DelegationFanOut100 -benchtime 5x ./services/e2e/
func BenchmarkDelegationFanOut100(b *testing.B) {
	const n = 100
	e := start(b, opts{script: fanOutScript(n)})
	for _, a := range []*agentmeshv1.Agent{
		{Name: "planner", Tools: []string{"call_agent", "wait_tasks"}},
		{Name: "worker", Tools: []string{"echo"}},
	} {
		if _, err := e.agents.CreateAgent(b.Context(), &agentmeshv1.CreateAgentRequest{Agent: a}); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		resp, err := e.tasks.SubmitTask(b.Context(), &agentmeshv1.SubmitTaskRequest{Input: "fan out", Agent: "planner"})
		if err != nil {
			b.Fatal(err)
		}
		var done *agentmeshv1.Task
		poll.Until(b, 60*time.Second, func() error {
			got, err := e.tasks.GetTask(b.Context(), &agentmeshv1.GetTaskRequest{Id: resp.Task.Id})
			if err != nil {
				return err
			}
			if done = got.Task; !taskstate.Terminal(done.Status) {
				return errStatus{done.Status, taskstate.Completed}
			}
			return nil
		})
		var got []waitedStatus
		if done.Status != taskstate.Completed || json.Unmarshal([]byte(done.Result), &got) != nil || len(got) != n {
			b.Fatalf("parent %s (%s): %d results", taskstate.Name(done.Status), done.Error, len(got))
		}
	}
}
