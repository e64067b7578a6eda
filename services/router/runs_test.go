package router

import (
	"fmt"
	"strings"
	"testing"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/encoding/protojson"
)

// A run's model and tools narrow the task's agent settings (for this task
// only), max_steps bounds it, and the messages become its input.
func TestStartRun(t *testing.T) {
	e, c := startHTTP(t, Config{})
	e.fake.mu.Lock()
	e.fake.agents["helper"].Tools = []string{"echo", "current_time", "web_fetch"}
	e.fake.mu.Unlock()
	var resp agentmeshv1.StartRunResponse
	c.As("k-op").Do(t, "POST", "/v1/runs", `{"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "what time is it?"}],
		"model": "small-model", "tools": ["current_time", "echo", "current_time"], "max_steps": 3, "agent": "helper"}`).Decode(t, &resp)
	if resp.GetStatus() != "pending" || resp.GetPollUrl() != "/v1/runs/"+resp.GetSessionId() {
		t.Fatalf("start: %v", &resp)
	}
	e.fake.mu.Lock()
	task := e.fake.creates[len(e.fake.creates)-1]
	catalogue := e.fake.agents["helper"]
	e.fake.mu.Unlock()
	if got := fmt.Sprint(task.GetAgentSpec().GetTools()); got != "[current_time echo]" {
		t.Errorf("the task's tools %s, want the named ones only, in order, once", got)
	}
	if task.GetAgentSpec().GetModel().GetModel() != "small-model" || task.GetBudget().GetMaxSteps() != 3 {
		t.Errorf("model %q max_steps %d, want small-model and 3", task.GetAgentSpec().GetModel().GetModel(), task.GetBudget().GetMaxSteps())
	}
	if task.GetInput() != "system: be brief\n\nuser: what time is it?" {
		t.Errorf("input %q, want the transcript", task.GetInput())
	}
	if len(catalogue.GetTools()) != 3 || catalogue.GetModel() != nil {
		t.Errorf("the catalogue's agent changed: %v", catalogue)
	}

	for _, tc := range []struct {
		name, body, words, field string
	}{
		{"no messages", `{"messages": []}`, "messages: required", "messages"},
		{"last not the user's", `{"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]}`, "must be the user's", "messages[1].role"},
		{"bad role", `{"messages": [{"role": "tool", "content": "a"}]}`, "want user, assistant or system", "messages[0].role"},
		{"empty content", `{"messages": [{"role": "user", "content": ""}]}`, "required", "messages[0].content"},
		{"a tool the agent lacks", `{"messages": [{"role": "user", "content": "a"}], "agent": "helper", "tools": ["shell"]}`, `has no tool "shell"`, "tools"},
		{"bad max_steps", `{"messages": [{"role": "user", "content": "a"}], "max_steps": -1}`, "max_steps", "max_steps"},
		{"bad model", `{"messages": [{"role": "user", "content": "a"}], "model": " padded "}`, "model", "model"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantStatus(t, c.As("k-op").Do(t, "POST", "/v1/runs", tc.body), 400, codes.InvalidArgument, tc.words, tc.field)
		})
	}
	wantStatus(t, c.As("k-reader").Do(t, "POST", "/v1/runs", `{"messages": [{"role": "user", "content": "a"}]}`), 403, codes.PermissionDenied, "needs role operator", "")
	if n := e.fake.count("create"); n != 1 {
		t.Errorf("%d tasks created, want only the valid run's", n)
	}
}

// GetRun shows the task's steps as ReAct steps; CancelRun cancels it.
func TestGetRun(t *testing.T) {
	e, c := startHTTP(t, Config{})
	task := e.fake.AddTask(&agentmeshv1.Task{Org: "acme", Input: "x", Agent: "helper"})
	step := func(s *agentmeshv1.Step) {
		e.fake.Record(task.Id, &agentmeshv1.TaskEvent{Type: agentmeshv1.EventType_EVENT_TYPE_STEP, Step: s}, false)
	}
	e.fake.Record(task.Id, &agentmeshv1.TaskEvent{Type: agentmeshv1.EventType_EVENT_TYPE_STATUS, Status: taskstate.Assigned}, false)
	e.fake.Record(task.Id, &agentmeshv1.TaskEvent{Type: agentmeshv1.EventType_EVENT_TYPE_STATUS, Status: taskstate.Running}, false)
	step(&agentmeshv1.Step{Index: 0, Kind: agentmeshv1.StepKind_STEP_KIND_MODEL_TURN, Content: "Let me look.",
		ToolCalls: []*agentmeshv1.ToolCall{{Id: "c1", Name: "echo", Arguments: `{"text":"hi"}`}}})
	step(&agentmeshv1.Step{Index: 1, Kind: agentmeshv1.StepKind_STEP_KIND_TOOL_CALL, ToolCallId: "c1", ToolName: "echo"})
	step(&agentmeshv1.Step{Index: 2, Kind: agentmeshv1.StepKind_STEP_KIND_TOOL_RESULT, ToolCallId: "c1", Content: "hi"})

	var sess agentmeshv1.RunSession
	c.Do(t, "GET", "/v1/runs/"+task.Id, nil).Decode(t, &sess)
	if sess.GetStatus() != "running" || len(sess.GetSteps()) != 1 {
		t.Fatalf("running run: %v", &sess)
	}
	s1 := sess.GetSteps()[0]
	if s1.GetThought() != "Let me look." || s1.GetAction().GetTool() != "echo" || s1.GetAction().GetArgs().GetFields()["text"].GetStringValue() != "hi" ||
		s1.GetObservation() != "hi" || s1.GetIsFinal() {
		t.Fatalf("step 1: %v", s1)
	}
	step(&agentmeshv1.Step{Index: 3, Kind: agentmeshv1.StepKind_STEP_KIND_MODEL_TURN, Content: "It says hi."})
	e.fake.Record(task.Id, &agentmeshv1.TaskEvent{Type: agentmeshv1.EventType_EVENT_TYPE_STATUS, Status: taskstate.Completed, Result: "It says hi."}, false)
	c.Do(t, "GET", "/v1/runs/"+task.Id, nil).Decode(t, &sess)
	if sess.GetStatus() != "completed" || len(sess.GetSteps()) != 2 || !sess.GetSteps()[1].GetIsFinal() ||
		sess.GetSteps()[1].GetFinalAnswer() != "It says hi." || sess.GetSteps()[1].GetIndex() != 2 || sess.GetFinalAnswer() != "It says hi." {
		t.Fatalf("completed run: %v", &sess)
	}
	// The body is the session itself (seed 004's shape), snake_case.
	raw := c.Do(t, "GET", "/v1/runs/"+task.Id, nil).Body
	for _, k := range []string{`"session_id"`, `"final_answer"`, `"is_final"`, `"steps"`} {
		if !strings.Contains(string(raw), k) {
			t.Errorf("GET /v1/runs/ID lacks %s: %s", k, raw)
		}
	}

	other := e.fake.AddTask(&agentmeshv1.Task{Org: "acme", Input: "y", Agent: "helper"})
	var cancelled agentmeshv1.RunSession
	c.As("k-op").Do(t, "POST", "/v1/runs/"+other.Id+"/cancel", `{"reason": "stop"}`).Decode(t, &cancelled)
	if cancelled.GetStatus() != "cancelled" || cancelled.GetSessionId() != other.Id {
		t.Fatalf("cancelled run: %v", &cancelled)
	}
}

// buildSession: several tool calls in one turn are several steps; a
// completed run whose last step called a tool gets a final step.
func TestBuildSession(t *testing.T) {
	task := &agentmeshv1.Task{Id: "T", Org: "acme", Status: taskstate.Completed, Result: "42"}
	steps := []*agentmeshv1.Step{
		{Index: 0, Kind: agentmeshv1.StepKind_STEP_KIND_MODEL_TURN, Content: "two calls", ToolCalls: []*agentmeshv1.ToolCall{
			{Id: "a", Name: "echo", Arguments: `{"text":"1"}`}, {Id: "b", Name: "echo", Arguments: `not json`}}},
		{Index: 1, Kind: agentmeshv1.StepKind_STEP_KIND_TOOL_RESULT, ToolCallId: "b", Content: "denied", IsError: true},
		{Index: 1, Kind: agentmeshv1.StepKind_STEP_KIND_TOOL_RESULT, ToolCallId: "b", Content: "again"}, // replayed index
		{Index: 2, Kind: agentmeshv1.StepKind_STEP_KIND_TOOL_RESULT, ToolCallId: "a", Content: "1"},
	}
	got := buildSession(task, steps)
	want := `{"session_id":"T","org_id":"acme","status":"completed","steps":[` +
		`{"index":1,"thought":"two calls","action":{"tool":"echo","args":{"text":"1"},"arguments_json":"{\"text\":\"1\"}","id":"a"},"observation":"1"},` +
		`{"index":2,"action":{"tool":"echo","arguments_json":"not json","id":"b"},"observation":"denied","observation_is_error":true},` +
		`{"index":3,"is_final":true,"final_answer":"42"}],"totals":{},"task_status":"TASK_STATUS_COMPLETED","final_answer":"42"}`
	b, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(got)
	if err != nil {
		t.Fatal(err)
	}
	if norm(string(b)) != want {
		t.Errorf("got  %s\nwant %s", norm(string(b)), want)
	}
}

// norm removes protojson's deliberately unstable spaces.
func norm(s string) string {
	return strings.NewReplacer(", ", ",", ": ", ":").Replace(s)
}

// GetVersion answers the binary's version to any key, platform included.
func TestGetVersion(t *testing.T) {
	_, c := startHTTP(t, Config{Version: "v9.9.9", APIKeys: map[string]string{"k-r": "acme:reader", "k-p": "*:platform"}})
	for _, key := range []string{"k-r", "k-p"} {
		var v agentmeshv1.GetVersionResponse
		c.As(key).Do(t, "GET", "/v1/version", nil).Decode(t, &v)
		if v.GetVersion() != "v9.9.9" || !strings.HasPrefix(v.GetGoVersion(), "go") {
			t.Errorf("%s: %v", key, &v)
		}
	}
}
