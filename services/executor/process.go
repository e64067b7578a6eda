package executor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	childv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/child/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/delegation"
	"github.com/agentmesh/agentmesh/pkg/metrics"
	"github.com/agentmesh/agentmesh/services/executor/child"
	"github.com/agentmesh/agentmesh/services/executor/childproto"
	"github.com/agentmesh/agentmesh/services/executor/sandbox"
	"github.com/agentmesh/agentmesh/services/executor/spawner"
	"google.golang.org/protobuf/proto"
)

// StderrTail is how much of a child's stderr is kept for error reports.
const StderrTail = 4 << 10

// exitGrace is how long a child that sent its last frame may take to exit
// before its process group is killed.
const exitGrace = 2 * time.Second

// errWallTime ends a run that outlived Config.WallTime.
type errWallTime struct{ d time.Duration }

func (e errWallTime) Error() string { return fmt.Sprintf("wall time %s exceeded", e.d) }

// runTask runs one attempt of task in a child process and returns how it
// ended. ctx's cause says why it was stopped from outside, if it was.
//
// teardown (never nil) waits for the child's exit and removes its sandbox
// (cgroups, workspace). When the child gave its final answer, teardown is
// left to the caller, to be called after the completion is recorded: the
// answer is all the outcome needs, and the child's exit and the removal of
// its cgroups (an RCU-synchronised rmdir each) and workspace take
// milliseconds that no longer sit between the answer and the task's
// completed event. The caller calls it before freeing the task's slot, so
// an executor never holds more than Capacity children.
func (s *Service) runTask(ctx context.Context, log *slog.Logger, task *agentmeshv1.Task, attempt int32, tp string) (out outcome, teardown func()) {
	out = s.runTaskIn(ctx, log, task, attempt, tp, &teardown)
	if teardown == nil {
		teardown = func() {}
	}
	return out, teardown
}

// runTaskIn is runTask; it sets *teardown when it leaves the child's
// teardown to the caller.
func (s *Service) runTaskIn(ctx context.Context, log *slog.Logger, task *agentmeshv1.Task, attempt int32, tp string, teardown *func()) outcome {
	// The work item carries the task as it was dispatched: with no step
	// checkpointed by an earlier attempt there is nothing to resume from
	// and no history to read.
	var steps []*agentmeshv1.Step
	var approvals map[string]*agentmeshv1.Approval
	if task.StepCount > 0 {
		var err error
		steps, approvals, err = s.history(ctx, task.Id)
		if err != nil {
			if gone(err) {
				return outcome{kind: outGone, reason: err.Error()}
			}
			return outcome{kind: outRequeue, reason: "could not read the task's checkpoints: " + err.Error()}
		}
	}
	spec := task.GetAgentSpec()
	start := &childv1.Start{
		TaskId:       task.Id,
		Attempt:      attempt,
		SystemPrompt: spec.GetSystemPrompt(),
		Input:        inputWithDependencies(task),
		Tools:        spec.GetTools(),
		MaxSteps:     spec.GetMaxSteps(),
		History:      steps,
		Traceparent:  tp,
	}
	if start.MaxSteps <= 0 {
		start.MaxSteps = int32(s.cfg.MaxSteps)
	}
	// The model key (from a named secret) and the budget (see budget.go).
	mr, bad := s.newModelRun(task, steps)
	if bad != nil {
		return *bad
	}
	// A continued conversation: the earlier thread (conversation.go).
	if mr.thread, bad = s.conversation(ctx, task); bad != nil {
		return *bad
	}
	start.MaxSteps = mr.maxSteps(start.MaxSteps)

	limit, wall := mr.attemptLimit(s.cfg.WallTime)
	ctx, cancel := context.WithTimeoutCause(ctx, limit, wall)
	defer func() {
		if *teardown == nil {
			cancel()
		}
	}()

	// MCP servers: the executor connects the HTTP ones (it calls them on
	// the child's behalf); the child starts the stdio ones in its sandbox.
	mc, err := s.connectMCP(ctx, log, task)
	defer mc.close()
	if err != nil {
		if cause := context.Cause(ctx); cause != nil {
			return stopped(cause)
		}
		return outcome{kind: outFailed, reason: err.Error(), failKind: agentmeshv1.FailureKind_FAILURE_KIND_AGENT}
	}
	start.ExecutorTools = append(start.ExecutorTools, mc.specs...)
	start.McpServers = mc.stdio

	// The first model turn, asked now when the start alone decides it;
	// the child comes beside it or after it (first.go).
	first := s.askFirst(ctx, task, attempt, mr, start)
	p, kept, err := s.childFor(ctx, task, attempt, mr, first, child.NextIndex(steps))
	if kept != nil {
		// The answer is checkpointed: the child replays it from its
		// history, as a retry would, and never asks for it.
		steps = append(slices.Clip(steps), kept)
		start.History, first = steps, nil
	}
	if errors.Is(err, errNoChild) {
		res, _ := first.ended(mr)
		if res.kind != agentmeshv1.FailureKind_FAILURE_KIND_MODEL || ctx.Err() == nil {
			return outcome{kind: outFailed, reason: res.failure.GetReason(), failKind: res.kind}
		}
	}
	if err != nil {
		if resp := first.unclaimed(); resp != nil { // (none after errNoChild, or once kept)
			// The answer came and no child could be started for it.
			kctx, cancel := endContext(ctx)
			s.keepAnswer(kctx, task, attempt, resp, child.NextIndex(steps))
			cancel()
		}
		if cause := context.Cause(ctx); cause != nil {
			return stopped(cause)
		}
		return outcome{kind: outFailed, reason: err.Error(), failKind: agentmeshv1.FailureKind_FAILURE_KIND_INTERNAL}
	}
	start.Reusable = s.reusable(p, start)
	log.Info("agent process started", "pid", p.pid, "warm", p.warm, "resumed_steps", len(steps))

	dl := s.newDelegator(task, attempt, mr, steps)
	// serve may replace p: a child released while its model call ran is
	// followed by another (release.go).
	res := s.serve(ctx, task, attempt, start, &p, first, newGate(task, approvals, dl.tools(mc.execTools(s.execTools)), mc.tools), mr, dl)
	if !res.blocked && res.final != nil {
		// The answer is in hand (and checkpointed): record it first, then
		// let the child exit and remove its sandbox.
		// The attempt's context stays alive until then: its end would kill
		// the child before it exits by itself.
		*teardown = func() {
			if start.Reusable && s.park(task, p) {
				cancel() // the child is unlinked from the task's context
				return
			}
			p.background()
			_ = p.wait(res.last)
			p.cleanup()
			cancel()
		}
		return outcome{kind: outCompleted, result: res.final.Answer, steps: res.steps}
	}
	defer p.cleanup()
	status := p.wait(res.last)

	switch {
	case res.blocked:
		return outcome{kind: outGone, reason: res.blockedOn}
	case res.final != nil:
		return outcome{kind: outCompleted, result: res.final.Answer, steps: res.steps}
	case res.failure != nil && !(res.kind == agentmeshv1.FailureKind_FAILURE_KIND_MODEL && ctx.Err() != nil):
		return outcome{kind: outFailed, reason: res.failure.Reason, failKind: res.kind}
	case res.takeOverErr != nil && ctx.Err() == nil:
		// The model's answer is checkpointed (keepAnswer): the next
		// attempt replays it.
		return outcome{kind: outRequeue, reason: res.takeOverErr.Error()}
	}
	if cause := context.Cause(ctx); cause != nil {
		return stopped(cause)
	}
	switch {
	case res.stepErr != nil && gone(res.stepErr):
		return outcome{kind: outGone, reason: res.stepErr.Error()}
	case res.stepErr != nil:
		return outcome{kind: outRequeue, reason: "checkpoint failed: " + res.stepErr.Error()}
	case res.protoErr != nil:
		return outcome{kind: outFailed, reason: withTail("agent process broke the protocol: "+res.protoErr.Error(), p.stderr.String()), failKind: agentmeshv1.FailureKind_FAILURE_KIND_AGENT}
	}
	// A memory overrun is the task's own doing: report it as resource
	// exhaustion (retrying cannot help).
	if p.sb != nil && p.sb.OOMKilled() {
		return outcome{kind: outFailed, reason: p.sb.MemoryError().Error(), failKind: agentmeshv1.FailureKind_FAILURE_KIND_RESOURCE}
	}
	reason := "agent process " + status
	if strings.TrimSpace(p.stderr.String()) == "" {
		reason += " without a final answer"
	}
	return outcome{kind: outFailed, reason: withTail(reason, p.stderr.String()), failKind: agentmeshv1.FailureKind_FAILURE_KIND_INTERNAL}
}

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
	stderr *tailBuffer
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
	p := &process{stderr: &tailBuffer{max: StderrTail}, dir: sb.Workspace(), sb: sb}
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
		s.log.Warn("UNSANDBOXED agent process: isolation level none (no namespaces, no Landlock, no cgroup limits)", "task", taskID, "pid", p.pid)
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

// serveResult is how a conversation with a child ended.
type serveResult struct {
	final    *childv1.Final
	failure  *childv1.Failure
	stepErr  error // a checkpoint was refused or failed
	protoErr error // a malformed or unexpected frame
	// last is true when the child sent its last frame (Final, Failure, or
	// got a stop ack) and should exit by itself.
	last bool
	// blocked: the task now waits for a person's approval or for its
	// sub-tasks (blockedOn says which).
	blocked   bool
	blockedOn string
	// kind of a failure (MODEL, BUDGET, AGENT).
	kind agentmeshv1.FailureKind
	// takeOverErr: no child could take over from one released while its
	// model call ran.
	takeOverErr error
	// steps: with final, the model turn that gave the answer, acked and not
	// yet written: the completion records it (finish).
	steps []*agentmeshv1.Step
}

// maxTogether bounds the steps written in one request: larger ones go on
// their own, so no request is larger than it was before steps were written
// together (the bus's message limit).
const maxTogether = 256 << 10

// deferrable tells whether a model turn may wait to be written with the
// step after it. A large turn is written at once, and so is a turn that
// asks for sub-tasks: their spawns start as soon as it is recorded
// (delegator.prefetch), and must not start from an answer the store does
// not hold.
func deferrable(turn *agentmeshv1.Step) bool {
	if proto.Size(turn) > maxTogether {
		return false
	}
	for _, c := range turn.GetToolCalls() {
		switch c.GetName() {
		case delegation.ToolCallAgent, delegation.ToolCallModel, delegation.ToolWaitTasks:
			return false
		}
	}
	return true
}

// endWrites bounds the checkpoints serve writes as a conversation ends
// (a held turn, an answer no child recorded) after the attempt's own
// context ended.
const endWrites = 5 * time.Second

// endContext is the context of those writes: ctx's values without its
// end, bounded by endWrites.
func endContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), endWrites)
}

// serve answers the child's frames in order until it sends Final or
// Failure, breaks the protocol, or its stdout ends.
//
// *pp is the child; serve replaces it when it releases the child while a
// model call runs and starts another when the answer comes (release.go).
//
// first is the model call asked ahead for the child's first request (nil:
// none was; first.go).
func (s *Service) serve(ctx context.Context, task *agentmeshv1.Task, attempt int32, start *childv1.Start, pp **process, first *asked, g *gate, mr *modelRun, dl *delegator) serveResult {
	p := *pp
	r, w := p.frames()
	// The last model response not yet recorded by a MODEL_TURN step.
	var observed *childv1.ModelResponse
	// held is the answer of a model call whose child was released, for the
	// child that took over to ask for again.
	var held *childv1.ModelResponse
	rel := newReleasable(releaseAfter(s.cfg), start)
	// deferred is a model turn acked to the child and not yet written: it
	// is checkpointed together with the step that follows it (the first
	// tool call it asked for) or with the completion (it gave the answer),
	// one store write and one request instead of two. Any other frame, and
	// the child's end, writes it first, so it is durable before anything
	// that depends on it happens: a tool runs, the model is called again,
	// the task ends (docs/architecture.md, "Checkpoints written together").
	var deferred *agentmeshv1.Step
	flushIn := func(ctx context.Context) error {
		if deferred == nil {
			return nil
		}
		step := deferred
		deferred = nil
		if err := s.appendSteps(ctx, task.Id, attempt, step); err != nil {
			return err
		}
		rel.recorded(step, verdict{})
		return nil
	}
	flush := func() error { return flushIn(ctx) }
	// next is the index of the child's next step (child.NextIndex, then
	// each step it reports).
	next := child.NextIndex(start.GetHistory())
	// early is a slow answer's MODEL_TURN being written while the child
	// that asked for it takes the answer (first.go, handEarly); the child's
	// own report of that turn is then acknowledged without a second write.
	var early *earlyTurn
	// However the conversation ends — the child's exit, a broken pipe, a
	// protocol error, a refused step — a turn still held is written (the
	// final answer's goes with the completion instead), and so is an
	// answer the model gave that no child recorded: the first turn asked
	// ahead that no child asked for, or an answer its child did not live
	// to report (first.go, keepAnswer). Both are written even when the
	// attempt's context has ended (a draining executor, the wall time; a
	// cancelled task's attempt is fenced and refused), within endWrites.
	defer func() {
		if early != nil && early.wait() == nil {
			observed = nil // recorded: the child died before reporting it
		}
		if resp := first.unclaimed(); resp != nil {
			observed = resp
		}
		if held != nil && held.GetError() == "" {
			observed = held // the child taking over died before asking for it
		}
		if deferred == nil && observed == nil {
			return // the common end: nothing left to write
		}
		ctx, cancel := endContext(ctx)
		defer cancel()
		if err := flushIn(ctx); err != nil {
			s.log.Warn("model turn not checkpointed after the agent's end", "task", task.Id, "err", err)
			return
		}
		if observed != nil {
			s.keepAnswer(ctx, task, attempt, observed, next)
		}
	}()
	if err := w.Write(&childv1.Frame{Kind: &childv1.Frame_Start{Start: start}}); err != nil {
		return serveResult{}
	}
	for {
		f, err := r.Read()
		if err != nil {
			if errors.Is(err, io.EOF) || ctx.Err() != nil {
				return serveResult{}
			}
			if errors.Is(err, childproto.ErrMalformed) || errors.Is(err, childproto.ErrFrameTooLarge) {
				return serveResult{protoErr: err}
			}
			return serveResult{} // the pipe broke: the exit status tells why
		}
		if _, ok := f.Kind.(*childv1.Frame_ModelRequest); held != nil && !ok {
			return serveResult{protoErr: fmt.Errorf("a child taking over sent %s before asking for its model turn", childproto.Kind(f))}
		}
		// The turn written early is settled before anything else is
		// written or done: the child's next frame is its report of it.
		var recorded *agentmeshv1.Step
		if early != nil {
			et := early
			early = nil
			if et.wait() == nil {
				observed = nil
				recorded = et.step
			}
		}
		switch f.Kind.(type) {
		case *childv1.Frame_Step, *childv1.Frame_Final:
		default:
			if err := flush(); err != nil {
				return serveResult{stepErr: err}
			}
		}
		switch k := f.Kind.(type) {
		case *childv1.Frame_ModelRequest:
			var resp *childv1.ModelResponse
			var stop *serveResult
			if held != nil {
				// The child that took over asks for the turn its
				// predecessor asked for: the answer is in hand.
				resp, held = held, nil
				resp.Id = k.ModelRequest.GetId()
			} else {
				var a *asked
				if first != nil {
					a, first = s.firstAnswer(task, first, k.ModelRequest), nil
				}
				var released bool
				resp, stop, released = s.awaitModel(ctx, task, attempt, mr, k.ModelRequest, rel, p, a)
				if released && stop == nil {
					// A slow answer is checkpointed while the child that
					// takes over starts, and is in that child's history
					// (first.go, startKeeping); else it is held for it.
					np, kept, err := s.takeOver(ctx, task, attempt, rel, start, resp, next, s.keepsEarly(resp, mr))
					if kept != nil {
						next = kept.Index + 1
					}
					if err != nil {
						if resp.GetError() == "" && kept == nil {
							observed = resp // kept for the next attempt
						}
						return serveResult{takeOverErr: err}
					}
					p, *pp = np, np
					r, w = p.frames()
					if kept == nil {
						held = resp
					}
					continue
				}
			}
			if resp.GetError() == "" {
				observed = resp // what the next MODEL_TURN step must record
			}
			if stop == nil && s.keepsEarly(resp, mr) {
				early = s.handEarly(ctx, task, attempt, resp, next)
			}
			if err := w.Write(&childv1.Frame{Kind: &childv1.Frame_ModelResponse{ModelResponse: resp}}); err != nil && stop == nil {
				return serveResult{}
			}
			if stop != nil {
				return *stop // a budget ran out: no model call
			}
		case *childv1.Frame_ToolRequest:
			resp := g.run(ctx, k.ToolRequest)
			if err := w.Write(&childv1.Frame{Kind: &childv1.Frame_ToolResponse{ToolResponse: resp}}); err != nil {
				return serveResult{}
			}
		case *childv1.Frame_Step:
			step := k.Step.GetStep()
			if step == nil {
				return serveResult{protoErr: errors.New("step frame without a step")}
			}
			step.Attempt = attempt
			next = max(next, step.Index+1)
			ack := &childv1.StepAck{Index: step.Index}
			var v verdict
			switch step.Kind {
			case agentmeshv1.StepKind_STEP_KIND_TOOL_CALL:
				v = g.decide(step)
				ack.Decision, ack.Message, ack.RunInExecutor = v.decision, v.message, v.inExecutor
			case agentmeshv1.StepKind_STEP_KIND_TOOL_RESULT:
				// The decision recorded is the gate's, not the child's word.
				if err := g.result(step); err != nil {
					return serveResult{protoErr: err}
				}
			case agentmeshv1.StepKind_STEP_KIND_MODEL_TURN:
				// Usage and model are what the executor saw, not what the
				// child reports: they feed cost, usage totals and budgets.
				if recorded != nil {
					// Written early, from the model's answer itself: the
					// child must report that very turn.
					if !proto.Equal(step, recorded) {
						return serveResult{protoErr: fmt.Errorf("the agent reported model turn %d other than the model's answer, which was recorded", step.Index)}
					}
					break
				}
				if observed == nil {
					return serveResult{protoErr: errors.New("a model turn step without a model call")}
				}
				step.Usage, step.Model = observed.GetUsage(), observed.GetModel()
				observed = nil
			}
			if recorded != nil && step.Kind != agentmeshv1.StepKind_STEP_KIND_MODEL_TURN {
				return serveResult{protoErr: fmt.Errorf("the agent reported a %s step before the model turn it asked for", step.Kind)}
			}
			res, stop := mr.stepDone(step)
			if recorded != nil {
				// Recorded already: acknowledged without a write.
				rel.recorded(step, verdict{})
				if stop {
					ack.Error = res.failure.Reason
					_ = w.Write(&childv1.Frame{Kind: &childv1.Frame_StepAck{StepAck: ack}})
					return res
				}
				dl.prefetch(ctx, g, step)
				if err := w.Write(&childv1.Frame{Kind: &childv1.Frame_StepAck{StepAck: ack}}); err != nil {
					return serveResult{}
				}
				continue
			}
			if step.Kind == agentmeshv1.StepKind_STEP_KIND_MODEL_TURN && !stop && deferred == nil && deferrable(step) {
				deferred = step
				if err := w.Write(&childv1.Frame{Kind: &childv1.Frame_StepAck{StepAck: ack}}); err != nil {
					return serveResult{}
				}
				continue
			}
			if deferred != nil && proto.Size(deferred)+proto.Size(step) > maxTogether {
				if err := flush(); err != nil { // each on its own, as large as before
					return serveResult{stepErr: err}
				}
			}
			steps := []*agentmeshv1.Step{step}
			if deferred != nil {
				if step.Index <= deferred.Index {
					return serveResult{protoErr: fmt.Errorf("step %d after step %d: step indexes must increase", step.Index, deferred.Index)}
				}
				steps = []*agentmeshv1.Step{deferred, step}
			}
			stepErr := s.appendSteps(ctx, task.Id, attempt, steps...)
			if stepErr == nil {
				if deferred != nil {
					rel.recorded(deferred, verdict{})
					deferred = nil
				}
				rel.recorded(step, v)
			}
			if stop && stepErr == nil {
				ack.Error = res.failure.Reason // a budget ran out with this model turn
				_ = w.Write(&childv1.Frame{Kind: &childv1.Frame_StepAck{StepAck: ack}})
				return res
			}
			if stepErr == nil && step.Kind == agentmeshv1.StepKind_STEP_KIND_MODEL_TURN {
				dl.prefetch(ctx, g, step) // the turn's spawns start together
			}
			if stepErr == nil && step.ToolName == delegation.ToolWaitTasks && v.inExecutor &&
				(v.decision == agentmeshv1.ToolDecision_TOOL_DECISION_ALLOWED || v.decision == agentmeshv1.ToolDecision_TOOL_DECISION_APPROVED) {
				// The call is checkpointed: the task may block on its
				// sub-tasks now, and a later attempt replays the call.
				blocked, err := dl.wait(ctx, step)
				stepErr = err
				if blocked {
					ack.Error = "waiting for sub-tasks"
					_ = w.Write(&childv1.Frame{Kind: &childv1.Frame_StepAck{StepAck: ack}})
					return serveResult{blocked: true, blockedOn: "waiting for sub-tasks", last: true}
				}
			}
			if stepErr == nil && v.approval != nil && v.decision == agentmeshv1.ToolDecision_TOOL_DECISION_PENDING_APPROVAL {
				stepErr = s.block(ctx, task, attempt, v.approval)
				if stepErr == nil {
					ack.Error = "waiting for approval of " + v.approval.Tool
					_ = w.Write(&childv1.Frame{Kind: &childv1.Frame_StepAck{StepAck: ack}})
					return serveResult{blocked: true, blockedOn: "waiting for approval", last: true}
				}
			}
			if stepErr != nil {
				ack.Error = stepErr.Error()
			}
			if err := w.Write(&childv1.Frame{Kind: &childv1.Frame_StepAck{StepAck: ack}}); err != nil && stepErr == nil {
				return serveResult{}
			}
			if stepErr != nil {
				return serveResult{stepErr: stepErr}
			}
		case *childv1.Frame_ToolsDiscovered:
			if err := mcpDiscovered(task, g, k.ToolsDiscovered); err != nil {
				return serveResult{protoErr: err}
			}
		case *childv1.Frame_Final:
			res := serveResult{final: k.Final, last: true}
			if deferred != nil {
				res.steps = []*agentmeshv1.Step{deferred} // written with the completion
				deferred = nil
			}
			return res
		case *childv1.Frame_Failure:
			return mr.failed(k.Failure)
		default:
			return serveResult{protoErr: fmt.Errorf("unexpected %s frame from the agent", childproto.Kind(f))}
		}
	}
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}

// reset forgets what was written (a reused child's next task starts with
// an empty tail).
func (t *tailBuffer) reset() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = t.buf[:0]
}
