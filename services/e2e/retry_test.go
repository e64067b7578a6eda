package e2e

import (
	"strings"
	"testing"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// A model outage that outlasts one attempt (the executor's own retries of
// the call) fails that attempt with kind MODEL; the retry policy queues the
// task again, and the next attempt resumes from the checkpoints: the turn
// the model already answered is not asked again.
func TestModelOutageRetriedFromCheckpoint(t *testing.T) {
	e := start(t, opts{})
	if _, err := e.agents.CreateAgent(ctxT(t), &agentmeshv1.CreateAgentRequest{Agent: &agentmeshv1.Agent{
		Name: "patient", Tools: []string{"echo"},
		RetryPolicy: &agentmeshv1.RetryPolicy{InitialBackoff: durationpb.New(200 * time.Millisecond)},
	}}); err != nil {
		t.Fatal(err)
	}
	task := e.submit(t, &agentmeshv1.SubmitTaskRequest{Input: "flaky service", Agent: "patient"})
	done := e.waitStatus(t, task.Id, taskstate.Completed, 90*time.Second)
	if done.Result != "recovered: flaky service" {
		t.Errorf("result %q", done.Result)
	}
	if done.RetryCount < 1 || done.Attempt < 2 || done.LastFailureKind != agentmeshv1.FailureKind_FAILURE_KIND_MODEL {
		t.Errorf("retry count %d, attempt %d, last failure %s; want ≥ 1 retry of kind MODEL", done.RetryCount, done.Attempt, done.LastFailureKind)
	}
	model := e.stack.ScriptedModel()
	if n := model.RequestsAt(0); n != 1 {
		t.Errorf("the first (answered, paid) turn was asked %d times, want once", n)
	}
	// Every failed attempt stays in the history.
	retries := 0
	for _, ev := range e.history(t, task.Id) {
		if ev.Status == taskstate.Queued && ev.FailureKind == agentmeshv1.FailureKind_FAILURE_KIND_MODEL {
			retries++
			if ev.NotBefore == nil || ev.Reason == "" {
				t.Errorf("retry event without its not-before time or reason: %v", ev)
			}
		}
	}
	if retries != int(done.RetryCount) {
		t.Errorf("%d retry events in the history, task says %d retries", retries, done.RetryCount)
	}
}

func TestBadRetryPolicyAndQueueTimeoutRefused(t *testing.T) {
	e := start(t, opts{})
	e.createAgent(t, "assistant")
	tests := []struct {
		name  string
		req   *agentmeshv1.SubmitTaskRequest
		field string
	}{
		{"too many attempts", &agentmeshv1.SubmitTaskRequest{RetryPolicy: &agentmeshv1.RetryPolicy{MaxAttempts: 1000}}, "retry_policy.max_attempts"},
		{"multiplier below 1", &agentmeshv1.SubmitTaskRequest{RetryPolicy: &agentmeshv1.RetryPolicy{Multiplier: 0.5}}, "retry_policy.multiplier"},
		{"budget never retries", &agentmeshv1.SubmitTaskRequest{RetryPolicy: &agentmeshv1.RetryPolicy{RetryOn: []agentmeshv1.FailureKind{agentmeshv1.FailureKind_FAILURE_KIND_BUDGET}}}, "retry_policy.retry_on[0]"},
		{"max below initial backoff", &agentmeshv1.SubmitTaskRequest{RetryPolicy: &agentmeshv1.RetryPolicy{InitialBackoff: durationpb.New(time.Minute), MaxBackoff: durationpb.New(time.Second)}}, "retry_policy.max_backoff"},
		{"negative queue timeout", &agentmeshv1.SubmitTaskRequest{QueueTimeout: durationpb.New(-time.Second)}, "queue_timeout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.req.Input, tt.req.Agent = "hi", "assistant"
			_, err := e.tasks.SubmitTask(ctxT(t), tt.req)
			st, _ := status.FromError(err)
			if st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), tt.field) {
				t.Fatalf("got %v, want InvalidArgument naming %s", err, tt.field)
			}
		})
	}
	_, err := e.agents.CreateAgent(ctxT(t), &agentmeshv1.CreateAgentRequest{Agent: &agentmeshv1.Agent{
		Name: "bad-retry", RetryPolicy: &agentmeshv1.RetryPolicy{Jitter: 2},
	}})
	if st, _ := status.FromError(err); st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), "agent.retry_policy.jitter") {
		t.Fatalf("agent with jitter 2: %v, want InvalidArgument naming agent.retry_policy.jitter", err)
	}
}
