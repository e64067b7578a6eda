package child

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	childv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/child/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/mcp/mcptest"
	"github.com/agentmesh/agentmesh/services/executor/childproto"
)

// stepAllowed reads a step and acks it with decision ALLOWED.
func (d *driver) stepAllowed(want agentmeshv1.StepKind, index int32) *agentmeshv1.Step {
	d.t.Helper()
	f := d.read()
	s := f.GetStep().GetStep()
	if s == nil || s.Kind != want || s.Index != index {
		d.t.Fatalf("got %s %v, want step %d %v", childproto.Kind(f), s, index, want)
	}
	d.send(&childv1.Frame{Kind: &childv1.Frame_StepAck{StepAck: &childv1.StepAck{Index: s.Index, Decision: agentmeshv1.ToolDecision_TOOL_DECISION_ALLOWED}}})
	return s
}

// processesMentioning returns the pids whose command line contains s.
func processesMentioning(s string) []string {
	var pids []string
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, "cmdline"))
		if err == nil && strings.Contains(string(b), s) {
			pids = append(pids, filepath.Base(d))
		}
	}
	return pids
}

func TestMCPStdioServerInChild(t *testing.T) {
	srv := mcptest.Install(t)
	ws := t.TempDir()
	if err := os.WriteFile(filepath.Join(ws, "hello.txt"), []byte("hi"), 0o644); err != nil {
		t.Fatal(err)
	}
	d := startChild(t, &childv1.Start{
		TaskId: "t", Attempt: 1, Input: "list", Tools: []string{"echo"}, Workspace: ws,
		ExecutorTools: []*childv1.ToolSpec{{Name: "web__fetch", ParametersJson: `{"type":"object"}`}},
		McpServers:    []*agentmeshv1.McpServer{{Name: "fs", Command: srv.FilesystemCommand("${WORKSPACE}")}},
	})
	f := d.read()
	disc := f.GetToolsDiscovered()
	if disc == nil {
		t.Fatalf("first frame %s, want tools_discovered", childproto.Kind(f))
	}
	names := map[string]bool{}
	for _, s := range disc.Tools {
		names[s.Name] = true
		if !strings.HasPrefix(s.Name, "fs__") || !strings.Contains(s.ParametersJson, `"type"`) {
			t.Errorf("discovered %v", s)
		}
	}
	for _, want := range []string{"fs__list_directory", "fs__read_text_file", "fs__write_file"} {
		if !names[want] {
			t.Errorf("%s not discovered (got %v)", want, names)
		}
	}
	if len(processesMentioning(ws)) == 0 {
		t.Error("no running server mentions the workspace")
	}

	req := d.modelRequest()
	offered := map[string]bool{}
	for _, s := range req.Tools {
		offered[s.Name] = true
	}
	if !offered["echo"] || !offered["fs__list_directory"] || !offered["web__fetch"] || len(req.Tools) != 2+len(disc.Tools) {
		t.Errorf("offered %v", offered)
	}
	d.answer(req, "", &agentmeshv1.ToolCall{Id: "c1", Name: "fs__list_directory", Arguments: `{"path":"` + ws + `"}`},
		&agentmeshv1.ToolCall{Id: "c2", Name: "fs__read_text_file", Arguments: `{"path":"/etc/passwd"}`})
	d.step(turn, 0)
	d.stepAllowed(call, 1)
	if s := d.step(result, 2); s.IsError || !strings.Contains(s.Content, "[FILE] hello.txt") || s.ToolName != "fs__list_directory" {
		t.Errorf("list_directory result = %v", s)
	}
	d.stepAllowed(call, 3)
	if s := d.step(result, 4); !s.IsError || !strings.Contains(s.Content, "denied") {
		t.Errorf("read outside the workspace = %v, want an error observation", s)
	}
	req = d.modelRequest()
	d.answer(req, "done")
	d.step(turn, 5)
	if f := d.read(); f.GetFinal().GetAnswer() != "done" {
		t.Fatalf("got %s, want final", childproto.Kind(f))
	}
	if code := d.exit(); code != ExitOK {
		t.Errorf("exit code %d", code)
	}
	if pids := processesMentioning(ws); len(pids) > 0 {
		t.Errorf("MCP server still running after the child exited: pids %v", pids)
	}
}

func TestMCPServerThatDoesNotStartFailsTask(t *testing.T) {
	d := startChild(t, &childv1.Start{
		TaskId: "t", Attempt: 1, Input: "x", Workspace: t.TempDir(),
		McpServers: []*agentmeshv1.McpServer{{Name: "bad", Command: []string{"/nonexistent/mcp-server", "--stdio"}}},
	})
	f := d.read()
	fl := f.GetFailure()
	if fl == nil || !fl.Permanent || !strings.HasPrefix(fl.Reason, "mcp server bad: start: ") {
		t.Fatalf("got %s %v, want a permanent failure naming the server", childproto.Kind(f), fl)
	}
	if code := d.exit(); code != ExitFailed {
		t.Errorf("exit code %d", code)
	}
}
