package sandbox_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/agentmesh/agentmesh/services/executor/sandbox"
)

// deadPid returns the pid of a process that has ended.
func deadPid(t *testing.T) int {
	t.Helper()
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	return cmd.Process.Pid
}

// An instance is judged by its owner lock, not by its pid: a lock nobody
// holds is an instance that no longer exists even when its pid was reused
// by a live process, and a held lock is a live instance whatever its name
// says. An instance without a lock file (an older executor's) is judged by
// its pid, under this node's name only.
func TestSweepJudgesByTheOwnerLock(t *testing.T) {
	root := t.TempDir()
	mk := func(inst string, lock bool) string {
		t.Helper()
		dir := filepath.Join(root, "agentmesh-"+inst)
		if err := os.MkdirAll(filepath.Join(dir, "task-1"), 0o700); err != nil {
			t.Fatal(err)
		}
		if lock {
			if err := os.WriteFile(dir+".lock", nil, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
	dead := deadPid(t)
	reused := mk(fmt.Sprintf("n.%d", os.Getppid()), true) // a live pid, its lock free: a reused pid
	held := mk(fmt.Sprintf("other.%d", dead), true)       // a dead pid, its lock held
	f, err := os.Open(held + ".lock")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	oldDead := mk(fmt.Sprintf("n.%d", dead), false)           // older, of this node, its pid gone
	oldOther := mk(fmt.Sprintf("m.%d", dead), false)          // older, another node's
	oldLive := mk(fmt.Sprintf("n.%d-2", os.Getppid()), false) // older, its pid alive

	removed := sandbox.Sweep(sandbox.Config{Level: sandbox.None, Node: "n", WorkspaceRoot: root})
	for _, tc := range []struct {
		dir  string
		gone bool
	}{{reused, true}, {held, false}, {oldDead, true}, {oldOther, false}, {oldLive, false}} {
		_, err := os.Stat(tc.dir)
		if gone := os.IsNotExist(err); gone != tc.gone {
			t.Errorf("%s: swept = %v, want %v (removed %v)", filepath.Base(tc.dir), gone, tc.gone, removed)
		}
	}
	if _, err := os.Stat(reused + ".lock"); !os.IsNotExist(err) {
		t.Errorf("the swept instance's lock file is still there: %v", err)
	}
}

// A live sandbox holds its lock: another's sweep leaves it alone; once
// closed, it leaves nothing in the workspace root nor in the cgroups.
func TestSandboxCloseLeavesNothing(t *testing.T) {
	root := t.TempDir()
	for _, d := range []string{root, filepath.Dir(root)} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	sb := strict(t, sandbox.Config{WorkspaceRoot: root, Node: "closing"})
	task, err := sb.Prepare("t")
	if err != nil {
		t.Fatal(err)
	}
	var instanceCgroups []string
	for _, cg := range task.Cgroups() {
		instanceCgroups = append(instanceCgroups, filepath.Dir(cg))
	}
	task.Cleanup()
	if removed := sandbox.Sweep(sandbox.Config{Level: sandbox.None, Node: "closing", WorkspaceRoot: root}); len(removed) > 0 {
		t.Fatalf("a sweep removed a live sandbox's %v", removed)
	}
	sb.Close()
	ents, _ := os.ReadDir(root)
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "agentmesh-") {
			t.Errorf("after Close the workspace root holds %s", e.Name())
		}
	}
	for _, d := range instanceCgroups {
		if _, err := os.Stat(d); err == nil {
			t.Errorf("after Close the instance's cgroup %s is still there", d)
		}
	}
}
