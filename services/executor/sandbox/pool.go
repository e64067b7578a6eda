package sandbox

// Cgroup sets used again.
//
// Making a task's cgroups (five mkdirs on cgroup v1, each allocating the
// controller's state in the kernel) and its staging directory (on ext4,
// the inode allocator skips the many recently deleted inodes such churn
// leaves), and removing them (rmdirs, then the kernel's workers freeing
// the cgroups' state) was most of the executor's side of a sandboxed
// spawn (docs/benchmarks.md, "The sandboxed spawn: cgroup sets and
// staging directories used again"). An ended task's
// cgroup set and staging directory are instead kept in a small pool and
// handed to a later task of the same Sandbox, when nothing tells them
// from new ones:
//
//   - the staging directory is empty (the task's root was mounted on it
//     in the task's own mount namespace; on the host it stays empty);
//   - the set is empty: no process in any of its directories (the
//     kernel lists every thread group in cgroup.procs; a task's processes
//     cannot leave its cgroups, so an empty set means none of them is
//     alive);
//   - its counters a task can read or the executor reports are zero: the
//     agent's and the tools' oom_kill, the pids limits' "max" events (the
//     tools' OOM file is bound into the sandbox); nr_throttled, which only
//     the executor reads, is counted from where the next task starts
//     (cgSet.throttled0);
//   - what is still charged to its memory cgroup (page cache the task
//     read; its tmpfs went with its mount namespace) is at most
//     recycleMaxCharge, reclaimable cache the next task's limit reclaims
//     first;
//   - its limits are the Sandbox's (the sandbox may write none of them:
//     only the tools' cgroup.procs is given to it) and its CPU weight the
//     foreground one (SetBackground is undone); after a task its CPU
//     limit throttled, the limit is written again, which refills the
//     period's runtime (a task never throttled leaves some of it: the
//     next one has at most the rest of that period, ≤ 100 ms, with what
//     is left of the quota).
//
// A set keeps the host uid (and gid) its files and staging directory were
// given to: that uid stays reserved with it in the pool and is handed
// with it, so no other task ever runs as the owner of a pooled set's
// files. A set is in the pool or with exactly one task: take removes it,
// and only the Cleanup of the task that held it (once, under the task's
// lock) puts it back. A set that fails any check is removed as before.
// The pool's directories are under the instance's cgroup base and
// staging directory like a task's, so Close removes them, and a dead
// executor's are swept with its instance (sweep.go).

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"sync"
)

// DefaultCgroupPool is how many ended tasks' cgroup sets a Sandbox keeps
// for later tasks (Config.CgroupPool).
const DefaultCgroupPool = 16

// maxCgroupPool bounds Config.CgroupPool.
const maxCgroupPool = 1024

// recycleMaxCharge bounds the memory still charged to an ended task's
// cgroup for the set to be used again.
const recycleMaxCharge = 4 << 20

// cgPool holds the cgroup sets of ended tasks. A nil pool holds none.
type cgPool struct {
	mu   sync.Mutex
	max  int
	free []cgSet
}

func newCgPool(n int) *cgPool {
	if n <= 0 {
		return nil
	}
	return &cgPool{max: n}
}

// take hands out a pooled set, removing it from the pool.
func (p *cgPool) take() (cgSet, bool) {
	if p == nil {
		return cgSet{}, false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	n := len(p.free)
	if n == 0 {
		return cgSet{}, false
	}
	c := p.free[n-1]
	p.free[n-1] = cgSet{}
	p.free = p.free[:n-1]
	return c, true
}

// full reports whether put would refuse a set.
func (p *cgPool) full() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.free) >= p.max
}

// put keeps a set, unless the pool is full.
func (p *cgPool) put(c cgSet) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.free) >= p.max {
		return false
	}
	p.free = append(p.free, c)
	return true
}

// drain empties the pool (Close removes the directories).
func (p *cgPool) drain() {
	if p == nil {
		return
	}
	p.mu.Lock()
	p.free = nil
	p.mu.Unlock()
}

// Pooled is how many cgroup sets the pool holds now (for tests and
// diagnostics).
func (s *Sandbox) Pooled() int {
	if s.pool == nil {
		return 0
	}
	s.pool.mu.Lock()
	defer s.pool.mu.Unlock()
	return len(s.pool.free)
}

// recycle puts the ended task's cgroup set (and its uid) in the pool when
// nothing tells it from a new one (above), and reports whether it did;
// then the set is no longer the task's. Called by Cleanup, with the
// counters read, before anything is removed.
func (t *Task) recycle() bool {
	p := t.sb.pool
	if p == nil || t.memDir == "" || len(t.cgDirs) == 0 || p.full() {
		return false
	}
	if t.agentOOM != 0 || t.toolsOOM != 0 || t.pidsMaxHit != 0 {
		return false
	}
	for _, d := range t.cgDirs {
		if !cgroupEmpty(d) {
			return false
		}
	}
	if charged(t.memDir, t.sb.mem.v2) > recycleMaxCharge || !dirEmpty(t.dir) {
		return false
	}
	if t.background.Load() {
		if err := t.SetBackground(false); err != nil {
			return false
		}
	}
	throttled, ok := readKey(filepath.Join(t.cpuDir, "cpu.stat"), "nr_throttled")
	if !ok {
		return false
	}
	// A task its CPU limit throttled may have left its last period's
	// runtime spent: writing the limit again refills it (and lifts the
	// throttle), so the next task does not start with what is left of
	// this one's quota. The write is not made otherwise: it costs ~0.14 ms
	// (tg_set_bandwidth), a quarter of the executor's side of a spawn.
	if throttled > t.throttled0 {
		if err := setCPU(t.cpuDir, t.sb.cpu.v2, t.sb.cfg.CPU); err != nil {
			return false
		}
	}
	set := t.cgSet
	set.stage, set.throttled0 = t.dir, throttled
	if !p.put(set) {
		return false
	}
	t.cgSet = cgSet{name: set.name}
	return true
}

// dirEmpty reports whether a directory exists and holds nothing.
func dirEmpty(dir string) bool {
	f, err := os.Open(dir)
	if err != nil {
		return false
	}
	defer f.Close()
	_, err = f.Readdirnames(1)
	return errors.Is(err, io.EOF)
}

// cgroupEmpty reports whether a cgroup holds no process (false when it
// cannot tell).
func cgroupEmpty(dir string) bool {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	return err == nil && len(b) == 0
}

// charged is the memory charged to a memory cgroup (v1
// memory.usage_in_bytes, v2 memory.current); the most when unreadable.
func charged(dir string, v2 bool) int64 {
	name := "memory.usage_in_bytes"
	if v2 {
		name = "memory.current"
	}
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		return 1<<63 - 1
	}
	n, err := strconv.ParseInt(string(trimNL(b)), 10, 64)
	if err != nil {
		return 1<<63 - 1
	}
	return n
}

func trimNL(b []byte) []byte {
	for len(b) > 0 && (b[len(b)-1] == '\n' || b[len(b)-1] == ' ') {
		b = b[:len(b)-1]
	}
	return b
}
