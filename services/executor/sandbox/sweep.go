package sandbox

// What executors leave behind, and who removes it.
//
// Each Sandbox is an instance of an executor, named "<node>.<pid>" (a
// further Sandbox in the same process adds "-<n>"), that keeps its tasks'
// cgroups under <agentmesh cgroup>/<instance> in every hierarchy and their
// staging directories under <workspace root>/agentmesh-<instance>. A task's
// processes die with their executor (the agent process is the init of the
// task's PID namespace and gets SIGKILL when its parent dies), and its
// workspace is a tmpfs of its own mount namespace; what a dead executor
// leaves are directories: the instance's cgroups and staging directories.
//
// Who owns an instance is told by a lock, not by a pid: while it lives, an
// instance holds an exclusive flock on <workspace root>/agentmesh-
// <instance>.lock. The kernel releases it when the process dies, however
// it dies, so a lock another process can take belongs to an instance that
// no longer exists — whatever its pid has become since (pid reuse), and
// from whichever PID namespace the question is asked. An instance without
// a lock file (left by an executor of an earlier version) is judged by its
// pid, only under this node's name, as before: gone when no process has
// that pid.
//
// Every executor sweeps at start (New) and then periodically (SweepEvery,
// every minute by default): a dead executor that nobody restarts leaves
// nothing for long while another executor of the node runs. A clean stop
// removes the instance's own directories and lock (Close).

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

// sandboxes counts the Sandboxes of this process, so each has an instance
// name of its own.
var sandboxes atomic.Int64

// instanceName names a new Sandbox of node in this process.
func instanceName(node string) string {
	if n := sandboxes.Add(1); n > 1 {
		return fmt.Sprintf("%s.%d-%d", node, os.Getpid(), n)
	}
	return fmt.Sprintf("%s.%d", node, os.Getpid())
}

const (
	instancePrefix = "agentmesh-"
	lockSuffix     = ".lock"
)

// lockPath is where instance's owner lock is, under the workspace root.
func lockPath(root, instance string) string {
	return filepath.Join(root, instancePrefix+instance+lockSuffix)
}

// own takes the instance's owner lock for the Sandbox's life. The lock
// file is created under a temporary name, locked, then renamed into
// place, so that no sweeper ever finds it unlocked while its owner lives.
func (s *Sandbox) own() error {
	f, err := os.CreateTemp(s.cfg.WorkspaceRoot, instancePrefix+s.instance+lockSuffix+".*")
	if err != nil {
		return fmt.Errorf("sandbox: the instance's lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		os.Remove(f.Name())
		return fmt.Errorf("sandbox: lock %s: %w", f.Name(), err)
	}
	if err := os.Rename(f.Name(), lockPath(s.cfg.WorkspaceRoot, s.instance)); err != nil {
		f.Close()
		os.Remove(f.Name())
		return fmt.Errorf("sandbox: the instance's lock: %w", err)
	}
	s.lock = f
	return nil
}

// Close removes what the Sandbox keeps while it lives — its instance's
// cgroups and staging directory (the /etc snapshot, the tasks' directories
// if any are left) — and gives up its lock. Call it once its tasks are
// cleaned up; a clean stop so leaves no empty instance directories.
func (s *Sandbox) Close() {
	s.pool.drain()
	for _, base := range uniq(s.mem.base, s.pids.base, s.cpu.base) {
		killTree(base)
		_ = removeCgroup(base)
	}
	removeWorkspace(s.wsRoot)
	if s.lock != nil {
		_ = os.Remove(lockPath(s.cfg.WorkspaceRoot, s.instance))
		_ = s.lock.Close()
		s.lock = nil
	}
}

// Sweep removes what executor instances that no longer exist left behind
// (see above) — never this Sandbox's own — and returns what it removed.
func (s *Sandbox) Sweep() []string { return sweep(s.cfg, s.instance) }

// SweepEvery sweeps every interval until ctx ends, logging what it
// removed.
func (s *Sandbox) SweepEvery(ctx context.Context, interval time.Duration, log *slog.Logger) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if removed := s.Sweep(); len(removed) > 0 {
			log.Info("swept what executors that no longer exist left behind", "removed", len(removed), "paths", removed)
		}
	}
}

// Sweep is Sandbox.Sweep for cfg, before any Sandbox of this process
// exists (it spares none of them).
func Sweep(cfg Config) []string {
	if err := cfg.defaults(); err != nil {
		return nil
	}
	return sweep(cfg, "")
}

// sweep removes the leftovers of every instance but own whose owner is
// gone: its cgroups (killing anything still in them), its staging
// directory, its lock file.
func sweep(cfg Config, own string) []string {
	var bases []string
	for _, name := range []string{"memory", "pids", "cpu"} {
		if ctl, err := findController(name, cfg.CgroupName); err == nil && !slices.Contains(bases, ctl.base) {
			bases = append(bases, ctl.base)
		}
	}
	var removed []string
	for _, inst := range instances(cfg.WorkspaceRoot, bases) {
		if inst == own {
			continue
		}
		release, gone := ownerGone(cfg, inst)
		if !gone {
			continue
		}
		for _, base := range bases {
			dir := filepath.Join(base, inst)
			if _, err := os.Stat(dir); err != nil {
				continue
			}
			killTree(dir)
			if removeCgroup(dir) == nil {
				removed = append(removed, dir)
			}
		}
		dir := filepath.Join(cfg.WorkspaceRoot, instancePrefix+inst)
		if _, err := os.Stat(dir); err == nil {
			removeWorkspace(dir)
			if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
				removed = append(removed, dir)
			}
		}
		if os.Remove(lockPath(cfg.WorkspaceRoot, inst)) == nil {
			removed = append(removed, lockPath(cfg.WorkspaceRoot, inst))
		}
		release()
	}
	return removed
}

// instances lists the instance names found in the workspace root (staging
// directories, lock files) and the cgroup bases.
func instances(root string, bases []string) []string {
	seen := map[string]bool{}
	ents, _ := os.ReadDir(root)
	for _, e := range ents {
		name, ok := strings.CutPrefix(e.Name(), instancePrefix)
		switch {
		case !ok:
		case e.IsDir():
			seen[name] = true
		case strings.HasSuffix(name, lockSuffix) && e.Type().IsRegular():
			seen[strings.TrimSuffix(name, lockSuffix)] = true
		}
	}
	for _, base := range bases {
		ents, _ := os.ReadDir(base)
		for _, e := range ents {
			if e.IsDir() {
				seen[e.Name()] = true
			}
		}
	}
	out := make([]string, 0, len(seen))
	for name := range seen {
		out = append(out, name)
	}
	slices.Sort(out)
	return out
}

// ownerGone reports whether the instance's owner is gone; when it is, the
// caller holds its lock (if it had one) until release, so no other sweeper
// removes the same directories at once.
func ownerGone(cfg Config, inst string) (release func(), gone bool) {
	f, err := os.OpenFile(lockPath(cfg.WorkspaceRoot, inst), os.O_RDONLY, 0)
	if err == nil {
		if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) != nil {
			f.Close()
			return nil, false // its owner holds it: alive
		}
		return func() { f.Close() }, true
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return nil, false
	}
	return func() {}, pidGone(cfg.Node, inst)
}

// pidGone judges an instance without a lock file by its name
// ("<node>.<pid>" or "<node>.<pid>-<n>"): of this node, and no process has
// its pid.
func pidGone(node, inst string) bool {
	i := strings.LastIndexByte(inst, '.')
	if i < 0 || inst[:i] != node {
		return false
	}
	pidStr, _, _ := strings.Cut(inst[i+1:], "-")
	pid, err := strconv.Atoi(pidStr)
	if err != nil || pid <= 0 || pid == os.Getpid() {
		return false
	}
	return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
}
