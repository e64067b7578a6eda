// Package pgtest runs a throwaway Postgres cluster from the machine's own
// binaries (pg_config --bindir, or /usr/lib/postgresql/*/bin) for tests and
// benchmarks: one cluster per test process, fsync off, trust auth, listening
// on 127.0.0.1 on a free port and on a unix socket inside its temporary
// directory. Each test gets its own freshly created database.
//
// Postgres refuses to run as root, so when the process is root, initdb and
// pg_ctl run as the postgres user (runuser) and the cluster's directory is
// owned by it.
//
// When AGENTMESH_TEST_PG_URL is set, that server is used instead and no
// cluster is started. When no binaries are found a test is skipped with the
// reason — unless CI=true, where it fails: CI never skips silently.
//
// A watchdog process stops the cluster and removes its directory when the
// test process exits, so a panicking or killed test leaves nothing behind.
package pgtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// EnvURL names a Postgres server to use instead of starting a cluster. Its
// role must be allowed to create databases.
const EnvURL = "AGENTMESH_TEST_PG_URL"

// ErrNoPostgres is returned when no Postgres binaries are found.
var ErrNoPostgres = errors.New("pgtest: no Postgres binaries found (install postgresql, or set " + EnvURL + ")")

// Cluster is a running throwaway Postgres, or an outside server named by
// AGENTMESH_TEST_PG_URL.
type Cluster struct {
	base    *url.URL // URL of the server, database part replaced per call
	dir     string   // owned temp dir ("" for an outside server)
	bindir  string
	asUser  string // "postgres" when we are root, else ""
	watch   *exec.Cmd
	stopped atomic.Bool
}

// BinDir finds the directory of initdb and pg_ctl.
func BinDir() (string, error) {
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		d := strings.TrimSpace(string(out))
		if isFile(filepath.Join(d, "initdb")) && isFile(filepath.Join(d, "pg_ctl")) {
			return d, nil
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return versionOf(dirs[i]) > versionOf(dirs[j]) })
	for _, d := range dirs {
		if isFile(filepath.Join(d, "initdb")) && isFile(filepath.Join(d, "pg_ctl")) {
			return d, nil
		}
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		d := filepath.Dir(p)
		if isFile(filepath.Join(d, "pg_ctl")) {
			return d, nil
		}
	}
	return "", ErrNoPostgres
}

func versionOf(bindir string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(bindir)))
	return v
}

func isFile(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir()
}

// StartCluster initialises and starts a cluster in a new directory under
// dir (created if missing; "" means the system temp dir, which is also used
// when the postgres user cannot reach dir). When AGENTMESH_TEST_PG_URL is set it
// returns a Cluster for that server instead. Stop it with Stop.
func StartCluster(dir string) (*Cluster, error) {
	if u := os.Getenv(EnvURL); u != "" {
		base, err := url.Parse(u)
		if err != nil {
			return nil, fmt.Errorf("pgtest: %s: %w", EnvURL, err)
		}
		return &Cluster{base: base}, nil
	}
	bindir, err := BinDir()
	if err != nil {
		return nil, err
	}
	if dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("pgtest: %w", err)
		}
	}
	asUser := ""
	if os.Geteuid() == 0 {
		asUser = "postgres"
		// The postgres user must reach the directory; a private temp dir
		// of root's (t.TempDir) is not reachable, the system one is.
		if dir != "" && exec.Command("runuser", "-u", asUser, "--", "test", "-x", dir).Run() != nil {
			dir = ""
		}
	}
	root, err := os.MkdirTemp(dir, "agentmesh-pg-")
	if err != nil {
		return nil, fmt.Errorf("pgtest: %w", err)
	}
	c := &Cluster{dir: root, bindir: bindir, asUser: asUser}
	if asUser != "" {
		if err := chownTo(root, c.asUser); err != nil {
			os.RemoveAll(root)
			return nil, err
		}
	}
	if err := c.start(); err != nil {
		c.Stop()
		return nil, err
	}
	return c, nil
}

func chownTo(dir, name string) error {
	u, err := user.Lookup(name)
	if err != nil {
		return fmt.Errorf("pgtest: running as root needs the %s user: %w", name, err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	if err := os.Chown(dir, uid, gid); err != nil {
		return fmt.Errorf("pgtest: chown %s: %w", dir, err)
	}
	return nil
}

func (c *Cluster) command(name string, args ...string) *exec.Cmd {
	bin := filepath.Join(c.bindir, name)
	if c.asUser != "" {
		return exec.Command("runuser", append([]string{"-u", c.asUser, "--", bin}, args...)...)
	}
	return exec.Command(bin, args...)
}

func (c *Cluster) data() string    { return filepath.Join(c.dir, "data") }
func (c *Cluster) sockets() string { return filepath.Join(c.dir, "sock") }

func (c *Cluster) start() error {
	if out, err := c.command("initdb", "-D", c.data(), "-U", "postgres", "--auth=trust",
		"--no-sync", "-E", "UTF8", "--locale=C").CombinedOutput(); err != nil {
		return fmt.Errorf("pgtest: initdb: %v: %s", err, out)
	}
	if err := os.Mkdir(c.sockets(), 0o755); err != nil {
		return fmt.Errorf("pgtest: %w", err)
	}
	if c.asUser != "" {
		if err := chownTo(c.sockets(), c.asUser); err != nil {
			return err
		}
	}
	port, err := freePort()
	if err != nil {
		return err
	}
	conf := fmt.Sprintf(`
listen_addresses = '127.0.0.1'
port = %d
unix_socket_directories = '%s'
fsync = off
synchronous_commit = off
full_page_writes = off
max_connections = 400
shared_buffers = 128MB
log_min_messages = warning
`, port, c.sockets())
	f, err := os.OpenFile(filepath.Join(c.data(), "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("pgtest: %w", err)
	}
	_, err = f.WriteString(conf)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("pgtest: write postgresql.conf: %w", err)
	}
	// The watchdog outlives this process: when it is gone, the cluster is
	// stopped and its directory removed, however the tests ended.
	c.watch = exec.Command("sh", "-c", `while kill -0 "$1" 2>/dev/null; do sleep 1; done; `+
		shellQuote(c.command("pg_ctl", "-D", c.data(), "-m", "immediate", "-w", "stop").Args)+` >/dev/null 2>&1; rm -rf "$2"`,
		"pgtest-watchdog", strconv.Itoa(os.Getpid()), c.dir)
	if err := c.watch.Start(); err != nil {
		return fmt.Errorf("pgtest: start watchdog: %w", err)
	}
	go c.watch.Wait() //nolint:errcheck // reaped only; it outlives us by design
	logf := filepath.Join(c.dir, "postgres.log")
	if out, err := c.command("pg_ctl", "-D", c.data(), "-l", logf, "-w", "-t", "60", "start").CombinedOutput(); err != nil {
		log, _ := os.ReadFile(logf)
		return fmt.Errorf("pgtest: pg_ctl start: %v: %s\n%s", err, out, log)
	}
	c.base = &url.URL{Scheme: "postgres", User: url.User("postgres"), Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
		Path: "/postgres", RawQuery: "sslmode=disable"}
	return nil
}

func shellQuote(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return strings.Join(q, " ")
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pgtest: find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// URL returns the URL of database db on the cluster.
func (c *Cluster) URL(db string) string {
	u := *c.base
	u.Path = "/" + db
	return u.String()
}

// CreateDatabase creates database name (a plain identifier).
func (c *Cluster) CreateDatabase(name string) error {
	if !identRE.MatchString(name) {
		return fmt.Errorf("pgtest: invalid database name %q", name)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin := *c.base
	if c.dir != "" {
		admin.Path = "/postgres"
	}
	conn, err := pgx.Connect(ctx, admin.String())
	if err != nil {
		return fmt.Errorf("pgtest: connect: %w", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return fmt.Errorf("pgtest: create database %s: %w", name, err)
	}
	return nil
}

// DropDatabase drops database name, closing its connections.
func (c *Cluster) DropDatabase(name string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin := *c.base
	if c.dir != "" {
		admin.Path = "/postgres"
	}
	conn, err := pgx.Connect(ctx, admin.String())
	if err != nil {
		return fmt.Errorf("pgtest: connect: %w", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("pgtest: drop database %s: %w", name, err)
	}
	return nil
}

// Stop stops the cluster and removes its directory. It does nothing for an
// outside server. Safe to call more than once.
func (c *Cluster) Stop() {
	if c == nil || c.dir == "" || !c.stopped.CompareAndSwap(false, true) {
		return
	}
	if isFile(filepath.Join(c.data(), "postmaster.pid")) {
		_ = c.command("pg_ctl", "-D", c.data(), "-m", "immediate", "-w", "stop").Run()
	}
	if c.watch != nil && c.watch.Process != nil {
		_ = c.watch.Process.Kill()
	}
	_ = os.RemoveAll(c.dir)
}

var identRE = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

var (
	once       sync.Once
	shared     *Cluster
	sharedErr  error
	dbSeq      atomic.Int64
	nameFilter = regexp.MustCompile(`[^a-z0-9]+`)
)

func cluster() (*Cluster, error) {
	once.Do(func() { shared, sharedErr = StartCluster("") })
	return shared, sharedErr
}

// Main runs the tests of a package and then stops the shared cluster. Use
// it in TestMain: func TestMain(m *testing.M) { pgtest.Main(m) }.
func Main(m *testing.M) {
	code := m.Run()
	if shared != nil {
		shared.Stop()
	}
	os.Exit(code)
}

// NewDatabase creates a fresh database for t on the shared cluster
// (started on first use) and returns its URL. The database is dropped at
// cleanup. Without Postgres binaries t is skipped, or failed when CI=true.
func NewDatabase(t testing.TB) string {
	t.Helper()
	c, err := cluster()
	if errors.Is(err, ErrNoPostgres) {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true and Postgres is required: %v", err)
		}
		t.Skipf("skipping: %v", err)
	}
	if err != nil {
		t.Fatalf("start Postgres: %v", err)
	}
	n := strings.Trim(nameFilter.ReplaceAllString(strings.ToLower(t.Name()), "_"), "_")
	if len(n) > 40 {
		n = n[:40]
	}
	name := fmt.Sprintf("t%d_%d_%s", os.Getpid(), dbSeq.Add(1), n)
	if err := c.CreateDatabase(name); err != nil {
		t.Fatalf("%v", err)
	}
	t.Cleanup(func() {
		if err := c.DropDatabase(name); err != nil {
			t.Logf("drop test database: %v", err)
		}
	})
	return c.URL(name)
}
