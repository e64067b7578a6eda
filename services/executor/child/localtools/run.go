// Package localtools implements the tools that run inside the agent's
// sandboxed child process: code_run, shell, fs_read, fs_write and fs_list.
// Importing it registers them with pkg/tools (the child imports it).
//
// code_run and shell run a program (python3, node, sh -c) in the task's
// workspace, in its own process group, with a clean environment, a
// wall-time limit (timeout_seconds, 30 s by default), a CPU-time limit
// (RLIMIT_CPU, the same number of seconds) and, in a strict sandbox, in
// the tools' memory cgroup (128 MiB by default) without network. Stdout
// and stderr are capped at OutputCap each; truncation is flagged. A
// program killed at a limit is reported as an error wrapping
// sandbox.ErrResourceExhausted that names the limit.
//
// The fs tools stay inside the workspace: absolute paths, paths that climb
// out with "..", and symbolic links that lead outside (or are absolute)
// are refused with a clear error before anything is touched; in a strict
// sandbox Landlock is the backstop.
package localtools

import (
	"bytes"
	"context"
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
	"unicode/utf8"

	"github.com/agentmesh/agentmesh/pkg/tools"
	"github.com/agentmesh/agentmesh/services/executor/sandbox"
)

func init() {
	tools.Register("code_run", runCode, nil)
	tools.Register("shell", runShell, nil)
	tools.Register("fs_read", fsRead, nil)
	tools.Register("fs_write", fsWrite, nil)
	tools.Register("fs_list", fsList, nil)
}

// Limits.
const (
	// OutputCap bounds each of stdout and stderr returned to the model.
	OutputCap = 64 << 10
	// DefaultTimeout is a program's wall-time limit when the call sets none.
	DefaultTimeout = 30 * time.Second
	// MaxTimeout is the largest timeout_seconds honoured.
	MaxTimeout = 300 * time.Second
)

// ErrOutsideWorkspace is wrapped by the fs tools' refusals.
var ErrOutsideWorkspace = errors.New("outside the workspace")

// workspace returns the directory the tools work in: the sandbox's when
// confined (whatever the Start frame says), else env.Workspace, else the
// working directory.
func workspace(env tools.Env) (string, error) {
	if c := sandbox.Current(); c != nil {
		return c.Workspace, nil
	}
	if env.Workspace != "" {
		return env.Workspace, nil
	}
	return os.Getwd()
}

type codeArgs struct {
	Language string `json:"language"`
	Code     string `json:"code"`
	Stdin    string `json:"stdin"`
	Timeout  int    `json:"timeout_seconds"`
}

func runCode(ctx context.Context, env tools.Env, raw json.RawMessage) (string, error) {
	var a codeArgs
	if err := json.Unmarshal(raw, &a); err != nil {
		return "", fmt.Errorf("code_run: %w: %w", tools.ErrInvalidArguments, err)
	}
	ws, err := workspace(env)
	if err != nil {
		return "", fmt.Errorf("code_run: %w", err)
	}
	var argv []string
	var ext string
	switch a.Language {
	case "python":
		argv, ext = []string{"python3"}, ".py"
	case "node":
		argv, ext = []string{"node"}, ".js"
		if c := sandbox.Current(); c != nil && c.ToolMemory > 0 {
			// A heap limit under the cgroup's, so that Node reports a
			// JavaScript heap overflow rather than being OOM-killed.
			argv = append(argv, "--max-old-space-size="+strconv.FormatInt(c.ToolMemory*3/4>>20, 10))
		}
	default:
		return "", fmt.Errorf("code_run: %w: language %q: want python or node", tools.ErrInvalidArguments, a.Language)
	}
	if _, err := exec.LookPath(argv[0]); err != nil {
		return "", fmt.Errorf("code_run: %s is not installed on this executor", argv[0])
	}
	// The program goes in a file (an argument is limited to 128 KiB),
	// removed afterwards.
	dir := filepath.Join(ws, ".code_run")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("code_run: %w", err)
	}
	f, err := os.CreateTemp(dir, "prog-*"+ext)
	if err != nil {
		return "", fmt.Errorf("code_run: %w", err)
	}
	defer os.Remove(f.Name())
	_, err = f.WriteString(a.Code)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", fmt.Errorf("code_run: write the program: %w", err)
	}
	return runProgram(ctx, program{tool: "code_run", ws: ws, argv: append(argv, f.Name()), stdin: a.Stdin, timeoutSec: a.Timeout, traceparent: env.Traceparent})
}

type shellArgs struct {
	Command string `json:"command"`
	Stdin   string `json:"stdin"`
	Timeout int    `json:"timeout_seconds"`
}

func runShell(ctx context.Context, env tools.Env, raw json.RawMessage) (string, error) {
	var a shellArgs
	if err := json.Unmarshal(raw, &a); err != nil {
		return "", fmt.Errorf("shell: %w: %w", tools.ErrInvalidArguments, err)
	}
	ws, err := workspace(env)
	if err != nil {
		return "", fmt.Errorf("shell: %w", err)
	}
	return runProgram(ctx, program{tool: "shell", ws: ws, argv: []string{"/bin/sh", "-c", a.Command}, stdin: a.Stdin, timeoutSec: a.Timeout, traceparent: env.Traceparent})
}

// wrapper is the shell that starts every program: it sets RLIMIT_CPU, moves
// itself into the tools' memory and pids cgroups and execs the program, so
// the program is limited from its first instruction.
const wrapper = `ulimit -t "$AGENTMESH_CPU_SECONDS" 2>/dev/null
IFS=:
for f in $AGENTMESH_CGROUP_PROCS; do
  echo 0 > "$f" || { echo "agentmesh sandbox: cannot join the tools' cgroup $f" >&2; exit 125; }
done
unset IFS AGENTMESH_CPU_SECONDS AGENTMESH_CGROUP_PROCS
exec "$@"`

// program is one program a local tool runs: the tool's name, the
// workspace, argv, its stdin and its wall-time limit in seconds (0:
// DefaultTimeout).
type program struct {
	tool, ws   string
	argv       []string
	stdin      string
	timeoutSec int
	// traceparent of the tool call's span: TRACEPARENT for the program
	// (the OpenTelemetry convention for trace context in the environment).
	traceparent string
}

// runProgram runs p under the limits and formats the result.
func runProgram(ctx context.Context, p program) (string, error) {
	timeout := DefaultTimeout
	if p.timeoutSec > 0 {
		timeout = min(time.Duration(p.timeoutSec)*time.Second, MaxTimeout)
	}
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < timeout {
		timeout = max(time.Until(dl), time.Second)
	}
	r := ran{timeout: timeout, cpu: max(int(timeout.Seconds()), 1), conf: sandbox.Current()}
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := p.command(rctx, &r)

	sandbox.Reap() // orphans of earlier calls count against the pids limit
	oomBefore := oomKills(r.conf)
	began := time.Now()
	err := sandbox.StartCmd(cmd)
	if err == nil {
		err = cmd.Wait()
		sandbox.Forget(cmd)
		// Whatever the program left behind in its group goes too.
		_ = sandbox.KillGroup(cmd)
	}
	r.took, r.err = time.Since(began), err
	r.oom = oomBefore >= 0 && oomKills(r.conf) > oomBefore
	r.timedOut = errors.Is(rctx.Err(), context.DeadlineExceeded)
	if r.st = cmd.ProcessState; r.st == nil {
		return "", fmt.Errorf("%s: could not start %s: %w", p.tool, p.argv[0], err)
	}
	return p.result(ctx, &r)
}

// ran is how a program ran: its limits, how it ended, what it wrote.
type ran struct {
	timeout        time.Duration
	cpu            int                  // seconds
	conf           *sandbox.Confinement // nil: not sandboxed
	took           time.Duration
	err            error
	st             *os.ProcessState
	oom, timedOut  bool
	stdout, stderr *capped
}

// oomKills is how many of the tools' programs the kernel killed out of
// memory (-1: unknown, not sandboxed).
func oomKills(c *sandbox.Confinement) int64 {
	if c == nil {
		return -1
	}
	return c.ToolOOMKills()
}

// command is the command that runs p: through the wrapper (RLIMIT_CPU and
// the tools' cgroups), in the workspace, with a clean environment, in a
// process group of its own; its output is captured, capped, in r.
func (p program) command(ctx context.Context, r *ran) *exec.Cmd {
	var procs []string
	if r.conf != nil {
		procs = r.conf.ToolProcs
	}
	cmd := exec.CommandContext(ctx, "/bin/sh", append([]string{"-c", wrapper, "sh"}, p.argv...)...)
	cmd.Dir = p.ws
	lang := os.Getenv("LANG")
	if lang == "" {
		lang = "C.UTF-8"
	}
	cmd.Env = []string{
		"PATH=" + os.Getenv("PATH"), "HOME=" + p.ws, "TMPDIR=" + p.ws, "LANG=" + lang,
		"PYTHONDONTWRITEBYTECODE=1", "PYTHONUNBUFFERED=1", "NO_COLOR=1",
		"AGENTMESH_CPU_SECONDS=" + strconv.Itoa(r.cpu), "AGENTMESH_CGROUP_PROCS=" + strings.Join(procs, ":"),
	}
	if p.traceparent != "" {
		cmd.Env = append(cmd.Env, "TRACEPARENT="+p.traceparent)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return sandbox.KillGroup(cmd) }
	cmd.WaitDelay = 2 * time.Second
	r.stdout, r.stderr = &capped{max: OutputCap}, &capped{max: OutputCap}
	cmd.Stdout, cmd.Stderr = r.stdout, r.stderr
	if p.stdin != "" {
		cmd.Stdin = strings.NewReader(p.stdin)
	}
	return cmd
}

// result is what the model is told of how the program ran: its output,
// or the limit it ran into.
func (p program) result(ctx context.Context, r *ran) (string, error) {
	var sig syscall.Signal
	if ws, ok := r.st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		sig = ws.Signal()
	}
	body := format(r.st, sig, r.stdout, r.stderr)
	var limit string
	switch {
	case r.oom:
		limit = fmt.Sprintf("memory limit of %d MiB exceeded: the program was killed (out of memory)", r.conf.ToolMemory>>20)
	case r.timedOut && ctx.Err() == nil:
		limit = fmt.Sprintf("wall-time limit of %s exceeded after %s: the program was killed", r.timeout, r.took.Round(time.Millisecond))
	case sig == syscall.SIGXCPU || (sig == syscall.SIGKILL && cpuUsed(r.st) >= time.Duration(r.cpu)*time.Second):
		limit = fmt.Sprintf("CPU-time limit of %ds exceeded: the program was killed", r.cpu)
	case ctx.Err() != nil:
		return "", fmt.Errorf("%s: stopped: %w", p.tool, ctx.Err())
	case r.st.ExitCode() == 125 && strings.Contains(r.stderr.String(), "agentmesh sandbox:"):
		return "", fmt.Errorf("%s: the sandbox could not limit the program: %s", p.tool, strings.TrimSpace(r.stderr.String()))
	case errors.Is(r.err, exec.ErrWaitDelay):
		body += "\n[background processes of the program kept its output open: what they wrote after it exited is not shown]"
	}
	if limit != "" {
		return "", fmt.Errorf("%s: %w: %s\n%s", p.tool, sandbox.ErrResourceExhausted, limit, body)
	}
	return body, nil
}

func cpuUsed(st *os.ProcessState) time.Duration { return st.UserTime() + st.SystemTime() }

// format renders a program's end and output for the model.
func format(st *os.ProcessState, sig syscall.Signal, stdout, stderr *capped) string {
	var b strings.Builder
	if sig != 0 {
		fmt.Fprintf(&b, "killed by signal %s\n", sig)
	} else {
		fmt.Fprintf(&b, "exit status %d\n", st.ExitCode())
	}
	section := func(name string, c *capped) {
		b.WriteString("--- " + name)
		if c.total > int64(len(c.buf)) {
			fmt.Fprintf(&b, " (truncated: %d bytes in all, the first %d shown)", c.total, len(c.buf))
		}
		b.WriteString(" ---\n")
		b.WriteString(text(c.buf))
		if len(c.buf) > 0 && c.buf[len(c.buf)-1] != '\n' {
			b.WriteByte('\n')
		}
	}
	section("stdout", stdout)
	section("stderr", stderr)
	return b.String()
}

// text makes bytes safe for the model (and for protobuf strings).
func text(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	return strings.ToValidUTF8(string(b), "\uFFFD")
}

// capped keeps the first max bytes written to it and counts the rest.
type capped struct {
	mu    sync.Mutex
	max   int
	buf   []byte
	total int64
}

func (c *capped) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.total += int64(len(p))
	if room := c.max - len(c.buf); room > 0 {
		c.buf = append(c.buf, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

func (c *capped) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return string(bytes.Clone(c.buf))
}
