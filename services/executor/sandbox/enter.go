package sandbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
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
	// Stage is the empty host directory the sandbox's root is built on.
	Stage string `json:"stage"`
	// Etc is the executor's /etc snapshot, bound read-only at /etc; ""
	// binds the host's entries one by one (etc.go).
	Etc string `json:"etc,omitempty"`
	// Disk is the size of the task disk tmpfs (workspace, /tmp, /dev/shm).
	Disk     int64 `json:"disk"`
	Landlock bool  `json:"landlock,omitempty"`
	// Scope is Landlock's IPC scoping (ll.Scope* bits).
	Scope      uint64   `json:"scope,omitempty"`
	Seccomp    bool     `json:"seccomp,omitempty"`
	ReadOnly   []string `json:"read_only,omitempty"`
	NoFile     uint64   `json:"nofile"`
	FileSize   uint64   `json:"fsize"`
	ToolMemory int64    `json:"tool_memory"`
	ToolProcs  []string `json:"tool_procs"`
	ToolOOM    string   `json:"tool_oom"`
	V2         bool     `json:"v2,omitempty"`
	ExeFD      int      `json:"exe_fd,omitempty"`
	// SyncFD, with subordinate ids, is where the executor says the
	// sandbox's id maps are written (subids.go).
	SyncFD int `json:"sync_fd,omitempty"`
	Pids   int `json:"pids"`
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
// Task.Command) and runs the steps below in order; each is a function of
// its own that a spawner (a fork server) can call the same way.
//
//  1. closes the executable's fd and every descriptor inherited from the
//     executor but stdin, stdout and stderr (closeInherited);
//  2. joins a new, empty session keyring on every thread (newSessionKeyring);
//  3. makes mounts private and builds its root from nothing (buildRoot:
//     system paths read-only, a fresh /proc, a minimal /dev, the task disk
//     for the workspace and /tmp), pivots into it and enters the workspace;
//  4. names the host "sandbox", forbids further namespaces, sets rlimits
//     (core 0, NOFILE, FSIZE);
//  5. applies Landlock (system paths read-only, the workspace, /tmp and
//     /dev/shm read-write, the tools cgroup's procs files; no TCP bind or
//     connect; abstract unix sockets and, from ABI 8, signals scoped);
//  6. installs the seccomp filter (socket families, io_uring; seccomp.go);
//  7. clears the ambient capabilities and locks root out of regaining
//     capabilities at exec (so nothing it executes has a capability),
//     marks itself not dumpable (its memory and /proc files are out of its
//     tools' reach) and starts reaping orphans (it is PID 1).
func Enter() error {
	raw, ok := takeParams()
	if !ok {
		return nil
	}
	var p params
	if err := json.Unmarshal([]byte(raw), &p); err != nil {
		return fmt.Errorf("parameters: %w", err)
	}
	if !filepath.IsAbs(p.Stage) {
		return fmt.Errorf("parameters: stage %q is not absolute", p.Stage)
	}
	if p.SyncFD > 2 {
		if err := becomeRoot(p.SyncFD); err != nil {
			return err
		}
	}
	if p.ExeFD > 2 {
		_ = unix.Close(p.ExeFD)
	}
	if _, err := closeInherited(); err != nil {
		return err
	}
	if os.Getpid() != 1 {
		return errors.New("not the init of a PID namespace (start the child with Task.Command)")
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make mounts private: %w", err)
	}
	if err := buildRoot(&p); err != nil {
		return fmt.Errorf("fresh root: %w", err)
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
	if err := newSessionKeyring(); err != nil {
		return err
	}
	// no_new_privs on every thread. Landlock sets it itself, on every
	// thread, as it restricts them (go-landlock: an all-threads prctl
	// before an all-threads restrict, or the kernel's TSYNC from ABI 8);
	// each all-threads call waits for every thread of the child to run,
	// which under load is a large part of a spawn's CPU, so it is made
	// here only when Landlock did not make it.
	if p.Landlock {
		if err := restrictFS(p); err != nil {
			return fmt.Errorf("landlock: %w", err)
		}
	}
	if nnp, err := unix.PrctlRetInt(unix.PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0); err != nil || nnp != 1 {
		if err := ll.AllThreadsPrctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
			return fmt.Errorf("no_new_privs: %w", err)
		}
	}
	if p.Seccomp {
		if err := installSeccomp(); err != nil {
			return err
		}
	}
	if err := dropCapabilities(); err != nil {
		return fmt.Errorf("capabilities: %w", err)
	}
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("prctl(PR_SET_DUMPABLE): %w", err)
	}
	currentMu.Lock()
	current = &Confinement{Workspace: SandboxWorkspace, ToolProcs: p.ToolProcs, ToolOOMFile: p.ToolOOM, ToolMemory: p.ToolMemory, Pids: p.Pids}
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
		landlock.RWDirs(SandboxWorkspace).WithRefer(),
		landlock.RWDirs("/tmp", "/dev/shm"),
		landlock.RWFiles("/dev/null", "/dev/full").IgnoreIfMissing(),
		landlock.ROFiles("/dev/zero", "/dev/random", "/dev/urandom").IgnoreIfMissing(),
	}
	if len(p.ToolProcs) > 0 {
		rules = append(rules, landlock.RWFiles(p.ToolProcs...))
	}
	if p.ToolOOM != "" {
		rules = append(rules, landlock.ROFiles(p.ToolOOM).IgnoreIfMissing())
	}
	// ABI 5 (filesystem, ioctl on devices, TCP), degraded to what the
	// kernel has. No network rules: TCP bind and connect are refused (the
	// network namespace has no route anyway; Landlock does not cover UDP,
	// the namespace does). ABI 6's scoping as landlockScope chose.
	cfg := landlock.V5
	cfg.Scoped = landlock.ScopedSet(p.Scope)
	return cfg.BestEffort().Restrict(rules...)
}

// landlockScope is the IPC scoping to ask of a kernel with Landlock ABI
// abi. Abstract unix sockets from ABI 6: a sandboxed program connects only
// to abstract sockets of its own domain (the network namespace already
// hides the host's; this is the second wall). Signals only from ABI 8:
// before it every thread of a Go process gets its own domain (no TSYNC),
// and a thread could not signal the programs another thread started (a
// timed-out program would survive its kill); the PID namespace scopes
// signals anyway.
func landlockScope(abi int) uint64 {
	var s uint64
	if abi >= 6 {
		s |= ll.ScopeAbstractUnixSocket
	}
	if abi >= 8 {
		s |= ll.ScopeSignal
	}
	return s
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
	// Every thread has the ambient set the program was started with (no
	// thread changed it since): when it is empty there is nothing to clear,
	// and an all-threads call is saved (see Enter).
	if ambientSet() {
		if err := ll.AllThreadsPrctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil && !errors.Is(err, unix.EINVAL) {
			return fmt.Errorf("clear ambient: %w", err)
		}
	}
	if err := clearInheritable(); err != nil {
		return err
	}
	bits := secbitNoroot | secbitNorootLocked | secbitNoSetuidFixup | secbitNoSetuidFixupLckd |
		secbitKeepCapsLocked | secbitNoCapAmbientRaise | secbitNoCapAmbientLocked
	if err := ll.AllThreadsPrctl(unix.PR_SET_SECUREBITS, uintptr(bits), 0, 0, 0); err != nil {
		return fmt.Errorf("set securebits: %w", err)
	}
	return nil
}

// ambientSet reports whether this thread holds any ambient capability
// (true when it cannot tell).
func ambientSet() bool {
	for c := 0; c < 64; c++ {
		on, err := unix.PrctlRetInt(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_IS_SET, uintptr(c), 0, 0)
		if errors.Is(err, unix.EINVAL) {
			return false // past the kernel's last capability
		}
		if err != nil || on != 0 {
			return true
		}
	}
	return false
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

// reapOrphans reaps as the orphans end: the sandbox's PID 1 gets SIGCHLD
// for each of its children that ends, its orphans' included, so an idle
// agent (a warm child waiting for its task) wakes for nothing. Signals that
// coalesce lose nothing: the channel is drained before each scan, and a
// child that ends during one leaves a signal for the next.
func reapOrphans() {
	ended := make(chan os.Signal, 1)
	signal.Notify(ended, syscall.SIGCHLD)
	for range ended {
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
	outside := fmt.Sprintf("/agentmesh-probe-%d", time.Now().UnixNano())
	if err := os.WriteFile(outside, []byte("x"), 0o600); err == nil {
		_ = os.Remove(outside)
		return fail("fresh root: a write outside the workspace succeeded")
	}
	for _, host := range []string{"/run", "/var", "/home", "/sys"} {
		if _, err := os.Lstat(host); err == nil {
			return fail("fresh root: the host's %s is visible", host)
		}
	}
	if conn, err := net.DialTimeout("tcp", "127.0.0.1:1", time.Second); err == nil {
		conn.Close()
		return fail("network namespace: 127.0.0.1 is reachable")
	}
	fmt.Fprintln(os.Stdout, probeOK)
	return 0
}
