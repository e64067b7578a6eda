package sandbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/landlock-lsm/go-landlock/landlock"
	ll "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"
)

// ArgParams prefixes the argument that carries the sandbox parameters from
// the executor to the child (the last argument; the environment stays
// what the agent process is given, nothing more). They hold no secret:
// paths and limits.
const ArgParams = "--agentmesh-sandbox="

// envProbe makes a binary that links this package run the start-up
// self-test (see New) instead of its main.
const envProbe = "AGENTMESH_SANDBOX_PROBE"

const probeOK = "agentmesh sandbox probe: ok"

// params is what Enter needs; the executor passes it in ArgParams.
type params struct {
	Workspace  string   `json:"workspace"`
	ReadOnly   []string `json:"read_only,omitempty"`
	NoFile     uint64   `json:"nofile"`
	FileSize   uint64   `json:"fsize"`
	ToolMemory int64    `json:"tool_memory"`
	ToolProcs  []string `json:"tool_procs"`
	ToolOOM    string   `json:"tool_oom"`
	V2         bool     `json:"v2,omitempty"`
	ExeFD      int      `json:"exe_fd,omitempty"`
	Pids       int      `json:"pids"`
}

func init() {
	if os.Getenv(envProbe) == "1" {
		os.Exit(probeChild())
	}
}

// Confinement is what a confined child knows about its sandbox.
type Confinement struct {
	// Workspace is the task's workspace, the only writable directory.
	Workspace string
	// ToolProcs are the cgroup.procs files of the tools' memory and pids
	// cgroups: a program a tool runs writes "0" to them before it execs.
	ToolProcs []string
	// ToolOOMFile holds the tools cgroup's oom_kill counter.
	ToolOOMFile string
	// ToolMemory is the tools' memory limit in bytes.
	ToolMemory int64
	// Pids is the task's process limit.
	Pids int
}

// ToolOOMKills reads how many programs the kernel OOM-killed in the tools
// cgroup so far (-1 if it cannot tell).
func (c *Confinement) ToolOOMKills() int64 {
	if n, ok := readKey(c.ToolOOMFile, "oom_kill"); ok {
		return n
	}
	return -1
}

var (
	currentMu sync.Mutex
	current   *Confinement
)

// Current returns the confinement Enter applied, or nil when this process
// is not sandboxed (isolation none, or not a child).
func Current() *Confinement {
	currentMu.Lock()
	defer currentMu.Unlock()
	return current
}

// EnterOrExit calls Enter and, if it fails, reports why on stderr and exits
// with status 4: a child that cannot confine itself must not run anything.
func EnterOrExit() {
	if err := Enter(); err != nil {
		fmt.Fprintf(os.Stderr, "agentmesh child: sandbox: %v\n", err)
		os.Exit(4)
	}
}

// Enter confines this process as the executor's parameters (ArgParams) say;
// without them (isolation none) it does nothing. Call it first thing in
// the child, before reading anything from the executor. It expects to be
// the init of new user, PID, mount, network, IPC and UTS namespaces (see
// Task.Command) and, in order: closes the executable's fd, makes mounts
// private and mounts a fresh /proc (only this task's processes, its own
// environment), names the host "sandbox", forbids further namespaces, sets
// rlimits (core 0, NOFILE, FSIZE), applies Landlock (system paths
// read-only, the workspace read-write, the tools cgroup's procs file; no
// TCP bind or connect), clears the ambient capabilities and locks root
// out of regaining capabilities at exec (so nothing it executes has a
// capability), marks itself not dumpable (its memory and /proc files are
// out of its tools' reach) and starts reaping orphans (it is PID 1).
func Enter() error {
	raw, ok := takeParams()
	if !ok {
		return nil
	}
	var p params
	if err := json.Unmarshal([]byte(raw), &p); err != nil {
		return fmt.Errorf("parameters: %w", err)
	}
	if !filepath.IsAbs(p.Workspace) {
		return fmt.Errorf("parameters: workspace %q is not absolute", p.Workspace)
	}
	if p.ExeFD > 2 {
		_ = unix.Close(p.ExeFD)
	}
	if os.Getpid() != 1 {
		return errors.New("not the init of a PID namespace (start the child with Task.Command)")
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make mounts private: %w", err)
	}
	if err := unix.Mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mount a fresh /proc in the PID namespace: %w (a /proc partly hidden by other mounts, as in some containers, forbids it)", err)
	}
	_ = unix.Sethostname([]byte("sandbox"))
	// No namespace may be created inside: unshare -U needs no capability,
	// the others would need ones we drop below anyway.
	for _, ns := range []string{"user", "mnt", "net", "pid", "ipc", "uts", "cgroup", "time"} {
		err := os.WriteFile("/proc/sys/user/max_"+ns+"_namespaces", []byte("0"), 0)
		if err != nil && ns == "user" {
			return fmt.Errorf("forbid user namespaces inside: %w", err)
		}
	}
	if err := setRlimits(p); err != nil {
		return err
	}
	if err := restrictFS(p); err != nil {
		return fmt.Errorf("landlock: %w", err)
	}
	if err := dropCapabilities(); err != nil {
		return fmt.Errorf("capabilities: %w", err)
	}
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("prctl(PR_SET_DUMPABLE): %w", err)
	}
	currentMu.Lock()
	current = &Confinement{Workspace: p.Workspace, ToolProcs: p.ToolProcs, ToolOOMFile: p.ToolOOM, ToolMemory: p.ToolMemory, Pids: p.Pids}
	currentMu.Unlock()
	go reapOrphans()
	return nil
}

// findParams returns the parameters argument's value.
func findParams() (string, bool) {
	for _, a := range os.Args[1:] {
		if v, ok := strings.CutPrefix(a, ArgParams); ok {
			return v, true
		}
	}
	return "", false
}

// takeParams returns the parameters and removes their argument from
// os.Args, so that the program's own flag parsing does not see it.
func takeParams() (string, bool) {
	v, ok := findParams()
	if ok {
		args := os.Args[:1]
		for _, a := range os.Args[1:] {
			if !strings.HasPrefix(a, ArgParams) {
				args = append(args, a)
			}
		}
		os.Args = args
	}
	return v, ok
}

// Sandboxed reports whether the executor asked this process to confine
// itself (it carries the sandbox parameters); true before Enter, too.
func Sandboxed() bool {
	_, ok := findParams()
	return ok || Current() != nil
}

func setRlimits(p params) error {
	limits := []struct {
		res int
		v   uint64
		nm  string
	}{
		{unix.RLIMIT_CORE, 0, "core"},
		{unix.RLIMIT_NOFILE, p.NoFile, "nofile"},
		{unix.RLIMIT_FSIZE, p.FileSize, "fsize"},
	}
	for _, l := range limits {
		var cur syscall.Rlimit
		if err := syscall.Getrlimit(l.res, &cur); err != nil {
			return fmt.Errorf("getrlimit %s: %w", l.nm, err)
		}
		v := l.v
		if cur.Max != unix.RLIM_INFINITY && cur.Max < v {
			v = cur.Max
		}
		if err := syscall.Setrlimit(l.res, &syscall.Rlimit{Cur: v, Max: v}); err != nil {
			return fmt.Errorf("setrlimit %s: %w", l.nm, err)
		}
	}
	return nil
}

func restrictFS(p params) error {
	ro := append(append([]string(nil), SystemPaths...), p.ReadOnly...)
	rules := []landlock.Rule{
		landlock.RODirs(ro...).IgnoreIfMissing(),
		landlock.RWDirs(p.Workspace).WithRefer(),
		landlock.RWFiles("/dev/null").IgnoreIfMissing(),
		landlock.ROFiles("/dev/zero", "/dev/full", "/dev/random", "/dev/urandom").IgnoreIfMissing(),
	}
	if len(p.ToolProcs) > 0 {
		rules = append(rules, landlock.RWFiles(p.ToolProcs...))
	}
	if p.ToolOOM != "" {
		rules = append(rules, landlock.ROFiles(p.ToolOOM).IgnoreIfMissing())
	}
	// ABI 5 (filesystem, ioctl on devices, TCP), degraded to what the
	// kernel has (New refuses a kernel without Landlock). No network rules:
	// TCP bind and connect are refused (the network namespace has no route
	// anyway; Landlock does not cover UDP, the namespace does). Not ABI 6's
	// scoping of signals and abstract sockets: before ABI 8 every thread
	// of a Go process gets its own domain, and a thread could not signal
	// the programs another thread started (a timed-out program would
	// survive its kill); the PID and network namespaces scope both anyway.
	return landlock.V5.BestEffort().Restrict(rules...)
}

// Securebits (linux/securebits.h).
const (
	secbitNoroot             = 1 << 0
	secbitNorootLocked       = 1 << 1
	secbitNoSetuidFixup      = 1 << 2
	secbitNoSetuidFixupLckd  = 1 << 3
	secbitKeepCapsLocked     = 1 << 5
	secbitNoCapAmbientRaise  = 1 << 6
	secbitNoCapAmbientLocked = 1 << 7
)

// dropCapabilities makes sure nothing this process executes has a
// capability, on every thread (os/exec forks from any of them): no
// ambient capabilities, and root's special treatment at exec (the full
// bounding set as permitted capabilities) turned off and locked. The
// inheritable set of a new user namespace's root is empty, file
// capabilities are ignored in it (their owner is not mapped) and
// no_new_privs is set (Landlock), so an executed program starts with
// none. The process itself keeps its effective capabilities (Landlock
// already forbids it mounts); the programs its tools run have none, so
// they cannot ptrace it. (Dropping the bounding set too costs one
// all-threads call per capability, about 1 ms per spawn, and adds nothing
// here.)
func dropCapabilities() error {
	if err := ll.AllThreadsPrctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil && !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("clear ambient: %w", err)
	}
	bits := secbitNoroot | secbitNorootLocked | secbitNoSetuidFixup | secbitNoSetuidFixupLckd |
		secbitKeepCapsLocked | secbitNoCapAmbientRaise | secbitNoCapAmbientLocked
	if err := ll.AllThreadsPrctl(unix.PR_SET_SECUREBITS, uintptr(bits), 0, 0, 0); err != nil {
		return fmt.Errorf("set securebits: %w", err)
	}
	return nil
}

// The child is PID 1 of its namespace: it adopts every orphan (a daemon a
// tool left behind, the remains of a fork bomb) and must reap them, or
// their zombies fill the pids limit. A blind wait4(-1) would also steal
// the exit status of a program os/exec is about to wait for, so the
// reaper reaps only zombies it was not told about: start programs with
// StartCmd and call Forget after Wait.
var (
	startMu   sync.RWMutex // held for reading while a program starts, for writing while reaping
	trackedMu sync.Mutex
	tracked   = map[int]bool{}
)

// StartCmd starts cmd so that the orphan reaper leaves it to its owner's
// Wait. Call Forget(cmd) after Wait. Outside a sandbox it is cmd.Start.
func StartCmd(cmd *exec.Cmd) error {
	startMu.RLock()
	defer startMu.RUnlock()
	if err := cmd.Start(); err != nil {
		return err
	}
	trackedMu.Lock()
	tracked[cmd.Process.Pid] = true
	trackedMu.Unlock()
	return nil
}

// Forget ends the reaper's deference to cmd (after its Wait).
func Forget(cmd *exec.Cmd) {
	if cmd.Process == nil {
		return
	}
	trackedMu.Lock()
	delete(tracked, cmd.Process.Pid)
	trackedMu.Unlock()
}

// Reap reaps the orphans that have ended (a no-op outside a sandbox).
func Reap() {
	if Current() == nil {
		return
	}
	startMu.Lock()
	defer startMu.Unlock()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return
	}
	self := os.Getpid()
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) < 2 || f[0] != "Z" || f[1] != strconv.Itoa(self) {
			continue
		}
		trackedMu.Lock()
		mine := tracked[pid]
		trackedMu.Unlock()
		if !mine {
			var ws unix.WaitStatus
			_, _ = unix.Wait4(pid, &ws, unix.WNOHANG, nil)
		}
	}
}

func reapOrphans() {
	for {
		time.Sleep(250 * time.Millisecond)
		Reap()
	}
}

// landlockABI returns the kernel's Landlock ABI version, or why there is none.
func landlockABI() (int, error) {
	v, err := ll.LandlockGetABIVersion()
	switch {
	case errors.Is(err, unix.ENOSYS):
		return 0, errors.New("landlock: not supported by this kernel (Linux 5.13 or newer built with CONFIG_SECURITY_LANDLOCK)")
	case errors.Is(err, unix.EOPNOTSUPP):
		return 0, errors.New("landlock: disabled at boot (add landlock to the lsm= kernel parameter)")
	case err != nil:
		return 0, fmt.Errorf("landlock: %w", err)
	case v < 1:
		return 0, fmt.Errorf("landlock: ABI version %d", v)
	}
	return v, nil
}

// probeChild is the self-test New runs in a sandboxed process: confine,
// then check that the confinement holds.
func probeChild() int {
	fail := func(format string, a ...any) int {
		fmt.Fprintf(os.Stdout, format+"\n", a...)
		return 1
	}
	if _, ok := findParams(); !ok {
		return fail("no sandbox parameters")
	}
	if err := Enter(); err != nil {
		return fail("%v", err)
	}
	c := Current()
	if err := os.WriteFile(filepath.Join(c.Workspace, "probe"), []byte("x"), 0o600); err != nil {
		return fail("the workspace is not writable: %v", err)
	}
	outside := filepath.Join(filepath.Dir(c.Workspace), fmt.Sprintf("agentmesh-probe-%d", time.Now().UnixNano()))
	if err := os.WriteFile(outside, []byte("x"), 0o600); err == nil {
		_ = os.Remove(outside)
		return fail("landlock: a write outside the workspace succeeded")
	}
	if conn, err := net.DialTimeout("tcp", "127.0.0.1:1", time.Second); err == nil {
		conn.Close()
		return fail("network namespace: 127.0.0.1 is reachable")
	}
	fmt.Fprintln(os.Stdout, probeOK)
	return 0
}
