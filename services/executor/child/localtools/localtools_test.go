package localtools

// These run the tools unsandboxed (this test process is not confined): the
// path checks, output capping and limits the tools apply themselves. The
// sandboxed runs are services/executor's sandbox escape tests.

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/pkg/tools"
	"github.com/agentmesh/agentmesh/services/executor/sandbox"
)

func call(t *testing.T, ws, name, args string) (string, error) {
	t.Helper()
	tool, ok := tools.Lookup(name)
	if !ok || tool.Run == nil {
		t.Fatalf("%s is not registered", name)
	}
	return tool.Call(context.Background(), tools.Env{Workspace: ws}, args)
}

func TestFSRefusesEscapes(t *testing.T) {
	ws, outside := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "secret"), []byte("s3cret"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(ws, "out")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(outside, "secret"), filepath.Join(ws, "abs-secret")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../"+filepath.Base(outside)+"/secret", filepath.Join(ws, "rel-secret")); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ tool, args, want string }{
		{"fs_read", `{"path":"` + filepath.Join(outside, "secret") + `"}`, "absolute"},
		{"fs_read", `{"path":"../x"}`, "climbs out"},
		{"fs_read", `{"path":"a/../../x"}`, "climbs out"},
		{"fs_read", `{"path":"out/secret"}`, "leads outside"},
		{"fs_read", `{"path":"abs-secret"}`, "leads outside"},
		{"fs_read", `{"path":"rel-secret"}`, "leads outside"},
		{"fs_write", `{"path":"out/new","content":"x"}`, "leads outside"},
		{"fs_write", `{"path":"/tmp/x","content":"x"}`, "absolute"},
		{"fs_write", `{"path":".","content":"x"}`, "names the workspace itself"},
		{"fs_list", `{"path":"out"}`, "leads outside"},
		{"fs_list", `{"path":".."}`, "climbs out"},
	} {
		out, err := call(t, ws, c.tool, c.args)
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(out+err.Error(), "s3cret") {
			t.Errorf("%s %s = %q, %v; want an error saying %q", c.tool, c.args, out, err, c.want)
		} else if c.want != "names the workspace itself" && !errors.Is(err, ErrOutsideWorkspace) {
			t.Errorf("%s %s: %v does not wrap ErrOutsideWorkspace", c.tool, c.args, err)
		}
	}
	if _, err := os.Stat(filepath.Join(outside, "new")); err == nil {
		t.Error("fs_write wrote through a symlink")
	}
}

func TestFSInside(t *testing.T) {
	ws := t.TempDir()
	if out, err := call(t, ws, "fs_write", `{"path":"a/b/c.txt","content":"hello\n"}`); err != nil || !strings.Contains(out, "wrote 6 bytes") {
		t.Fatalf("fs_write: %q, %v", out, err)
	}
	if _, err := call(t, ws, "fs_write", `{"path":"a/b/c.txt","content":"more\n","append":true}`); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("b/c.txt", filepath.Join(ws, "a", "link")); err != nil {
		t.Fatal(err)
	}
	if out, err := call(t, ws, "fs_read", `{"path":"a/link"}`); err != nil || out != "hello\nmore\n" {
		t.Errorf("fs_read through an inside link: %q, %v", out, err)
	}
	if out, err := call(t, ws, "fs_read", `{"path":"a/b/c.txt","offset":2,"max_bytes":3}`); err != nil || !strings.HasPrefix(out, "llo\n[") || !strings.Contains(out, "offset 5") {
		t.Errorf("fs_read a range: %q, %v", out, err)
	}
	if out, err := call(t, ws, "fs_list", `{"recursive":true}`); err != nil || !strings.Contains(out, "a/b/c.txt (11 bytes)") || !strings.Contains(out, "a/link -> b/c.txt") {
		t.Errorf("fs_list: %q, %v", out, err)
	}
	if out, err := call(t, ws, "fs_list", `{}`); err != nil || out != "a/" {
		t.Errorf("fs_list root: %q, %v", out, err)
	}
	if _, err := call(t, ws, "fs_read", `{"path":"a"}`); err == nil || !strings.Contains(err.Error(), "directory") {
		t.Errorf("fs_read of a directory: %v", err)
	}
}

func TestShellOutputCapped(t *testing.T) {
	ws := t.TempDir()
	out, err := call(t, ws, "shell", `{"command":"head -c 100000 /dev/zero | tr '\\0' a; echo oops >&2; exit 3"}`)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out, "exit status 3\n--- stdout (truncated: 100000 bytes in all, the first 65536 shown) ---\n") {
		t.Errorf("header: %q", out[:min(len(out), 200)])
	}
	if !strings.HasSuffix(out, "--- stderr ---\noops\n") {
		t.Errorf("stderr: %q", out[max(0, len(out)-100):])
	}
	if len(out) > 2*OutputCap+500 {
		t.Errorf("output of %d bytes", len(out))
	}
}

func TestShellWorkspaceAndEnv(t *testing.T) {
	ws := t.TempDir()
	t.Setenv("AGENTMESH_LOCALTOOLS_SECRET", "nope")
	out, err := call(t, ws, "shell", `{"command":"pwd; env","stdin":"ignored"}`)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "\n"+ws+"\n") || strings.Contains(out, "AGENTMESH_LOCALTOOLS_SECRET") || strings.Contains(out, "AGENTMESH_CGROUP_PROCS") {
		t.Errorf("got %q", out)
	}
}

// A traced call's programs get its span as TRACEPARENT (the
// OpenTelemetry environment carrier); an untraced one's get none.
func TestProgramsGetTheCallsTrace(t *testing.T) {
	const tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	tool, _ := tools.Lookup("shell")
	for _, tc := range []struct{ name, traceparent, want string }{
		{"traced", tp, "[" + tp + "]"},
		{"untraced", "", "[]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := tools.Env{Workspace: t.TempDir(), Traceparent: tc.traceparent}
			out, err := tool.Call(context.Background(), env, `{"command":"echo \"[$TRACEPARENT]\""}`)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(out, tc.want) {
				t.Errorf("got %q, want it to hold %q", out, tc.want)
			}
		})
	}
}

func TestShellTimeoutKillsTheGroup(t *testing.T) {
	ws := t.TempDir()
	began := time.Now()
	_, err := call(t, ws, "shell", `{"command":"sleep 30 & sleep 30","timeout_seconds":1}`)
	if err == nil || !errors.Is(err, sandbox.ErrResourceExhausted) || !strings.Contains(err.Error(), "wall-time limit of 1s exceeded") {
		t.Errorf("got %v", err)
	}
	if d := time.Since(began); d > 20*time.Second { // the sleeps take 30s: they were killed
		t.Errorf("took %s", d)
	}
}

func TestCodeRun(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("no python3")
	}
	ws := t.TempDir()
	out, err := call(t, ws, "code_run", `{"language":"python","code":"import sys\nprint(sys.stdin.read().upper())\nprint(b'\\xff'.decode('latin-1'))","stdin":"hi"}`)
	if err != nil || !strings.HasPrefix(out, "exit status 0\n--- stdout ---\nHI\n") {
		t.Errorf("python: %q, %v", out, err)
	}
	if _, err := exec.LookPath("node"); err == nil {
		out, err := call(t, ws, "code_run", `{"language":"node","code":"console.log(6*7)"}`)
		if err != nil || !strings.Contains(out, "42") {
			t.Errorf("node: %q, %v", out, err)
		}
	}
	if ents, _ := os.ReadDir(filepath.Join(ws, ".code_run")); len(ents) != 0 {
		t.Errorf("program files left behind: %v", ents)
	}
	out, err = call(t, ws, "code_run", `{"language":"python","code":"import sys; sys.stdout.buffer.write(b'\\xff\\xfe ok')"}`)
	if err != nil || !strings.Contains(out, "\uFFFD ok") {
		t.Errorf("invalid UTF-8: %q, %v", out, err)
	}
}
