package e2e

import (
	"strings"
	"testing"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"github.com/agentmesh/agentmesh/pkg/telemetry"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// Every log line about a task carries its task_id, and — tracing on —
// the task's trace_id, whichever service logs it; tracing off, the task
// records no trace and its lines carry task_id alone.
func TestLogsCarryTheTaskAndItsTrace(t *testing.T) {
	for _, traced := range []bool{true, false} {
		name := map[bool]string{true: "traced", false: "untraced"}[traced]
		t.Run(name, func(t *testing.T) {
			if traced {
				defer telemetry.Install(tracetest.NewSpanRecorder())()
			}
			logs := &syncBuffer{}
			e := start(t, opts{log: logs})
			e.createAgent(t, "assistant")
			e.careful(t)
			plain := e.submit(t, &agentmeshv1.SubmitTaskRequest{Input: "hello", Agent: "assistant"})
			task := e.submit(t, &agentmeshv1.SubmitTaskRequest{Input: "ship it", Agent: "careful"})
			a := e.pendingApproval(t, task.Id)
			if _, err := agentmeshv1.NewApprovalServiceClient(e.conn).ApproveToolCall(ctxT(t), &agentmeshv1.ApproveToolCallRequest{ApprovalId: a.Id}); err != nil {
				t.Fatal(err)
			}
			e.waitStatus(t, plain.Id, taskstate.Completed, 60*time.Second)
			e.waitStatus(t, task.Id, taskstate.Completed, 60*time.Second)
			e.stop()

			tid := telemetry.SpanContextOf(task.GetTraceparent()).TraceID()
			if traced != tid.IsValid() {
				t.Fatalf("task traceparent %q with tracing %s", task.GetTraceparent(), name)
			}
			var about []string
			for _, line := range strings.Split(logs.String(), "\n") {
				if strings.Contains(line, task.Id) {
					about = append(about, line)
				}
			}
			// Two attempts (started, blocked; started, completed) and the
			// wait for the approval.
			if len(about) < 5 {
				t.Fatalf("%d log lines about the task, want at least 5:\n%s", len(about), logs.String())
			}
			for _, line := range about {
				if !strings.Contains(line, "task_id="+task.Id) {
					t.Errorf("a line about the task lacks task_id: %s", line)
				}
				if traced && !strings.Contains(line, "trace_id="+tid.String()) {
					t.Errorf("a line about the task lacks its trace_id %s: %s", tid, line)
				}
				if !traced && strings.Contains(line, "trace_id=") {
					t.Errorf("an untraced task's line has a trace_id: %s", line)
				}
			}
		})
	}
}
