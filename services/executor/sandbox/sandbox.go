// Package sandbox isolates agent child processes.
//
// Three isolation levels can be asked for:
//
//   - Strict (the default): the child starts in new user, PID, mount,
//     network, IPC, UTS and cgroup namespaces and its own session (no controlling
//     terminal), with a clean environment; its root is mapped to a host
//     uid of its own (one of Config.UIDs per running task when the
//     executor runs as root; one of the user's subordinate ids, mapped by
//     newuidmap/newgidmap, when it does not: subids.go). Before it reads
//     anything from the executor it confines itself (Enter): it closes
//     every descriptor it inherited but stdin, stdout and stderr, joins a
//     new session keyring, builds
//     its filesystem from nothing and pivots into it (see root.go: system
//     paths read-only, a fresh /proc, a minimal /dev, its workspace and
//     /tmp on a tmpfs of Config.Disk bytes; no host /tmp, /run, /var or
//     other workspace exists in it), forbids further namespaces, sets safe
//     rlimits (no core files, NOFILE, FSIZE), applies Landlock (the system
//     paths read-only, its workspace read-write, nothing else; no TCP bind
//     or connect; abstract unix sockets scoped to the sandbox where the
//     kernel has ABI 6), a seccomp filter (socket families other than
//     unix, inet, inet6 and netlink — vsock above all — and io_uring are
//     refused; seccomp.go), no capabilities for anything it executes, not
//     dumpable. The executor puts it in cgroups with memory, pids and CPU
//     limits (v1 or v2, whichever the host offers); the programs its tools
//     run go in a nested cgroup with a smaller memory limit. The child is
//     the init of its PID namespace: killing it kills every process of the
//     task, daemons included, and it dies with the executor (Pdeathsig).
//   - BestEffort: every wall of Strict that this host (and this user)
//     allows, the rest named with why and how to get it; the level the
//     tasks get is "strict" when nothing is missing, else "reduced"
//     (Sandbox.Isolation). Namespaces and the fresh root are not optional:
//     without user namespaces New fails. This is what `agentmesh dev` asks
//     for, so that it runs as an ordinary user.
//   - None: a plain child process in its own session (development on
//     platforms without the above). It is loudly labelled as unsandboxed.
//
// The executor side is New (probes the host once and fails closed when the
// level cannot be had), Sandbox.Prepare (a task's workspace and cgroups),
// Task.Command and Task.Start (the child's command and its placement in the
// cgroups), Task.OOMKilled and Task.Cleanup. The child side is Enter (call
// it first thing in the child) and Current (what the local tools need).
package sandbox

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Level is an isolation level.
type Level string

const (
	// Strict: every wall (see the package comment); New fails without one.
	Strict Level = "strict"
	// BestEffort: every wall the host allows; the missing ones are named.
	BestEffort Level = "best-effort"
	// None: a plain child process. Unsandboxed.
	None Level = "none"
)

// What a task got (Sandbox.Isolation), as recorded on the task.
const (
	IsolationStrict  = "strict"
	IsolationReduced = "reduced"
	IsolationNone    = "none"
)

// ParseLevel parses "strict", "best-effort" or "none" ("" is strict).
func ParseLevel(s string) (Level, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "", string(Strict):
		return Strict, nil
	case string(BestEffort), "besteffort", "best_effort":
		return BestEffort, nil
	case string(None):
		return None, nil
	}
	return "", fmt.Errorf("isolation level %q: want strict, best-effort or none", s)
}

// Config configures the sandbox. Zero values take the defaults named.
type Config struct {
	// Level of isolation (Strict).
	Level Level
	// Memory bounds the memory of a task's whole process tree, swap
	// included (512 MiB).
	Memory int64
	// ToolMemory bounds the memory of the programs local tools run
	// (code_run, shell), together (128 MiB); at most Memory.
	ToolMemory int64
	// Pids bounds the processes and threads of a task (256); the programs
	// its tools run get all but max(16, Pids/8), kept for the agent process.
	Pids int
	// NoFile is RLIMIT_NOFILE in the sandbox (1024).
	NoFile uint64
	// FileSize is RLIMIT_FSIZE in the sandbox: the largest file a task may
	// write (1 GiB).
	FileSize uint64
	// UIDs is the range of host uids (and gids) task sandboxes are mapped
	// to when the executor runs as root, one per running task
	// (DefaultUIDs). An executor that is not root takes them from its
	// user's subordinate ranges (/etc/subuid, /etc/subgid) when it has
	// them and the helpers newuidmap/newgidmap, else maps its own ids, the
	// same for every task, and says so (Label).
	UIDs IDRange
	// Disk bounds what a task stores: its workspace, /tmp and /dev/shm
	// live on one tmpfs of this size (1 GiB). Its pages are charged to the
	// memory cgroup of whoever writes them.
	Disk int64
	// CPU is the task's CPU share in cores (0.5: half of one core), for
	// the agent process and its tools' programs together.
	CPU float64
	// CPUShares is the CPU weight of all the executor's tasks together
	// against the executor's own cgroup, in cgroup v1 cpu.shares units
	// (an ordinary process group has 1024; cgroup v2 gets the equivalent
	// cpu.weight): when the CPU is short the agents yield it to the
	// control plane (DefaultCPUShares, 1024: the kernel's default, an
	// ordinary group; see cpuweight.go).
	CPUShares int64
	// Node names this executor's node: the cgroups and workspaces of the
	// executor's tasks are under "<Node>.<pid>" (sweep.go), and its
	// executors sweep what the dead ones left behind (the host name).
	Node string
	// ReadOnlyPaths are readable (and executable) in the sandbox besides
	// /usr, /bin, /sbin, /lib*, the parts of /etc programs read and /proc
	// (e.g. /opt/node); they are bound into the sandbox's fresh root at
	// the same path.
	ReadOnlyPaths []string
	// Path is PATH in the sandbox ("/usr/local/bin:/usr/bin:/bin").
	Path string
	// WorkspaceRoot is where task workspaces are created (os.TempDir()).
	WorkspaceRoot string
	// CgroupName names the cgroup, under the executor's own, that holds
	// the task cgroups ("agentmesh").
	CgroupName string
	// CgroupPool is how many ended tasks' cgroup sets are kept and handed
	// to later tasks instead of new ones (pool.go); 0: none, each task's
	// are made for it and removed after it (the executor's default is
	// DefaultCgroupPool).
	CgroupPool int
}

// Defaults.
const (
	DefaultMemory     = 512 << 20
	DefaultToolMemory = 128 << 20
	DefaultPids       = 256
	DefaultNoFile     = 1024
	DefaultFileSize   = 1 << 30
	DefaultDisk       = 1 << 30
	DefaultCPU        = 0.5
	DefaultPath       = "/usr/local/bin:/usr/bin:/bin"
	DefaultCgroupName = "agentmesh"
)

// SystemPaths are readable and executable in a strict sandbox (Landlock's
// rules; the fresh root holds only these anyway).
var SystemPaths = []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/proc"}

// defaults fills in and checks the configuration one field after another:
// a flat list, one field a few lines, read in order (over 80 lines only
// because the fields are many; split, it would scatter them).
func (c *Config) defaults() error {
	if c.Level == "" {
		c.Level = Strict
	}
	if c.Level != Strict && c.Level != BestEffort && c.Level != None {
		return fmt.Errorf("sandbox: isolation level %q: want strict, best-effort or none", c.Level)
	}
	if c.Memory <= 0 {
		c.Memory = DefaultMemory
	}
	if c.ToolMemory <= 0 {
		c.ToolMemory = DefaultToolMemory
	}
	if c.ToolMemory > c.Memory {
		c.ToolMemory = c.Memory
	}
	if c.Memory < 16<<20 {
		return fmt.Errorf("sandbox: memory limit %d bytes is too small (at least 16 MiB)", c.Memory)
	}
	if c.Pids <= 0 {
		c.Pids = DefaultPids
	}
	if c.CgroupPool < 0 || c.CgroupPool > maxCgroupPool {
		return fmt.Errorf("sandbox: cgroup pool %d: want 0 to %d", c.CgroupPool, maxCgroupPool)
	}
	if c.Pids < 32 {
		return fmt.Errorf("sandbox: pids limit %d is too small (at least 32: the agent process alone runs several threads)", c.Pids)
	}
	if c.NoFile == 0 {
		c.NoFile = DefaultNoFile
	}
	if c.FileSize == 0 {
		c.FileSize = DefaultFileSize
	}
	if c.UIDs.Count == 0 {
		c.UIDs = DefaultUIDs
	}
	if c.UIDs.First <= 0 || c.UIDs.Count < 0 || c.UIDs.First+c.UIDs.Count > 1<<32-1 {
		return fmt.Errorf("sandbox: uid range %s is invalid", c.UIDs)
	}
	if c.Disk == 0 {
		c.Disk = DefaultDisk
	}
	if c.Disk < 1<<20 {
		return fmt.Errorf("sandbox: task disk %d bytes is too small (at least 1 MiB)", c.Disk)
	}
	if c.CPU == 0 {
		c.CPU = DefaultCPU
	}
	if c.CPU < 0.01 || c.CPU > 1024 {
		return fmt.Errorf("sandbox: CPU share %g cores: want 0.01 to 1024", c.CPU)
	}
	if c.CPUShares == 0 {
		c.CPUShares = DefaultCPUShares
	}
	if err := checkCPUShares(c.CPUShares); err != nil {
		return err
	}
	if c.Node == "" {
		c.Node, _ = os.Hostname()
	}
	c.Node = cleanName(c.Node, 40)
	if c.Node == "" {
		c.Node = "node"
	}
	if c.Path == "" {
		c.Path = DefaultPath
	}
	if c.WorkspaceRoot == "" {
		c.WorkspaceRoot = os.TempDir()
	}
	if c.CgroupName == "" {
		c.CgroupName = DefaultCgroupName
	}
	for _, p := range c.ReadOnlyPaths {
		if !filepath.IsAbs(p) {
			return fmt.Errorf("sandbox: read-only path %q is not absolute", p)
		}
	}
	return nil
}

// ErrUnavailable is wrapped by New when the configured level cannot be had.
var ErrUnavailable = errors.New("isolation level unavailable on this host")

// ErrResourceExhausted is wrapped by errors that report a sandbox limit
// reached (memory, processes, time).
var ErrResourceExhausted = errors.New("resource exhausted")

// Sandbox makes task sandboxes on this host.
type Sandbox struct {
	cfg       Config
	root      bool         // the executor runs as root
	uids      *uidPool     // root or sub: one host uid per task
	sub       *subordinate // not root: subordinate ids, mapped by the helpers
	caps      []uintptr    // sub: the capabilities the child keeps across exec
	uid, gid  int          // not root, no sub: the executor's own ids, for every task
	mem       controller
	pids      controller
	cpu       controller
	cgroups   bool    // memory, pids and CPU limits are had
	pool      *cgPool // ended tasks' cgroup sets, for later tasks (nil: none)
	abi       int     // Landlock ABI, 0 without
	seccomp   bool
	instance  string   // "<node>.<pid>[-<n>]": names this executor's cgroups and workspaces (sweep.go)
	lock      *os.File // the instance's owner lock, held while it lives (sweep.go)
	wsRoot    string   // where its task workspaces are staged
	etc       string   // the /etc snapshot under wsRoot (etc.go), "" without
	missing   []string
	isolation string
	label     string // the isolation with what it lacks, as recorded on tasks
	report    string
}

// New checks cfg and probes the host. With Strict it fails closed, with an
// error wrapping ErrUnavailable that names what is missing, unless the
// host offers every wall: user namespaces (and the rest), the fresh root,
// Landlock, the seccomp filter, the memory, pids and CPU cgroup
// controllers and, as root, a uid per task. With BestEffort only user
// namespaces and the fresh root are required; what else is missing is
// named (Missing, String) and the tasks' isolation is "reduced". The
// probe starts one real sandboxed process (the running binary, which must
// link this package; see Enter). New also sweeps what dead executors of
// the same node left behind (see Sweep), and takes the lock that tells
// the others it lives. Close removes what it keeps.
func New(cfg Config) (_ *Sandbox, err error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	s := &Sandbox{cfg: cfg, root: os.Geteuid() == 0, instance: instanceName(cfg.Node)}
	s.wsRoot = filepath.Join(cfg.WorkspaceRoot, instancePrefix+s.instance)
	if cfg.Level == None {
		s.isolation = IsolationNone
		s.label = IsolationNone
		s.report = "isolation none: UNSANDBOXED — agent processes run as plain child processes with the executor's privileges (no namespaces, no fresh root, no Landlock, no cgroup limits); for development only"
		s.Sweep()
		if err := os.MkdirAll(s.wsRoot, 0o700); err != nil {
			return nil, fmt.Errorf("sandbox: create the workspace root: %w", err)
		}
		// Without its lock (a workspace root without flock) the instance
		// is judged by its pid, as an older one is (sweep.go).
		_ = s.own()
		return s, nil
	}
	MarkInheritedCloseOnExec()
	var w walls
	subErr := s.findIDs()
	s.probe(&w)
	s.Sweep()
	if err := s.prepareRoot(&w); err != nil {
		return nil, err
	}
	_ = s.own() // (as above)
	defer func() {
		if err != nil {
			s.Close() // a sandbox refused leaves nothing behind
		}
	}()
	if len(w.fatal) == 0 {
		err := s.selfTest()
		if err != nil && s.sub != nil {
			// Subordinate ids listed but not usable (helpers not setuid,
			// a range shadow refuses): tasks share the executor's uid.
			subErr = fmt.Errorf("mapping a task to subordinate ids failed: %v", err)
			s.sub, s.uids, s.caps = nil, nil, nil
			err = s.selfTest()
		}
		if err != nil {
			w.fatal = append(w.fatal, err.Error())
		}
	}
	if !s.root && s.sub == nil {
		w.missing = append([]string{fmt.Sprintf("a host uid per task: the executor is not root and cannot map tasks to subordinate ids (%v), so every task's sandbox is mapped to its uid %d; the fresh root still keeps the tasks' workspaces apart — run the executor as root, or give its user a subordinate range", subErr, s.uid)}, w.missing...)
		w.short = append([]string{"one uid for all tasks — add a /etc/subuid range and install uidmap"}, w.short...)
	}
	if len(w.fatal) > 0 || (cfg.Level == Strict && len(w.missing) > 0) {
		all := append(w.fatal, w.missing...)
		hint := "set the isolation level to best-effort to run with what this host allows (named on every task), or to none to run unsandboxed, for development only"
		if len(w.fatal) > 0 {
			hint = "set the isolation level to none to run unsandboxed, for development only"
		}
		return nil, fmt.Errorf("sandbox: %w: %s isolation needs: %s (%s)", ErrUnavailable, cfg.Level, strings.Join(all, "; "), hint)
	}
	s.settle(w)
	s.pool = newCgPool(cfg.CgroupPool)
	return s, nil
}

// walls are what New found of the sandbox's walls: fatal, what no level
// but none can do without; missing, the walls this host or user lacks
// (best-effort runs without them, named), and their short names for the
// label.
type walls struct {
	fatal, missing, short []string
}

// findIDs finds the host ids the tasks are mapped to: a pool of uids as
// root, else the executor's user's subordinate ids (the error says why
// there are none).
func (s *Sandbox) findIDs() error {
	if s.root {
		s.uids = newUIDPool(s.cfg.UIDs)
		return nil
	}
	s.uid, s.gid = os.Geteuid(), os.Getegid()
	sub, err := findSubordinate()
	if err != nil {
		return err
	}
	s.sub, s.uids, s.caps = sub, sub.pool(), AmbientCaps()
	return nil
}

// probe checks the kernel's walls: user namespaces, Landlock, seccomp and
// the cgroup controllers.
func (s *Sandbox) probe(w *walls) {
	if err := userNamespacesEnabled(); err != nil {
		w.fatal = append(w.fatal, err.Error())
	}
	if abi, err := landlockABI(); err != nil {
		w.missing, w.short = append(w.missing, err.Error()), append(w.short, "no Landlock")
	} else {
		s.abi = abi
	}
	if _, err := seccompProgram(); err != nil {
		w.missing, w.short = append(w.missing, err.Error()), append(w.short, "no seccomp filter")
	} else {
		s.seccomp = true
	}
	if err := s.findCgroups(); err != nil {
		w.missing, w.short = append(w.missing, err.Error()), append(w.short, "no cgroup limits — run under a delegated cgroup")
	} else {
		s.cgroups = true
	}
}

// prepareRoot creates the workspace root and the /etc snapshot, and
// checks that the tasks' uids can reach it.
func (s *Sandbox) prepareRoot(w *walls) error {
	if err := os.MkdirAll(s.wsRoot, 0o711); err != nil {
		return fmt.Errorf("sandbox: create the workspace root: %w", err)
	}
	if err := os.Chmod(s.wsRoot, 0o711); err != nil {
		return fmt.Errorf("sandbox: workspace root: %w", err)
	}
	if err := buildEtc(filepath.Join(s.wsRoot, "etc")); err != nil {
		w.fatal = append(w.fatal, err.Error())
	} else {
		s.etc = filepath.Join(s.wsRoot, "etc")
	}
	if s.root {
		// The tasks' uids must be able to reach their staging directories.
		for d := filepath.Dir(s.wsRoot); d != "/" && d != "."; d = filepath.Dir(d) {
			if st, err := os.Stat(d); err == nil && st.Mode().Perm()&0o001 == 0 {
				w.fatal = append(w.fatal, fmt.Sprintf("workspace root %s: the tasks' uids cannot reach it (%s is mode %v: it needs o+x)", s.cfg.WorkspaceRoot, d, st.Mode().Perm()))
				break
			}
		}
	}
	return nil
}

// settle records the isolation the walls give, its label and the report
// New's caller logs.
func (s *Sandbox) settle(w walls) {
	s.missing = w.missing
	s.isolation = IsolationStrict
	s.label = IsolationStrict
	if len(w.missing) > 0 {
		s.isolation = IsolationReduced
		short := w.short
		if s.sub != nil {
			short = append([]string{"a subordinate uid per task"}, short...)
		}
		s.label = IsolationReduced + ": " + strings.Join(short, "; ")
	}
	s.report = s.describe()
}

// describe says what the sandbox's walls are.
func (s *Sandbox) describe() string {
	cfg := s.cfg
	var b strings.Builder
	fmt.Fprintf(&b, "isolation %s: user/pid/mount/net/ipc/uts namespaces, fresh root (system paths read-only; workspace, /tmp and /dev/shm on a %s tmpfs), no inherited descriptors, new session keyring, no controlling terminal", s.isolation, mib(cfg.Disk))
	if s.root {
		fmt.Fprintf(&b, ", a host uid per task from %s", cfg.UIDs)
	} else if s.sub != nil {
		fmt.Fprintf(&b, ", a host uid per task from the subordinate uids %s (gids %s), mapped by %s and %s", s.sub.uids, s.sub.gids, s.sub.newuidmap, s.sub.newgidmap)
	} else {
		fmt.Fprintf(&b, ", every task as host uid %d", s.uid)
	}
	if s.abi > 0 {
		fmt.Fprintf(&b, ", landlock ABI %d", s.abi)
		if s.abi >= 6 {
			b.WriteString(" (abstract unix sockets scoped")
			if s.abi >= 8 {
				b.WriteString(", signals scoped")
			}
			b.WriteString(")")
		}
	}
	if s.seccomp {
		b.WriteString(", seccomp (socket families unix/inet/inet6/netlink only, no io_uring)")
	}
	if s.cgroups {
		fmt.Fprintf(&b, ", cgroup memory %s (task %s, tools %s), cgroup pids %s (max %d), cgroup cpu %s (%g cores; all tasks weigh %d cpu.shares)",
			s.mem, mib(cfg.Memory), mib(cfg.ToolMemory), s.pids, cfg.Pids, s.cpu, cfg.CPU, cfg.CPUShares)
	}
	fmt.Fprintf(&b, ", rlimits core=0 nofile=%d fsize=%s", cfg.NoFile, mib(int64(cfg.FileSize)))
	if len(s.missing) > 0 {
		fmt.Fprintf(&b, "; MISSING: %s", strings.Join(s.missing, "; "))
	}
	return b.String()
}

// findCgroups locates the memory, pids and CPU controllers and prepares
// this executor's cgroup under each.
func (s *Sandbox) findCgroups() error {
	parent := filepath.Join(s.cfg.CgroupName, s.instance)
	var errs []string
	for _, c := range []struct {
		dst  *controller
		name string
	}{{&s.mem, "memory"}, {&s.pids, "pids"}, {&s.cpu, "cpu"}} {
		ctl, err := findController(c.name, parent)
		if err == nil {
			err = ctl.prepareBase()
		}
		if err == nil && c.name == "memory" {
			ctl.swap = swapFile(ctl.base, ctl.v2)
		}
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		*c.dst = ctl
	}
	if len(errs) == 0 {
		if err := s.setAgentsWeight(); err != nil {
			errs = append(errs, err.Error())
		}
	}
	if len(errs) > 0 {
		how := "run the executor as root, or give it a delegated cgroup v2 subtree (as an ordinary user under systemd: systemd-run --user --scope -p Delegate=yes agentmesh dev)"
		return fmt.Errorf("cgroup limits (memory, pids, CPU): %s — %s", strings.Join(errs, "; "), how)
	}
	return nil
}

// Level returns the isolation level asked for.
func (s *Sandbox) Level() Level { return s.cfg.Level }

// Isolation is what every task of this sandbox gets: "strict" (every
// wall), "reduced" (some missing, see Missing) or "none".
func (s *Sandbox) Isolation() string { return s.isolation }

// Label is what is recorded on every task: the isolation and, when it is
// reduced, what the tasks lack in short (e.g. "reduced: one uid for all
// tasks — add a /etc/subuid range and install uidmap; no cgroup limits —
// run under a delegated cgroup"); Missing says why and how at length.
func (s *Sandbox) Label() string { return s.label }

// Missing names the walls this host could not give (BestEffort), each
// with why and how to get it.
func (s *Sandbox) Missing() []string { return append([]string(nil), s.missing...) }

// Config returns the configuration with its defaults applied.
func (s *Sandbox) Config() Config { return s.cfg }

// String reports what the sandbox enforces on this host.
func (s *Sandbox) String() string { return s.report }

func mib(n int64) string {
	if n%(1<<20) == 0 {
		return strconv.FormatInt(n>>20, 10) + " MiB"
	}
	return strconv.FormatInt(n, 10) + " bytes"
}

// Task is the sandbox of one task attempt: its workspace and cgroups.
type Task struct {
	sb    *Sandbox
	dir   string   // the host directory the sandbox's root is built on
	syncR *os.File // sub: the child's end of the sync pipe
	syncW *os.File // sub: the executor's end; a byte releases the child
	// cgSet is the task's cgroups and host ids: made for it, or an ended
	// task's taken from the Sandbox's pool (pool.go).
	cgSet
	exe *os.File
	// background: SetBackground(true) was the last weight written.
	background atomic.Bool

	mu         sync.Mutex
	cleaned    bool
	agentOOM   int64
	toolsOOM   int64
	pidsMaxHit int64
}

// cgSet is a task's cgroup directories and the host ids their files are
// given to (giveToSandbox): one task's at a time.
type cgSet struct {
	name     string
	uid, gid int  // host ids of the sandbox's root
	sub      bool // mapped to subordinate ids by the helpers (MapIDs)

	memDir   string // the task's memory cgroup
	agentMem string // where the agent process goes in the memory hierarchy
	toolsMem string // the tools' memory cgroup
	pidsDir  string // the task's pids cgroup
	agentPid string // where the agent process goes in the pids hierarchy
	toolsPid string // the tools' pids cgroup
	cpuDir   string // the task's cpu cgroup (v1, or v2 apart from memory/pids)
	agentCPU string // where the agent process goes in the cpu hierarchy
	// cgDirs are the cgroup directories setup created, in order (parents
	// before their children).
	cgDirs []string
	// throttled0 is the cpu cgroup's nr_throttled when the set was handed
	// to this task (0 for a new one): CPUThrottled counts from it.
	throttled0 int64
	// stage is, in the pool, the ended task's staging directory (empty,
	// its uid's), handed on with the cgroups.
	stage string
}

// Prepare creates a task's staging directory and, for Strict, its uid and
// cgroups. Call Cleanup when done.
func (s *Sandbox) Prepare(taskID string) (*Task, error) {
	if set, ok := s.pool.take(); ok {
		return &Task{sb: s, dir: set.stage, cgSet: set}, nil
	}
	if err := os.MkdirAll(s.wsRoot, 0o711); err != nil {
		return nil, fmt.Errorf("create task workspace: %w", err)
	}
	dir, err := os.MkdirTemp(s.wsRoot, "task-")
	if err != nil {
		return nil, fmt.Errorf("create task workspace: %w", err)
	}
	t := &Task{sb: s, dir: dir, cgSet: cgSet{name: s.cgroupName(taskID), uid: s.uid, gid: s.gid}}
	if s.cfg.Level == None {
		return t, nil
	}
	if s.uids != nil {
		if t.uid, err = s.uids.get(); err != nil {
			removeWorkspace(dir)
			return nil, err
		}
		t.gid = t.uid
		if s.sub != nil {
			t.sub, t.gid = true, s.sub.gidOf(t.uid)
		}
	}
	if err := t.setup(); err != nil {
		t.Cleanup()
		return nil, err
	}
	return t, nil
}

func (t *Task) setup() error {
	s := t.sb
	if s.root {
		if err := os.Chown(t.dir, t.uid, t.gid); err != nil {
			return fmt.Errorf("sandbox: chown workspace: %w", err)
		}
	}
	if err := os.Chmod(t.dir, 0o700); err != nil {
		return fmt.Errorf("sandbox: chmod workspace: %w", err)
	}
	if !s.cgroups {
		return nil
	}
	sameV2 := s.mem.v2 && s.pids.v2 && s.mem.base == s.pids.base
	if err := t.setupMemory(sameV2); err != nil {
		return err
	}
	if err := t.setupPids(sameV2); err != nil {
		return err
	}
	return t.setupCPU()
}

// setupMemory makes the task's memory cgroups: <base>/<task> (the whole
// task), the agent in it (v1) or in <task>/agent (v2: no processes in
// inner cgroups), tools in <task>/tools. With sameV2 the pids controller
// shares them.
func (t *Task) setupMemory(sameV2 bool) error {
	s := t.sb
	t.memDir = filepath.Join(s.mem.base, t.name)
	if err := t.mkCgroup(t.memDir); err != nil {
		return fmt.Errorf("sandbox: create cgroup: %w", err)
	}
	if err := setMemory(t.memDir, s.mem, s.cfg.Memory); err != nil {
		return err
	}
	if s.mem.v2 {
		ctrl := "+memory"
		if sameV2 {
			ctrl += " +pids"
		}
		if err := writeFile(t.memDir, "cgroup.subtree_control", ctrl); err != nil {
			return err
		}
		t.agentMem = filepath.Join(t.memDir, "agent")
		if err := t.mkCgroup(t.agentMem); err != nil {
			return fmt.Errorf("sandbox: create cgroup: %w", err)
		}
	} else {
		t.agentMem = t.memDir
	}
	t.toolsMem = filepath.Join(t.memDir, "tools")
	if err := t.mkCgroup(t.toolsMem); err != nil {
		return fmt.Errorf("sandbox: create cgroup: %w", err)
	}
	if err := setMemory(t.toolsMem, s.mem, s.cfg.ToolMemory); err != nil {
		return err
	}
	// The sandbox moves the programs its tools run into the tools cgroup
	// itself (it cannot move anything out: it may write no other
	// cgroup.procs; v2 asks for write access to the common ancestor's).
	chown := []string{filepath.Join(t.toolsMem, "cgroup.procs")}
	if s.mem.v2 {
		chown = append(chown, filepath.Join(t.memDir, "cgroup.procs"))
	}
	for _, f := range chown {
		if err := t.giveToSandbox(f); err != nil {
			return err
		}
	}
	return nil
}

// setupPids makes the task's pids cgroups: the task's limit, and a
// smaller one for the tools' programs, so that a fork bomb leaves the
// agent process room for its threads. With sameV2 they are the memory
// cgroups.
func (t *Task) setupPids(sameV2 bool) error {
	s := t.sb
	if sameV2 {
		t.pidsDir, t.agentPid, t.toolsPid = t.memDir, t.agentMem, t.toolsMem
	} else {
		t.pidsDir = filepath.Join(s.pids.base, t.name)
		if err := t.mkCgroup(t.pidsDir); err != nil {
			return fmt.Errorf("sandbox: create cgroup: %w", err)
		}
		t.agentPid = t.pidsDir
		if s.pids.v2 {
			if err := writeFile(t.pidsDir, "cgroup.subtree_control", "+pids"); err != nil {
				return err
			}
			t.agentPid = filepath.Join(t.pidsDir, "agent")
			if err := t.mkCgroup(t.agentPid); err != nil {
				return fmt.Errorf("sandbox: create cgroup: %w", err)
			}
		}
		t.toolsPid = filepath.Join(t.pidsDir, "tools")
		if err := t.mkCgroup(t.toolsPid); err != nil {
			return fmt.Errorf("sandbox: create cgroup: %w", err)
		}
		if err := t.giveToSandbox(filepath.Join(t.toolsPid, "cgroup.procs")); err != nil {
			return err
		}
	}
	if err := writeFile(t.toolsPid, "pids.max", strconv.Itoa(s.cfg.toolPids())); err != nil {
		return err
	}
	return writeFile(t.pidsDir, "pids.max", strconv.Itoa(s.cfg.Pids))
}

// setupCPU gives the whole task one CPU share. In the unified hierarchy a
// process is in one cgroup only: the limit goes on the task's v2 cgroup
// (whose subtree holds the agent and the tools) when there is one;
// otherwise the task gets a cpu cgroup of its own.
func (t *Task) setupCPU() error {
	s := t.sb
	switch {
	case s.cpu.v2 && s.mem.v2 && s.cpu.base == s.mem.base:
		t.cpuDir, t.agentCPU = t.memDir, t.agentMem
	case s.cpu.v2 && s.pids.v2 && s.cpu.base == s.pids.base:
		t.cpuDir, t.agentCPU = t.pidsDir, t.agentPid
	default:
		t.cpuDir = filepath.Join(s.cpu.base, t.name)
		if err := t.mkCgroup(t.cpuDir); err != nil {
			return fmt.Errorf("sandbox: create cgroup: %w", err)
		}
		t.agentCPU = t.cpuDir
	}
	return setCPU(t.cpuDir, s.cpu.v2, s.cfg.CPU)
}

// mkCgroup creates one of the task's cgroup directories and remembers it.
func (t *Task) mkCgroup(dir string) error {
	if err := os.Mkdir(dir, 0o755); err != nil {
		return err
	}
	t.cgDirs = append(t.cgDirs, dir)
	return nil
}

// giveToSandbox lets the task's sandbox root write a cgroup file: chown to
// its uid as root; with subordinate ids (which an ordinary user cannot
// chown to) mode 0666 — a cgroup file only a writer that may also write
// the common ancestor's cgroup.procs, inside this executor's subtree, can
// use.
func (t *Task) giveToSandbox(f string) error {
	switch {
	case t.sb.root:
		if err := os.Chown(f, t.uid, t.gid); err != nil {
			return fmt.Errorf("sandbox: chown %s: %w", f, err)
		}
	case t.sub:
		if err := os.Chmod(f, 0o666); err != nil {
			return fmt.Errorf("sandbox: chmod %s: %w", f, err)
		}
	}
	return nil
}

// toolPids is the tools' share of the pids limit: all but a reserve for
// the agent process's threads.
func (c Config) toolPids() int { return c.Pids - max(16, c.Pids/8) }

// cgroupName names a new task's cgroups after the task. A set that may be
// handed to later tasks (a pool) is named at random alone: a task sees
// its cgroups' names (/proc/self/cgroup, the mount table), and must not
// learn an earlier task's id from them.
func (s *Sandbox) cgroupName(taskID string) string {
	if s.pool != nil {
		var rnd [8]byte
		_, _ = rand.Read(rnd[:])
		return "task-" + hex.EncodeToString(rnd[:])
	}
	var rnd [4]byte
	_, _ = rand.Read(rnd[:])
	return "task-" + cleanName(taskID, 40) + "-" + hex.EncodeToString(rnd[:])
}

// cleanName keeps the first n letters, digits, '-' and '_' of s.
func cleanName(s string, n int) string {
	var b strings.Builder
	for _, r := range s {
		if b.Len() >= n {
			break
		}
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' {
			b.WriteRune(r)
		}
	}
	return b.String()
}

// Workspace is the task's working directory as the agent process sees it:
// SandboxWorkspace in a sandbox (a tmpfs that exists only in the task's
// mount namespace), the host directory with None.
func (t *Task) Workspace() string {
	if t.Unsandboxed() {
		return t.dir
	}
	return SandboxWorkspace
}

// Stage is the host directory the task's sandbox is built on (with None,
// its workspace). It stays empty on the host.
func (t *Task) Stage() string { return t.dir }

// UID is the host uid the task's sandbox runs as (-1 with None).
func (t *Task) UID() int {
	if t.Unsandboxed() {
		return -1
	}
	return t.uid
}

// Level is the task's isolation level.
func (t *Task) Level() Level { return t.sb.cfg.Level }

// Isolation is what the task got: "strict", "reduced" or "none".
func (t *Task) Isolation() string { return t.sb.isolation }

// Unsandboxed reports whether the task runs without isolation (None).
func (t *Task) Unsandboxed() bool { return t.sb.cfg.Level == None }

// MemoryLimit is the memory limit of the task's process tree (0 with None).
func (t *Task) MemoryLimit() int64 {
	if t.Unsandboxed() {
		return 0
	}
	return t.sb.cfg.Memory
}

// Command returns the command that runs argv as the task's child: in the
// workspace, with a clean environment (env, plus PATH and HOME), its own
// session (and so process group; no controlling terminal), killed when
// the executor dies and, unless None, in new namespaces with the sandbox
// parameters Enter reads as its last argument.
// Start it with Task.Start. The caller may set Stdin/Stdout/Stderr, Cancel
// and WaitDelay; ctx ending kills it.
func (t *Task) Command(ctx context.Context, argv []string, env []string) (*exec.Cmd, error) {
	if len(argv) == 0 {
		return nil, errors.New("sandbox: empty command")
	}
	cfg := t.sb.cfg
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = t.dir
	cmd.Env = append(append([]string(nil), env...), "HOME="+t.Workspace())
	if cfg.Level == None {
		cmd.Env = append(cmd.Env, "PATH="+os.Getenv("PATH"))
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Pdeathsig: syscall.SIGKILL}
		return cmd, nil
	}
	p := t.params()
	if t.sb.root && t.uid != 0 {
		if err := t.execByFD(cmd, argv[0], &p); err != nil {
			return nil, err
		}
	}
	if t.sub {
		// Subordinate ids: the helpers map them after the start (Start,
		// MapIDs); the child waits on this pipe until they have.
		r, w, err := os.Pipe()
		if err != nil {
			return nil, fmt.Errorf("sandbox: sync pipe: %w", err)
		}
		t.closeSync()
		t.syncR, t.syncW = r, w
		cmd.ExtraFiles = append(cmd.ExtraFiles, r)
		p.SyncFD = 2 + len(cmd.ExtraFiles)
	}
	b, err := json.Marshal(p)
	if err != nil {
		return nil, err
	}
	cmd.Env = append(cmd.Env, "PATH="+cfg.Path)
	cmd.Args = append(cmd.Args, ArgParams+string(b))
	cmd.SysProcAttr = t.namespaces()
	return cmd, nil
}

// params are the sandbox parameters Enter reads in the child.
func (t *Task) params() params {
	cfg := t.sb.cfg
	p := params{
		Stage:      t.dir,
		Etc:        t.sb.etcFor(),
		Disk:       cfg.Disk,
		Landlock:   t.sb.abi > 0,
		Scope:      landlockScope(t.sb.abi),
		Seccomp:    t.sb.seccomp,
		ReadOnly:   cfg.ReadOnlyPaths,
		NoFile:     cfg.NoFile,
		FileSize:   cfg.FileSize,
		ToolMemory: cfg.ToolMemory,
		V2:         t.sb.mem.v2,
		Pids:       cfg.Pids,
	}
	if t.toolsMem != "" {
		p.ToolProcs, p.ToolOOM = t.toolProcs(), oomKillFile(t.toolsMem, t.sb.mem.v2)
	}
	return p
}

// execByFD makes cmd exec the binary through an fd the executor opened:
// the sandbox's root (a host uid of its own) may not reach the binary (a
// 0700 build directory). Enter closes it.
func (t *Task) execByFD(cmd *exec.Cmd, name string, p *params) error {
	path, err := exec.LookPath(name)
	if err != nil {
		return fmt.Errorf("sandbox: %w", err)
	}
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("sandbox: open %s: %w", path, err)
	}
	t.exe = f
	cmd.Path = "/proc/self/fd/3"
	cmd.Err = nil
	cmd.ExtraFiles = []*os.File{f}
	p.ExeFD = 3
	return nil
}

// namespaces is how the child starts: in new namespaces, mapped to the
// task's host ids (or, with subordinate ids, mapped by the helpers once it
// runs), in a session of its own, killed when the executor dies.
func (t *Task) namespaces() *syscall.SysProcAttr {
	a := &syscall.SysProcAttr{
		Cloneflags: syscall.CLONE_NEWUSER | syscall.CLONE_NEWPID | syscall.CLONE_NEWNS |
			syscall.CLONE_NEWNET | syscall.CLONE_NEWIPC | syscall.CLONE_NEWUTS | syscall.CLONE_NEWCGROUP,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: t.uid, Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: t.gid, Size: 1}},
		// As root, drop the executor's supplementary groups (setgroups);
		// an unprivileged executor may not.
		GidMappingsEnableSetgroups: t.sb.root,
		// Root in the namespace, with its capabilities there, until Enter
		// drops them.
		Credential: &syscall.Credential{Uid: 0, Gid: 0},
		// A session of its own: a new process group, no controlling
		// terminal (nothing can be pushed into the executor's terminal).
		Setsid:    true,
		Pdeathsig: syscall.SIGKILL,
	}
	if t.sub {
		// No mapping yet (an ordinary user may write only its own ids;
		// the helpers write the subordinate ones once it runs), so no
		// credential to switch to; the capabilities of its namespace are
		// kept across exec as ambient ones, until Enter drops them.
		a.UidMappings, a.GidMappings, a.GidMappingsEnableSetgroups, a.Credential = nil, nil, false, nil
		a.AmbientCaps = t.sb.caps
	}
	return a
}

// closeSync closes what is left of the sync pipe.
func (t *Task) closeSync() {
	for _, f := range []**os.File{&t.syncR, &t.syncW} {
		if *f != nil {
			_ = (*f).Close()
			*f = nil
		}
	}
}

// toolProcs are the cgroup.procs files a tool's program joins.
func (t *Task) toolProcs() []string {
	out := []string{filepath.Join(t.toolsMem, "cgroup.procs")}
	if t.toolsPid != t.toolsMem {
		out = append(out, filepath.Join(t.toolsPid, "cgroup.procs"))
	}
	return out
}

// Start starts cmd (from Command) and, for Strict, puts it in the task's
// cgroups before it is sent anything. On error nothing is left running.
func (t *Task) Start(cmd *exec.Cmd) error {
	err := cmd.Start()
	if t.exe != nil {
		_ = t.exe.Close()
		t.exe = nil
	}
	if t.syncR != nil {
		_ = t.syncR.Close()
		t.syncR = nil
	}
	if err != nil || t.Unsandboxed() {
		t.closeSync()
		return err
	}
	fail := func(err error) error {
		t.closeSync() // EOF: the child exits without running anything
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return err
	}
	pid := strconv.Itoa(cmd.Process.Pid)
	if t.memDir != "" {
		for _, dir := range uniq(t.agentMem, t.agentPid, t.agentCPU) {
			if err := writeFile(dir, "cgroup.procs", pid); err != nil {
				return fail(fmt.Errorf("sandbox: %w", err))
			}
		}
	}
	if t.sub {
		if err := t.MapAndRelease(cmd.Process.Pid); err != nil {
			return fail(err)
		}
	}
	return nil
}

// AgentCgroupProcs are the cgroup.procs files the task's agent process
// joins (none with None or without cgroups): a spawner that starts the
// process writes its pid there before it reaps it, as Start does.
func (t *Task) AgentCgroupProcs() []string {
	if t.Unsandboxed() || t.memDir == "" {
		return nil
	}
	var out []string
	for _, dir := range uniq(t.agentMem, t.agentPid, t.agentCPU) {
		out = append(out, filepath.Join(dir, "cgroup.procs"))
	}
	return out
}

// Started closes the executable's descriptor and the child's end of the
// sync pipe once another process (a spawner) started the task's child
// from Command's cmd (or failed to) and placed it in AgentCgroupProcs. A
// task whose ids the helpers map is then mapped and released with
// MapAndRelease.
func (t *Task) Started() {
	if t.exe != nil {
		_ = t.exe.Close()
		t.exe = nil
	}
	if t.syncR != nil {
		_ = t.syncR.Close()
		t.syncR = nil
	}
}

// StartError explains why a sandboxed process could not start (user
// namespaces refused or exhausted, for instance).
func StartError(err error) error { return startError(err) }

// OOMKilled reports whether the kernel OOM-killed the agent process itself
// at the task's memory limit (its tools' programs have their own, smaller
// limit and are reported by the tools; see ToolOOMKills). Call it after
// the process ended, before or after Cleanup.
func (t *Task) OOMKilled() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.cleaned {
		return t.agentOOM > 0
	}
	return t.agentMem != "" && oomKills(t.agentMem, t.sb.mem.v2) > 0
}

// ToolOOMKills is how many programs run by tools were OOM-killed at the
// tools' memory limit.
func (t *Task) ToolOOMKills() int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.cleaned {
		return t.toolsOOM
	}
	if t.toolsMem == "" {
		return 0
	}
	return max(oomKills(t.toolsMem, t.sb.mem.v2), 0)
}

// PidsLimitHits is how many forks the pids limits (the task's and the
// tools') refused.
func (t *Task) PidsLimitHits() int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.cleaned {
		return t.pidsMaxHit
	}
	return t.pidsHits()
}

func (t *Task) pidsHits() int64 {
	var sum int64
	for _, d := range []string{t.pidsDir, t.toolsPid} {
		if d != "" {
			n, _ := readKey(filepath.Join(d, "pids.events"), "max")
			sum += n
		}
	}
	return sum
}

// MemoryError is the error of a task whose agent process was killed at
// its memory limit. It wraps ErrResourceExhausted.
func (t *Task) MemoryError() error {
	return fmt.Errorf("%w: the agent process was killed at its memory limit of %s", ErrResourceExhausted, mib(t.sb.cfg.Memory))
}

// Procs lists the host pids of the processes in the task's cgroup (the
// agent and everything it started), for tests and diagnostics.
func (t *Task) Procs() []int {
	if t.pidsDir == "" {
		return nil
	}
	var out []int
	_ = filepath.WalkDir(t.pidsDir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			out = append(out, procs(p)...)
		}
		return nil
	})
	return out
}

// Cgroups lists the task's cgroup directories (for tests and diagnostics).
func (t *Task) Cgroups() []string { return uniq(t.memDir, t.pidsDir, t.cpuDir) }

// Cleanup kills whatever is left in the task's cgroups, removes them and
// the workspace. It keeps the OOM and pids counters for later questions.
// Call it after the process was waited for.
func (t *Task) Cleanup() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.cleaned {
		return
	}
	t.cleaned = true
	if t.exe != nil {
		_ = t.exe.Close()
	}
	t.closeSync()
	if t.agentMem != "" {
		t.agentOOM = max(oomKills(t.agentMem, t.sb.mem.v2), 0)
	}
	if t.toolsMem != "" {
		t.toolsOOM = max(oomKills(t.toolsMem, t.sb.mem.v2), 0)
	}
	t.pidsMaxHit = t.pidsHits()
	if t.recycle() {
		return
	}
	empty := t.removeEmptyCgroups()
	if !empty {
		for _, d := range []string{t.pidsDir, t.memDir, t.cpuDir} {
			if d != "" {
				killTree(d)
			}
		}
		for _, d := range uniq(t.pidsDir, t.memDir, t.cpuDir) {
			_ = removeCgroup(d)
		}
	}
	if t.sb.cfg.Level == None {
		removeWorkspace(t.dir)
	} else {
		removeSandboxedWorkspace(t.dir)
	}
	if t.sb.uids != nil && t.uid != 0 && (empty || t.pidsDir == "" || len(procs(t.pidsDir)) == 0) {
		t.sb.uids.put(t.uid)
	}
}

// removeEmptyCgroups removes the task's cgroups, children first, and
// reports whether all of them went. The kernel refuses to remove a cgroup
// that still holds a process (EBUSY), so success means nothing of the task
// is left in them: no kill is needed, and neither is the listing of their
// directories and processes the general path (killTree, removeCgroup) does
// — the common case, where the agent process has exited and been reaped
// (its PID namespace, whose init it was, went with it). Nothing but setup
// creates a directory in them: the sandbox may write only the tools'
// cgroup.procs. On false the general path removes what is left.
func (t *Task) removeEmptyCgroups() bool {
	for i := len(t.cgDirs) - 1; i >= 0; i-- {
		if err := os.Remove(t.cgDirs[i]); err != nil && !errors.Is(err, os.ErrNotExist) {
			return false
		}
	}
	return true
}

// uniq returns the non-empty strings of ss, each once.
func uniq(ss ...string) []string {
	var out []string
	for _, s := range ss {
		if s != "" && !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

// removeWorkspace removes a workspace unless something is mounted inside it
// (possible only unsandboxed, where a tool runs with the executor's
// privileges): removing it would descend into the mounted tree.
func removeWorkspace(dir string) {
	if b, err := os.ReadFile("/proc/self/mountinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); len(f) > 4 {
				if mp := unescapeMount(f[4]); mp == dir || strings.HasPrefix(mp, dir+"/") {
					fmt.Fprintf(os.Stderr, "agentmesh sandbox: not removing workspace %s: %s is mounted inside it\n", dir, mp)
					return
				}
			}
		}
	}
	_ = os.RemoveAll(dir)
}

// removeSandboxedWorkspace removes the workspace of a sandboxed task
// without reading the executor's mount table: nothing a sandboxed task
// mounts can appear in the executor's mount namespace. Its child is
// started with CLONE_NEWUSER|CLONE_NEWNS, so its mount namespace is less
// privileged than the executor's and the kernel reduces every shared
// mount in it to a slave (no propagation back; mount_namespaces(7)), and
// Enter makes the whole tree private before it mounts anything. Reading
// /proc/self/mountinfo per task was a fifth of the teardown's time.
func removeSandboxedWorkspace(dir string) { _ = os.RemoveAll(dir) }

// killTree SIGKILLs every process in a cgroup and its children.
func killTree(dir string) {
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			killProcs(p)
		}
		return nil
	})
}

func killProcs(dir string) {
	for _, pid := range procs(dir) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

// selfTest starts one real sandboxed process: this binary in probe mode.
func (s *Sandbox) selfTest() error {
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("self-test: %w", err)
	}
	t, err := s.Prepare("probe")
	if err != nil {
		return err
	}
	defer t.Cleanup()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd, err := t.Command(ctx, []string{exe}, []string{envProbe + "=1"})
	if err != nil {
		return err
	}
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := t.Start(cmd); err != nil {
		return startError(err)
	}
	err = cmd.Wait()
	msg := strings.TrimSpace(out.String())
	if err != nil || msg != probeOK {
		if msg == "" {
			msg = fmt.Sprint(err)
		}
		return fmt.Errorf("self-test of a sandboxed process failed: %s", msg)
	}
	return nil
}

// startError explains why a sandboxed process could not start.
func startError(err error) error {
	switch {
	case errors.Is(err, syscall.EPERM), errors.Is(err, syscall.EACCES):
		return fmt.Errorf("user namespaces: creating one was refused (%v): unprivileged user namespaces disabled (kernel.unprivileged_userns_clone=0, or AppArmor's kernel.apparmor_restrict_unprivileged_userns=1, or a seccomp profile)", err)
	case errors.Is(err, syscall.ENOSPC):
		return fmt.Errorf("user namespaces: limit reached (%v): raise user.max_user_namespaces", err)
	case errors.Is(err, syscall.EINVAL):
		return fmt.Errorf("namespaces: not supported by this kernel (%v)", err)
	}
	return fmt.Errorf("start a sandboxed process: %w", err)
}

func userNamespacesEnabled() error {
	if b, err := os.ReadFile("/proc/sys/user/max_user_namespaces"); err == nil && strings.TrimSpace(string(b)) == "0" {
		return errors.New("user namespaces: disabled (user.max_user_namespaces=0)")
	}
	if b, err := os.ReadFile("/proc/sys/kernel/unprivileged_userns_clone"); err == nil && strings.TrimSpace(string(b)) == "0" && os.Geteuid() != 0 {
		return errors.New("user namespaces: disabled (kernel.unprivileged_userns_clone=0)")
	}
	if _, err := os.Stat("/proc/self/ns/user"); err != nil {
		return errors.New("user namespaces: not supported by this kernel (no /proc/self/ns/user)")
	}
	return nil
}

// KillGroup sends SIGKILL to cmd's process group (a process started with
// Setpgid); a group already gone is not an error.
func KillGroup(cmd *exec.Cmd) error {
	if cmd.Process == nil {
		return nil
	}
	err := syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	if errors.Is(err, syscall.ESRCH) {
		return nil
	}
	return err
}
