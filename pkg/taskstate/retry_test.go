package taskstate

import (
	"errors"
	"math"
	"testing"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"google.golang.org/protobuf/types/known/durationpb"
)

func TestValidateRetryPolicy(t *testing.T) {
	d := durationpb.New
	tests := []struct {
		name  string
		p     *agentmeshv1.RetryPolicy
		field string // "" = valid
	}{
		{"nil", nil, ""},
		{"empty inherits", &agentmeshv1.RetryPolicy{}, ""},
		{"full", &agentmeshv1.RetryPolicy{MaxAttempts: 5, InitialBackoff: d(time.Second), Multiplier: 3, MaxBackoff: d(time.Minute), Jitter: 0.5,
			RetryOn: []agentmeshv1.FailureKind{agentmeshv1.FailureKind_FAILURE_KIND_MODEL}}, ""},
		{"negative attempts", &agentmeshv1.RetryPolicy{MaxAttempts: -1}, "p.max_attempts"},
		{"too many attempts", &agentmeshv1.RetryPolicy{MaxAttempts: 101}, "p.max_attempts"},
		{"tiny backoff", &agentmeshv1.RetryPolicy{InitialBackoff: d(time.Millisecond)}, "p.initial_backoff"},
		{"negative backoff", &agentmeshv1.RetryPolicy{InitialBackoff: d(-time.Second)}, "p.initial_backoff"},
		{"huge max backoff", &agentmeshv1.RetryPolicy{MaxBackoff: d(48 * time.Hour)}, "p.max_backoff"},
		{"max below initial", &agentmeshv1.RetryPolicy{InitialBackoff: d(time.Minute), MaxBackoff: d(time.Second)}, "p.max_backoff"},
		{"multiplier below 1", &agentmeshv1.RetryPolicy{Multiplier: 0.5}, "p.multiplier"},
		{"multiplier NaN", &agentmeshv1.RetryPolicy{Multiplier: math.NaN()}, "p.multiplier"},
		{"jitter above 1", &agentmeshv1.RetryPolicy{Jitter: 1.5}, "p.jitter"},
		{"budget never retries", &agentmeshv1.RetryPolicy{RetryOn: []agentmeshv1.FailureKind{agentmeshv1.FailureKind_FAILURE_KIND_MODEL, agentmeshv1.FailureKind_FAILURE_KIND_BUDGET}}, "p.retry_on[1]"},
		{"unknown kind", &agentmeshv1.RetryPolicy{RetryOn: []agentmeshv1.FailureKind{99}}, "p.retry_on[0]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := ValidateRetryPolicy("p", tt.p)
			var be *bus.Error
			switch {
			case tt.field == "" && err != nil:
				t.Fatalf("got %v, want valid", err)
			case tt.field != "" && (!errors.As(err, &be) || be.Code != bus.CodeInvalidArgument || be.Field != tt.field):
				t.Fatalf("got %v, want invalid_argument on %s", err, tt.field)
			}
		})
	}
}

func TestRetryDelay(t *testing.T) {
	p := &agentmeshv1.RetryPolicy{InitialBackoff: durationpb.New(time.Second), Multiplier: 2, MaxBackoff: durationpb.New(5 * time.Second), Jitter: -1}
	for n, want := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 5 * time.Second, 5 * time.Second} {
		if got := RetryDelay(p, "t", int32(n)); got != want {
			t.Errorf("retry %d: got %s, want %s", n, got, want)
		}
	}
	p.Jitter = 0.2
	for n := range int32(50) {
		got := RetryDelay(p, "task", n%3)
		base := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second}[n%3]
		if got < base*8/10 || got > base*12/10 {
			t.Errorf("retry %d with jitter 0.2: %s outside ±20%% of %s", n%3, got, base)
		}
		if again := RetryDelay(p, "task", n%3); again != got {
			t.Errorf("jitter is not stable: %s then %s", got, again)
		}
	}
}

func TestPlanRetry(t *testing.T) {
	running := &agentmeshv1.Task{Id: "t", Status: Running}
	if ok, _ := PlanRetry(running, agentmeshv1.FailureKind_FAILURE_KIND_MODEL); !ok {
		t.Error("default policy does not retry MODEL")
	}
	for _, k := range []agentmeshv1.FailureKind{agentmeshv1.FailureKind_FAILURE_KIND_BUDGET, agentmeshv1.FailureKind_FAILURE_KIND_RESOURCE,
		agentmeshv1.FailureKind_FAILURE_KIND_APPROVAL, agentmeshv1.FailureKind_FAILURE_KIND_AGENT, agentmeshv1.FailureKind_FAILURE_KIND_UNSPECIFIED} {
		if ok, _ := PlanRetry(running, k); ok {
			t.Errorf("%s retried", k)
		}
	}
	spent := &agentmeshv1.Task{Id: "t", Status: Running, RetryCount: 3}
	if ok, _ := PlanRetry(spent, agentmeshv1.FailureKind_FAILURE_KIND_MODEL); ok {
		t.Error("retried after 3 retries under the default 4 attempts")
	}
	agentSays := &agentmeshv1.Task{Id: "t", Status: Running, AgentSpec: &agentmeshv1.Agent{RetryPolicy: &agentmeshv1.RetryPolicy{MaxAttempts: 1}}}
	if ok, _ := PlanRetry(agentSays, agentmeshv1.FailureKind_FAILURE_KIND_MODEL); ok {
		t.Error("retried although the agent allows 1 attempt")
	}
	taskOverrides := &agentmeshv1.Task{Id: "t", Status: Running, AgentSpec: agentSays.AgentSpec, RetryPolicy: &agentmeshv1.RetryPolicy{MaxAttempts: 3}}
	if ok, _ := PlanRetry(taskOverrides, agentmeshv1.FailureKind_FAILURE_KIND_MODEL); !ok {
		t.Error("the task's policy did not override the agent's")
	}
	if ok, _ := PlanRetry(&agentmeshv1.Task{Id: "t", Status: Queued}, agentmeshv1.FailureKind_FAILURE_KIND_TIMEOUT); ok {
		t.Error("a queued task's failure (queue timeout) retried")
	}
}
