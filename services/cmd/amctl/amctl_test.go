package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// server is a real gRPC server on a loopback port serving the public API
// from memory: amctl's peer in these tests.
type server struct {
	agentmeshv1.UnimplementedTaskServiceServer
	agentmeshv1.UnimplementedAgentServiceServer

	mu      sync.Mutex
	tasks   map[string]*agentmeshv1.Task
	agents  map[string]*agentmeshv1.Agent
	submits []*agentmeshv1.SubmitTaskRequest
	updates []*agentmeshv1.UpdateAgentRequest
	keys    []string // authorization metadata seen
	// script is the task's events; breakAfter makes the first WatchTask
	// stream fail with Unavailable after that many events.
	script     []*agentmeshv1.TaskEvent
	breakAfter int
	watchFrom  []int64 // after_seq of every WatchTask
}

func newServer() *server {
	return &server{
		tasks:  map[string]*agentmeshv1.Task{},
		agents: map[string]*agentmeshv1.Agent{"helper": {Name: "helper", Skills: []string{"sql"}, Version: 3}},
	}
}

func (s *server) note(ctx context.Context) {
	md, _ := metadata.FromIncomingContext(ctx)
	s.mu.Lock()
	s.keys = append(s.keys, strings.Join(md.Get("authorization"), ","))
	s.mu.Unlock()
}

func (s *server) SubmitTask(ctx context.Context, req *agentmeshv1.SubmitTaskRequest) (*agentmeshv1.SubmitTaskResponse, error) {
	s.note(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.submits = append(s.submits, req)
	if req.Agent == "ghost" {
		return nil, status.Error(codes.FailedPrecondition, `agent: unknown agent "ghost"`)
	}
	t := &agentmeshv1.Task{Id: "01TASK", Agent: "helper", Input: req.Input, Title: req.Title, Status: taskstate.Queued,
		Priority: req.Priority, Metadata: req.Metadata, CreatedAt: timestamppb.Now(), LastEventSeq: 2}
	s.tasks[t.Id] = t
	return &agentmeshv1.SubmitTaskResponse{Task: t, Created: true}, nil
}

func (s *server) GetTask(ctx context.Context, req *agentmeshv1.GetTaskRequest) (*agentmeshv1.GetTaskResponse, error) {
	s.note(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.tasks[req.Id]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "task %q not found", req.Id)
	}
	return &agentmeshv1.GetTaskResponse{Task: t}, nil
}

func (s *server) ListTasks(ctx context.Context, req *agentmeshv1.ListTasksRequest) (*agentmeshv1.ListTasksResponse, error) {
	s.note(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	resp := &agentmeshv1.ListTasksResponse{NextPageToken: "tok2"}
	for _, t := range s.tasks {
		if len(req.Statuses) == 0 || req.Statuses[0] == t.Status {
			resp.Tasks = append(resp.Tasks, t)
		}
	}
	return resp, nil
}

func (s *server) CancelTask(ctx context.Context, req *agentmeshv1.CancelTaskRequest) (*agentmeshv1.CancelTaskResponse, error) {
	s.note(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.tasks[req.Id]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "task %q not found", req.Id)
	}
	if taskstate.Terminal(t.Status) {
		return nil, status.Errorf(codes.FailedPrecondition, "task %s already finished (%s)", t.Id, taskstate.Name(t.Status))
	}
	t.Status, t.Error = taskstate.Cancelled, req.Reason
	return &agentmeshv1.CancelTaskResponse{Task: t}, nil
}

func (s *server) GetTaskHistory(ctx context.Context, req *agentmeshv1.GetTaskHistoryRequest) (*agentmeshv1.GetTaskHistoryResponse, error) {
	s.note(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.tasks[req.Id]; !ok {
		return nil, status.Errorf(codes.NotFound, "task %q not found", req.Id)
	}
	resp := &agentmeshv1.GetTaskHistoryResponse{}
	for _, ev := range s.script {
		if ev.Seq > req.AfterSeq {
			resp.Events = append(resp.Events, ev)
		}
	}
	return resp, nil
}

func (s *server) WatchTask(req *agentmeshv1.WatchTaskRequest, stream agentmeshv1.TaskService_WatchTaskServer) error {
	s.note(stream.Context())
	s.mu.Lock()
	_, ok := s.tasks[req.Id]
	s.watchFrom = append(s.watchFrom, req.AfterSeq)
	first := len(s.watchFrom) == 1
	script, breakAfter := s.script, s.breakAfter
	s.mu.Unlock()
	if !ok {
		return status.Errorf(codes.NotFound, "task %q not found", req.Id)
	}
	sent := 0
	for _, ev := range script {
		if ev.Seq <= req.AfterSeq && ev.Type != agentmeshv1.EventType_EVENT_TYPE_TOKEN {
			continue
		}
		if first && breakAfter > 0 && sent == breakAfter {
			return status.Error(codes.Unavailable, "router restarting")
		}
		if err := stream.Send(&agentmeshv1.WatchTaskResponse{Event: ev, Status: ev.Status}); err != nil {
			return err
		}
		sent++
		if ev.Type != agentmeshv1.EventType_EVENT_TYPE_STEP && taskstate.Terminal(ev.Status) {
			return nil
		}
	}
	return nil
}

func (s *server) CreateAgent(ctx context.Context, req *agentmeshv1.CreateAgentRequest) (*agentmeshv1.CreateAgentResponse, error) {
	s.note(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.agents[req.Agent.Name]; ok {
		return nil, status.Errorf(codes.AlreadyExists, "agent %q already exists", req.Agent.Name)
	}
	a := proto.Clone(req.Agent).(*agentmeshv1.Agent)
	a.Version = 1
	s.agents[a.Name] = a
	return &agentmeshv1.CreateAgentResponse{Agent: a}, nil
}

func (s *server) GetAgent(ctx context.Context, req *agentmeshv1.GetAgentRequest) (*agentmeshv1.GetAgentResponse, error) {
	s.note(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	a, ok := s.agents[req.Name]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "agent %q not found", req.Name)
	}
	return &agentmeshv1.GetAgentResponse{Agent: a}, nil
}

func (s *server) ListAgents(ctx context.Context, req *agentmeshv1.ListAgentsRequest) (*agentmeshv1.ListAgentsResponse, error) {
	s.note(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	resp := &agentmeshv1.ListAgentsResponse{}
	for _, a := range s.agents {
		resp.Agents = append(resp.Agents, a)
	}
	return resp, nil
}

func (s *server) UpdateAgent(ctx context.Context, req *agentmeshv1.UpdateAgentRequest) (*agentmeshv1.UpdateAgentResponse, error) {
	s.note(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.updates = append(s.updates, req)
	cur, ok := s.agents[req.Agent.Name]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "agent %q not found", req.Agent.Name)
	}
	if req.ExpectedVersion > 0 && req.ExpectedVersion != cur.Version {
		return nil, status.Errorf(codes.FailedPrecondition, "agent %q is at version %d, not %d", cur.Name, cur.Version, req.ExpectedVersion)
	}
	a := proto.Clone(req.Agent).(*agentmeshv1.Agent)
	a.Version = cur.Version + 1
	s.agents[a.Name] = a
	return &agentmeshv1.UpdateAgentResponse{Agent: a}, nil
}

func (s *server) DeleteAgent(ctx context.Context, req *agentmeshv1.DeleteAgentRequest) (*agentmeshv1.DeleteAgentResponse, error) {
	s.note(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.agents[req.Name]; !ok {
		return nil, status.Errorf(codes.NotFound, "agent %q not found", req.Name)
	}
	delete(s.agents, req.Name)
	return &agentmeshv1.DeleteAgentResponse{}, nil
}

// serve runs s on a loopback port and returns its address.
func serve(t *testing.T, s *server) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	agentmeshv1.RegisterTaskServiceServer(g, s)
	agentmeshv1.RegisterAgentServiceServer(g, s)
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	return lis.Addr().String()
}

// amctl runs the CLI and returns its exit code, stdout and stderr.
func amctl(t *testing.T, addr string, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	full := append([]string{"--server", addr}, args...)
	code := run(ctx, full, &out, &errb)
	return code, out.String(), errb.String()
}

// scriptedRun is a task's life: created, queued, assigned, running, a
// model turn asking for a tool, the call, its result, the final turn, done.
func scriptedRun(id string, end agentmeshv1.TaskStatus) []*agentmeshv1.TaskEvent {
	st := func(seq int64, s agentmeshv1.TaskStatus) *agentmeshv1.TaskEvent {
		return &agentmeshv1.TaskEvent{TaskId: id, Seq: seq, Type: agentmeshv1.EventType_EVENT_TYPE_STATUS, Status: s, Attempt: 1}
	}
	step := func(seq int64, s *agentmeshv1.Step) *agentmeshv1.TaskEvent {
		return &agentmeshv1.TaskEvent{TaskId: id, Seq: seq, Type: agentmeshv1.EventType_EVENT_TYPE_STEP, Status: taskstate.Running, Step: s}
	}
	evs := []*agentmeshv1.TaskEvent{
		{TaskId: id, Seq: 1, Type: agentmeshv1.EventType_EVENT_TYPE_CREATED, Status: taskstate.Created},
		st(2, taskstate.Queued),
		st(3, taskstate.Assigned),
		st(4, taskstate.Running),
		step(5, &agentmeshv1.Step{Kind: agentmeshv1.StepKind_STEP_KIND_MODEL_TURN, Content: "I will echo it.",
			ToolCalls: []*agentmeshv1.ToolCall{{Id: "c1", Name: "echo", Arguments: `{"text":"hi"}`}}}),
		step(6, &agentmeshv1.Step{Kind: agentmeshv1.StepKind_STEP_KIND_TOOL_CALL, ToolName: "echo", ToolCallId: "c1", Arguments: `{"text":"hi"}`}),
		step(7, &agentmeshv1.Step{Kind: agentmeshv1.StepKind_STEP_KIND_TOOL_RESULT, ToolName: "echo", ToolCallId: "c1", Content: "hi"}),
	}
	last := st(8, end)
	switch end {
	case taskstate.Completed:
		last.Result = "The answer is hi."
	default:
		last.Reason = "model server down after 3 tries"
	}
	return append(evs, last)
}

func TestSubmitWait(t *testing.T) {
	s := newServer()
	s.script = scriptedRun("01TASK", taskstate.Completed)
	s.breakAfter = 4 // the first stream breaks after seq 4
	addr := serve(t, s)

	code, out, errOut := amctl(t, addr, "submit", "--agent", "helper", "--wait", "--meta", "team=core", "--priority", "high", "say", "hi")
	if code != 0 {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	for _, want := range []string{
		"task 01TASK submitted to agent helper",
		"#1    created",
		"#3    assigned   attempt 1",
		"#5    model      I will echo it.",
		`#6    tool       echo {"text":"hi"}`,
		"#7    result     echo → hi",
		"#8    completed",
		"\nThe answer is hi.\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("stdout lacks %q:\n%s", want, out)
		}
	}
	if !strings.HasSuffix(out, "\nThe answer is hi.\n") {
		t.Errorf("stdout does not end with the answer:\n%s", out)
	}
	for seq := 1; seq <= 8; seq++ {
		if n := strings.Count(out, "#"+strconv.Itoa(seq)+" "); n != 1 {
			t.Errorf("event %d printed %d times, want once", seq, n)
		}
	}
	if !strings.Contains(errOut, "reconnecting after seq 4") {
		t.Errorf("stderr %q does not report the reconnect", errOut)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if got := s.watchFrom; len(got) != 2 || got[0] != 0 || got[1] != 4 {
		t.Errorf("WatchTask after_seq %v, want [0 4]", got)
	}
	req := s.submits[0]
	if req.Input != "say hi" || req.Agent != "helper" || req.Priority != agentmeshv1.Priority_PRIORITY_HIGH || req.Metadata["team"] != "core" {
		t.Errorf("server got %v", req)
	}
}

func TestSubmitWaitFailed(t *testing.T) {
	tests := []struct {
		name string
		end  agentmeshv1.TaskStatus
		want string
	}{
		{"failed", taskstate.Failed, "amctl: task 01TASK failed: model server down after 3 tries\n"},
		{"cancelled", taskstate.Cancelled, "amctl: task 01TASK was cancelled: model server down after 3 tries\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newServer()
			s.script = scriptedRun("01TASK", tt.end)
			code, out, errOut := amctl(t, serve(t, s), "submit", "--skill", "sql", "--wait", "hi")
			if code != 1 || errOut != tt.want {
				t.Fatalf("exit %d stderr %q, want 1 %q", code, errOut, tt.want)
			}
			if !strings.Contains(out, "#8    "+taskstate.Name(tt.end)) {
				t.Errorf("stdout lacks the final status:\n%s", out)
			}
		})
	}
}

func TestCommands(t *testing.T) {
	s := newServer()
	s.script = scriptedRun("01TASK", taskstate.Completed)
	s.tasks["01TASK"] = &agentmeshv1.Task{Id: "01TASK", Agent: "helper", Title: "greet", Input: "say hi", Status: taskstate.Running,
		Priority: agentmeshv1.Priority_PRIORITY_LOW, CreatedAt: timestamppb.Now(), Metadata: map[string]string{"team": "core"}}
	s.tasks["01DONE"] = &agentmeshv1.Task{Id: "01DONE", Agent: "helper", Input: "x", Status: taskstate.Completed, Result: "done", CreatedAt: timestamppb.Now()}
	addr := serve(t, s)

	tests := []struct {
		name    string
		args    []string
		code    int
		stdout  []string // each must appear
		stderr  string   // stderr must equal it
		jsonOut bool     // stdout must be one protojson object
	}{
		{"get", []string{"get", "01TASK"}, 0, []string{"id:", "01TASK", "status:", "running", "priority:", "low", "meta team:", "core", "input:\n  say hi"}, "", false},
		{"get json", []string{"get", "01TASK", "-o", "json"}, 0, []string{`"id": "01TASK"`, `"status": "TASK_STATUS_RUNNING"`}, "", true},
		{"get json before command", []string{"-o", "json", "get", "01TASK"}, 0, []string{`"id": "01TASK"`}, "", true},
		{"get unknown", []string{"get", "01NOPE"}, 1, nil, "amctl: task 01NOPE not found\n", false},
		{"list", []string{"list", "--status", "running"}, 0, []string{"ID", "STATUS", "01TASK", "running", "greet", "more: amctl list --page-token tok2"}, "", false},
		{"list json", []string{"list", "-o", "json"}, 0, []string{`"tasks": [`, `"nextPageToken": "tok2"`}, "", true},
		{"cancel", []string{"cancel", "01TASK", "--reason", "enough"}, 0, []string{"task 01TASK cancelled"}, "", false},
		{"cancel finished", []string{"cancel", "01DONE"}, 1, nil, "amctl: task 01DONE already finished (completed)\n", false},
		{"history", []string{"history", "01TASK"}, 0, []string{"#1    created", "#7    result     echo → hi", "#8    completed"}, "", false},
		{"history json", []string{"history", "01TASK", "-o", "json"}, 0, []string{`"events": [`}, "", true},
		{"watch after a cursor", []string{"watch", "01DONE", "--after", "6"}, 0, []string{"#7    result", "#8    completed"}, "", false},
		{"watch unknown", []string{"watch", "01NOPE"}, 1, nil, "amctl: task 01NOPE not found\n", false},
		{"submit unknown agent", []string{"submit", "--agent", "ghost", "hi"}, 1, nil, "amctl: agent: unknown agent \"ghost\"\n", false},
		{"submit to the default agent", []string{"submit", "hello"}, 0, []string{"task 01TASK submitted to agent helper"}, "", false},
		{"submit json", []string{"submit", "--agent", "helper", "-o", "json", "hi"}, 0, []string{`"created": true`}, "", true},
		{"agents list", []string{"agents", "list"}, 0, []string{"NAME", "helper", "sql"}, "", false},
		{"agents get", []string{"agents", "get", "helper"}, 0, []string{"name:", "helper", "version:", "3"}, "", false},
		{"agents get unknown", []string{"agents", "get", "ghost"}, 1, nil, "amctl: agent ghost not found\n", false},
		{"agents create", []string{"agents", "create", "writer", "--model", "gpt-4o-mini", "--skill", "prose,edit", "--tool", "echo", "--max-concurrency", "2", "--temperature", "0.2"}, 0, []string{"agent writer created (version 1)"}, "", false},
		{"agents create again", []string{"agents", "create", "writer"}, 1, nil, "amctl: agent \"writer\" already exists\n", false},
		{"agents update", []string{"agents", "update", "writer", "--system-prompt", "Be brief."}, 0, []string{"agent writer updated (version 2)"}, "", false},
		{"agents delete", []string{"agents", "delete", "writer"}, 0, []string{"agent writer deleted"}, "", false},
		{"help", []string{"help"}, 0, []string{"Usage: amctl", "submit", "agents"}, "", false},
		{"command help", []string{"list", "-h"}, 0, []string{"Usage: amctl list", "-since"}, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errOut := amctl(t, addr, tt.args...)
			if code != tt.code {
				t.Fatalf("exit %d, want %d (stderr %q)", code, tt.code, errOut)
			}
			if errOut != tt.stderr {
				t.Errorf("stderr %q, want %q", errOut, tt.stderr)
			}
			for _, want := range tt.stdout {
				if !strings.Contains(out, want) {
					t.Errorf("stdout lacks %q:\n%s", want, out)
				}
			}
			if tt.jsonOut {
				if !json.Valid([]byte(out)) || !strings.HasPrefix(out, "{") {
					t.Errorf("stdout is not one JSON object:\n%s", out)
				}
			}
		})
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	t.Run("update kept the other settings and sent the version read", func(t *testing.T) {
		if len(s.updates) != 1 {
			t.Fatalf("got %d updates, want 1", len(s.updates))
		}
		u := s.updates[0]
		a := u.Agent
		if u.ExpectedVersion != 1 || a.SystemPrompt != "Be brief." || a.Model.GetModel() != "gpt-4o-mini" ||
			strings.Join(a.Skills, ",") != "prose,edit" || strings.Join(a.Tools, ",") != "echo" || a.MaxConcurrency != 2 || a.Model.GetTemperature() != 0.2 {
			t.Fatalf("update sent %v", u)
		}
	})
}

func TestAgentFromFile(t *testing.T) {
	s := newServer()
	addr := serve(t, s)
	path := filepath.Join(t.TempDir(), "agent.json")
	a := &agentmeshv1.Agent{Name: "coder", Skills: []string{"go"}, Model: &agentmeshv1.ModelSettings{Model: "m1"}}
	data, _ := protojson.Marshal(a)
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := amctl(t, addr, "agents", "create", "--file", path, "--max-steps", "7", "-o", "json")
	if code != 0 {
		t.Fatalf("exit %d stderr %q", code, errOut)
	}
	got := &agentmeshv1.Agent{}
	if err := protojson.Unmarshal([]byte(out), got); err != nil {
		t.Fatalf("stdout is not an agent: %v\n%s", err, out)
	}
	if got.Name != "coder" || got.Model.GetModel() != "m1" || got.MaxSteps != 7 || got.Version != 1 {
		t.Fatalf("created %v", got)
	}
	code, _, errOut = amctl(t, addr, "agents", "create", "other", "--file", path)
	if code != 2 || !strings.Contains(errOut, `differs from the name "coder"`) {
		t.Fatalf("exit %d stderr %q, want 2 naming the mismatch", code, errOut)
	}
}

func TestAPIKeySent(t *testing.T) {
	s := newServer()
	addr := serve(t, s)
	t.Setenv(envAPIKey, "from-env")
	if code, _, errOut := amctl(t, addr, "agents", "list"); code != 0 {
		t.Fatalf("exit %d stderr %q", code, errOut)
	}
	if code, _, errOut := amctl(t, addr, "agents", "list", "--api-key", "from-flag"); code != 0 {
		t.Fatalf("exit %d stderr %q", code, errOut)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if got := strings.Join(s.keys, "|"); got != "Bearer from-env|Bearer from-flag" {
		t.Fatalf("server saw authorization %q", got)
	}
}

func TestUnauthenticated(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer(grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, _ grpc.UnaryHandler) (any, error) {
		return nil, status.Error(codes.Unauthenticated, "unknown API key")
	}))
	agentmeshv1.RegisterTaskServiceServer(g, newServer())
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	code, _, errOut := amctl(t, lis.Addr().String(), "get", "01TASK")
	want := "amctl: not authenticated: unknown API key (set --api-key or AGENTMESH_API_KEY)\n"
	if code != 1 || errOut != want {
		t.Fatalf("exit %d stderr %q, want 1 %q", code, errOut, want)
	}
}

func TestUnreachable(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	_ = lis.Close() // nothing listens here now
	for _, args := range [][]string{{"get", "01TASK"}, {"list"}, {"submit", "--agent", "a", "x"}, {"watch", "01TASK"}} {
		t.Run(args[0], func(t *testing.T) {
			code, _, errOut := amctl(t, addr, args...)
			want := "amctl: cannot reach agentmesh at " + addr + ": "
			if code != 1 || !strings.HasPrefix(errOut, want) || strings.Count(errOut, "\n") != 1 {
				t.Fatalf("exit %d stderr %q, want 1 and one line starting %q", code, errOut, want)
			}
		})
	}
}

func TestUsageErrors(t *testing.T) {
	addr := "127.0.0.1:1" // never dialled: usage errors come first
	tests := []struct {
		name string
		args []string
		want string // stderr's first line contains it
	}{
		{"no command", nil, "Usage: amctl"},
		{"unknown command", []string{"frobnicate"}, `unknown command "frobnicate"`},
		{"unknown flag", []string{"get", "--nope", "x"}, "flag provided but not defined: -nope"},
		{"get without id", []string{"get"}, "get: want ID, got 0 argument(s)"},
		{"get with two ids", []string{"get", "a", "b"}, "get: want ID, got 2 argument(s)"},
		{"submit without text", []string{"submit", "--agent", "a"}, "submit: TEXT is required"},
		{"submit with both", []string{"submit", "--agent", "a", "--skill", "s", "hi"}, "not both"},
		{"bad priority", []string{"submit", "--agent", "a", "--priority", "urgent", "hi"}, `unknown priority "urgent"`},
		{"negative retries", []string{"submit", "--agent", "a", "--retries", "-2", "hi"}, "--retries: -2 is out of range"},
		{"agent retries", []string{"agents", "create", "x", "--retries", "500"}, "--retries: 500 is out of range"},
		{"agent queue timeout", []string{"agents", "create", "x", "--queue-timeout", "-1s"}, "--queue-timeout: -1s is out of range"},
		{"tiny queue timeout", []string{"submit", "--agent", "a", "--queue-timeout", "1ms", "hi"}, "--queue-timeout: 1ms is out of range"},
		{"negative cost", []string{"submit", "--agent", "a", "--max-cost", "-1", "hi"}, "--max-cost: must be a number ≥ 0"},
		{"bad meta", []string{"submit", "--agent", "a", "--meta", "novalue", "hi"}, `"novalue" is not key=value`},
		{"duplicate meta", []string{"submit", "--agent", "a", "--meta", "k=1", "--meta", "k=2", "hi"}, `key "k" given twice`},
		{"bad output", []string{"get", "x", "-o", "yaml"}, `unknown output format "yaml"`},
		{"bad status", []string{"list", "--status", "sleeping"}, `unknown status "sleeping"`},
		{"bad since", []string{"list", "--since", "yesterday"}, `invalid duration "yesterday"`},
		{"bad limit", []string{"list", "--limit", "5000"}, "--limit: must be between 0 and 1000"},
		{"negative after", []string{"watch", "x", "--after", "-1"}, "--after: must not be negative"},
		{"agents without command", []string{"agents"}, "Usage: amctl agents"},
		{"agents unknown command", []string{"agents", "fly"}, `agents: unknown command "fly"`},
		{"skills unknown command", []string{"skills", "fly"}, `skills: unknown command "fly" (want create, list, get, update or delete)`},
		{"approvals without command", []string{"approvals"}, "approvals: a command is required"},
		{"proposals unknown command", []string{"proposals", "fly"}, `proposals: unknown command "fly" (want list, show, approve or reject)`},
		{"agents create without name", []string{"agents", "create"}, "agents create: NAME is required"},
		{"bad temperature", []string{"agents", "create", "x", "--temperature", "hot"}, "--temperature: want a number"},
		{"NaN temperature", []string{"agents", "create", "x", "--temperature", "NaN"}, "--temperature: want a number"},
		{"bad timeout", []string{"--timeout", "soon", "list"}, "invalid value"},
		{"negative timeout", []string{"--timeout", "-5s", "list"}, "--timeout: must not be negative"},
		{"server as a URL", []string{"--server", "http://127.0.0.1:7400", "list"}, "--server: want HOST:PORT"},
		{"server as an https URL", []string{"list", "--server", "https://agentmesh.example.com"}, "add --tls"},
		{"server not host:port", []string{"--server", "nonsense::::", "list"}, `--server: "nonsense::::" is not HOST:PORT`},
		{"API key with a newline", []string{"--api-key", "k\nx-api-key: other", "list"}, "--api-key: the key holds a character"},
		{"negative timeout after the command", []string{"get", "x", "--timeout", "-1ms"}, "--timeout: must not be negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, errOut := amctl(t, addr, tt.args...)
			if code != 2 {
				t.Fatalf("exit %d, want 2 (stderr %q)", code, errOut)
			}
			if !strings.Contains(errOut, tt.want) {
				t.Fatalf("stderr %q, want it to contain %q", errOut, tt.want)
			}
		})
	}
}

func TestSubmitScheduleFlags(t *testing.T) {
	s := newServer()
	addr := serve(t, s)
	code, _, errOut := amctl(t, addr, "submit", "--agent", "helper", "--priority", "critical", "--retries", "0",
		"--queue-timeout", "10m", "--max-steps", "5", "--max-tokens", "1000", "--max-cost", "0.5", "--max-wall", "2m", "do", "it")
	if code != 0 {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	s.mu.Lock()
	req := s.submits[len(s.submits)-1]
	s.mu.Unlock()
	b := req.GetBudget()
	switch {
	case req.Priority != agentmeshv1.Priority_PRIORITY_CRITICAL:
		t.Errorf("priority %s", req.Priority)
	case req.GetRetryPolicy().GetMaxAttempts() != 1:
		t.Errorf("--retries 0: max_attempts %d, want 1 (no retry)", req.GetRetryPolicy().GetMaxAttempts())
	case req.GetQueueTimeout().AsDuration() != 10*time.Minute:
		t.Errorf("queue timeout %v", req.GetQueueTimeout())
	case b.GetMaxSteps() != 5 || b.GetMaxTokens() != 1000 || b.GetMaxCostUsd() != 0.5 || b.GetMaxWallTime().AsDuration() != 2*time.Minute:
		t.Errorf("budget %v", b)
	}
	// Without the flags nothing is overridden.
	if code, _, errOut := amctl(t, addr, "submit", "--agent", "helper", "plain"); code != 0 {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	s.mu.Lock()
	plain := s.submits[len(s.submits)-1]
	s.mu.Unlock()
	if plain.RetryPolicy != nil || plain.QueueTimeout != nil || plain.Budget != nil {
		t.Errorf("plain submit overrides: retry %v, queue timeout %v, budget %v", plain.RetryPolicy, plain.QueueTimeout, plain.Budget)
	}
}

func TestAgentRetryFlags(t *testing.T) {
	addr := serve(t, newServer())
	code, out, errOut := amctl(t, addr, "agents", "create", "careful", "--max-concurrency", "2", "--retries", "5", "--queue-timeout", "10m", "-o", "json")
	if code != 0 {
		t.Fatalf("exit %d stderr %q", code, errOut)
	}
	got := &agentmeshv1.Agent{}
	if err := protojson.Unmarshal([]byte(out), got); err != nil {
		t.Fatalf("stdout is not an agent: %v\n%s", err, out)
	}
	if got.MaxConcurrency != 2 || got.GetRetryPolicy().GetMaxAttempts() != 6 || got.GetQueueTimeout().AsDuration() != 10*time.Minute {
		t.Fatalf("created %v, want max_concurrency 2, 6 attempts, queue timeout 10m", got)
	}
}

// A command's help lists its flags with their defaults: the API key taken
// from the environment (or given) is a secret and is never printed.
func TestHelpHidesAPIKey(t *testing.T) {
	t.Setenv(envAPIKey, "env-secret-key")
	for _, args := range [][]string{{"submit", "-h"}, {"--api-key", "flag-secret-key", "get", "-h"}, {"agents", "create", "-h"}} {
		code, out, errOut := amctl(t, "127.0.0.1:1", args...)
		if code != 0 || !strings.Contains(out, "-api-key") {
			t.Fatalf("%v: exit %d, stdout %q, want 0 and the flags' help", args, code, out)
		}
		if strings.Contains(out+errOut, "secret-key") {
			t.Errorf("%v printed the API key:\n%s", args, out)
		}
	}
}

// Without a home or config directory (a service's environment) amctl
// needs no config file: the flags and the environment are enough; only a
// context asked for needs one.
func TestNoConfigDirectory(t *testing.T) {
	addr, keys := serveVersion(t)
	t.Setenv(envConfig, "")
	t.Setenv("HOME", "")
	t.Setenv("XDG_CONFIG_HOME", "")
	t.Setenv(envContext, "")
	code, out, errOut := runAmctl(t, "--server", addr, "--api-key", "k", "version")
	if code != 0 || !strings.Contains(out, "server: agentmesh") || <-keys != "Bearer k" {
		t.Fatalf("exit %d %q %q, want the server's version", code, out, errOut)
	}
	code, _, errOut = runAmctl(t, "--server", addr, "--context", "prod", "version")
	if code != 1 || !strings.Contains(errOut, envConfig) {
		t.Fatalf("--context without a config directory: exit %d %q, want 1 naming %s", code, errOut, envConfig)
	}
}
