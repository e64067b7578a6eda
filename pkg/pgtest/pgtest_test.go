package pgtest_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/agentmesh/agentmesh/pkg/pgtest"
	"github.com/jackc/pgx/v5"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func TestNewDatabase(t *testing.T) {
	ctx := context.Background()
	urls := map[string]bool{}
	for _, name := range []string{"first", "second"} {
		t.Run(name, func(t *testing.T) {
			u := pgtest.NewDatabase(t)
			if urls[u] {
				t.Fatalf("database URL %s handed out twice", u)
			}
			urls[u] = true
			conn, err := pgx.Connect(ctx, u)
			if err != nil {
				t.Fatalf("connect %s: %v", u, err)
			}
			defer conn.Close(ctx)
			// A fresh database has no tables of ours; creating one proves we may write.
			if _, err := conn.Exec(ctx, "CREATE TABLE probe (id int primary key)"); err != nil {
				t.Fatalf("create table: %v", err)
			}
			var fsync string
			if err := conn.QueryRow(ctx, "SHOW fsync").Scan(&fsync); err != nil {
				t.Fatalf("show fsync: %v", err)
			}
			if fsync != "off" && pgtestOwnsCluster() {
				t.Errorf("fsync: got %v, want off", fsync)
			}
		})
	}
}

func TestStartClusterStop(t *testing.T) {
	if _, err := pgtest.BinDir(); err != nil {
		t.Skipf("skipping: %v", err)
	}
	t.Setenv(pgtest.EnvURL, "")
	c, err := pgtest.StartCluster(filepath.Join(t.TempDir(), "not", "yet"))
	if err != nil {
		t.Fatalf("StartCluster: %v", err)
	}
	defer c.Stop()
	if err := c.CreateDatabase("bench_probe"); err != nil {
		t.Fatalf("CreateDatabase: %v", err)
	}
	if err := c.CreateDatabase("bad-name"); err == nil {
		t.Errorf("CreateDatabase(bad-name): got nil error, want invalid name")
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, c.URL("bench_probe"))
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	var one int
	if err := conn.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil || one != 1 {
		t.Fatalf("SELECT 1: got %v, %v, want 1, nil", one, err)
	}
	conn.Close(ctx)
	c.Stop()
	if _, err := pgx.Connect(ctx, c.URL("bench_probe")); err == nil {
		t.Errorf("connect after Stop: got nil error, want the server gone")
	}
}

func pgtestOwnsCluster() bool { return os.Getenv(pgtest.EnvURL) == "" }
