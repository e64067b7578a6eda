package pgtest

import (
	"errors"
	"fmt"
	"path/filepath"
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
