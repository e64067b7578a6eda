package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/poll"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
)

// exampleDir is the Node tap example (examples/tap-node).
var exampleDir = filepath.Join("..", "..", "examples", "tap-node")

// nodeExample makes sure node and the example's pinned packages are there
// (npm ci when node_modules is missing). Without node or npm the test is
// skipped, except under CI=true, where it fails.
func nodeExample(t *testing.T) string {
	t.Helper()
	missing := func(what string, err error) {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s: %v (CI installs node 20 and runs npm ci in %s)", what, err, exampleDir)
		}
		t.Skipf("%s: %v", what, err)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		missing("node", err)
	}
	if _, err := os.Stat(filepath.Join(exampleDir, "node_modules", "nats")); err != nil {
		npm, err := exec.LookPath("npm")
		if err != nil {
			missing("npm", err)
		}
		cmd := exec.Command(npm, "ci", "--no-audit", "--no-fund")
		cmd.Dir = exampleDir
		if out, err := cmd.CombinedOutput(); err != nil {
			missing("npm ci in "+exampleDir, errors.New(string(out)))
		}
	}
	return node
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// The Node example (the `nats` npm package) taps acme's events with a tap
// credential from the API: it decodes every JSON event of acme and sees
// none of globex's.
func TestNodeTapExample(t *testing.T) {
	node := nodeExample(t)
	e := start(t, opts{apiKeys: map[string]string{"key-acme": "acme", "key-globex": "globex"}})
	// Agents belong to orgs: each org defines its own default agent.
	for _, key := range []string{"key-acme", "key-globex"} {
		if _, err := e.agents.CreateAgent(withKey(ctxT(t), key), &agentmeshv1.CreateAgentRequest{Agent: &agentmeshv1.Agent{
			Name: "assistant", Tools: []string{"echo"},
		}}); err != nil {
			t.Fatal(err)
		}
	}
	tap, err := agentmeshv1.NewTapServiceClient(e.conn).CreateTap(withKey(ctxT(t), "key-acme"), &agentmeshv1.CreateTapRequest{Org: "acme"})
	if err != nil {
		t.Fatalf("create tap: %v", err)
	}
	creds := filepath.Join(t.TempDir(), "acme.creds")
	if err := os.WriteFile(creds, []byte(tap.GetCreds()), 0o600); err != nil {
		t.Fatal(err)
	}

	script, _ := filepath.Abs(filepath.Join(exampleDir, "tap.mjs"))
	cmd := exec.Command(node, script)
	cmd.Dir = exampleDir
	cmd.Env = append(os.Environ(), "NATS_URL="+e.stack.NATSURL(), "NATS_CREDS="+creds, "AGENTMESH_ORG=acme")
	stdout, stderr := &lockedBuffer{}, &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		if t.Failed() {
			t.Logf("tap.mjs stderr:\n%s\nstdout:\n%s", stderr.String(), stdout.String())
		}
	})
	poll.Until(t, 30*time.Second, func() error {
		if !strings.Contains(stderr.String(), "tapping am.evt.acme.>") {
			return errors.New("the example is not subscribed yet")
		}
		return nil
	})

	theirs := e.submitAs(t, "key-globex", "globex secret plans")
	ours := e.submitAs(t, "key-acme", "acme hello")
	e.waitStatusAs(t, "key-globex", theirs.Id, taskstate.Completed)
	e.waitStatusAs(t, "key-acme", ours.Id, taskstate.Completed)
	poll.Until(t, 30*time.Second, func() error {
		if !strings.Contains(stdout.String(), "am.evt.acme.task."+ours.Id+".completed") {
			return errors.New("acme's completed event not printed yet")
		}
		return nil
	})
	_ = cmd.Process.Signal(syscall.SIGINT)
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("tap.mjs exited with %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Error("tap.mjs did not stop on SIGINT")
	}

	types := map[string]bool{}
	sc := bufio.NewScanner(strings.NewReader(stdout.String()))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var line struct {
			Subject string          `json:"subject"`
			Type    string          `json:"type"`
			Event   json.RawMessage `json:"event"`
		}
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Fatalf("example printed %q: %v", sc.Text(), err)
		}
		if !strings.HasPrefix(line.Subject, "am.evt.acme.") && !strings.HasPrefix(line.Subject, "am.live.acme.") {
			t.Errorf("acme's tap saw %s", line.Subject)
		}
		if strings.Contains(sc.Text(), theirs.Id) || strings.Contains(sc.Text(), "globex") {
			t.Errorf("acme's tap saw globex's event: %s", sc.Text())
		}
		if line.Type != "agentmesh.v1.TaskEvent" {
			continue
		}
		var ev agentmeshv1.TaskEvent
		if err := bus.DecodeEvent(line.Event, &ev); err != nil {
			t.Errorf("event the example decoded is not a TaskEvent: %v (%s)", err, line.Event)
		}
		if ev.TaskId == ours.Id {
			types[taskstate.Name(ev.Status)+"/"+strings.ToLower(strings.TrimPrefix(ev.Type.String(), "EVENT_TYPE_"))] = true
		}
	}
	for _, want := range []string{"created/created", "queued/status", "running/status", "running/step", "completed/status"} {
		if !types[want] {
			t.Errorf("the example did not decode acme's %s event (got %v)", want, types)
		}
	}
}

func (e *env) submitAs(t *testing.T, key, input string) *agentmeshv1.Task {
	t.Helper()
	r, err := e.tasks.SubmitTask(withKey(ctxT(t), key), &agentmeshv1.SubmitTaskRequest{Input: input})
	if err != nil {
		t.Fatalf("submit: %v", err)
	}
	return r.Task
}

func (e *env) waitStatusAs(t *testing.T, key, id string, want agentmeshv1.TaskStatus) {
	t.Helper()
	poll.Until(t, 60*time.Second, func() error {
		r, err := e.tasks.GetTask(withKey(ctxShort(t), key), &agentmeshv1.GetTaskRequest{Id: id})
		if err != nil {
			return err
		}
		if r.Task.Status != want {
			return errStatus{r.Task.Status, want}
		}
		return nil
	})
}
