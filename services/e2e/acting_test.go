package e2e

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/mcp/mcptest"
	"github.com/agentmesh/agentmesh/pkg/scriptedmodel"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"github.com/agentmesh/agentmesh/services/executor"
	"github.com/agentmesh/agentmesh/services/executor/webfetch"
	"github.com/agentmesh/agentmesh/services/stack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// TestAgentThatActs is issue 3's "done when": through the public API, an
// agent with code_run, web_fetch (an allowlisted local server), the fs tools
// and the MCP filesystem server completes a multi-step scripted task, each
// tool running where it must (sandbox or executor).
func TestAgentThatActs(t *testing.T) {
	servers := mcptest.Install(t)
	page := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "the secret word is PAPAYA")
	}))
	defer page.Close()
	host := strings.TrimPrefix(page.URL, "http://")

	// The scripted model drives five tool calls, then answers with what
	// the last one returned.
	script := fmt.Sprintf(`{"scenarios":[{"turns":[
	  {"tool_calls":[{"name":"web_fetch","arguments":{"url":"%s/word"}}]},
	  {"tool_calls":[{"name":"fs_write","arguments":{"path":"notes/word.txt","content":"PAPAYA"}}]},
	  {"tool_calls":[{"name":"code_run","arguments":{"language":"python","code":"print(open('notes/word.txt').read().lower())"}}]},
	  {"tool_calls":[{"name":"fs_list","arguments":{"path":"notes"}}]},
	  {"tool_calls":[{"name":"fs__read_text_file","arguments":{"path":"notes/word.txt"}}]},
	  {"content":"done: {{last_tool_result}}"}]}]}`, page.URL)
	scriptPath := filepath.Join(t.TempDir(), "script.json")
	if err := os.WriteFile(scriptPath, []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	sc, err := scriptedmodel.LoadScript(scriptPath)
	if err != nil {
		t.Fatal(err)
	}
	fns, closeTools, err := executor.PrivilegedTools(context.Background(), executor.ToolsConfig{
		WebFetch: webfetch.Config{Allow: []string{host}},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer closeTools()

	cfg := stack.Config{DataDir: t.TempDir(), NATSHost: "127.0.0.1", NATSPort: -1, Script: sc, Log: logger()}
	cfg.Router.Listen = "127.0.0.1:0"
	cfg.Executor.ChildCommand = []string{os.Args[0]}
	cfg.Executor.WallTime = 2 * time.Minute
	cfg.Executor.Tools = fns
	cfg.Executor.Sandbox.ReadOnlyPaths = []string{servers.Dir}
	ctx, cancel := context.WithCancel(context.Background())
	st, err := stack.New(ctx, cfg)
	if err != nil {
		cancel()
		t.Fatalf("stack: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- st.Run(ctx) }()
	defer func() { cancel(); <-done }()
	conn, err := grpc.NewClient(st.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	e := &env{conn: conn, stack: st, tasks: agentmeshv1.NewTaskServiceClient(conn), agents: agentmeshv1.NewAgentServiceClient(conn), skills: agentmeshv1.NewSkillServiceClient(conn)}

	_, err = e.agents.CreateAgent(ctxT(t), &agentmeshv1.CreateAgentRequest{Agent: &agentmeshv1.Agent{
		Name:  "worker",
		Tools: []string{"web_fetch", "fs_write", "fs_read", "fs_list", "code_run"},
		McpServers: []*agentmeshv1.McpServer{{
			Name: "fs", Command: servers.FilesystemCommand("${WORKSPACE}"),
		}},
	}})
	if err != nil {
		t.Fatalf("create agent: %v", err)
	}
	task := e.submit(t, &agentmeshv1.SubmitTaskRequest{Input: "find the word and file it", Agent: "worker"})
	got := e.waitStatus(t, task.Id, taskstate.Completed, 2*time.Minute)
	if !strings.Contains(got.Result, "PAPAYA") {
		t.Errorf("result = %q, want the file's content read back through MCP", got.Result)
	}

	// Every tool ran, allowed, and returned what it should have.
	_, results, calls := steps(e.history(t, task.Id))
	want := []struct{ tool, contains string }{
		{"web_fetch", "PAPAYA"},
		{"fs_write", "notes/word.txt"},
		{"code_run", "papaya"},
		{"fs_list", "word.txt"},
		{"fs__read_text_file", "PAPAYA"},
	}
	if len(results) != len(want) {
		t.Fatalf("%d tool results, want %d: %v", len(results), len(want), results)
	}
	for i, w := range want {
		r := results[i]
		if r.ToolName != w.tool || r.IsError || !strings.Contains(r.Content, w.contains) {
			t.Errorf("result %d: %s error=%v %q; want %s containing %q", i, r.ToolName, r.IsError, clipS(r.Content), w.tool, w.contains)
		}
		if c := calls[i]; c.Decision != agentmeshv1.ToolDecision_TOOL_DECISION_ALLOWED || c.ArgumentsSha256 == "" || c.Risk == "" {
			t.Errorf("call %d (%s) audit: decision %s hash %q risk %q", i, c.ToolName, c.Decision, c.ArgumentsSha256, c.Risk)
		}
	}
}

func clipS(s string) string {
	if len(s) > 200 {
		return s[:200] + "…"
	}
	return s
}
