package taskstate

import (
	"testing"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"google.golang.org/protobuf/types/known/timestamppb"
)

var all = []agentmeshv1.TaskStatus{Created, Queued, Assigned, Running, Blocked, Completed, Failed, Cancelled}

func TestTerminalStatusesNeverChange(t *testing.T) {
	for _, from := range []agentmeshv1.TaskStatus{Completed, Failed, Cancelled} {
		for _, to := range all {
			if Allowed(from, to) {
				t.Errorf("Allowed(%s, %s) = true, want false", Name(from), Name(to))
			}
		}
	}
}

func TestEveryLiveStatusCanBeCancelledAndFailed(t *testing.T) {
	for _, from := range []agentmeshv1.TaskStatus{Created, Queued, Assigned, Running, Blocked} {
		for _, to := range []agentmeshv1.TaskStatus{Cancelled, Failed} {
			if !Allowed(from, to) {
				t.Errorf("Allowed(%s, %s) = false, want true", Name(from), Name(to))
			}
		}
	}
}

func TestTable(t *testing.T) {
	tests := []struct {
		from, to agentmeshv1.TaskStatus
		want     bool
	}{
		{Created, Queued, true},
		{Queued, Assigned, true},
		{Assigned, Running, true},
		{Running, Completed, true},
		{Running, Queued, true},   // executor lost: re-dispatch
		{Assigned, Queued, true},  // executor lost before it started
		{Queued, Running, false},  // must be assigned first
		{Created, Running, false}, // must be queued and assigned
		{Queued, Completed, false},
		{Running, Running, false},
	}
	for _, tt := range tests {
		t.Run(Name(tt.from)+"->"+Name(tt.to), func(t *testing.T) {
			if got := Allowed(tt.from, tt.to); got != tt.want {
				t.Fatalf("got %v, want %v", got, tt.want)
			}
			if err := Check(tt.from, tt.to); (err == nil) != tt.want {
				t.Fatalf("Check = %v, want allowed=%v", err, tt.want)
			}
		})
	}
}

func TestParseName(t *testing.T) {
	for _, s := range all {
		got, ok := Parse(Name(s))
		if !ok || got != s {
			t.Errorf("Parse(%q) = %v %v, want %v", Name(s), got, ok, s)
		}
	}
	if _, ok := Parse("sleeping"); ok {
		t.Error("Parse(sleeping) ok, want not ok")
	}
}

func TestApply(t *testing.T) {
	ts := timestamppb.Now()
	task := &agentmeshv1.Task{Id: "t", Status: Assigned, Attempt: 1, LastEventSeq: 3}
	task = Apply(task, &agentmeshv1.TaskEvent{Seq: 4, Type: agentmeshv1.EventType_EVENT_TYPE_STATUS, Status: Running, Attempt: 1, Node: "n1", Isolation: "reduced", Time: ts})
	if task.Isolation != "reduced" {
		t.Errorf("isolation %q after the move to running, want reduced", task.Isolation)
	}
	if task.Status != Running || task.StartedAt == nil || task.Node != "n1" || task.LastEventSeq != 4 {
		t.Fatalf("after running: %v", task)
	}
	task = Apply(task, &agentmeshv1.TaskEvent{Seq: 5, Type: agentmeshv1.EventType_EVENT_TYPE_STEP, Status: Running, Attempt: 1, Time: ts,
		Step: &agentmeshv1.Step{Usage: &agentmeshv1.Usage{PromptTokens: 10, CompletionTokens: 5, TotalTokens: 15}}})
	task = Apply(task, &agentmeshv1.TaskEvent{Seq: 6, Type: agentmeshv1.EventType_EVENT_TYPE_STEP, Status: Running, Attempt: 1, Time: ts,
		Step: &agentmeshv1.Step{Usage: &agentmeshv1.Usage{PromptTokens: 1, CompletionTokens: 1, TotalTokens: 2}}})
	if task.StepCount != 2 || task.Usage.TotalTokens != 17 || task.Usage.PromptTokens != 11 {
		t.Fatalf("after steps: count %d usage %v", task.StepCount, task.Usage)
	}
	task = Apply(task, &agentmeshv1.TaskEvent{Seq: 7, Type: agentmeshv1.EventType_EVENT_TYPE_STATUS, Status: Completed, Attempt: 1, Result: "42", Time: ts})
	if task.Status != Completed || task.Result != "42" || task.FinishedAt == nil || task.Error != "" {
		t.Fatalf("after completed: %v", task)
	}
	failed := Apply(&agentmeshv1.Task{Status: Running}, &agentmeshv1.TaskEvent{Seq: 1, Type: agentmeshv1.EventType_EVENT_TYPE_STATUS, Status: Failed, Reason: "model down", Time: ts})
	if failed.Error != "model down" || failed.Result != "" {
		t.Fatalf("after failed: %v", failed)
	}
}
