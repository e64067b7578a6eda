package main

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
)

var (
	usageMu   sync.Mutex
	usageReqs []*agentmeshv1.GetUsageRequest
)

func (s *server) GetUsage(ctx context.Context, req *agentmeshv1.GetUsageRequest) (*agentmeshv1.GetUsageResponse, error) {
	s.note(ctx)
	usageMu.Lock()
	usageReqs = append(usageReqs, req)
	usageMu.Unlock()
	return &agentmeshv1.GetUsageResponse{Tasks: 4, Usage: &agentmeshv1.Usage{PromptTokens: 1200, CompletionTokens: 300, TotalTokens: 1500, CostUsd: 0.00036}}, nil
}

func TestUsageCommand(t *testing.T) {
	addr := serve(t, newServer())
	usageMu.Lock()
	usageReqs = nil
	usageMu.Unlock()
	code, out, errOut := amctl(t, addr, "usage", "--since", "7d", "--agent", "helper")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{"tasks created in the last 7d of agent helper", "tasks              4", "prompt tokens      1200", "completion tokens  300", "total tokens       1500", "cost (USD)         0.000360"} {
		if !strings.Contains(out, want) {
			t.Errorf("stdout lacks %q:\n%s", want, out)
		}
	}
	usageMu.Lock()
	req := usageReqs[0]
	usageMu.Unlock()
	if d := time.Since(req.CreatedAfter.AsTime()); req.Agent != "helper" || req.CreatedAfter == nil || d < 7*24*time.Hour-time.Minute || d > 7*24*time.Hour+time.Minute {
		t.Errorf("request = %v", req)
	}
	code, out, _ = amctl(t, addr, "-o", "json", "usage")
	if code != 0 || !strings.Contains(out, `"totalTokens": "1500"`) || !strings.Contains(out, `"tasks": "4"`) {
		t.Errorf("json: exit %d\n%s", code, out)
	}
	if code, _, errOut := amctl(t, addr, "usage", "--since", "yesterday"); code != exitUsage || !strings.Contains(errOut, "--since") {
		t.Errorf("bad --since: exit %d, stderr %q", code, errOut)
	}
}

// withTokens inserts TOKEN events (seq 0) after the first model turn's
// running status.
func withTokens(evs []*agentmeshv1.TaskEvent, pieces ...string) []*agentmeshv1.TaskEvent {
	var out []*agentmeshv1.TaskEvent
	for _, ev := range evs {
		if ev.Seq == 5 {
			for _, p := range pieces {
				out = append(out, &agentmeshv1.TaskEvent{TaskId: ev.TaskId, Type: agentmeshv1.EventType_EVENT_TYPE_TOKEN, Token: p, Status: taskstate.Running})
			}
		}
		out = append(out, ev)
	}
	return out
}

func TestWatchTokens(t *testing.T) {
	s := newServer()
	s.script = withTokens(scriptedRun("01TASK", taskstate.Completed), "I will ", "echo it.")
	addr := serve(t, s)
	s.mu.Lock()
	s.tasks["01TASK"] = &agentmeshv1.Task{Id: "01TASK", Status: taskstate.Running}
	s.mu.Unlock()

	code, out, errOut := amctl(t, addr, "watch", "--tokens", "01TASK")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if !strings.Contains(out, "#4    running\nI will echo it.\n#5    model      I will echo it.") {
		t.Errorf("streamed text not printed between the events:\n%s", out)
	}
	code, out, _ = amctl(t, addr, "watch", "01TASK")
	if code != 0 || strings.Count(out, "I will echo it.") != 1 {
		t.Errorf("without --tokens the stream shows: exit %d\n%s", code, out)
	}
	code, out, _ = amctl(t, addr, "-o", "json", "watch", "--tokens", "01TASK")
	if code != 0 || strings.Count(out, `"EVENT_TYPE_TOKEN"`) != 2 {
		t.Errorf("json tokens: exit %d\n%s", code, out)
	}
}
