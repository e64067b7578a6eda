// Package sandbox isolates agent child processes.
//
// Two isolation levels exist:
//
//   - Strict (the default): the child starts in new user, PID, mount,
//     network, IPC and UTS namespaces; its root is mapped to an unprivileged
//     host uid (65534 when the executor runs as root, the executor's own uid
//     otherwise). Before it reads anything from the executor it confines
//     itself (Enter): a fresh /proc for its PID namespace, no further
//     namespaces, safe rlimits (no core files, NOFILE, FSIZE), Landlock (the
//     system paths read-only, its workspace read-write, nothing else; no TCP
//     bind or connect), no capabilities for anything it executes, not
//     dumpable. The executor puts it in a cgroup with memory and pids
//     limits (v1 or v2, whichever the host offers); the programs its tools
//     run go in a nested cgroup with a smaller memory limit. The child is
//     the init of its PID namespace: killing it kills every process of the
//     task, daemons included, and it dies with the executor (Pdeathsig).
//   - None: a plain child process in its own process group (development on
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
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Level is an isolation level.
type Level string

const (
	// Strict: namespaces, Landlock, cgroups (see the package comment).
	Strict Level = "strict"
	// None: a plain child process. Unsandboxed.
	None Level = "none"
)

// ParseLevel parses "strict" or "none" ("" is strict).
func ParseLevel(s string) (Level, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "", string(Strict):
		return Strict, nil
	case string(None):
		return None, nil
	}
	return "", fmt.Errorf("isolation level %q: want strict or none", s)
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
	// UID and GID are the host ids the sandbox's root is mapped to when the
	// executor runs as root (65534, nobody/nogroup). An executor that is
	// not root maps its own ids.
	UID, GID int
	// ReadOnlyPaths are readable (and executable) in the sandbox besides
	// /usr, /bin, /sbin, /lib*, /etc and /proc (e.g. /opt/node).
	ReadOnlyPaths []string
	// Path is PATH in the sandbox ("/usr/local/bin:/usr/bin:/bin").
	Path string
	// WorkspaceRoot is where task workspaces are created (os.TempDir()).
	WorkspaceRoot string
	// CgroupName names the cgroup, under the executor's own, that holds
	// the task cgroups ("agentmesh").
	CgroupName string
}

// Defaults.
const (
	DefaultMemory     = 512 << 20
	DefaultToolMemory = 128 << 20
	DefaultPids       = 256
	DefaultNoFile     = 1024
	DefaultFileSize   = 1 << 30
	DefaultUID        = 65534
	DefaultPath       = "/usr/local/bin:/usr/bin:/bin"
	DefaultCgroupName = "agentmesh"
)

// SystemPaths are readable and executable in a strict sandbox.
var SystemPaths = []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/proc"}

func (c *Config) defaults() error {
	if c.Level == "" {
		c.Level = Strict
	}
	if c.Level != Strict && c.Level != None {
		return fmt.Errorf("sandbox: isolation level %q: want strict or none", c.Level)
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
	if c.Pids < 32 {
		return fmt.Errorf("sandbox: pids limit %d is too small (at least 32: the agent process alone runs several threads)", c.Pids)
	}
	if c.NoFile == 0 {
		c.NoFile = DefaultNoFile
	}
	if c.FileSize == 0 {
		c.FileSize = DefaultFileSize
	}
	if c.UID == 0 {
		c.UID = DefaultUID
	}
	if c.GID == 0 {
		c.GID = DefaultUID
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
	cfg      Config
	root     bool // the executor runs as root
	uid, gid int  // host ids of the sandbox's root
	mem      controller
	pids     controller
	abi      int
	report   string
}

// New checks cfg and probes the host. With Strict it fails closed, with an
// error wrapping ErrUnavailable that names what is missing, unless the
// host offers every part of it: Landlock, user namespaces (and the rest),
// a fresh /proc in a PID namespace, and the memory and pids cgroup
// controllers. The probe starts one real sandboxed process (the running
// binary, which must link this package; see Enter).
func New(cfg Config) (*Sandbox, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	s := &Sandbox{cfg: cfg, root: os.Geteuid() == 0}
	if cfg.Level == None {
		s.report = "isolation none: UNSANDBOXED — agent processes run as plain child processes with the executor's privileges (no namespaces, no Landlock, no cgroup limits); for development only"
		return s, nil
	}
	if s.root {
		s.uid, s.gid = cfg.UID, cfg.GID
	} else {
		s.uid, s.gid = os.Geteuid(), os.Getegid()
	}
	var missing []string
	abi, err := landlockABI()
	if err != nil {
		missing = append(missing, err.Error())
	}
	s.abi = abi
	if err := userNamespacesEnabled(); err != nil {
		missing = append(missing, err.Error())
	}
	s.mem, err = findController("memory", cfg.CgroupName)
	if err == nil {
		err = s.mem.prepareBase()
	}
	if err != nil {
		missing = append(missing, err.Error())
	}
	s.pids, err = findController("pids", cfg.CgroupName)
	if err == nil {
		err = s.pids.prepareBase()
	}
	if err != nil {
		missing = append(missing, err.Error())
	}
	if len(missing) == 0 {
		if err := s.selfTest(); err != nil {
			missing = append(missing, err.Error())
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("sandbox: %w: strict isolation needs: %s (set the isolation level to none to run unsandboxed, for development only)",
			ErrUnavailable, strings.Join(missing, "; "))
	}
	s.report = fmt.Sprintf("isolation strict: user/pid/mount/net/ipc/uts namespaces (root mapped to host uid %d), landlock ABI %d, cgroup memory %s (task %s, tools %s), cgroup pids %s (max %d), rlimits core=0 nofile=%d fsize=%s",
		s.uid, abi, s.mem, mib(cfg.Memory), mib(cfg.ToolMemory), s.pids, cfg.Pids, cfg.NoFile, mib(int64(cfg.FileSize)))
	return s, nil
}

// Level returns the isolation level.
func (s *Sandbox) Level() Level { return s.cfg.Level }

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
	sb   *Sandbox
	name string
	dir  string // workspace

	memDir   string // the task's memory cgroup
	agentMem string // where the agent process goes in the memory hierarchy
	toolsMem string // the tools' memory cgroup
	pidsDir  string // the task's pids cgroup
	agentPid string // where the agent process goes in the pids hierarchy
	toolsPid string // the tools' pids cgroup
	exe      *os.File

	mu         sync.Mutex
	cleaned    bool
	agentOOM   int64
	toolsOOM   int64
	pidsMaxHit int64
}

// Prepare creates a task's workspace and, for Strict, its cgroups. Call
// Cleanup when done.
func (s *Sandbox) Prepare(taskID string) (*Task, error) {
	dir, err := os.MkdirTemp(s.cfg.WorkspaceRoot, "agentmesh-task-")
	if err != nil {
		return nil, fmt.Errorf("create task workspace: %w", err)
	}
	t := &Task{sb: s, dir: dir, name: cgroupName(taskID)}
	if s.cfg.Level == None {
		return t, nil
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
		if err := os.Chown(t.dir, s.uid, s.gid); err != nil {
			return fmt.Errorf("sandbox: chown workspace: %w", err)
		}
	}
	if err := os.Chmod(t.dir, 0o700); err != nil {
		return fmt.Errorf("sandbox: chmod workspace: %w", err)
	}
	sameV2 := s.mem.v2 && s.pids.v2 && s.mem.base == s.pids.base
	// Memory: <base>/<task> (the whole task), the agent in it (v1) or in
	// <task>/agent (v2: no processes in inner cgroups), tools in <task>/tools.
	t.memDir = filepath.Join(s.mem.base, t.name)
	if err := os.Mkdir(t.memDir, 0o755); err != nil {
		return fmt.Errorf("sandbox: create cgroup: %w", err)
	}
	if err := setMemory(t.memDir, s.mem.v2, s.cfg.Memory); err != nil {
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
		if err := os.Mkdir(t.agentMem, 0o755); err != nil {
			return fmt.Errorf("sandbox: create cgroup: %w", err)
		}
	} else {
		t.agentMem = t.memDir
	}
	t.toolsMem = filepath.Join(t.memDir, "tools")
	if err := os.Mkdir(t.toolsMem, 0o755); err != nil {
		return fmt.Errorf("sandbox: create cgroup: %w", err)
	}
	if err := setMemory(t.toolsMem, s.mem.v2, s.cfg.ToolMemory); err != nil {
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
		if err := os.Chown(f, s.uid, s.gid); err != nil && s.root {
			return fmt.Errorf("sandbox: chown %s: %w", f, err)
		}
	}
	// Pids: the task's limit, and a smaller one for the tools' programs, so
	// that a fork bomb leaves the agent process room for its threads.
	if sameV2 {
		t.pidsDir, t.agentPid, t.toolsPid = t.memDir, t.agentMem, t.toolsMem
	} else {
		t.pidsDir = filepath.Join(s.pids.base, t.name)
		if err := os.Mkdir(t.pidsDir, 0o755); err != nil {
			return fmt.Errorf("sandbox: create cgroup: %w", err)
		}
		t.agentPid = t.pidsDir
		if s.pids.v2 {
			if err := writeFile(t.pidsDir, "cgroup.subtree_control", "+pids"); err != nil {
				return err
			}
			t.agentPid = filepath.Join(t.pidsDir, "agent")
			if err := os.Mkdir(t.agentPid, 0o755); err != nil {
				return fmt.Errorf("sandbox: create cgroup: %w", err)
			}
		}
		t.toolsPid = filepath.Join(t.pidsDir, "tools")
		if err := os.Mkdir(t.toolsPid, 0o755); err != nil {
			return fmt.Errorf("sandbox: create cgroup: %w", err)
		}
		f := filepath.Join(t.toolsPid, "cgroup.procs")
		if err := os.Chown(f, s.uid, s.gid); err != nil && s.root {
			return fmt.Errorf("sandbox: chown %s: %w", f, err)
		}
	}
	if err := writeFile(t.toolsPid, "pids.max", strconv.Itoa(s.cfg.toolPids())); err != nil {
		return err
	}
	return writeFile(t.pidsDir, "pids.max", strconv.Itoa(s.cfg.Pids))
}

// toolPids is the tools' share of the pids limit: all but a reserve for
// the agent process's threads.
func (c Config) toolPids() int { return c.Pids - max(16, c.Pids/8) }

func cgroupName(taskID string) string {
	var b strings.Builder
	for _, r := range taskID {
		if b.Len() >= 40 {
			break
		}
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' {
			b.WriteRune(r)
		}
	}
	var rnd [4]byte
	_, _ = rand.Read(rnd[:])
	return "task-" + b.String() + "-" + hex.EncodeToString(rnd[:])
}

// Workspace is the task's working directory.
func (t *Task) Workspace() string { return t.dir }

// Level is the task's isolation level.
func (t *Task) Level() Level { return t.sb.cfg.Level }

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
// process group, killed when the executor dies and, for Strict, in new
// namespaces with the sandbox parameters Enter reads as its last argument.
// Start it with Task.Start. The caller may set Stdin/Stdout/Stderr, Cancel
// and WaitDelay; ctx ending kills it.
func (t *Task) Command(ctx context.Context, argv []string, env []string) (*exec.Cmd, error) {
	if len(argv) == 0 {
		return nil, errors.New("sandbox: empty command")
	}
	cfg := t.sb.cfg
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = t.dir
	cmd.Env = append(append([]string(nil), env...), "HOME="+t.dir)
	if cfg.Level == None {
		cmd.Env = append(cmd.Env, "PATH="+os.Getenv("PATH"))
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		return cmd, nil
	}
	p := params{
		Workspace:  t.dir,
		ReadOnly:   cfg.ReadOnlyPaths,
		NoFile:     cfg.NoFile,
		FileSize:   cfg.FileSize,
		ToolMemory: cfg.ToolMemory,
		V2:         t.sb.mem.v2,
		ToolProcs:  t.toolProcs(),
		ToolOOM:    oomKillFile(t.toolsMem, t.sb.mem.v2),
		Pids:       cfg.Pids,
	}
	if t.sb.root && t.sb.uid != 0 {
		// The sandbox's root (a host nobody) may not be able to reach the
		// binary (a 0700 build directory): exec it through an fd the
		// executor opened; Enter closes it.
		path, err := exec.LookPath(argv[0])
		if err != nil {
			return nil, fmt.Errorf("sandbox: %w", err)
		}
		f, err := os.Open(path)
		if err != nil {
			return nil, fmt.Errorf("sandbox: open %s: %w", path, err)
		}
		t.exe = f
		cmd.Path = "/proc/self/fd/3"
		cmd.Err = nil
		cmd.ExtraFiles = []*os.File{f}
		p.ExeFD = 3
	}
	b, err := json.Marshal(p)
	if err != nil {
		return nil, err
	}
	cmd.Env = append(cmd.Env, "PATH="+cfg.Path)
	cmd.Args = append(cmd.Args, ArgParams+string(b))
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags: syscall.CLONE_NEWUSER | syscall.CLONE_NEWPID | syscall.CLONE_NEWNS |
			syscall.CLONE_NEWNET | syscall.CLONE_NEWIPC | syscall.CLONE_NEWUTS,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: t.sb.uid, Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: t.sb.gid, Size: 1}},
		// As root, drop the executor's supplementary groups (setgroups);
		// an unprivileged executor may not.
		GidMappingsEnableSetgroups: t.sb.root,
		// Root in the namespace, with its capabilities there, until Enter
		// drops them.
		Credential: &syscall.Credential{Uid: 0, Gid: 0},
		Setpgid:    true,
		Pdeathsig:  syscall.SIGKILL,
	}
	return cmd, nil
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
	if err != nil || t.Unsandboxed() {
		return err
	}
	pid := strconv.Itoa(cmd.Process.Pid)
	for _, dir := range []string{t.agentMem, t.agentPid} {
		if err := writeFile(dir, "cgroup.procs", pid); err != nil {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			return fmt.Errorf("sandbox: %w", err)
		}
	}
	return nil
}

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
	if t.agentMem != "" {
		t.agentOOM = max(oomKills(t.agentMem, t.sb.mem.v2), 0)
	}
	if t.toolsMem != "" {
		t.toolsOOM = max(oomKills(t.toolsMem, t.sb.mem.v2), 0)
	}
	t.pidsMaxHit = t.pidsHits()
	for _, d := range []string{t.pidsDir, t.memDir} {
		if d != "" {
			killTree(d)
		}
	}
	for _, d := range []string{t.pidsDir, t.memDir} {
		_ = removeCgroup(d)
	}
	removeWorkspace(t.dir)
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

// ParseSize parses a byte count: a number with an optional unit (K, M, G,
// KiB, MiB, GiB, KB, MB, GB; all binary multiples), e.g. "512MiB".
func ParseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	num := strings.TrimRightFunc(t, func(r rune) bool { return r < '0' || r > '9' })
	unit := strings.ToUpper(strings.TrimSpace(t[len(num):]))
	mult := int64(1)
	switch strings.TrimSuffix(strings.TrimSuffix(unit, "IB"), "B") {
	case "":
	case "K":
		mult = 1 << 10
	case "M":
		mult = 1 << 20
	case "G":
		mult = 1 << 30
	default:
		return 0, fmt.Errorf("size %q: unknown unit %q (want K, M or G)", s, unit)
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n < 0 || n > (1<<62)/mult {
		return 0, fmt.Errorf("size %q: want a number of bytes with an optional unit, e.g. 512MiB", s)
	}
	return n * mult, nil
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
