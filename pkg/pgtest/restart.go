package pgtest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// Pause stops the cluster's server (fast shutdown: connections are closed)
// and keeps its data, so Resume can start it again on the same port: for
// tests of what clients see while the database is down. Use a cluster of
// the test's own (StartCluster), not the shared one.
func (c *Cluster) Pause() error {
	if c == nil || c.dir == "" {
		return errors.New("pgtest: only a cluster started by pgtest can be paused")
	}
	if out, err := c.command("pg_ctl", "-D", c.data(), "-m", "fast", "-w", "-t", "60", "stop").CombinedOutput(); err != nil {
		return fmt.Errorf("pgtest: pg_ctl stop: %v: %s", err, out)
	}
	return nil
}

// Resume starts a paused cluster again.
func (c *Cluster) Resume() error {
	if c == nil || c.dir == "" {
		return errors.New("pgtest: only a cluster started by pgtest can be resumed")
	}
	logf := filepath.Join(c.dir, "postgres.log")
	if out, err := c.command("pg_ctl", "-D", c.data(), "-l", logf, "-w", "-t", "60", "start").CombinedOutput(); err != nil {
		return fmt.Errorf("pgtest: pg_ctl start: %v: %s", err, out)
	}
	return nil
}

// Own starts a cluster of the test's own, to Pause and Resume (stopped at
// cleanup). Without Postgres binaries t is skipped (failed when CI=true);
// when AGENTMESH_TEST_PG_URL names an outside server, which the test cannot
// stop, t is skipped.
func Own(t testing.TB) *Cluster {
	t.Helper()
	if os.Getenv(EnvURL) != "" {
		t.Skip("needs a cluster of its own to stop; " + EnvURL + " names an outside server")
	}
	c, err := StartCluster("")
	if errors.Is(err, ErrNoPostgres) && os.Getenv("CI") != "true" {
		t.Skipf("skipping: %v", err)
	}
	if err != nil {
		t.Fatalf("start Postgres: %v", err)
	}
	t.Cleanup(c.Stop)
	return c
}
