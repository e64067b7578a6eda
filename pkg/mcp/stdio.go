package mcp

// The stdio client: MCP's stdio transport is JSON-RPC 2.0, one message a
// line, on the server's stdin (client → server) and stdout (server →
// client); its stderr is for logs. The client here does what agentmesh
// needs and nothing more: the lifecycle (initialize, then
// notifications/initialized), tools/list, tools/call, answering the
// server's pings, and stopping the server. It declares no capabilities,
// so a server has no reason to ask anything else; any other request of
// the server is answered "method not found" and its notifications are
// ignored.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/agentmesh/agentmesh/pkg/tail"
)

// ProtocolVersion is the MCP version the client asks for; Protocol
// versions lists those it accepts in the server's answer (tools/list and
// tools/call are the same in all of them).
const ProtocolVersion = "2025-06-18"

// ProtocolVersions are the versions the stdio client speaks.
var ProtocolVersions = []string{"2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"}

// MaxMessage bounds one message a stdio server writes (bytes); a longer
// line ends the session.
const MaxMessage = 32 << 20

// Errors of the stdio client.
var (
	// ErrClosed: the server's stdout ended or the session was closed.
	ErrClosed = errors.New("the server closed the connection")
	// ErrMessageTooLarge: a line of the server's stdout exceeds MaxMessage.
	ErrMessageTooLarge = errors.New("message from the server too large")
	// ErrProtocol: the server broke JSON-RPC or the MCP lifecycle.
	ErrProtocol = errors.New("MCP protocol error")
)

// stopGrace is how long a stdio server may take to exit once its stdin is
// closed before it is sent SIGTERM (and as long again before SIGKILL).
const stopGrace = 2 * time.Second

// message is a JSON-RPC 2.0 message, any of the four kinds.
type message struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id,omitempty"`
	Method  string          `json:"method,omitempty"`
	Params  any             `json:"params,omitempty"`
	Result  json.RawMessage `json:"result,omitempty"`
	Error   *RPCError       `json:"error,omitempty"`
}

// incoming is a message as read: params kept raw.
type incoming struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Result json.RawMessage `json:"result"`
	Error  *RPCError       `json:"error"`
}

// RPCError is a JSON-RPC error response of the server.
type RPCError struct {
	Code    int64           `json:"code"`
	Message string          `json:"message"`
	Data    json.RawMessage `json:"data,omitempty"`
}

func (e *RPCError) Error() string { return fmt.Sprintf("%s (JSON-RPC error %d)", e.Message, e.Code) }

// JSON-RPC's code for a method the receiver does not know.
const codeMethodNotFound = -32601

// stdioSession is a session with a server process it started.
type stdioSession struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser

	wmu sync.Mutex // one message written at a time

	mu      sync.Mutex
	nextID  int64
	pending map[int64]chan incoming
	readErr error         // why reading stopped (set before done closes)
	done    chan struct{} // closed when the server's stdout ends

	closeOnce sync.Once
	closeErr  error
}

// startStdio starts cfg's command and runs the lifecycle's opening.
func startStdio(ctx context.Context, cfg Config, workspace string) (Session, *tail.Buffer, error) {
	stderr := tail.New(2 << 10)
	cmd := command(cfg, workspace, stderr)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, stderr, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, stderr, err
	}
	if err := cmd.Start(); err != nil {
		return nil, stderr, err
	}
	s := &stdioSession{cmd: cmd, stdin: stdin, pending: map[int64]chan incoming{}, done: make(chan struct{})}
	go s.read(stdout)
	if err := s.initialize(ctx); err != nil {
		s.kill()
		return nil, stderr, err
	}
	return s, stderr, nil
}

// command builds a stdio server's process: the configured environment
// only, plus PATH, HOME (the workspace) and LANG; the workspace as its
// working directory; killed if its parent dies.
func command(cfg Config, workspace string, stderr io.Writer) *exec.Cmd {
	expand := func(v string) string { return strings.ReplaceAll(v, "${WORKSPACE}", workspace) }
	argv := cfg.GetCommand()
	args := make([]string, len(argv))
	for i, a := range argv {
		args[i] = expand(a)
	}
	cmd := exec.Command(args[0], args[1:]...)
	lang := os.Getenv("LANG")
	if lang == "" {
		lang = "C.UTF-8"
	}
	env := map[string]string{"PATH": os.Getenv("PATH"), "HOME": workspace, "LANG": lang}
	for k, v := range cfg.GetEnv() {
		env[k] = expand(v)
	}
	keys := make([]string, 0, len(env))
	for k := range env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		cmd.Env = append(cmd.Env, k+"="+env[k])
	}
	cmd.Dir = workspace
	cmd.Stderr = stderr
	cmd.WaitDelay = stopGrace
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	return cmd
}

// initialize opens the session: initialize, a version both speak, then
// notifications/initialized.
func (s *stdioSession) initialize(ctx context.Context) error {
	params := map[string]any{
		"protocolVersion": ProtocolVersion,
		"capabilities":    map[string]any{}, // no roots: a server works on what its command line names
		"clientInfo":      map[string]any{"name": "agentmesh", "version": "1"},
	}
	var res struct {
		ProtocolVersion string `json:"protocolVersion"`
	}
	if err := s.call(ctx, "initialize", params, &res); err != nil {
		return err
	}
	if !slices.Contains(ProtocolVersions, res.ProtocolVersion) {
		return fmt.Errorf("%w: the server speaks MCP %q, the client %s", ErrProtocol, res.ProtocolVersion, strings.Join(ProtocolVersions, ", "))
	}
	return s.write(message{JSONRPC: "2.0", Method: "notifications/initialized"})
}

// ListTools asks for one page of tools.
func (s *stdioSession) ListTools(ctx context.Context, cursor string) ([]ToolInfo, string, error) {
	params := map[string]any{}
	if cursor != "" {
		params["cursor"] = cursor
	}
	var res struct {
		Tools      []ToolInfo `json:"tools"`
		NextCursor string     `json:"nextCursor"`
	}
	if err := s.call(ctx, "tools/list", params, &res); err != nil {
		return nil, "", err
	}
	return res.Tools, res.NextCursor, nil
}

// CallTool calls a tool.
func (s *stdioSession) CallTool(ctx context.Context, name string, args json.RawMessage, meta map[string]any) (*Result, error) {
	params := map[string]any{"name": name, "arguments": args}
	if meta != nil {
		params["_meta"] = meta
	}
	var res Result
	if err := s.call(ctx, "tools/call", params, &res); err != nil {
		return nil, err
	}
	return &res, nil
}

// call sends a request and waits for its response (or ctx, or the end of
// the server's stdout), decoding its result into out.
func (s *stdioSession) call(ctx context.Context, method string, params, out any) error {
	ch := make(chan incoming, 1)
	s.mu.Lock()
	s.nextID++
	id := s.nextID
	s.pending[id] = ch
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.pending, id)
		s.mu.Unlock()
	}()
	if err := s.write(message{JSONRPC: "2.0", ID: json.RawMessage(strconv.FormatInt(id, 10)), Method: method, Params: params}); err != nil {
		return fmt.Errorf("%s: %w", method, err)
	}
	select {
	case resp := <-ch:
		if resp.Error != nil {
			return fmt.Errorf("%s: %w", method, resp.Error)
		}
		if err := json.Unmarshal(resp.Result, out); err != nil {
			return fmt.Errorf("%s: %w: result: %w", method, ErrProtocol, err)
		}
		return nil
	case <-s.done:
		return fmt.Errorf("%s: %w", method, s.readErr)
	case <-ctx.Done():
		_ = s.write(message{JSONRPC: "2.0", Method: "notifications/cancelled", Params: map[string]any{"requestId": id, "reason": ctx.Err().Error()}})
		return fmt.Errorf("%s: %w", method, ctx.Err())
	}
}

// write sends one message as one line.
func (s *stdioSession) write(m message) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if _, err := s.stdin.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("write to the server: %w", err)
	}
	return nil
}

// read reads the server's stdout until it ends: responses go to their
// callers, requests are answered, notifications dropped.
func (s *stdioSession) read(stdout io.Reader) {
	r := bufio.NewReaderSize(stdout, 64<<10)
	var err error
	for {
		var line []byte
		if line, err = readLine(r); err != nil {
			break
		}
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		if err = s.dispatch(line); err != nil {
			break
		}
	}
	if errors.Is(err, io.EOF) {
		err = ErrClosed
	}
	s.readErr = err
	close(s.done)
	// The server stops being read: make it stop writing too.
	if !errors.Is(err, ErrClosed) {
		s.kill()
	}
}

// readLine reads one line (without its newline) of at most MaxMessage
// bytes.
func readLine(r *bufio.Reader) ([]byte, error) {
	var line []byte
	for {
		chunk, err := r.ReadSlice('\n')
		if len(line)+len(chunk) > MaxMessage+1 {
			return nil, fmt.Errorf("%w: over %d bytes", ErrMessageTooLarge, MaxMessage)
		}
		line = append(line, chunk...)
		switch {
		case err == nil:
			return line[:len(line)-1], nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF) && len(bytes.TrimSpace(line)) > 0:
			return line, nil // a last message without its newline
		default:
			return nil, err
		}
	}
}

// dispatch handles one message of the server.
func (s *stdioSession) dispatch(line []byte) error {
	var m incoming
	if err := json.Unmarshal(line, &m); err != nil {
		return fmt.Errorf("%w: a line of the server's stdout is not a JSON-RPC message: %w", ErrProtocol, err)
	}
	switch {
	case m.Method != "" && len(m.ID) > 0: // a request
		if m.Method == "ping" {
			return s.write(message{JSONRPC: "2.0", ID: m.ID, Result: json.RawMessage(`{}`)})
		}
		return s.write(message{JSONRPC: "2.0", ID: m.ID, Error: &RPCError{Code: codeMethodNotFound, Message: "method not found: " + m.Method}})
	case m.Method != "": // a notification
		return nil
	}
	id, err := strconv.ParseInt(string(m.ID), 10, 64)
	if err != nil {
		return nil // a response to no request of ours
	}
	s.mu.Lock()
	ch := s.pending[id]
	delete(s.pending, id) // one response per request is delivered
	s.mu.Unlock()
	if ch != nil {
		ch <- m // buffered
	}
	return nil
}

// Close stops the server: stdin closed, then SIGTERM after stopGrace, then
// SIGKILL after as long again. Its exit status is not an error: once its
// stdin closed, how it exits is its own business.
func (s *stdioSession) Close() error {
	s.closeOnce.Do(func() {
		_ = s.stdin.Close()
		exited := make(chan struct{})
		go func() { _ = s.cmd.Wait(); close(exited) }()
		for _, sig := range []os.Signal{nil, syscall.SIGTERM, syscall.SIGKILL} {
			if sig != nil {
				_ = s.cmd.Process.Signal(sig)
			}
			select {
			case <-exited:
				return
			case <-time.After(stopGrace):
			}
		}
		s.closeErr = fmt.Errorf("the server (pid %d) did not exit %s after SIGKILL", s.cmd.Process.Pid, stopGrace)
	})
	return s.closeErr
}

// kill ends a server that failed to start or broke the protocol, and
// waits for it (so its stderr is all read).
func (s *stdioSession) kill() {
	s.closeOnce.Do(func() {
		_ = s.stdin.Close()
		_ = s.cmd.Process.Kill()
		_ = s.cmd.Wait()
	})
}
