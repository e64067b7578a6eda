package mcp_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/mcp"
	"github.com/agentmesh/agentmesh/pkg/mcp/mcptest"
	"github.com/agentmesh/agentmesh/pkg/tools"
)

func TestToolName(t *testing.T) {
	cases := []struct{ server, tool, want string }{
		{"fs", "read_file", "fs__read_file"},
		{"every-thing", "get-sum", "every-thing__get-sum"},
		{"x", "a.b/c d", "x__a_b_c_d"},
		{"x", "héllo", "x__h_llo"},
	}
	for _, c := range cases {
		if got := mcp.ToolName(c.server, c.tool); got != c.want {
			t.Errorf("ToolName(%q, %q) = %q, want %q", c.server, c.tool, got, c.want)
		}
	}
	long1 := mcp.ToolName("server", strings.Repeat("a", 80)+"1")
	long2 := mcp.ToolName("server", strings.Repeat("a", 80)+"2")
	if len(long1) != mcp.MaxToolName || len(long2) != mcp.MaxToolName || long1 == long2 {
		t.Errorf("capped names %q (%d) and %q (%d): want distinct, %d long", long1, len(long1), long2, len(long2), mcp.MaxToolName)
	}
	if s, ok := mcp.ServerOf("my_srv__a__b"); !ok || s != "my_srv" {
		t.Errorf("ServerOf = %q %v", s, ok)
	}
	if _, ok := mcp.ServerOf("echo"); ok {
		t.Error("ServerOf(echo) = ok")
	}
}

func TestValidate(t *testing.T) {
	ok := []*agentmeshv1.McpServer{
		{Name: "fs", Command: []string{"npx", "x"}},
		{Name: "my_srv-2", Url: "https://mcp.example.com/mcp", RequireApproval: true},
	}
	for _, s := range ok {
		if err := mcp.Validate(s); err != nil {
			t.Errorf("Validate(%v) = %v", s, err)
		}
	}
	bad := map[string]*agentmeshv1.McpServer{
		"upper":       {Name: "FS", Command: []string{"x"}},
		"double _":    {Name: "a__b", Command: []string{"x"}},
		"trailing _":  {Name: "a_", Command: []string{"x"}},
		"empty name":  {Command: []string{"x"}},
		"long name":   {Name: strings.Repeat("a", 33), Command: []string{"x"}},
		"both":        {Name: "a", Command: []string{"x"}, Url: "http://h/"},
		"neither":     {Name: "a"},
		"ftp":         {Name: "a", Url: "ftp://h/x"},
		"no host":     {Name: "a", Url: "http:///x"},
		"empty prog":  {Name: "a", Command: []string{""}},
		"env on http": {Name: "a", Url: "http://h/", Env: map[string]string{"A": "b"}},
		"env name":    {Name: "a", Command: []string{"x"}, Env: map[string]string{"A=B": "b"}},
	}
	for what, s := range bad {
		if err := mcp.Validate(s); err == nil {
			t.Errorf("%s: Validate(%v) = nil, want an error", what, s)
		}
	}
}

func TestCompileFullSchema(t *testing.T) {
	// Keywords the built-in subset checker ignores: oneOf, pattern, $ref.
	check, err := mcp.Compile(json.RawMessage(`{
	  "$schema": "http://json-schema.org/draft-07/schema#",
	  "type": "object",
	  "definitions": {"id": {"type": "string", "pattern": "^[a-z]+$"}},
	  "properties": {"id": {"$ref": "#/definitions/id"}, "n": {"oneOf": [{"type": "integer"}, {"type": "null"}]}},
	  "required": ["id"], "additionalProperties": false}`))
	if err != nil {
		t.Fatal(err)
	}
	if err := check(json.RawMessage(`{"id":"abc","n":3}`)); err != nil {
		t.Errorf("valid arguments: %v", err)
	}
	for _, args := range []string{`{"id":"ABC"}`, `{"id":"abc","n":"x"}`, `{}`, `{"id":"a","zz":1}`, `[1]`, `{"id":`, `{"id":"a"} {}`} {
		if err := check(json.RawMessage(args)); err == nil {
			t.Errorf("check(%s) = nil, want an error", args)
		}
	}
	if _, err := mcp.Compile(json.RawMessage(`{"type": 3}`)); err == nil {
		t.Error("Compile of a broken schema = nil error")
	}
}

func find(ts []tools.Tool, name string) (tools.Tool, bool) {
	for _, t := range ts {
		if t.Name == name {
			return t, true
		}
	}
	return tools.Tool{}, false
}

func TestStdioFilesystem(t *testing.T) {
	srv := mcptest.Install(t)
	ws := t.TempDir()
	if err := os.WriteFile(filepath.Join(ws, "hello.txt"), []byte("hi there"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	s, err := mcp.Connect(ctx, &agentmeshv1.McpServer{Name: "fs", Command: srv.FilesystemCommand("${WORKSPACE}"), RequireApproval: true},
		mcp.Options{Workspace: ws, Runs: tools.InChild})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ts := s.Tools(tools.InChild)
	read, ok := find(ts, "fs__read_text_file")
	if !ok {
		t.Fatalf("no fs__read_text_file among %d tools", len(ts))
	}
	if read.Category != tools.CategoryMCP || read.Risk != mcp.RiskExternal || !read.NeedsApproval || read.Runs != tools.InChild {
		t.Errorf("spec = %+v", read.Spec)
	}
	out, err := read.Call(ctx, tools.Env{}, `{"path":"`+filepath.Join(ws, "hello.txt")+`"}`)
	if err != nil || out != "hi there" {
		t.Errorf("read_text_file = %q, %v", out, err)
	}
	// Outside the allowed directory: the server refuses (isError).
	_, err = read.Call(ctx, tools.Env{}, `{"path":"/etc/passwd"}`)
	if err == nil || !strings.Contains(err.Error(), "denied") {
		t.Errorf("read outside = %v, want access denied", err)
	}
	// Invalid arguments never reach the server.
	if _, err := read.Call(ctx, tools.Env{}, `{"path": 7}`); !errors.Is(err, tools.ErrInvalidArguments) {
		t.Errorf("bad arguments: %v, want ErrInvalidArguments", err)
	}
	list, _ := find(ts, "fs__list_directory")
	out, err = list.Call(ctx, tools.Env{}, `{"path":"`+ws+`"}`)
	if err != nil || !strings.Contains(out, "[FILE] hello.txt") {
		t.Errorf("list_directory = %q, %v", out, err)
	}
}

func TestStdioEverything(t *testing.T) {
	srv := mcptest.Install(t)
	ctx := context.Background()
	s, err := mcp.Connect(ctx, &agentmeshv1.McpServer{Name: "ev", Command: srv.EverythingCommand()}, mcp.Options{Workspace: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	sum, ok := find(s.Tools(tools.InChild), "ev__get-sum")
	if !ok {
		t.Fatal("no ev__get-sum")
	}
	out, err := sum.Call(ctx, tools.Env{}, `{"a": 2, "b": 40}`)
	if err != nil || !strings.Contains(out, "42") {
		t.Errorf("get-sum = %q, %v", out, err)
	}
	if _, err := sum.Call(ctx, tools.Env{}, `{"a": "two", "b": 40}`); !errors.Is(err, tools.ErrInvalidArguments) {
		t.Errorf("get-sum with a string: %v, want ErrInvalidArguments", err)
	}
	img, ok := find(s.Tools(tools.InChild), "ev__get-tiny-image")
	if !ok {
		t.Error("no ev__get-tiny-image")
	} else {
		out, err := img.Call(ctx, tools.Env{}, `{}`)
		if err != nil || !strings.Contains(out, "[image image/png") {
			t.Errorf("get-tiny-image = %q, %v", out, err)
		}
	}
	// The server's environment: only what the config gives plus PATH, HOME, LANG.
	if env, ok := find(s.Tools(tools.InChild), "ev__get-env"); !ok {
		t.Error("no ev__get-env")
	} else {
		t.Setenv("AGENTMESH_SECRET_FOR_TEST", "leak")
		out, err := env.Call(ctx, tools.Env{}, `{}`)
		if err != nil || strings.Contains(out, "AGENTMESH_SECRET_FOR_TEST") || !strings.Contains(out, "PATH") {
			t.Errorf("get-env = %q, %v", out, err)
		}
	}
}

func TestServerThatDoesNotStart(t *testing.T) {
	ctx := context.Background()
	_, err := mcp.Connect(ctx, &agentmeshv1.McpServer{Name: "nope", Command: []string{"/nonexistent/mcp-server"}}, mcp.Options{Workspace: t.TempDir()})
	if err == nil || !strings.HasPrefix(err.Error(), "mcp server nope: start: ") || !strings.Contains(err.Error(), "no such file") {
		t.Errorf("missing binary: %v", err)
	}
	// A program that exits at once, saying why on stderr.
	_, err = mcp.Connect(ctx, &agentmeshv1.McpServer{Name: "dies", Command: []string{"sh", "-c", "echo cannot open config >&2; exit 3"}},
		mcp.Options{Workspace: t.TempDir(), Timeout: 10 * time.Second})
	if err == nil || !strings.HasPrefix(err.Error(), "mcp server dies: start: ") || !strings.Contains(err.Error(), "cannot open config") {
		t.Errorf("exiting server: %v", err)
	}
	// A program that never answers.
	began := time.Now()
	_, err = mcp.Connect(ctx, &agentmeshv1.McpServer{Name: "mute", Command: []string{"sleep", "60"}},
		mcp.Options{Workspace: t.TempDir(), Timeout: time.Second})
	if err == nil || !strings.Contains(err.Error(), "no answer within 1s") || time.Since(began) > 10*time.Second {
		t.Errorf("mute server: %v after %s", err, time.Since(began))
	}
}
