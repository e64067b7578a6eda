package sandbox

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// controller is where one cgroup controller (memory or pids) lives for this
// process: a cgroup v1 hierarchy, or the v2 unified hierarchy.
type controller struct {
	name string // "memory" or "pids"
	v2   bool
	// base is the directory under which task cgroups are created: the
	// executor's own cgroup in that hierarchy plus "/agentmesh".
	base string
	// swap (memory only) is the swap limit's file, "" without swap
	// accounting (swapFile).
	swap string
}

func (c controller) String() string {
	v := "v1"
	if c.v2 {
		v = "v2"
	}
	return v + ":" + c.base
}

// mountInfo is one cgroup mount.
type cgMount struct {
	dir     string
	v2      bool
	options map[string]bool // v1 super options (controller names)
}

// cgroupMounts lists the cgroup mounts of this process's mount namespace.
func cgroupMounts() ([]cgMount, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []cgMount
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		// 36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue
		fields := strings.Fields(sc.Text())
		sep := -1
		for i, f := range fields {
			if f == "-" {
				sep = i
				break
			}
		}
		if sep < 5 || sep+3 > len(fields) {
			continue
		}
		fstype, dir := fields[sep+1], unescapeMount(fields[4])
		switch fstype {
		case "cgroup2":
			out = append(out, cgMount{dir: dir, v2: true})
		case "cgroup":
			m := cgMount{dir: dir, options: map[string]bool{}}
			if sep+3 < len(fields) {
				for _, o := range strings.Split(fields[sep+3], ",") {
					m.options[o] = true
				}
			}
			out = append(out, m)
		}
	}
	return out, sc.Err()
}

func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// ownCgroups returns this process's cgroup path per v1 controller and, under
// "", its v2 path.
func ownCgroups() (map[string]string, error) {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[1] == "" {
			out[""] = parts[2]
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			out[c] = parts[2]
		}
	}
	return out, nil
}

// findController locates a controller: a v1 hierarchy that carries it, else
// the unified hierarchy when it offers it.
func findController(name, parent string) (controller, error) {
	mounts, err := cgroupMounts()
	if err != nil {
		return controller{}, fmt.Errorf("cgroups: read mounts: %w", err)
	}
	own, err := ownCgroups()
	if err != nil {
		return controller{}, fmt.Errorf("cgroups: read /proc/self/cgroup: %w", err)
	}
	for _, m := range mounts {
		if !m.v2 && m.options[name] {
			p, ok := own[name]
			if !ok {
				continue
			}
			return controller{name: name, base: filepath.Join(m.dir, p, parent)}, nil
		}
	}
	for _, m := range mounts {
		if !m.v2 {
			continue
		}
		b, err := os.ReadFile(filepath.Join(m.dir, "cgroup.controllers"))
		if err != nil || !hasWord(string(b), name) {
			continue
		}
		p, ok := own[""]
		if !ok {
			continue
		}
		return controller{name: name, v2: true, base: filepath.Join(m.dir, p, parent)}, nil
	}
	return controller{}, fmt.Errorf("cgroups: no %s controller is available (neither a cgroup v1 hierarchy with it nor cgroup2 offering it)", name)
}

func hasWord(s, w string) bool {
	for _, f := range strings.Fields(s) {
		if f == w {
			return true
		}
	}
	return false
}

// prepareBase creates the controller's base directory
// (<own cgroup>/agentmesh/<node>.<pid>) and, for v2, enables the
// controller for its children: in the executor's own cgroup (moving the
// executor into a leaf "executor" cgroup first if the kernel insists on
// no processes in inner cgroups), in agentmesh and in the base.
func (c controller) prepareBase() error {
	if err := os.MkdirAll(c.base, 0o755); err != nil {
		return fmt.Errorf("cgroups: create %s: %w (the executor needs write access to its cgroup)", c.base, err)
	}
	if !c.v2 {
		return nil
	}
	parent := filepath.Dir(filepath.Dir(c.base))
	if err := enableController(parent, c.name); err != nil {
		// The executor's cgroup holds processes: move them into a leaf.
		leaf := filepath.Join(parent, "executor")
		if mkErr := os.MkdirAll(leaf, 0o755); mkErr != nil {
			return fmt.Errorf("cgroups: enable %s in %s: %w", c.name, parent, err)
		}
		if mvErr := moveAll(parent, leaf); mvErr != nil {
			return fmt.Errorf("cgroups: enable %s in %s: %w (and moving the executor into a leaf failed: %v)", c.name, parent, err, mvErr)
		}
		if err := enableController(parent, c.name); err != nil {
			return fmt.Errorf("cgroups: enable %s in %s: %w", c.name, parent, err)
		}
	}
	for _, dir := range []string{filepath.Dir(c.base), c.base} {
		if err := enableController(dir, c.name); err != nil {
			return fmt.Errorf("cgroups: enable %s in %s: %w", c.name, dir, err)
		}
	}
	return nil
}

func enableController(dir, name string) error {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.subtree_control"))
	if err == nil && hasWord(string(b), name) {
		return nil
	}
	return os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte("+"+name), 0)
}

func moveAll(from, to string) error {
	b, err := os.ReadFile(filepath.Join(from, "cgroup.procs"))
	if err != nil {
		return err
	}
	for _, pid := range strings.Fields(string(b)) {
		if err := os.WriteFile(filepath.Join(to, "cgroup.procs"), []byte(pid), 0); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return nil
}

// writeFile writes one value to a cgroup file.
func writeFile(dir, name, value string) error {
	if err := os.WriteFile(filepath.Join(dir, name), []byte(value), 0); err != nil {
		return fmt.Errorf("cgroups: write %s to %s: %w", value, filepath.Join(dir, name), err)
	}
	return nil
}

// setMemory limits dir, a cgroup of the memory controller c, to limit
// bytes, swap included (when the kernel accounts swap: c.swap).
func setMemory(dir string, c controller, limit int64) error {
	v := strconv.FormatInt(limit, 10)
	name := "memory.limit_in_bytes"
	if c.v2 {
		name = "memory.max"
	}
	if err := writeFile(dir, name, v); err != nil {
		return err
	}
	switch {
	case c.swap == "":
		return nil
	case c.v2:
		return writeFile(dir, c.swap, "0")
	}
	return writeFile(dir, c.swap, v)
}

// swapFile is the swap limit's file of the memory controller whose
// executor cgroup is base, "" when the kernel does not account swap
// (v1 without swapaccount, v2 without the swap controller): every task
// cgroup under base has it or not as base does, so it is looked for once.
func swapFile(base string, v2 bool) string {
	name := "memory.memsw.limit_in_bytes"
	if v2 {
		name = "memory.swap.max"
	}
	if _, err := os.Stat(filepath.Join(base, name)); err != nil {
		return ""
	}
	return name
}

// cpuPeriod is the CFS period the CPU share is enforced over (100 ms).
const cpuPeriod = 100_000

// setCPU limits dir to cores CPUs' worth of time per period (v1
// cpu.cfs_quota_us, v2 cpu.max).
func setCPU(dir string, v2 bool, cores float64) error {
	quota := strconv.FormatInt(max(int64(cores*cpuPeriod), 1000), 10)
	if v2 {
		return writeFile(dir, "cpu.max", quota+" "+strconv.Itoa(cpuPeriod))
	}
	// A new cgroup's cpu.cfs_period_us is the kernel's default, which is
	// cpuPeriod: only the quota is written.
	return writeFile(dir, "cpu.cfs_quota_us", quota)
}

// CPUThrottled is how many CFS periods the task's CPU limit throttled it
// in (cpu.stat nr_throttled); -1 when unknown.
func (t *Task) CPUThrottled() int64 {
	if t.cpuDir == "" {
		return -1
	}
	if n, ok := readKey(filepath.Join(t.cpuDir, "cpu.stat"), "nr_throttled"); ok {
		return n - t.throttled0
	}
	return -1
}

// oomKills reads how many processes the kernel OOM-killed in dir (v1
// memory.oom_control "oom_kill", v2 memory.events.local or memory.events
// "oom_kill"). -1 when unreadable.
func oomKills(dir string, v2 bool) int64 {
	files := []string{"memory.oom_control"}
	if v2 {
		files = []string{"memory.events.local", "memory.events"}
	}
	for _, f := range files {
		if n, ok := readKey(filepath.Join(dir, f), "oom_kill"); ok {
			return n
		}
	}
	return -1
}

// OOMKillFile returns the file holding the oom_kill counter of a memory cgroup.
func oomKillFile(dir string, v2 bool) string {
	if v2 {
		return filepath.Join(dir, "memory.events")
	}
	return filepath.Join(dir, "memory.oom_control")
}

// readKey reads "key N" from a flat-keyed file.
func readKey(path, key string) (int64, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) == 2 && f[0] == key {
			n, err := strconv.ParseInt(f[1], 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}

// removeCgroup removes a cgroup directory (children first), retrying while
// the kernel finishes tearing its processes down.
func removeCgroup(dir string) error {
	if dir == "" {
		return nil
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if e.IsDir() {
			_ = removeCgroup(filepath.Join(dir, e.Name()))
		}
	}
	var err error
	for i := 0; i < 50; i++ {
		err = os.Remove(dir)
		if err == nil || errors.Is(err, os.ErrNotExist) {
			return nil
		}
		// Processes still inside (being killed): kill them and retry.
		killProcs(dir)
		time.Sleep(10 * time.Millisecond)
	}
	return err
}

// procs returns the pids in a cgroup.
func procs(dir string) []int {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return nil
	}
	var out []int
	for _, f := range strings.Fields(string(b)) {
		if n, err := strconv.Atoi(f); err == nil {
			out = append(out, n)
		}
	}
	return out
}
