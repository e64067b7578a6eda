package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
)

// pythonExample is the REST and SSE client in Python (examples/rest-python).
var pythonExample = filepath.Join("..", "..", "examples", "rest-python", "agentmesh_rest.py")

// python3 finds the interpreter; without it the test is skipped, except
// under CI=true, where it fails.
func python3(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("python3")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("python3: %v (CI installs python3)", err)
		}
		t.Skipf("python3: %v", err)
	}
	return p
}

// The Python example submits a task, follows its events, drops the stream
// and resumes it, and sees every event of the history once; then it runs
// the run API. Against a real stack with keys on.
func TestPythonRESTExample(t *testing.T) {
	py := python3(t)
	e := start(t, opts{script: restScript, apiKeys: map[string]string{"key-acme": "acme"}})
	if _, err := e.agents.CreateAgent(withKey(ctxT(t), "key-acme"), &agentmeshv1.CreateAgentRequest{Agent: &agentmeshv1.Agent{
		Name: "worker", Tools: []string{"echo", "current_time"},
	}}); err != nil {
		t.Fatal(err)
	}
	base := []string{pythonExample, "--url", "http://" + e.stack.HTTPAddr(), "--agent", "worker"}
	cmd := exec.Command(py, append(base, "--drop-after", "2", "paced", "words")...)
	cmd.Env = append(os.Environ(), "AGENTMESH_API_KEY=key-acme")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("example: %v\n%s", err, out)
	}
	text := string(out)
	for _, want := range []string{"resuming with Last-Event-ID: 2", "status: TASK_STATUS_COMPLETED", "result: final answer: paced words"} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q:\n%s", want, text)
		}
	}
	if m := regexp.MustCompile(`events seen: (\[[^]]*\]) \(history: (\[[^]]*\])\)`).FindStringSubmatch(text); m == nil || m[1] != m[2] {
		t.Errorf("the events seen are not the history:\n%s", text)
	}

	cmd = exec.Command(py, append(base, "--run", "--tools", "echo,current_time", "hello")...)
	cmd.Env = append(os.Environ(), "AGENTMESH_API_KEY=key-acme")
	if out, err = cmd.CombinedOutput(); err != nil {
		t.Fatalf("run: %v\n%s", err, out)
	}
	for _, want := range []string{"step 1 action: echo", "step 1 observation: hello", "step 2 final answer: final answer: hello", "status: completed"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("run output lacks %q:\n%s", want, out)
		}
	}
	// Without the key: the door's 401, reported.
	cmd = exec.Command(py, append(base, "hello")...)
	cmd.Env = append(os.Environ(), "AGENTMESH_API_KEY=")
	out, err = cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "HTTP 401: missing API key") {
		t.Errorf("without a key: %v\n%s", err, out)
	}
}
