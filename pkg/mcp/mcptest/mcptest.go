// Package mcptest installs the real MCP servers the tests run against —
// @modelcontextprotocol/server-filesystem and
// @modelcontextprotocol/server-everything from npm, at the versions pinned
// here — and starts server-everything's streamable HTTP transport.
//
// The packages are installed once per version pair into
// $TMPDIR/agentmesh-mcp-npm/<versions> (a file lock keeps concurrent test
// binaries from installing twice). Without node or npm, or when the install
// fails, tests are skipped with the reason — unless CI=true, where they fail.
package mcptest

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The pinned versions of the npm servers (`npm view <pkg> version`).
const (
	FilesystemPackage = "@modelcontextprotocol/server-filesystem"
	FilesystemVersion = "2026.8.31"
	EverythingPackage = "@modelcontextprotocol/server-everything"
	EverythingVersion = "2026.8.31"
)

// Servers locates the installed servers.
type Servers struct {
	// Dir holds the installed packages (node_modules); a sandbox that runs
	// them must be able to read it.
	Dir string
	// Node is the node binary.
	Node string
	// Filesystem and Everything are the servers' entry scripts (run as
	// `node <script> ...`).
	Filesystem string
	Everything string
}

// FilesystemCommand is the command line of a filesystem server confined to
// dirs.
func (s Servers) FilesystemCommand(dirs ...string) []string {
	return append([]string{s.Node, s.Filesystem}, dirs...)
}

// EverythingCommand is the command line of server-everything over stdio.
func (s Servers) EverythingCommand() []string {
	return []string{s.Node, s.Everything, "stdio"}
}

var (
	installOnce sync.Once
	installed   Servers
	installErr  error
)

// Install returns the installed servers, installing them on first use.
func Install(t testing.TB) Servers {
	t.Helper()
	installOnce.Do(func() { installed, installErr = install() })
	if installErr != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("MCP test servers: %v", installErr)
		}
		t.Skipf("MCP test servers unavailable (CI=true makes this fail): %v", installErr)
	}
	return installed
}

func install() (Servers, error) {
	node, err := exec.LookPath("node")
	if err != nil {
		return Servers{}, fmt.Errorf("node is not installed: %w", err)
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		return Servers{}, fmt.Errorf("npm is not installed: %w", err)
	}
	dir := filepath.Join(os.TempDir(), "agentmesh-mcp-npm", "fs-"+FilesystemVersion+"_everything-"+EverythingVersion)
	s := Servers{
		Dir:        dir,
		Node:       node,
		Filesystem: filepath.Join(dir, "node_modules", FilesystemPackage, "dist", "index.js"),
		Everything: filepath.Join(dir, "node_modules", EverythingPackage, "dist", "index.js"),
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return Servers{}, err
	}
	lock, err := os.OpenFile(dir+".lock", os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return Servers{}, err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return Servers{}, fmt.Errorf("lock %s: %w", lock.Name(), err)
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
	marker := filepath.Join(dir, ".installed")
	if _, err := os.Stat(marker); err == nil {
		return s, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, npm, "install", "--prefix", dir, "--no-audit", "--no-fund", "--no-save", "--loglevel=error",
		FilesystemPackage+"@"+FilesystemVersion, EverythingPackage+"@"+EverythingVersion)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return Servers{}, fmt.Errorf("npm install %s@%s %s@%s: %w: %s", FilesystemPackage, FilesystemVersion,
			EverythingPackage, EverythingVersion, err, strings.TrimSpace(string(out)))
	}
	for _, p := range []string{s.Filesystem, s.Everything} {
		if _, err := os.Stat(p); err != nil {
			return Servers{}, fmt.Errorf("npm install left no %s", p)
		}
	}
	if err := os.WriteFile(marker, []byte(time.Now().UTC().Format(time.RFC3339)+"\n"), 0o644); err != nil {
		return Servers{}, err
	}
	return s, nil
}

// StartEverythingHTTP runs server-everything's streamable HTTP transport on
// a free port of 127.0.0.1 until the test ends and returns its endpoint
// ("http://127.0.0.1:<port>/mcp").
func StartEverythingHTTP(t testing.TB, s Servers) string {
	t.Helper()
	var lastErr error
	for range 3 {
		port, err := freePort()
		if err != nil {
			t.Fatal(err)
		}
		url, err := startHTTP(t, s, port)
		if err == nil {
			return url
		}
		lastErr = err
	}
	t.Fatalf("server-everything over HTTP: %v", lastErr)
	return ""
}

func startHTTP(t testing.TB, s Servers, port int) (string, error) {
	cmd := exec.Command(s.Node, s.Everything, "streamableHttp")
	cmd.Env = append(os.Environ(), "PORT="+strconv.Itoa(port))
	cmd.Dir = t.TempDir()
	var logs strings.Builder
	var mu sync.Mutex
	w := writerFunc(func(p []byte) (int, error) { mu.Lock(); defer mu.Unlock(); return logs.Write(p) })
	cmd.Stdout, cmd.Stderr = w, w
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return "", err
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	stop := func() {
		_ = cmd.Process.Kill()
		<-exited
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	deadline := time.Now().Add(20 * time.Second)
	for {
		select {
		case <-exited:
			mu.Lock()
			defer mu.Unlock()
			return "", fmt.Errorf("exited: %s", strings.TrimSpace(logs.String()))
		default:
		}
		if c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond); err == nil {
			c.Close()
			// The port answers; make sure it is this server.
			resp, err := http.Get("http://" + addr + "/mcp")
			if err == nil {
				resp.Body.Close()
				break
			}
		}
		if time.Now().After(deadline) {
			stop()
			return "", fmt.Errorf("not listening on %s after 20s", addr)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Cleanup(stop)
	return "http://" + addr + "/mcp", nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
