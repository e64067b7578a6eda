package taskstate

import (
	"testing"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
)

func TestNormalizeTaskID(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"01ABC", "01ABC"},
		{"subtask://01ABC", "01ABC"},
		{"SubTask://01ABC", "01ABC"},
		{"  subtask:// 01ABC ", "01ABC"},
		{"subtask://", ""},
		{"task://01ABC", "task://01ABC"},
		{"", ""},
	} {
		if got := NormalizeTaskID(tc.in); got != tc.want {
			t.Errorf("NormalizeTaskID(%q): got %q, want %q", tc.in, got, tc.want)
		}
	}
}

func FuzzNormalizeTaskID(f *testing.F) {
	for _, s := range []string{"01ABC", "subtask://x", "SUBTASK://", " subtask://subtask://y "} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got := NormalizeTaskID(s)
		if len(got) > len(s) {
			t.Fatalf("NormalizeTaskID(%q) = %q grew", s, got)
		}
		if back := NormalizeTaskID(SubtaskURI(got)); back != got {
			t.Fatalf("subtask://%s names %q, want %q", got, back, got)
		}
	})
}

func TestCascadeReason(t *testing.T) {
	for _, tc := range []struct {
		name   string
		parent *agentmeshv1.Task
		want   string
	}{
		{"completed", &agentmeshv1.Task{Id: "P", Status: Completed}, "parent P ended completed"},
		{"cancelled by a person", &agentmeshv1.Task{Id: "P", Status: Cancelled, Error: "no longer needed"}, "parent P ended cancelled"},
		{"cancelled by a cascade", &agentmeshv1.Task{Id: "C", Status: Cancelled, Error: "parent R ended cancelled"}, "ancestor R ended cancelled"},
		{"deeper cascade", &agentmeshv1.Task{Id: "G", Status: Cancelled, Error: "ancestor R ended failed"}, "ancestor R ended failed"},
		{"failed", &agentmeshv1.Task{Id: "P", Status: Failed, Error: "parent R ended cancelled"}, "parent P ended failed"},
	} {
		if got := CascadeReason(tc.parent); got != tc.want {
			t.Errorf("%s: got %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestApplySubtaskAddsOwnUsage(t *testing.T) {
	task := &agentmeshv1.Task{Id: "P", Status: Running}
	ended := &agentmeshv1.TaskEvent{Seq: 5, Type: agentmeshv1.EventType_EVENT_TYPE_SUBTASK, Status: Running,
		Subtask: &agentmeshv1.SubtaskEvent{TaskId: "C", Status: Completed,
			Usage:    &agentmeshv1.Usage{TotalTokens: 30, CostUsd: 3},
			OwnUsage: &agentmeshv1.Usage{TotalTokens: 10, CostUsd: 1}}}
	spawned := &agentmeshv1.TaskEvent{Seq: 4, Type: agentmeshv1.EventType_EVENT_TYPE_SUBTASK, Status: Running,
		Subtask: &agentmeshv1.SubtaskEvent{TaskId: "C", Status: Queued}}
	got := Apply(Apply(task, spawned), ended)
	if got.SubtreeUsage.GetTotalTokens() != 10 || got.SubtreeUsage.GetCostUsd() != 1 {
		t.Errorf("subtree usage: got %v, want 10 tokens, $1", got.SubtreeUsage)
	}
	if got.Usage != nil {
		t.Errorf("own usage changed: %v", got.Usage)
	}
	if got.Status != Running || got.LastEventSeq != 5 {
		t.Errorf("status/seq: got %v/%d", got.Status, got.LastEventSeq)
	}
}
