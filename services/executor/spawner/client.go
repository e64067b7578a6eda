package spawner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/agentmesh/agentmesh/services/executor/sandbox"
	"golang.org/x/sys/unix"
)

// ErrDied is wrapped by the errors of spawns that were in flight when the
// spawner died, and by the wait errors of the children it took with it.
// Such a spawn may be retried: the executor restarts the spawner.
var ErrDied = errors.New("spawner: the spawner process died")

// ErrClosed is returned by Start after Close.
var ErrClosed = errors.New("spawner: closed")

// Restart backoff: the first restart after 50 ms, doubling to 5 s; reset
// once a spawner lived a minute.
const (
	restartMin = 50 * time.Millisecond
	restartMax = 5 * time.Second
	// readyWait bounds how long Start waits for a spawner being restarted.
	readyWait = 30 * time.Second
	// closeWait bounds how long Close waits for the spawner to exit.
	closeWait = 5 * time.Second
)

// Client is the executor's side: it starts the spawner, restarts it when
// it dies, and starts children through it.
type Client struct {
	exe  string
	log  *slog.Logger
	opts Options

	mu     sync.Mutex
	cur    *conn
	proc   *os.Process   // cur's process
	ready  chan struct{} // closed while cur is usable
	closed bool

	ids      atomic.Uint64
	restarts atomic.Int64
	stop     chan struct{}
	done     chan struct{}
}

// Options tune the spawner.
type Options struct {
	// Nice lowers the CPU priority of the spawner and so of every child
	// it starts by this many nice steps (0 to 19) below the executor's
	// (capped at nice 19): the agents then yield the CPU to the executor
	// and the services beside it (the API) when the host is busy, and
	// lose nothing when it is idle. 0 leaves them at the executor's
	// priority. Lowering a priority needs no privilege.
	Nice int
}

// MaxNice is the largest nice value (the lowest priority) Linux knows.
const MaxNice = 19

// Start starts the spawner (exe, the running binary, which links this
// package) and waits until it is ready.
func Start(exe string, log *slog.Logger) (*Client, error) {
	return StartWith(exe, log, Options{})
}

// StartWith is Start with options.
func StartWith(exe string, log *slog.Logger, opts Options) (*Client, error) {
	if opts.Nice < 0 || opts.Nice > MaxNice {
		return nil, fmt.Errorf("spawner: nice %d: want 0 to %d", opts.Nice, MaxNice)
	}
	c := &Client{exe: exe, log: log, opts: opts, ready: make(chan struct{}), stop: make(chan struct{}), done: make(chan struct{})}
	first := make(chan error, 1)
	go c.supervise(first)
	if err := <-first; err != nil {
		<-c.done
		return nil, err
	}
	return c, nil
}

// supervise runs the spawner and restarts it when it dies. It keeps its
// OS thread locked for its whole life: the spawner's PR_SET_PDEATHSIG
// fires when the thread that started it ends, so that thread must not end
// before the executor does (and when it does end, the spawner dies).
func (c *Client) supervise(first chan<- error) {
	runtime.LockOSThread() // never unlocked: see above
	defer close(c.done)
	// Linux keeps the nice value per thread and a fork inherits the
	// forking thread's: lowering this thread's priority (it only waits)
	// gives it to the spawner, every thread of the spawner and every
	// child it starts, without touching the executor's other threads.
	if c.opts.Nice != 0 {
		if err := lowerPriority(c.opts.Nice); err != nil {
			first <- err
			return
		}
	}
	backoff := restartMin
	for {
		cmd, cn, err := c.startOne()
		if first != nil && err != nil {
			first <- err
			return
		}
		if err != nil {
			c.log.Error("spawner: restart failed", "err", err, "retry_in", backoff)
		} else {
			c.mu.Lock()
			c.cur, c.proc = cn, cmd.Process
			close(c.ready)
			closed := c.closed
			c.mu.Unlock()
			if closed {
				_ = cn.uc.Close()
			}
			if first != nil { // Start returns once Pid and Start see this spawner
				first <- nil
				first = nil
			}
			began := time.Now()
			werr := cmd.Wait()
			cn.fail()
			c.mu.Lock()
			c.cur, c.proc = nil, nil
			c.ready = make(chan struct{})
			closed = c.closed
			c.mu.Unlock()
			if closed {
				return
			}
			if time.Since(began) > time.Minute {
				backoff = restartMin
			}
			c.restarts.Add(1)
			c.log.Warn("spawner died; restarting it (the spawns in flight failed, its children died with it)", "pid", cmd.Process.Pid, "status", fmt.Sprint(werr), "retry_in", backoff)
		}
		select {
		case <-c.stop:
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, restartMax)
	}
}

// lowerPriority adds by to the calling thread's nice value (at most 19).
func lowerPriority(by int) error {
	tid := unix.Gettid()
	// The raw getpriority returns 20 - nice.
	raw, err := unix.Getpriority(unix.PRIO_PROCESS, tid)
	if err != nil {
		return fmt.Errorf("spawner: read the thread's nice value: %w", err)
	}
	to := min(20-raw+by, MaxNice)
	if err := unix.Setpriority(unix.PRIO_PROCESS, tid, to); err != nil {
		return fmt.Errorf("spawner: set nice %d: %w", to, err)
	}
	return nil
}

// startOne starts one spawner process.
func (c *Client) startOne() (*exec.Cmd, *conn, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("spawner: socketpair: %w", err)
	}
	mine, theirs := os.NewFile(uintptr(fds[0]), "spawner"), os.NewFile(uintptr(fds[1]), "spawner-peer")
	defer theirs.Close()
	cmd := exec.Command(c.exe)
	cmd.Args = []string{c.exe, "spawner"}
	cmd.Env = []string{EnvServe + "=1", "GOMAXPROCS=1"}
	cmd.Stderr = os.Stderr
	cmd.ExtraFiles = []*os.File{theirs}
	// Its own process group (a terminal's ^C goes to the executor, which
	// drains); killed with the executor's supervising thread.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		mine.Close()
		return nil, nil, fmt.Errorf("spawner: start %s: %w", c.exe, err)
	}
	fc, err := net.FileConn(mine)
	mine.Close()
	if err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, nil, fmt.Errorf("spawner: %w", err)
	}
	cn := &conn{uc: fc.(*net.UnixConn), pid: cmd.Process.Pid, pending: map[uint64]chan startResult{}, procs: map[uint64]*Proc{}}
	go cn.read()
	return cmd, cn, nil
}

// Pid is the running spawner's pid (0 while it is being restarted).
func (c *Client) Pid() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cur == nil {
		return 0
	}
	return c.cur.pid
}

// Restarts counts the spawner's restarts.
func (c *Client) Restarts() int64 { return c.restarts.Load() }

// Close stops the spawner: it kills its remaining children and exits.
func (c *Client) Close() {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		<-c.done
		return
	}
	c.closed = true
	close(c.stop)
	if c.cur != nil {
		_ = c.cur.uc.Close()
	}
	proc := c.proc
	c.mu.Unlock()
	t := time.NewTimer(closeWait)
	defer t.Stop()
	select {
	case <-c.done:
	case <-t.C:
		// A spawner that does not exit at end of file (stopped, stuck) is
		// killed; its children die with it.
		if proc != nil {
			_ = proc.Kill()
		}
		<-c.done
	}
}

// get waits for a usable spawner.
func (c *Client) get(ctx context.Context) (*conn, error) {
	t := time.NewTimer(readyWait)
	defer t.Stop()
	for {
		c.mu.Lock()
		cn, ready, closed := c.cur, c.ready, c.closed
		c.mu.Unlock()
		if closed {
			return nil, ErrClosed
		}
		if cn != nil && !cn.isDead() {
			return cn, nil
		}
		select {
		case <-ready:
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		case <-t.C:
			return nil, fmt.Errorf("%w and was not restarted within %s", ErrDied, readyWait)
		case <-time.After(restartMin):
		}
	}
}

// StartTask starts cmd, which t.Command built, as the task's agent
// process: in the spawner, placed in t's cgroups, and — for a task whose
// ids the setuid helpers map (t.MapsByHelper) — mapped and released
// (t.MapAndRelease; killed and waited for if that fails, having run
// nothing). t's own copies of the child's descriptors are closed either
// way (t.Started). The executor and ambench's sandboxed ceiling both
// start children this way.
func (c *Client) StartTask(ctx context.Context, t *sandbox.Task, cmd *exec.Cmd) (*Proc, error) {
	p, err := c.Start(ctx, cmd, t.AgentCgroupProcs())
	t.Started()
	if err != nil {
		return nil, err
	}
	if t.MapsByHelper() {
		// The child waits unmapped on its sync pipe until the helpers
		// have written its maps (run here: they need the executor's
		// user and the child's pid).
		if err := t.MapAndRelease(p.Pid); err != nil {
			_ = p.Kill()
			_, _ = p.Wait()
			return nil, err
		}
	}
	return p, nil
}

// Start starts cmd (as package sandbox built it; Stdin, Stdout and Stderr
// must be *os.File, the child's ends, which the caller closes after
// Start) in the spawner and returns the running child, which the spawner
// put in cgroups (cgroup.procs files, sandbox.Task.AgentCgroupProcs)
// before it answered. A cmd with a
// SysProcAttr the spawner does not accept is refused before anything
// starts. ctx ending before the spawner answered kills the child. A
// command whose ids the setuid helpers map (sandbox.Task.MapsByHelper)
// starts unmapped and waits on its sync pipe: the caller maps and
// releases it (Task.MapAndRelease) once Start returned.
func (c *Client) Start(ctx context.Context, cmd *exec.Cmd, cgroups []string) (*Proc, error) {
	if cmd.Err != nil {
		return nil, cmd.Err
	}
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if closed {
		return nil, ErrClosed
	}
	req := request{Op: opSpawn, ID: c.ids.Add(1), Path: cmd.Path, Args: cmd.Args, Env: cmd.Env, Dir: cmd.Dir, Cgroups: cgroups}
	if a := cmd.SysProcAttr; a != nil && a.Cloneflags != 0 {
		switch {
		case a.Cloneflags != NamespaceFlags:
			return nil, errors.New("spawner: the command's namespaces or id mappings are not the sandbox's")
		case len(a.UidMappings) == 0 && len(a.GidMappings) == 0 && a.Credential == nil && len(a.AmbientCaps) > 0:
			// sandbox.Task.Command for a task whose ids the setuid
			// helpers map: the caller maps them after Start returns
			// and then releases the child (Task.MapAndRelease).
			req.Cloneflags, req.HelperMaps = a.Cloneflags, true
		case len(a.UidMappings) == 1 && len(a.GidMappings) == 1:
			req.Cloneflags = a.Cloneflags
			req.UID, req.GID, req.Setgroups = a.UidMappings[0].HostID, a.GidMappings[0].HostID, a.GidMappingsEnableSetgroups
		default:
			return nil, errors.New("spawner: the command's namespaces or id mappings are not the sandbox's")
		}
	}
	var fds []int
	for _, s := range []any{cmd.Stdin, cmd.Stdout, cmd.Stderr} {
		f, ok := s.(*os.File)
		if !ok || f == nil {
			return nil, errors.New("spawner: the child's stdin, stdout and stderr must be files")
		}
		fds = append(fds, int(f.Fd()))
	}
	for _, f := range cmd.ExtraFiles {
		fds = append(fds, int(f.Fd()))
	}
	req.Files = len(fds)
	cn, err := c.get(ctx)
	if err != nil {
		return nil, err
	}
	ch, err := cn.send(req, fds)
	runtime.KeepAlive(cmd)
	if err != nil {
		return nil, err
	}
	select {
	case r := <-ch:
		return r.p, r.err
	case <-ctx.Done():
		go func() {
			if r := <-ch; r.err == nil {
				_ = r.p.Kill()
			}
		}()
		return nil, context.Cause(ctx)
	}
}

// conn is one spawner's socket.
type conn struct {
	uc  *net.UnixConn
	pid int
	wmu sync.Mutex

	mu      sync.Mutex
	dead    bool
	pending map[uint64]chan startResult
	procs   map[uint64]*Proc
}

func (cn *conn) isDead() bool {
	cn.mu.Lock()
	defer cn.mu.Unlock()
	return cn.dead
}

// startResult is how a spawn request ended: the running child or why not.
type startResult struct {
	p   *Proc
	err error
}

// send writes req with fds and returns where its started reply arrives.
func (cn *conn) send(req request, fds []int) (chan startResult, error) {
	b, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	if len(b) > maxMessage {
		return nil, fmt.Errorf("spawner: request of %d bytes is too large", len(b))
	}
	ch := make(chan startResult, 1)
	cn.mu.Lock()
	if cn.dead {
		cn.mu.Unlock()
		return nil, fmt.Errorf("%w before the spawn was sent", ErrDied)
	}
	if req.Op == opSpawn {
		cn.pending[req.ID] = ch
	}
	cn.mu.Unlock()
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	cn.wmu.Lock()
	_, _, err = cn.uc.WriteMsgUnix(b, oob, nil)
	cn.wmu.Unlock()
	if err != nil {
		cn.mu.Lock()
		delete(cn.pending, req.ID)
		cn.mu.Unlock()
		return nil, fmt.Errorf("%w: %v", ErrDied, err)
	}
	return ch, nil
}

// replyError rebuilds a spawner's error, with its errno if it had one.
func replyError(msg string) error {
	if rest, ok := strings.CutPrefix(msg, "errno "); ok {
		if n, after, ok := strings.Cut(rest, ":"); ok {
			if e, err := strconv.Atoi(n); err == nil {
				return fmt.Errorf("spawner:%s: %w", after, syscall.Errno(e))
			}
		}
	}
	return errors.New("spawner: " + msg)
}

// read dispatches the spawner's replies until its socket ends.
func (cn *conn) read() {
	buf := make([]byte, 64<<10)
	for {
		n, err := cn.uc.Read(buf)
		if err != nil || n == 0 {
			cn.fail()
			return
		}
		var r reply
		if err := json.Unmarshal(buf[:n], &r); err != nil {
			continue
		}
		cn.mu.Lock()
		switch r.Op {
		case opStarted:
			ch := cn.pending[r.ID]
			delete(cn.pending, r.ID)
			if ch != nil {
				if r.Err != "" {
					ch <- startResult{err: replyError(r.Err)}
					break
				}
				p := &Proc{Pid: r.Pid, id: r.ID, cn: cn, done: make(chan struct{})}
				cn.procs[r.ID] = p
				ch <- startResult{p: p}
			}
		case opExited:
			if p := cn.procs[r.ID]; p != nil {
				delete(cn.procs, r.ID)
				p.status = syscall.WaitStatus(r.Status)
				if r.Err != "" {
					p.err = errors.New("spawner: " + r.Err)
				}
				close(p.done)
			}
		}
		cn.mu.Unlock()
	}
}

// fail ends the spawns in flight and the children of a dead spawner (the
// kernel killed them with it: PR_SET_PDEATHSIG).
func (cn *conn) fail() {
	_ = cn.uc.Close()
	cn.mu.Lock()
	defer cn.mu.Unlock()
	if cn.dead {
		return
	}
	cn.dead = true
	for _, ch := range cn.pending {
		ch <- startResult{err: fmt.Errorf("%w with the spawn in flight", ErrDied)}
	}
	clear(cn.pending)
	for _, p := range cn.procs {
		p.status = syscall.WaitStatus(syscall.SIGKILL) // signalled: killed
		p.err = fmt.Errorf("%w, and the agent process with it", ErrDied)
		close(p.done)
	}
	clear(cn.procs)
}

// Proc is a child the spawner started.
type Proc struct {
	// Pid is the child's pid (the executor and the spawner share a PID
	// namespace).
	Pid  int
	id   uint64
	cn   *conn
	done chan struct{}
	// set before done is closed
	status syscall.WaitStatus
	err    error
}

// Wait waits for the child to end and returns its wait status; err is set
// when the status is not known (the spawner died: the child died with it).
func (p *Proc) Wait() (syscall.WaitStatus, error) {
	<-p.done
	return p.status, p.err
}

// Done is closed when the child has ended.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Kill has the spawner SIGKILL the child's process group (with the
// sandbox's namespaces, the init of its PID namespace: the whole task),
// unless it was reaped already. A dead spawner's children are dead.
func (p *Proc) Kill() error {
	select {
	case <-p.done:
		return nil
	default:
	}
	if _, err := p.cn.send(request{Op: opKill, ID: p.id}, nil); err != nil && !errors.Is(err, ErrDied) {
		return err
	}
	return nil
}

// InFlight counts the spawns sent to the running spawner and not yet
// answered (for tests and diagnostics).
func (c *Client) InFlight() int {
	c.mu.Lock()
	cn := c.cur
	c.mu.Unlock()
	if cn == nil {
		return 0
	}
	cn.mu.Lock()
	defer cn.mu.Unlock()
	return len(cn.pending)
}
