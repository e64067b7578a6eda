package delegation

import (
	"errors"
	"strings"
	"testing"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"google.golang.org/protobuf/types/known/durationpb"
)

func TestTaskID(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		ok       bool
	}{
		{"subtask://01ABC", "01ABC", true},
		{"SUBTASK://01ABC", "01ABC", true},
		{"01ABC", "01ABC", true},
		{"a-b_c", "a-b_c", true},
		{"subtask://", "", false},
		{"", "", false},
		{"subtask://not a task!", "", false},
		{"subtask://x/y", "", false},
		{"http://x", "", false},
		{strings.Repeat("a", 129), "", false},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := TaskID(tc.in)
			if (err == nil) != tc.ok || got != tc.want {
				t.Fatalf("TaskID(%q) = %q, %v; want %q ok=%v", tc.in, got, err, tc.want, tc.ok)
			}
			if err != nil && !errors.Is(err, ErrBadTaskRef) {
				t.Errorf("error %v is not ErrBadTaskRef", err)
			}
		})
	}
}

func TestParseArguments(t *testing.T) {
	for _, tc := range []struct {
		name, args string
		parse      func([]byte) error
		wantErr    string
	}{
		{"agent ok", `{"agent":"w","input":"x"}`, parseAgent, ""},
		{"skills ok", `{"skills":["a"],"input":"x","tools":[]}`, parseAgent, ""},
		{"agent and skills", `{"agent":"w","skills":["a"],"input":"x"}`, parseAgent, "not both"},
		{"no target", `{"input":"x"}`, parseAgent, "agent"},
		{"no input", `{"agent":"w"}`, parseAgent, "input"},
		{"unknown field", `{"agent":"w","input":"x","secret":"y"}`, parseAgent, "unknown field"},
		{"bad tool name", `{"agent":"w","input":"x","tools":["a b"]}`, parseAgent, "tool"},
		{"not json", `{`, parseAgent, "invalid arguments"},
		{"model ok", `{"model":"small","input":"x"}`, parseModel, ""},
		{"model omitted: the agent's small model", `{"input":"x"}`, parseModel, ""},
		{"model bad", `{"model":"a b","input":"x"}`, parseModel, "model"},
		{"status ok", `{"task":"subtask://A1"}`, parseStatus, ""},
		{"status bad uri", `{"task":"subtask://a b"}`, parseStatus, "not a task id"},
		{"status empty", `{}`, parseStatus, "required"},
		{"wait empty", ``, parseWait, ""},
		{"wait any", `{"tasks":["subtask://A","B"],"mode":"any","timeout_seconds":5}`, parseWait, ""},
		{"wait bad mode", `{"mode":"some"}`, parseWait, "mode"},
		{"wait negative", `{"timeout_seconds":-1}`, parseWait, "timeout_seconds"},
		{"wait bad task", `{"tasks":["x y"]}`, parseWait, "tasks[0]"},
		{"trailing", `{} {}`, parseWait, "trailing"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.parse([]byte(tc.args))
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("got %v, want no error", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("got %v, want an error containing %q", err, tc.wantErr)
			case err != nil && !errors.Is(err, ErrBadArguments):
				t.Fatalf("error %v is not ErrBadArguments", err)
			}
		})
	}
	// call_model without a model asks the agent's small model, or is
	// refused naming it.
	small := &agentmeshv1.Agent{Model: &agentmeshv1.ModelSettings{Model: "big", SmallModel: "mini"}}
	if m, err := ModelFor(CallModel{Input: "x"}, small); err != nil || m != "mini" {
		t.Errorf("ModelFor(no model, small mini) = %q %v", m, err)
	}
	if m, err := ModelFor(CallModel{Model: "named", Input: "x"}, small); err != nil || m != "named" {
		t.Errorf("ModelFor(named) = %q %v", m, err)
	}
	if _, err := ModelFor(CallModel{Input: "x"}, &agentmeshv1.Agent{}); err == nil || !strings.Contains(err.Error(), "small_model") || !errors.Is(err, ErrBadArguments) {
		t.Errorf("ModelFor(no model, none small) = %v", err)
	}
	w, err := ParseWaitTasks([]byte(`{"tasks":["subtask://A","A","B"]}`))
	if err != nil || strings.Join(w.IDs, ",") != "A,B" || w.Any() {
		t.Fatalf("wait ids = %v %v, want A,B mode all", w.IDs, err)
	}
}

func parseAgent(b []byte) error  { _, err := ParseCallAgent(b); return err }
func parseModel(b []byte) error  { _, err := ParseCallModel(b); return err }
func parseStatus(b []byte) error { _, err := ParseGetTaskStatus(b); return err }
func parseWait(b []byte) error   { _, err := ParseWaitTasks(b); return err }

func TestApplyOverrides(t *testing.T) {
	target := &agentmeshv1.Agent{Name: "w", Tools: []string{"echo", "shell"}, Model: &agentmeshv1.ModelSettings{Model: "big", ApiKeySecret: "K"}}
	parent := &agentmeshv1.Agent{Name: "p", Tools: []string{"echo", "call_agent", "shell"},
		ToolPolicies: map[string]agentmeshv1.ToolPolicy{"shell": agentmeshv1.ToolPolicy_TOOL_POLICY_DENY}}
	tools := func(ts ...string) *[]string { return &ts }
	prompt := "be brief"
	got, err := ApplyOverrides(target, parent, CallAgent{Model: "small", SystemPrompt: &prompt, Tools: tools("echo")})
	if err != nil {
		t.Fatal(err)
	}
	if got.Model.Model != "small" || got.Model.ApiKeySecret != "K" || got.SystemPrompt != prompt || len(got.Tools) != 1 {
		t.Errorf("overridden = %v", got)
	}
	if target.Model.Model != "big" {
		t.Errorf("target changed: %v", target)
	}
	for _, tc := range []struct {
		tool, want string
	}{{"code_run", `does not have tool "code_run"`}, {"shell", `tool "shell" is not one this task may use`}} {
		if _, err := ApplyOverrides(target, parent, CallAgent{Tools: tools(tc.tool)}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("override %s: got %v, want %q", tc.tool, err, tc.want)
		}
	}
	m := ModelOnly(parent, "tiny", "sys")
	if m.Model.Model != "tiny" || len(m.Tools) != 0 || m.MaxSteps != 1 || m.SystemPrompt != "sys" {
		t.Errorf("ModelOnly = %v", m)
	}
}

func TestRemainingAndBound(t *testing.T) {
	b := &agentmeshv1.Budget{MaxSteps: 10, MaxTokens: 1000, MaxCostUsd: 1, MaxWallTime: durationpb.New(time.Minute)}
	r, why := Remaining(b, 3, 400, 0.25, 20*time.Second)
	if why != "" || r.MaxSteps != 7 || r.MaxTokens != 600 || r.MaxCostUsd != 0.75 || r.MaxWallTime.AsDuration() != 40*time.Second {
		t.Fatalf("Remaining = %v %q", r, why)
	}
	if _, why := Remaining(b, 10, 0, 0, 0); !strings.Contains(why, "max_steps") {
		t.Errorf("steps used up: %q", why)
	}
	if r, why := Remaining(nil, 5, 5, 5, time.Hour); r != nil || why != "" {
		t.Errorf("no budget: %v %q", r, why)
	}
	own := &agentmeshv1.Budget{MaxSteps: 20, MaxTokens: 100}
	got := Bound(own, r)
	if got.MaxSteps != 7 || got.MaxTokens != 100 || got.MaxCostUsd != 0.75 || got.MaxWallTime.AsDuration() != 40*time.Second {
		t.Errorf("Bound = %v", got)
	}
	if got := Bound(nil, r); got.MaxSteps != 7 {
		t.Errorf("Bound(nil) = %v", got)
	}
}

func FuzzTaskID(f *testing.F) {
	for _, s := range []string{"subtask://01ABC", "01ABC", "", "subtask://", "SuBtAsK://x", "subtask://a/b", "\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		id, err := TaskID(s)
		if err != nil {
			return
		}
		if id == "" || len(id) > maxIDLen || strings.Contains(id, "/") {
			t.Fatalf("TaskID(%q) = %q", s, id)
		}
		again, err := TaskID(URI(id))
		if err != nil || again != id {
			t.Fatalf("round trip of %q: %q %v", id, again, err)
		}
	})
}

func FuzzToolArguments(f *testing.F) {
	for _, s := range []string{`{"agent":"w","input":"x"}`, `{"skills":["a"],"input":"x","tools":["echo"]}`,
		`{"model":"m","input":"x"}`, `{"task":"subtask://A"}`, `{"tasks":["A"],"mode":"any","timeout_seconds":3}`, `{`, `null`, `[]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if a, err := ParseCallAgent(b); err == nil && ((a.Agent == "") == (len(a.Skills) == 0) || strings.TrimSpace(a.Input) == "") {
			t.Fatalf("call_agent accepted %q: %+v", b, a)
		}
		if a, err := ParseCallModel(b); err == nil && (a.Model == "" || strings.TrimSpace(a.Input) == "") {
			t.Fatalf("call_model accepted %q: %+v", b, a)
		}
		if id, err := ParseGetTaskStatus(b); err == nil {
			if _, err := TaskID(id); err != nil {
				t.Fatalf("get_task_status accepted %q: %q", b, id)
			}
		}
		if w, err := ParseWaitTasks(b); err == nil {
			if w.Mode != "all" && w.Mode != "any" || w.TimeoutSeconds < 0 || len(w.IDs) > len(w.Tasks) {
				t.Fatalf("wait_tasks accepted %q: %+v", b, w)
			}
		}
	})
}
