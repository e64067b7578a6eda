package executor_test

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/pkg/poll"
	"github.com/agentmesh/agentmesh/services/executor/sandbox"
)

// envDeadExecutor makes the test binary an executor's sandbox that
// prepares one task, says where it keeps it, and waits to be killed.
const envDeadExecutor = "EXECUTOR_TEST_DEAD_EXECUTOR"

// deadExecutor is the helper process: a real executor sandbox of the
// node with one task prepared — its staging directory and task cgroups.
func deadExecutor(root string) int {
	sb, err := sandbox.New(sandbox.Config{Level: sandbox.Strict, WorkspaceRoot: root}) // the node of the live one (the host name)
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	task, err := sb.Prepare("orphan")
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	fmt.Printf("task %s %s\n", task.Stage(), strings.Join(task.Cgroups(), ","))
	time.Sleep(time.Hour)
	return 0
}

// Nothing left behind: an executor process killed with SIGKILL, and not
// restarted, leaves its task cgroups and staging directory; another
// executor of the node, running all along, removes them within its sweep
// interval — without a restart. Its own are untouched while it runs, and
// its clean stop leaves no instance directory of its own.
func TestDeadExecutorsLeftoversSweptByALiveOne(t *testing.T) {
	e := newEnv(t)
	root := t.TempDir()
	for _, d := range []string{root, filepath.Dir(root)} { // the tasks' uids must reach it
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	e.cfg.Sandbox.WorkspaceRoot = root
	e.cfg.SweepInterval = 100 * time.Millisecond
	stop := e.startExecutor()
	own := instanceEntries(t, root)
	if len(own) != 2 { // agentmesh-<instance> and its .lock
		t.Fatalf("the live executor's entries in the workspace root: %v, want its directory and its lock", own)
	}

	helper := exec.Command(os.Args[0])
	helper.Env = append(os.Environ(), envDeadExecutor+"="+root)
	out, err := helper.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := helper.Start(); err != nil {
		t.Fatal(err)
	}
	defer helper.Process.Kill()
	line, _ := bufio.NewReader(out).ReadString('\n')
	var stage, cgroups string
	if _, err := fmt.Sscanf(line, "task %s %s", &stage, &cgroups); err != nil {
		t.Fatalf("helper said %q", line)
	}
	// Its task's staging directory, its instance's directory and lock,
	// its task's cgroups and its instance's.
	left := append([]string{stage, filepath.Dir(stage), filepath.Dir(stage) + ".lock"}, strings.Split(cgroups, ",")...)
	for _, cg := range strings.Split(cgroups, ",") {
		left = append(left, filepath.Dir(cg)) // the instance's cgroup
	}
	// While it lives, its directories stay.
	time.Sleep(5 * e.cfg.SweepInterval)
	for _, p := range left {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("a live executor's %s was swept: %v", p, err)
		}
	}

	_ = helper.Process.Kill() // SIGKILL: nothing of its own clean-up runs
	_ = helper.Wait()
	poll.Until(t, 10*time.Second, func() error {
		for _, p := range left {
			if _, err := os.Stat(p); err == nil {
				return fmt.Errorf("%s is still there", p)
			}
		}
		return nil
	})
	if got := instanceEntries(t, root); strings.Join(got, " ") != strings.Join(own, " ") {
		t.Errorf("entries after the sweep %v, want the live executor's %v", got, own)
	}

	stop()
	if got := instanceEntries(t, root); len(got) != 0 {
		t.Errorf("after a clean stop the workspace root holds %v, want nothing of the executor", got)
	}
}

// instanceEntries lists the executor instances' entries in root.
func instanceEntries(t *testing.T, root string) []string {
	t.Helper()
	ents, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "agentmesh-") {
			out = append(out, e.Name())
		}
	}
	return out
}
