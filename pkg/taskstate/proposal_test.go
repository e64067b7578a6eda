package taskstate

import (
	"strings"
	"testing"
)

func TestTaskOfProposal(t *testing.T) {
	for _, tt := range []struct {
		in, want string
		ok       bool
	}{
		{"01ABC-p", "01ABC", true},
		{"01ABC", "01ABC", true},
		{" 01ABC-p ", "01ABC", true},
		{"-p", "", false},
		{"", "", false},
		{"a.b-p", "", false},
		{"a b", "", false},
		{strings.Repeat("x", 129), "", false},
	} {
		got, ok := TaskOfProposal(tt.in)
		if got != tt.want || ok != tt.ok {
			t.Errorf("TaskOfProposal(%q) = %q, %v; want %q, %v", tt.in, got, ok, tt.want, tt.ok)
		}
	}
	if got, _ := TaskOfProposal(ProposalID("01XYZ")); got != "01XYZ" {
		t.Errorf("round trip: %q", got)
	}
}

// A proposal id from outside (the API) names at most one task, never a
// subject wildcard or separator.
func FuzzTaskOfProposal(f *testing.F) {
	for _, s := range []string{"01ABC-p", "", "-p", "a.b", "x-p-p", "*", ">"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		task, ok := TaskOfProposal(s)
		if !ok {
			return
		}
		if task == "" || strings.ContainsAny(task, " .*>\x00") || len(task) > 128 {
			t.Fatalf("TaskOfProposal(%q) = %q", s, task)
		}
	})
}
