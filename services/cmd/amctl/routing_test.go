package main

import (
	"context"
	"net"
	"strings"
	"testing"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"github.com/agentmesh/agentmesh/services/executor"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// fullServer adds MatchAgents and the approvals to the test server.
type fullServer struct {
	*server
	agentmeshv1.UnimplementedApprovalServiceServer
	matched []*agentmeshv1.MatchAgentsRequest
}

func (f *fullServer) MatchAgents(_ context.Context, req *agentmeshv1.MatchAgentsRequest) (*agentmeshv1.MatchAgentsResponse, error) {
	f.mu.Lock()
	f.matched = append(f.matched, req)
	f.mu.Unlock()
	return &agentmeshv1.MatchAgentsResponse{Routing: scoredRouting()}, nil
}

func (f *fullServer) RejectToolCall(_ context.Context, req *agentmeshv1.RejectToolCallRequest) (*agentmeshv1.RejectToolCallResponse, error) {
	return &agentmeshv1.RejectToolCallResponse{Approval: &agentmeshv1.Approval{Id: req.ApprovalId, Tool: "shell", Arguments: `{"cmd":"rm"}`}, Task: &agentmeshv1.Task{Id: "01T"}}, nil
}

func (f *fullServer) ApproveToolCall(_ context.Context, req *agentmeshv1.ApproveToolCallRequest) (*agentmeshv1.ApproveToolCallResponse, error) {
	return &agentmeshv1.ApproveToolCallResponse{Approval: &agentmeshv1.Approval{Id: req.ApprovalId, Tool: "shell"}, Task: &agentmeshv1.Task{Id: "01T"}}, nil
}

func serveFull(t *testing.T, f *fullServer) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	agentmeshv1.RegisterTaskServiceServer(g, f.server)
	agentmeshv1.RegisterAgentServiceServer(g, f)
	agentmeshv1.RegisterApprovalServiceServer(g, f)
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	return lis.Addr().String()
}

func scoredRouting() *agentmeshv1.Routing {
	return &agentmeshv1.Routing{
		Method: "scored", RequiredSkills: []string{"sql", "postgres"}, Chosen: "sql-expert", DecidedAt: timestamppb.Now(),
		Weights: &agentmeshv1.MatchWeights{Capability: 0.4, Workload: 0.3, Priority: 0.2, Affinity: 0.1},
		Candidates: []*agentmeshv1.RoutingCandidate{
			{Agent: "sql-expert", AgentOrg: "acme", Score: 0.81, Capability: 0.9, Workload: 1, Priority: 0.5, Affinity: 0.5,
				MatchedSkills: []string{"sql", "postgres"}},
			{Agent: "sql-busy", Score: 0.375, Capability: 0.5, Workload: 0, Priority: 0.5, Affinity: 0.75,
				MatchedSkills: []string{"sql"}, MissingSkills: []string{"postgres"}, Running: 2, MaxConcurrency: 2, RecentCompleted: 2},
		},
	}
}

func TestGetAndExplainShowRouting(t *testing.T) {
	s := newServer()
	s.tasks["01R"] = &agentmeshv1.Task{Id: "01R", Agent: "sql-expert", Input: "x", Status: taskstate.Queued, Routing: scoredRouting()}
	s.tasks["01N"] = &agentmeshv1.Task{Id: "01N", Agent: "helper", Input: "x", Status: taskstate.Queued, Routing: &agentmeshv1.Routing{Method: "named", Chosen: "helper"}}
	s.tasks["01OLD"] = &agentmeshv1.Task{Id: "01OLD", Agent: "helper", Input: "x", Status: taskstate.Queued}
	f := &fullServer{server: s}
	addr := serveFull(t, f)
	for _, tt := range []struct {
		args []string
		want []string
	}{
		{[]string{"get", "01R"}, []string{"routing:", "scored: sql-expert (0.810) of 2 candidate(s)"}},
		{[]string{"explain", "01R"}, []string{"task 01R runs on agent sql-expert", "how: scored for skills sql, postgres",
			"weights: capability 0.4, workload 0.3, priority 0.2, affinity 0.1", "chosen: sql-expert",
			"RANK", "1     sql-expert", "0.810", "0.900", "2     sql-busy (shared)", "postgres", "2/2", "2/0"}},
		{[]string{"explain", "01N"}, []string{"how: named by the submitter"}},
		{[]string{"explain", "01OLD"}, []string{"no routing decision recorded"}},
		{[]string{"explain", "01R", "-o", "json"}, []string{`"chosen": "sql-expert"`, `"capability": 0.9`}},
		{[]string{"agents", "match", "SQL", "postgres"}, []string{"chosen: sql-expert", "sql-busy (shared)"}},
	} {
		code, out, errOut := amctl(t, addr, tt.args...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", tt.args, code, errOut)
		}
		for _, w := range tt.want {
			if !strings.Contains(out, w) {
				t.Errorf("%v: output lacks %q:\n%s", tt.args, w, out)
			}
		}
	}
	if len(f.matched) != 1 || strings.Join(f.matched[0].RequiredSkills, ",") != "SQL,postgres" {
		t.Errorf("MatchAgents got %v", f.matched)
	}
	if code, _, _ := amctl(t, addr, "explain"); code != 2 {
		t.Errorf("explain without an ID exits %d, want 2", code)
	}
}

func TestAgentsGetShowsPoliciesServersAndDefaults(t *testing.T) {
	if defaultMaxSteps != executor.DefaultMaxSteps {
		t.Fatalf("amctl's defaultMaxSteps %d is not the executor's %d", defaultMaxSteps, executor.DefaultMaxSteps)
	}
	s := newServer()
	s.agents["tooly"] = &agentmeshv1.Agent{
		Name: "tooly", Tools: []string{"shell"},
		ToolPolicies: map[string]agentmeshv1.ToolPolicy{"shell": agentmeshv1.ToolPolicy_TOOL_POLICY_REQUIRE_APPROVAL, "echo": agentmeshv1.ToolPolicy_TOOL_POLICY_DENY},
		McpServers: []*agentmeshv1.McpServer{
			{Name: "files", Command: []string{"mcp-files", "--root", "/data"}, Env: map[string]string{"TOKEN": "s3cret"}},
			{Name: "web", Url: "https://mcp.example.com/", RequireApproval: true},
		},
	}
	addr := serve(t, s)
	code, out, errOut := amctl(t, addr, "agents", "get", "tooly")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, w := range []string{
		"max steps:", "16 (the executor's default",
		"retries:", "3 (backoff 2s ×2 up to 2m0s) (default)",
		"approval timeout:", "1h0m0s (default)",
		"queue timeout:", "routing priority:", "50 (default)",
		"tool policy echo:", "deny", "tool policy shell:", "require approval",
		"mcp server files:", "mcp-files --root /data (env TOKEN)",
		"mcp server web:", "https://mcp.example.com/, every call needs approval",
	} {
		if !strings.Contains(out, w) {
			t.Errorf("agents get lacks %q:\n%s", w, out)
		}
	}
	if strings.Contains(out, "s3cret") {
		t.Errorf("agents get prints an MCP env value:\n%s", out)
	}
	if strings.Contains(out, "max steps:        no limit") || strings.Contains(out, "max steps: no limit") {
		t.Errorf("agents get still says max steps has no limit:\n%s", out)
	}
}

func TestApprovalsDecisionWording(t *testing.T) {
	addr := serveFull(t, &fullServer{server: newServer()})
	code, out, errOut := amctl(t, addr, "approvals", "reject", "01T-a1", "--comment", "no")
	if code != 0 || !strings.HasPrefix(out, "01T-a1 rejected: shell") {
		t.Fatalf("reject: exit %d out %q err %q", code, out, errOut)
	}
	code, out, _ = amctl(t, addr, "approvals", "approve", "01T-a1")
	if code != 0 || !strings.HasPrefix(out, "01T-a1 approved: shell") {
		t.Fatalf("approve: exit %d out %q", code, out)
	}
}
