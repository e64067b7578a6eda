// Package spawner is the executor's fork server: a small, long-lived
// process that starts the sandboxed agent children, so that a spawn copies
// the page tables of that small process, not the executor's (Go cannot
// vfork with CLONE_NEWUSER, so every namespaced spawn is a real fork of
// its parent).
//
// The executor starts the spawner once (Start: the running binary, which
// links this package, with EnvServe=1 and one end of a unix SEQPACKET
// socketpair as descriptor 3) and restarts it if it dies. Over that
// socket it sends spawn requests — the command package sandbox built
// (Task.Command), with the child's stdin, stdout, stderr and executable
// descriptor attached by SCM_RIGHTS — and kill requests; the spawner
// answers with the child's pid (started) and later its wait status
// (exited). The spawner puts the pid in the task's cgroups (the files
// sandbox.Task.AgentCgroupProcs names) before it answers, so before the
// executor sends the child anything, as the direct path does. The child confines itself exactly as on the direct path
// (sandbox.Enter): the spawner changes who forks, not a wall.
//
// The parent-death chain: the spawner runs with PR_SET_PDEATHSIG=SIGKILL
// bound to a thread the executor keeps for the spawner's whole life
// (Client's supervisor goroutine holds it locked), and checks its parent
// at start; every child runs with PR_SET_PDEATHSIG=SIGKILL bound to the
// spawner. The executor dies → the kernel kills the spawner → the kernel
// kills every child, each the init of its PID namespace, which takes
// every process of its task with it. The spawner also kills its children
// and exits when its socket reaches end of file (the executor closed it).
//
// What the spawner accepts: requests only on the descriptor it inherited
// (a socketpair whose other end only the executor holds; it checks the
// peer is its parent), no listening socket, no path on the filesystem. A
// request is checked before anything is started: an absolute program
// path, an absolute directory, 3 to 5 descriptors, cgroup.procs files
// under /sys/fs/cgroup only, and either no new
// namespaces (isolation none) or exactly the sandbox's set with a single
// uid and gid mapping of root to one host id — or, for an executor that
// is not root and maps each task to a subordinate id (helper_maps), the
// sandbox's set with no mapping at all: the executor's setuid helpers
// (newuidmap, newgidmap) write the maps once the spawner said started,
// while the child waits on a sync pipe that came with the request;
// Setsid, Pdeathsig and (helper_maps) the ambient capabilities are set by
// the spawner itself, never taken from the request.
package spawner

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/agentmesh/agentmesh/services/executor/sandbox"
	"golang.org/x/sys/unix"
)

// EnvServe makes a binary that links this package run as a spawner
// (descriptor 3 is its socket) instead of its main.
const EnvServe = "AGENTMESH_SPAWNER_SERVE"

// NamespaceFlags are the namespaces of a sandboxed child (see
// sandbox.Task.Command); a request names these or none.
const NamespaceFlags = syscall.CLONE_NEWUSER | syscall.CLONE_NEWPID | syscall.CLONE_NEWNS |
	syscall.CLONE_NEWNET | syscall.CLONE_NEWIPC | syscall.CLONE_NEWUTS | syscall.CLONE_NEWCGROUP

// cgroupRoot is where the cgroup files a request names must be.
const cgroupRoot = "/sys/fs/cgroup/"

// maxMessage bounds one request or reply.
const maxMessage = 1 << 20

// Operations.
const (
	opSpawn   = "spawn"
	opKill    = "kill"
	opStarted = "started"
	opExited  = "exited"
)

// request is what the executor sends.
type request struct {
	Op   string   `json:"op"`
	ID   uint64   `json:"id"`
	Path string   `json:"path,omitempty"`
	Args []string `json:"args,omitempty"`
	Env  []string `json:"env,omitempty"`
	Dir  string   `json:"dir,omitempty"`
	// Cloneflags: 0 or NamespaceFlags.
	Cloneflags uintptr `json:"cloneflags,omitempty"`
	// UID and GID are the host ids the namespace's root maps to.
	UID       int  `json:"uid,omitempty"`
	GID       int  `json:"gid,omitempty"`
	Setgroups bool `json:"setgroups,omitempty"`
	// HelperMaps (with NamespaceFlags, no UID, GID or Setgroups): the
	// child starts in its namespaces without id maps and keeps the
	// capabilities of its new user namespace across exec (ambient), as
	// sandbox.Task.Command asks of a task whose ids the setuid helpers
	// map (MapsByHelper); the executor maps them after started, then
	// releases the child through its sync pipe (one of the descriptors).
	HelperMaps bool `json:"helper_maps,omitempty"`
	// Files is how many descriptors came with the request: stdin, stdout,
	// stderr and, optionally, the executable and the sync pipe (the
	// child's fd 3 and on, in that order).
	Files int `json:"files,omitempty"`
	// Cgroups are the cgroup.procs files the child joins before the
	// spawner answers (and so before it could be reaped).
	Cgroups []string `json:"cgroups,omitempty"`
}

// reply is what the spawner sends.
type reply struct {
	Op     string `json:"op"`
	ID     uint64 `json:"id"`
	Pid    int    `json:"pid,omitempty"`
	Status int    `json:"status"`
	Err    string `json:"err,omitempty"`
}

func init() {
	if os.Getenv(EnvServe) == "1" {
		os.Exit(serve())
	}
}

// server is the spawner's state.
type server struct {
	conn *net.UnixConn
	wmu  sync.Mutex

	mu       sync.Mutex
	children map[uint64]*child
}

type child struct {
	cmd    *exec.Cmd
	reaped bool
}

// serve runs the spawner on descriptor 3 until it reaches end of file.
func serve() int {
	// Small and few: one P, a tight heap.
	runtime.GOMAXPROCS(1)
	debug.SetGCPercent(50)
	f := os.NewFile(3, "spawner")
	if f == nil {
		fmt.Fprintln(os.Stderr, "agentmesh spawner: no socket on descriptor 3")
		return 2
	}
	syscall.CloseOnExec(3)
	// The peer must be the executor that started us.
	ucred, err := unix.GetsockoptUcred(3, unix.SOL_SOCKET, unix.SO_PEERCRED)
	if err != nil || int(ucred.Pid) != os.Getppid() {
		fmt.Fprintf(os.Stderr, "agentmesh spawner: descriptor 3 is not a socket of the parent process (%v)\n", err)
		return 2
	}
	c, err := net.FileConn(f)
	f.Close()
	if err != nil {
		fmt.Fprintf(os.Stderr, "agentmesh spawner: %v\n", err)
		return 2
	}
	uc, ok := c.(*net.UnixConn)
	if !ok {
		fmt.Fprintln(os.Stderr, "agentmesh spawner: descriptor 3 is not a unix socket")
		return 2
	}
	s := &server{conn: uc, children: map[uint64]*child{}}
	s.loop()
	s.killAll()
	return 0
}

// loop reads requests until the executor closes its end (or dies).
func (s *server) loop() {
	buf := make([]byte, maxMessage)
	// Room for more descriptors than a request may carry (5), so that
	// one with too many is read whole and refused by check, with its id.
	oob := make([]byte, unix.CmsgSpace(8*4))
	for {
		n, oobn, flags, _, err := s.conn.ReadMsgUnix(buf, oob)
		if err != nil || (n == 0 && oobn == 0) {
			return
		}
		files := receivedFiles(oob[:oobn])
		if flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0 {
			closeAll(files)
			s.send(reply{Op: opStarted, Err: "request too large"})
			continue
		}
		var req request
		if err := json.Unmarshal(buf[:n], &req); err != nil {
			closeAll(files)
			s.send(reply{Op: opStarted, Err: "malformed request: " + err.Error()})
			continue
		}
		switch req.Op {
		case opSpawn:
			go s.spawn(req, files)
		case opKill:
			closeAll(files)
			s.kill(req.ID)
		default:
			closeAll(files)
			s.send(reply{Op: opStarted, ID: req.ID, Err: fmt.Sprintf("unknown operation %q", req.Op)})
		}
	}
}

// receivedFiles are the descriptors of an SCM_RIGHTS message (close-on-exec:
// net receives them with MSG_CMSG_CLOEXEC).
func receivedFiles(oob []byte) []*os.File {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil
	}
	var out []*os.File
	for _, m := range msgs {
		fds, err := unix.ParseUnixRights(&m)
		if err != nil {
			continue
		}
		for _, fd := range fds {
			syscall.CloseOnExec(fd)
			out = append(out, os.NewFile(uintptr(fd), "fd"))
		}
	}
	return out
}

func closeAll(files []*os.File) {
	for _, f := range files {
		_ = f.Close()
	}
}

func (s *server) send(r reply) {
	b, _ := json.Marshal(r)
	s.wmu.Lock()
	defer s.wmu.Unlock()
	_, _ = s.conn.Write(b)
}

// check validates a spawn request against the descriptors that came with it.
func check(req *request, files []*os.File) error {
	switch {
	case req.ID == 0:
		return errors.New("no request id")
	case len(req.Args) == 0:
		return errors.New("no arguments")
	case !filepath.IsAbs(req.Path):
		return fmt.Errorf("program path %q is not absolute", req.Path)
	case !filepath.IsAbs(req.Dir):
		return fmt.Errorf("directory %q is not absolute", req.Dir)
	case req.Files != len(files) || len(files) < 3 || len(files) > 5:
		return fmt.Errorf("%d descriptors came with the request (it says %d): want stdin, stdout, stderr and at most the executable and a sync pipe", len(files), req.Files)
	}
	for _, f := range req.Cgroups {
		if filepath.Clean(f) != f || !strings.HasPrefix(f, cgroupRoot) || filepath.Base(f) != "cgroup.procs" {
			return fmt.Errorf("cgroup file %q: want a cgroup.procs file under %s", f, cgroupRoot)
		}
	}
	switch req.Cloneflags {
	case 0:
		if req.UID != 0 || req.GID != 0 || req.Setgroups || req.HelperMaps {
			return errors.New("id mappings without namespaces")
		}
	case NamespaceFlags:
		if req.UID < 0 || req.GID < 0 {
			return fmt.Errorf("host ids %d:%d are not valid", req.UID, req.GID)
		}
		if req.HelperMaps && (req.UID != 0 || req.GID != 0 || req.Setgroups) {
			return errors.New("helper maps with an id mapping: the helpers write the only one")
		}
	default:
		return fmt.Errorf("namespace flags %#x: want none or the sandbox's (%#x)", req.Cloneflags, NamespaceFlags)
	}
	return nil
}

// spawn starts one child and, once it ended, reports its wait status.
func (s *server) spawn(req request, files []*os.File) {
	defer func() { closeAll(files) }()
	if err := check(&req, files); err != nil {
		s.send(reply{Op: opStarted, ID: req.ID, Err: "refused: " + err.Error()})
		return
	}
	cmd := &exec.Cmd{Path: req.Path, Args: req.Args, Env: req.Env, Dir: req.Dir,
		Stdin: files[0], Stdout: files[1], Stderr: files[2], ExtraFiles: files[3:]}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Pdeathsig: syscall.SIGKILL}
	switch {
	case req.HelperMaps:
		// No maps yet (the executor's helpers write them), so no
		// credential to switch to; the capabilities of the new namespace
		// are kept across exec until sandbox.Enter drops them.
		cmd.SysProcAttr.Cloneflags = req.Cloneflags
		cmd.SysProcAttr.AmbientCaps = sandbox.AmbientCaps()
	case req.Cloneflags != 0:
		cmd.SysProcAttr.Cloneflags = req.Cloneflags
		cmd.SysProcAttr.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: req.UID, Size: 1}}
		cmd.SysProcAttr.GidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: req.GID, Size: 1}}
		cmd.SysProcAttr.GidMappingsEnableSetgroups = req.Setgroups
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: 0, Gid: 0}
	}
	s.mu.Lock()
	if _, dup := s.children[req.ID]; dup {
		s.mu.Unlock()
		s.send(reply{Op: opStarted, ID: req.ID, Err: "refused: request id in use"})
		return
	}
	ch := &child{cmd: cmd}
	s.children[req.ID] = ch
	s.mu.Unlock()
	if err := cmd.Start(); err != nil {
		s.mu.Lock()
		delete(s.children, req.ID)
		s.mu.Unlock()
		s.send(reply{Op: opStarted, ID: req.ID, Err: errno(err)})
		return
	}
	closeAll(files) // the child has them; ours would keep its pipes open
	files = nil
	for _, f := range req.Cgroups {
		if err := os.WriteFile(f, []byte(strconv.Itoa(cmd.Process.Pid)), 0); err != nil {
			_ = cmd.Process.Signal(syscall.SIGKILL)
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			_ = cmd.Wait()
			s.mu.Lock()
			ch.reaped = true
			delete(s.children, req.ID)
			s.mu.Unlock()
			s.send(reply{Op: opStarted, ID: req.ID, Err: "cgroups: " + err.Error()})
			return
		}
	}
	s.send(reply{Op: opStarted, ID: req.ID, Pid: cmd.Process.Pid})
	err := cmd.Wait()
	s.mu.Lock()
	ch.reaped = true
	delete(s.children, req.ID)
	s.mu.Unlock()
	r := reply{Op: opExited, ID: req.ID}
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok {
		r.Status = int(ws)
	} else if err != nil {
		r.Err = err.Error()
	}
	s.send(r)
}

// errno renders a start error so that the executor can still tell the
// errno (sandbox's startError explains EPERM, ENOSPC, EINVAL).
func errno(err error) string {
	var e syscall.Errno
	if errors.As(err, &e) {
		return fmt.Sprintf("errno %d: %v", int(e), err)
	}
	return err.Error()
}

// kill SIGKILLs a child's process group (with namespaces: the init of its
// PID namespace, and so the whole task) unless it was reaped already.
func (s *server) kill(id uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch := s.children[id]
	if ch == nil || ch.reaped || ch.cmd.Process == nil {
		return
	}
	_ = ch.cmd.Process.Signal(syscall.SIGKILL)
	_ = syscall.Kill(-ch.cmd.Process.Pid, syscall.SIGKILL)
}

func (s *server) killAll() {
	s.mu.Lock()
	ids := make([]uint64, 0, len(s.children))
	for id := range s.children {
		ids = append(ids, id)
	}
	s.mu.Unlock()
	for _, id := range ids {
		s.kill(id)
	}
}
