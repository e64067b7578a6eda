package executor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/metrics"
	"github.com/agentmesh/agentmesh/pkg/tail"
	"github.com/agentmesh/agentmesh/services/executor/child"
	"github.com/agentmesh/agentmesh/services/executor/childproto"
	"github.com/agentmesh/agentmesh/services/executor/sandbox"
	"github.com/agentmesh/agentmesh/services/executor/spawner"
)

// StderrTail is how much of a child's stderr is kept for error reports.
const StderrTail = 4 << 10

// exitGrace is how long a child that sent its last frame may take to exit
// before its process group is killed.
const exitGrace = 2 * time.Second

// errWallTime ends a run that outlived Config.WallTime.
type errWallTime struct{ d time.Duration }

func (e errWallTime) Error() string { return fmt.Sprintf("wall time %s exceeded", e.d) }

// stopped maps the cause of a stop from outside to an outcome.
func stopped(cause error) outcome {
	var wall errWallTime
	var budget errBudgetWall
	switch {
	case errors.As(cause, &wall):
		return outcome{kind: outFailed, reason: wall.Error(), failKind: agentmeshv1.FailureKind_FAILURE_KIND_TIMEOUT}
	case errors.As(cause, &budget):
		return outcome{kind: outFailed, reason: budget.Error(), failKind: agentmeshv1.FailureKind_FAILURE_KIND_BUDGET}
	case errors.Is(cause, errCancelled):
		return outcome{kind: outGone, reason: "cancelled"}
	case errors.Is(cause, errShutdown):
		return outcome{kind: outRequeue, reason: "executor draining: handed back to the queue"}
	}
	return outcome{kind: outRequeue, reason: cause.Error()}
}

func withTail(reason, tail string) string {
	tail = strings.TrimSpace(tail)
	if tail == "" {
		return reason
	}
	return reason + ": " + tail
}

// process is a running child.
type process struct {
	pid    int
	stdin  io.WriteCloser
	stdout io.ReadCloser
	stderr *tail.Buffer
	dir    string
	// sb is the child's sandbox: its workspace and cgroups. sb.OOMKilled()
	// tells whether the kernel killed the child at its memory limit.
	sb *sandbox.Task
	h  handle
	// release ends the context the child was spawned under (a warm child's
	// own; see warm.go), nil for a child spawned under its task's context.
	release func()
	// warm: the child came from the warm pool.
	warm bool
	// own ends the context of a child spawned under one of its own (warm,
	// or reusable: nil for a child spawned under its task's context);
	// unlink undoes claim's link to the task's context (reuse.go).
	own    func()
	unlink func() bool
	// fr and fw speak the child's frames (frames): one reader for the
	// child's life, as it buffers.
	fr *childproto.Reader
	fw *childproto.Writer
}

// frames returns the child's frame reader and writer.
func (p *process) frames() (*childproto.Reader, *childproto.Writer) {
	if p.fr == nil {
		p.fr, p.fw = childproto.NewReader(p.stdout), childproto.NewWriter(p.stdin)
	}
	return p.fr, p.fw
}

// handle is how the executor kills and waits for a child: its own
// exec.Cmd (direct) or the spawner's word (fork-server).
type handle interface {
	// kill SIGKILLs the child's process group (the whole task with the
	// sandbox's PID namespace); nothing once it was reaped.
	kill() error
	// wait waits for the child (and its stderr) and returns its wait
	// status; err when the status cannot be known. It may be called again.
	wait() (syscall.WaitStatus, error)
	// exited reports whether the child has ended (without reaping it).
	exited() bool
}

// spawnConcurrency is how many spawns run at once: a sandboxed spawn is
// CPU work (the spawner's fork, the child's namespaces, mounts and runtime
// start, the cgroup writes); more of them at once than the machine has
// cores only makes each slower and keeps more half-started children in
// memory. Spawns beyond it wait their turn in order, without a process.
func spawnConcurrency() int { return max(2, 2*runtime.GOMAXPROCS(0)) }

// spawn starts a child in a fresh workspace, with a clean environment, in
// the sandbox (see package sandbox: with the strict level its own
// namespaces, Landlock, cgroups; it is the init of its PID namespace, so
// killing it kills every process of the task). ctx ending kills it. The
// spawner starts it (Config.Spawner fork-server, see package spawner), or
// the executor itself (direct).
func (s *Service) spawn(ctx context.Context, taskID string) (*process, error) {
	return s.spawnIn(ctx, taskID, false)
}

// spawnIn is spawn; with background the child starts with its cpu cgroup
// at the background weight (see sandbox.Task.SetBackground): the warm
// pool's children, until a task claims one.
func (s *Service) spawnIn(ctx context.Context, taskID string, background bool) (*process, error) {
	if s.spawnGate != nil {
		waited := time.Now()
		select {
		case s.spawnGate <- struct{}{}:
			defer func() { <-s.spawnGate }()
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting to spawn: %w", context.Cause(ctx))
		}
		metrics.SpawnWait.Observe(time.Since(waited).Seconds())
	}
	began := time.Now()
	defer func() { metrics.Spawn.Observe(time.Since(began).Seconds()) }()
	sb, err := s.sb.Prepare(taskID)
	if err != nil {
		return nil, fmt.Errorf("create task sandbox: %w", err)
	}
	if background {
		if err := sb.SetBackground(true); err != nil {
			sb.Cleanup()
			return nil, err
		}
	}
	lang := os.Getenv("LANG")
	if lang == "" {
		lang = "C.UTF-8"
	}
	cmd, err := sb.Command(ctx, s.cfg.ChildCommand, []string{child.EnvChild + "=1", "LANG=" + lang})
	if err != nil {
		sb.Cleanup()
		return nil, fmt.Errorf("agent process %s: %w", s.cfg.ChildCommand[0], err)
	}
	p := &process{stderr: tail.New(StderrTail), dir: sb.Workspace(), sb: sb}
	if s.spawner != nil {
		err = s.spawnVia(ctx, cmd, p)
	} else {
		err = spawnDirect(cmd, p)
	}
	if err != nil {
		sb.Cleanup()
		return nil, fmt.Errorf("start agent process %s: %w", s.cfg.ChildCommand[0], err)
	}
	if sb.Unsandboxed() {
		s.log.WarnContext(ctx, "UNSANDBOXED agent process: isolation level none (no namespaces, no Landlock, no cgroup limits)", "task_id", taskID, "pid", p.pid)
	}
	return p, nil
}

// spawnDirect starts the child from the executor's own process (a fork of
// the whole executor).
func spawnDirect(cmd *exec.Cmd, p *process) error {
	cmd.Cancel = func() error { return sandbox.KillGroup(cmd) }
	cmd.WaitDelay = exitGrace
	cmd.Stderr = p.stderr
	var err error
	if p.stdin, err = cmd.StdinPipe(); err == nil {
		p.stdout, err = cmd.StdoutPipe()
	}
	if err == nil {
		err = p.sb.Start(cmd)
	}
	if err != nil {
		return err
	}
	p.pid = cmd.Process.Pid
	p.h = &directHandle{cmd: cmd}
	return nil
}

// directHandle is a child the executor forked itself.
type directHandle struct {
	cmd  *exec.Cmd
	once sync.Once
	ws   syscall.WaitStatus
	err  error
}

func (d *directHandle) kill() error { return sandbox.KillGroup(d.cmd) }

func (d *directHandle) exited() bool { return processEnded(d.cmd.Process.Pid) }

// processEnded reports whether pid is gone or a zombie (/proc/PID/stat).
func processEnded(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	return len(f) == 0 || f[0] == "Z" || f[0] == "X"
}

func (d *directHandle) wait() (syscall.WaitStatus, error) {
	d.once.Do(func() {
		err := d.cmd.Wait()
		if st := d.cmd.ProcessState; st != nil {
			d.ws, _ = st.Sys().(syscall.WaitStatus)
			return
		}
		d.err = err
	})
	return d.ws, d.err
}

// spawnVia starts the child in the spawner: the executor keeps its ends of
// the child's pipes, the spawner gets the child's (SCM_RIGHTS) and puts
// the child in its cgroups before it answers.
func (s *Service) spawnVia(ctx context.Context, cmd *exec.Cmd, p *process) error {
	var pipes [3][2]*os.File // stdin, stdout, stderr: {read, write}
	closeAll := func() {
		for _, pp := range pipes {
			for _, f := range pp {
				if f != nil {
					_ = f.Close()
				}
			}
		}
	}
	for i := range pipes {
		r, w, err := os.Pipe()
		if err != nil {
			closeAll()
			return err
		}
		pipes[i] = [2]*os.File{r, w}
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = pipes[0][0], pipes[1][1], pipes[2][1]
	// The spawner puts the child in its cgroups before it could reap it
	// (a child that exits at once stays a zombie until then), and before
	// the executor sends it anything.
	// A task whose ids the setuid helpers map is mapped and released
	// here too (an executor that is not root, with subordinate ids).
	proc, err := s.spawner.StartTask(ctx, p.sb, cmd)
	// The child's ends are the child's now.
	for _, f := range []*os.File{pipes[0][0], pipes[1][1], pipes[2][1]} {
		_ = f.Close()
	}
	if err != nil {
		closeAll()
		return sandbox.StartError(err)
	}
	h := &spawnedHandle{proc: proc, stderr: pipes[2][0], stdout: pipes[1][0], copied: make(chan struct{})}
	p.pid, p.stdin, p.stdout, p.h = proc.Pid, pipes[0][1], pipes[1][0], h
	go func() {
		_, _ = io.Copy(p.stderr, h.stderr)
		close(h.copied)
	}()
	go func() {
		// ctx ending kills the child; if something it left behind still
		// holds its stdout, the executor's end closes after exitGrace
		// (what exec.Cmd's WaitDelay does on the direct path).
		select {
		case <-ctx.Done():
			_ = proc.Kill()
			<-proc.Done()
			t := time.NewTimer(exitGrace)
			defer t.Stop()
			select {
			case <-t.C:
				_ = h.stdout.Close()
			case <-h.copied:
			}
		case <-proc.Done():
		}
	}()
	return nil
}

// spawnedHandle is a child the spawner started.
type spawnedHandle struct {
	proc   *spawner.Proc
	stderr *os.File // the executor's end of the child's stderr
	stdout *os.File
	copied chan struct{} // stderr read to its end
}

func (h *spawnedHandle) kill() error { return h.proc.Kill() }

func (h *spawnedHandle) exited() bool {
	select {
	case <-h.proc.Done():
		return true
	default:
		return false
	}
}

func (h *spawnedHandle) wait() (syscall.WaitStatus, error) {
	ws, err := h.proc.Wait()
	t := time.NewTimer(exitGrace)
	defer t.Stop()
	select {
	case <-h.copied:
	case <-t.C:
		_ = h.stderr.Close() // a leftover process holds it open
	}
	return ws, err
}

// background gives the child the background CPU weight for its exit:
// the task's answer is recorded, and what is left — the child tearing
// down its address space and its PID namespace — should not take the CPU
// from the next task (docs/benchmarks.md).
func (p *process) background() {
	if p.sb != nil {
		_ = p.sb.SetBackground(true)
	}
}

// wait closes the child's stdin and waits for it to exit; a child that
// does not exit within exitGrace after its last frame is killed. It
// returns how the process ended ("exited with status 2").
func (p *process) wait(last bool) string {
	_ = p.stdin.Close()
	type exit struct {
		ws  syscall.WaitStatus
		err error
	}
	done := make(chan exit, 1)
	go func() {
		ws, err := p.h.wait()
		done <- exit{ws, err}
	}()
	var e exit
	if last {
		select {
		case e = <-done:
		case <-time.After(exitGrace):
			_ = p.h.kill()
			e = <-done
		}
	} else {
		// The conversation broke off: nothing more is expected from it.
		_ = p.h.kill()
		e = <-done
	}
	return describeExit(e.ws, e.err)
}

// describeExit says how a process ended ("exited with status 2").
func describeExit(ws syscall.WaitStatus, err error) string {
	switch {
	case err != nil:
		return fmt.Sprintf("could not be waited for (%v)", err)
	case ws.Exited():
		return fmt.Sprintf("exited with status %d", ws.ExitStatus())
	case ws.Signaled():
		return fmt.Sprintf("was killed by signal %s", ws.Signal())
	}
	return fmt.Sprintf("ended with wait status %#x", int(ws))
}

// cleanup kills what is left of the process group (with the strict level,
// the whole PID namespace and anything left in the task's cgroups) and
// removes the cgroups and the workspace.
func (p *process) cleanup() {
	_ = p.h.kill()
	_, _ = p.h.wait()
	_ = p.stdin.Close()
	_ = p.stdout.Close()
	p.sb.Cleanup()
	if p.release != nil {
		p.release()
	}
}
