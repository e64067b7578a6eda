package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/scriptedmodel"
	"github.com/agentmesh/agentmesh/services/router"
	"github.com/agentmesh/agentmesh/services/stack"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// mcpRun is how `amctl mcp` ended: exit code, stderr, and what it printed
// on the command's stdout (which in real use is the protocol's stream).
type mcpRun struct {
	code           int
	stderr, stdout string
}

// runMCP runs `amctl mcp` with args on pipes and returns an MCP client
// session connected to it (nil if it could not connect), and a function
// that closes the session and waits for the command to end.
func runMCP(t *testing.T, args ...string) (*mcp.ClientSession, func() mcpRun) {
	t.Helper()
	cIn, sOut := io.Pipe()
	sIn, cOut := io.Pipe()
	oldIn, oldOut := mcpStdin, mcpStdout
	mcpStdin, mcpStdout = sIn, sOut
	t.Cleanup(func() { mcpStdin, mcpStdout = oldIn, oldOut })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	var stdout, stderr bytes.Buffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, append([]string{"mcp"}, args...), &stdout, &stderr)
		_ = sOut.Close()
	}()
	wait := func() mcpRun { code := <-done; return mcpRun{code, stderr.String(), stdout.String()} }
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "amctl-test", Version: "1"}, nil).
		Connect(ctx, &mcp.IOTransport{Reader: cIn, Writer: cOut}, nil)
	if err != nil {
		_ = cOut.Close()
		r := wait()
		return nil, func() mcpRun { return r }
	}
	return cs, func() mcpRun { _ = cs.Close(); return wait() }
}

// `amctl mcp` serves the running agentmesh over stdio: an MCP client
// delegates a task and gets its answer; stdout carries nothing else.
func TestMCPCommand(t *testing.T) {
	script, err := scriptedmodel.ParseScript([]byte(`{"scenarios": [{"turns": [
	    {"content": "echo", "tool_calls": [{"name": "echo", "arguments": {"text": "{{input}}"}}]},
	    {"content": "final answer: {{last_tool_result}}"}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	addr := realStackWith(t, stack.Config{Script: script, SeedAgents: []*agentmeshv1.Agent{{Name: "assistant", Tools: []string{"echo"}}}})
	cs, end := runMCP(t, "--server", addr)
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "delegate",
		Arguments: map[string]any{"task": "from claude desktop", "wait_seconds": 60}})
	if err != nil {
		t.Fatal(err)
	}
	var v struct{ Status, Result string }
	b, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(b, &v); err != nil || v.Status != "completed" || v.Result != "final answer: from claude desktop" {
		t.Fatalf("delegate answered %s (%v)", b, err)
	}
	if r := end(); r.code != exitOK || r.stdout != "" {
		t.Errorf("amctl mcp exited %d (stderr %q), printed %q besides the protocol", r.code, r.stderr, r.stdout)
	}
}

// A key the server does not know: amctl mcp says so and exits 1, before
// serving anything.
func TestMCPCommandUnknownKey(t *testing.T) {
	addr := realStackWith(t, stack.Config{Router: router.Config{APIKeys: map[string]string{"key-a": "org-a"}}})
	cs, end := runMCP(t, "--server", addr, "--api-key", "key-nobody")
	if cs != nil {
		_ = cs.Close()
	}
	if r := end(); r.code != exitError || !strings.Contains(r.stderr, "does not know this API key") {
		t.Errorf("exit %d, stderr %q", r.code, r.stderr)
	}
}
