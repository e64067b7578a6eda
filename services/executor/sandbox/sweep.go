package sandbox

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// Sweep removes what executors of cfg's node that are no longer running
// left behind: their task cgroups (killing anything still in them) and
// their workspaces' staging directories. Each executor keeps its own under
// "<node>.<pid>" (in every cgroup hierarchy's agentmesh cgroup, and as
// agentmesh-<node>.<pid> in the workspace root), so a sweep never touches
// a live executor's tasks, whichever node it is. New calls it; it returns
// what it removed.
//
// Why there is little to sweep: a task's processes die with its executor
// (the agent process is the init of the task's PID namespace and gets
// SIGKILL when the executor dies: Pdeathsig), and the task's workspace is
// a tmpfs that exists only in the task's mount namespace, gone with its
// last process. What stays is empty: cgroup directories and the host
// directory the sandbox was built on, until the node's next executor
// starts.
func Sweep(cfg Config) []string {
	if err := cfg.defaults(); err != nil {
		return nil
	}
	var removed []string
	dead := func(name string) bool {
		node, pidStr, ok := strings.Cut(name, ".")
		if !ok || node != cfg.Node {
			return false
		}
		pid, err := strconv.Atoi(pidStr)
		if err != nil || pid <= 0 || pid == os.Getpid() {
			return false
		}
		err = syscall.Kill(pid, 0)
		return errors.Is(err, syscall.ESRCH)
	}
	for _, name := range []string{"memory", "pids", "cpu"} {
		ctl, err := findController(name, cfg.CgroupName)
		if err != nil {
			continue
		}
		ents, _ := os.ReadDir(ctl.base)
		for _, e := range ents {
			if !e.IsDir() || !dead(e.Name()) {
				continue
			}
			dir := filepath.Join(ctl.base, e.Name())
			killTree(dir)
			if removeCgroup(dir) == nil {
				removed = append(removed, dir)
			}
		}
	}
	ents, _ := os.ReadDir(cfg.WorkspaceRoot)
	for _, e := range ents {
		inst, ok := strings.CutPrefix(e.Name(), "agentmesh-")
		if !ok || !e.IsDir() || !dead(inst) {
			continue
		}
		dir := filepath.Join(cfg.WorkspaceRoot, e.Name())
		removeWorkspace(dir)
		if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
			removed = append(removed, dir)
		}
	}
	return removed
}
