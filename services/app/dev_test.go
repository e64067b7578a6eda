package app

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/pkg/poll"
	"github.com/nats-io/nats.go"
)

type syncBuf struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

var tapLine = regexp.MustCompile(`-s (\S+) -creds (\S+) '([^']+)'`)

// runDevOnce starts `agentmesh dev` on dataDir, waits for its banner and
// returns it with a stop function.
func runDevOnce(t *testing.T, dataDir, natsAddr string, extra ...string) (banner string, stop func()) {
	t.Helper()
	out := &syncBuf{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		args := []string{"--data-dir", dataDir, "--listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0", "--nats-listen", natsAddr,
			"--isolation", "none", "--log-level", "error"}
		done <- runDevTo(ctx, append(args, extra...), out)
	}()
	poll.Until(t, 60*time.Second, func() error {
		select {
		case err := <-done:
			t.Fatalf("dev stopped: %v", err)
		default:
		}
		if !tapLine.MatchString(out.String()) {
			return errors.New("no tap instructions printed yet")
		}
		return nil
	})
	return out.String(), func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("dev: %v", err)
		}
	}
}

// agentmesh dev creates the bus credentials on first start (0600), reuses
// them after a restart, keeps its loopback NATS port authenticated and
// prints how to tap with a credential that works.
func TestDevBusCredentials(t *testing.T) {
	dataDir := t.TempDir()
	natsAddr := freePort(t)
	banner, stop := runDevOnce(t, dataDir, natsAddr)
	m := tapLine.FindStringSubmatch(banner)
	url, creds, subject := m[1], m[2], m[3]
	if subject != "am.evt.default.>" || !strings.HasPrefix(creds, filepath.Join(dataDir, "bus")) {
		t.Errorf("tap instructions: creds %s subject %s, want a file under %s/bus and am.evt.default.>", creds, subject, dataDir)
	}
	busDir := filepath.Join(dataDir, "bus")
	entries, err := os.ReadDir(busDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		fi, _ := e.Info()
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v, want 0600", e.Name(), fi.Mode().Perm())
		}
	}
	if fi, _ := os.Stat(busDir); fi.Mode().Perm() != 0o700 {
		t.Errorf("%s: mode %v, want 0700", busDir, fi.Mode().Perm())
	}
	account, err := os.ReadFile(filepath.Join(busDir, "account.nk"))
	if err != nil {
		t.Fatal(err)
	}

	// No anonymous access on the loopback port; the printed tap works.
	if nc, err := nats.Connect(url); err == nil {
		nc.Close()
		t.Error("anonymous client: connected, want refused")
	}
	nc, err := nats.Connect(url, nats.UserCredentials(creds))
	if err != nil {
		t.Fatalf("connect with the printed tap: %v", err)
	}
	var refused error
	nc.SetErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { refused = err })
	if _, err := nc.SubscribeSync(subject); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	nc.Close()
	if refused != nil {
		t.Errorf("the printed tap subscription was refused: %v", refused)
	}
	stop()

	// Restart: the same keys, so the same accounts and the same data.
	_, stop = runDevOnce(t, dataDir, natsAddr)
	defer stop()
	again, err := os.ReadFile(filepath.Join(busDir, "account.nk"))
	if err != nil {
		t.Fatal(err)
	}
	if string(again) != string(account) {
		t.Error("the account key changed across a restart; want the credentials reused")
	}
}

// agentmesh bus init writes every identity, auth.conf and the TLS files,
// keeps existing keys on a rerun, and refuses bad arguments.
func TestBusInit(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "bus")
	stdout := os.Stdout
	devnull, _ := os.Open(os.DevNull)
	os.Stdout = devnull
	defer func() { os.Stdout = stdout; devnull.Close() }()

	if code := Main([]string{"bus", "init", "--dir", dir}); code != 0 {
		t.Fatalf("bus init: exit %d", code)
	}
	for _, f := range []string{"auth.conf", "state.creds", "registry.creds", "scheduler.creds", "executor.creds", "router.creds",
		"tap-signer.nk", "operator.nk", "account.nk", "admin.creds", "tls/ca.pem", "tls/server.pem", "tls/server-key.pem"} {
		fi, err := os.Stat(filepath.Join(dir, f))
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v, want 0600", f, fi.Mode().Perm())
		}
	}
	account, _ := os.ReadFile(filepath.Join(dir, "account.nk"))
	server, _ := os.ReadFile(filepath.Join(dir, "tls", "server.pem"))
	if code := Main([]string{"bus", "init", "--dir", dir}); code != 0 {
		t.Fatalf("bus init again: exit %d", code)
	}
	again, _ := os.ReadFile(filepath.Join(dir, "account.nk"))
	serverAgain, _ := os.ReadFile(filepath.Join(dir, "tls", "server.pem"))
	if string(again) != string(account) || string(serverAgain) != string(server) {
		t.Error("a rerun replaced existing keys or certificates")
	}
	for _, args := range [][]string{
		{"bus"}, {"bus", "rotate"}, {"bus", "init"}, {"bus", "init", "--dir", dir, "--prefix", "a b"},
		{"bus", "init", "--dir", dir, "--owner", "me"},
	} {
		if code := Main(args); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
}
