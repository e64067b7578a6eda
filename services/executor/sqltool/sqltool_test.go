package sqltool

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/agentmesh/agentmesh/pkg/pgtest"
	"github.com/agentmesh/agentmesh/pkg/tools"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// testDB is a fresh database with a small items table, a sequence, a
// function that writes although the classifier cannot tell, and three
// roles: the cluster's superuser, a role that only reads (ro) and one
// that may change items (rw).
type testDB struct{ super, ro, rw string }

func newTestDB(t *testing.T) testDB {
	t.Helper()
	super := pgtest.NewDatabase(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, super)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	u, err := url.Parse(super)
	if err != nil {
		t.Fatal(err)
	}
	db := strings.TrimPrefix(u.Path, "/")
	ro, rw := db+"_ro", db+"_rw"
	for _, q := range []string{
		`CREATE TABLE items (id int PRIMARY KEY, name text, price numeric, tags jsonb, created timestamptz, ok bool)`,
		`INSERT INTO items VALUES (1, 'apple', 1.50, '{"c":"red"}', '2024-01-02T03:04:05Z', true),
			(2, 'pear', 2.25, '["green"]', '2024-02-03T00:00:00Z', false), (3, NULL, NULL, NULL, NULL, NULL)`,
		`CREATE FUNCTION sneaky() RETURNS int LANGUAGE sql VOLATILE AS 'INSERT INTO items (id, name) VALUES (99, ''sneaky'') RETURNING id'`,
		`CREATE SEQUENCE s`,
		`CREATE FUNCTION sneaky_op(int, int) RETURNS int LANGUAGE sql VOLATILE AS 'INSERT INTO items (id, name) VALUES (98, ''op'') RETURNING id'`,
		`CREATE OPERATOR #=# (FUNCTION = sneaky_op, LEFTARG = int, RIGHTARG = int)`,
		`REVOKE CREATE ON SCHEMA public FROM PUBLIC`,
		`CREATE ROLE ` + ro + ` LOGIN PASSWORD 'pw'`,
		`CREATE ROLE ` + rw + ` LOGIN PASSWORD 'pw'`,
		`GRANT SELECT ON items TO ` + ro + `, ` + rw,
		`GRANT INSERT, UPDATE, DELETE ON items TO ` + rw,
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	t.Cleanup(func() {
		c, err := pgx.Connect(ctx, super)
		if err != nil {
			return
		}
		defer c.Close(ctx)
		_, _ = c.Exec(ctx, "DROP OWNED BY "+ro+", "+rw)
		_, _ = c.Exec(ctx, "DROP ROLE "+ro+", "+rw)
	})
	as := func(role string) string {
		v := *u
		v.User = url.UserPassword(role, "pw")
		return v.String()
	}
	return testDB{super: super, ro: as(ro), rw: as(rw)}
}

// newDB returns the URL of a fresh test database as its read-only role.
func newDB(t *testing.T) string { return newTestDB(t).ro }

func newTool(t *testing.T, cfg Config) *Tool {
	t.Helper()
	tool, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(tool.Close)
	return tool
}

func call(t *testing.T, run tools.Func, q string, params ...any) (map[string]any, error) {
	t.Helper()
	a := map[string]any{"query": q}
	if len(params) > 0 {
		a["params"] = params
	}
	b, _ := json.Marshal(a)
	// Every call goes through the schema first, as the gate does.
	spec, _ := tools.Lookup("sql_query")
	if err := spec.Check(string(b)); err != nil {
		t.Fatalf("schema: %v", err)
	}
	out, err := run(context.Background(), tools.Env{}, b)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(out), &m); err != nil {
		t.Fatalf("output %q is not JSON: %v", out, err)
	}
	return m, nil
}

func count(t *testing.T, url string) int {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var n int
	if err := conn.QueryRow(context.Background(), "SELECT count(*) FROM items").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestReadOnly(t *testing.T) {
	db := newTestDB(t)
	url := db.ro
	ro := newTool(t, Config{URL: db.ro, MaxConns: 1})
	rw := newTool(t, Config{URL: db.rw, ReadWrite: true, MaxConns: 1})
	strict := newTool(t, Config{URL: db.rw, ReadWrite: true, Policy: PolicyRefuse})

	t.Run("select", func(t *testing.T) {
		m, err := call(t, ro.Run, "SELECT id, name FROM items ORDER BY id")
		if err != nil {
			t.Fatal(err)
		}
		got, _ := json.Marshal([]any{m["columns"], m["rows"], m["truncated"], m["command"]})
		want := `[["id","name"],[[1,"apple"],[2,"pear"],[3,null]],false,"SELECT 3"]`
		if string(got) != want {
			t.Errorf("got %s, want %s", got, want)
		}
	})
	cases := []struct {
		name    string
		tool    *Tool
		approve bool
		query   string
		wantErr error  // nil: succeeds
		sqlErr  string // a SQLSTATE the error must carry
		delta   int    // change in the row count
	}{
		{"unknown function needs approval", ro, false, "SELECT sneaky()", ErrNeedsApproval, "", 0},
		{"hidden write fails approved on a read-only tool", ro, true, "SELECT sneaky()", nil, "25006", 0},
		{"unknown function needs approval on a writable tool", rw, false, "SELECT sneaky()", ErrNeedsApproval, "", 0},
		{"write hidden in an operator fails in the read-only transaction", ro, false, "SELECT 1 #=# 2", nil, "25006", 0},
		{"write hidden in an operator fails on a writable tool unapproved", rw, false, "SELECT 1 #=# 2", nil, "25006", 0},
		{"approved unknown function runs read-write on a writable tool", rw, true, "SELECT sneaky()", nil, "", 1},
		{"insert unapproved", rw, false, "INSERT INTO items (id) VALUES (10)", ErrNeedsApproval, "", 0},
		{"insert approved on a read-only tool", ro, true, "INSERT INTO items (id) VALUES (10)", ErrRefused, "", 0},
		{"insert approved on a writable tool", rw, true, "INSERT INTO items (id) VALUES (10)", nil, "", 1},
		{"delete approved under the refuse policy", strict, true, "DELETE FROM items WHERE id = 10", ErrRefused, "", 0},
		{"delete approved", rw, true, "DELETE FROM items WHERE id = 10", nil, "", -1},
		{"drop database approved", rw, true, "DROP DATABASE postgres", ErrRefused, "", 0},
		{"multi-statement approved", rw, true, "SELECT 1; DELETE FROM items", ErrRefused, "", 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := count(t, url)
			run := tc.tool.Run
			if tc.approve {
				run = tc.tool.RunApproved
			}
			_, err := call(t, run, tc.query)
			switch {
			case tc.wantErr != nil && !errors.Is(err, tc.wantErr):
				t.Errorf("got %v, want %v", err, tc.wantErr)
			case tc.sqlErr != "":
				var pe *pgconn.PgError
				if !errors.As(err, &pe) || pe.Code != tc.sqlErr {
					t.Errorf("got %v, want SQLSTATE %s", err, tc.sqlErr)
				}
			case tc.wantErr == nil && err != nil:
				t.Errorf("got %v, want success", err)
			}
			if d := count(t, url) - before; d != tc.delta {
				t.Errorf("row count changed by %d, want %d", d, tc.delta)
			}
		})
	}
	t.Run("session settings do not leak into the next call", func(t *testing.T) {
		if _, err := call(t, rw.RunApproved, "SET search_path = nowhere"); err != nil {
			t.Fatal(err)
		}
		m, err := call(t, rw.Run, "SHOW search_path")
		if err != nil {
			t.Fatal(err)
		}
		if got := fmt.Sprint(m["rows"]); strings.Contains(got, "nowhere") {
			t.Errorf("search_path = %s after the call that set it", got)
		}
	})
	t.Run("result says read-write", func(t *testing.T) {
		res, err := rw.Query(context.Background(), Args{Query: "UPDATE items SET name = 'plum' WHERE id = 3 RETURNING id, name"}, true)
		if err != nil {
			t.Fatal(err)
		}
		if !res.ReadWrite || res.Command != "UPDATE 1" || res.RowsAffected != 1 || res.RowCount != 1 {
			t.Errorf("got %+v", res)
		}
	})
}

func TestParams(t *testing.T) {
	url := newDB(t)
	tool := newTool(t, Config{URL: url})
	cases := []struct {
		name   string
		query  string
		params []any
		want   string // JSON of rows
	}{
		{"int", "SELECT name FROM items WHERE id = $1", []any{2}, `[["pear"]]`},
		{"text", "SELECT id FROM items WHERE name = $1", []any{"apple"}, `[[1]]`},
		{"injection is a value", "SELECT id FROM items WHERE name = $1", []any{"x' OR '1'='1"}, `[]`},
		{"null", "SELECT $1::text IS NULL", []any{nil}, `[[true]]`},
		{"bool", "SELECT id FROM items WHERE ok = $1", []any{false}, `[[2]]`},
		{"timestamptz from a string", "SELECT id FROM items WHERE created > $1 ORDER BY id", []any{"2024-01-15T00:00:00Z"}, `[[2]]`},
		{"jsonb from an object", "SELECT id FROM items WHERE tags @> $1", []any{map[string]any{"c": "red"}}, `[[1]]`},
		{"numeric", "SELECT id FROM items WHERE price > $1", []any{2.0}, `[[2]]`},
		{"limit", "SELECT id FROM items ORDER BY id LIMIT $1", []any{1}, `[[1]]`},
		{"types out", "SELECT price, tags, created, ok, 'NaN'::float8 AS nan, '\\x01'::bytea AS b FROM items WHERE id = $1", []any{1},
			`[[1.50,{"c": "red"},"2024-01-02 03:04:05+00",true,"NaN","\\x01"]]`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m, err := call(t, tool.Run, tc.query, tc.params...)
			if err != nil {
				t.Fatal(err)
			}
			got, _ := json.Marshal(m["rows"])
			var want any
			json.Unmarshal([]byte(tc.want), &want)
			wantJSON, _ := json.Marshal(want)
			if string(got) != string(wantJSON) {
				t.Errorf("got %s, want %s", got, wantJSON)
			}
		})
	}
	t.Run("wrong parameter count", func(t *testing.T) {
		if _, err := call(t, tool.Run, "SELECT $1, $2", 1); err == nil {
			t.Errorf("got no error for a missing parameter")
		}
	})
}

func TestTimeout(t *testing.T) {
	url := newDB(t)
	tool := newTool(t, Config{URL: url, StatementTimeout: 200 * time.Millisecond})
	cases := []struct {
		name  string
		run   tools.Func
		query string
	}{
		// Endless and CPU-bound, with nothing spilled to disk. A
		// generate_series in FROM is materialized into temp files, and
		// once, on a busy CI machine, the timeout's error did not come
		// back within the tool's 5 s slack (most likely a temp-file
		// write stalled on the loaded disk).
		{"slow read", tool.Run, "WITH RECURSIVE r(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM r) SELECT count(*) FROM r"},
		{"approved pg_sleep", tool.RunApproved, "SELECT pg_sleep(60)"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			_, err := call(t, tc.run, tc.query)
			if !errors.Is(err, ErrTimeout) {
				t.Errorf("got %v, want %v", err, ErrTimeout)
			}
			if d := time.Since(start); d > 30*time.Second { // the statement alone would take a minute or more
				t.Errorf("took %s: the statement timeout did not end it", d)
			}
		})
	}
	t.Run("usable afterwards", func(t *testing.T) {
		if _, err := call(t, tool.Run, "SELECT 1"); err != nil {
			t.Errorf("got %v", err)
		}
	})
}

func TestCaps(t *testing.T) {
	url := newDB(t)
	def := newTool(t, Config{URL: url})
	small := newTool(t, Config{URL: url, MaxBytes: 1024, MaxConns: 1})
	cases := []struct {
		name string
		tool *Tool
		args Args
		rows int
		by   string
		cut  bool
	}{
		{"default row cap", def, Args{Query: "SELECT g FROM generate_series(1, 5000) g"}, DefaultMaxRows, "max_rows", false},
		{"max_rows lowers it", def, Args{Query: "SELECT g FROM generate_series(1, 5000) g", MaxRows: 10}, 10, "max_rows", false},
		{"max_rows cannot raise it", def, Args{Query: "SELECT g FROM generate_series(1, 5000) g", MaxRows: 5000}, DefaultMaxRows, "max_rows", false},
		{"exact fit is not truncated", def, Args{Query: "SELECT g FROM generate_series(1, 10) g", MaxRows: 10}, 10, "", false},
		{"byte cap", small, Args{Query: "SELECT g, repeat('x', 50) FROM generate_series(1, 100) g"}, 13, "max_bytes", false},
		{"huge value cut", small, Args{Query: "SELECT repeat('y', 100000)"}, 1, "", true},
		// An endless result, streamed row by row (a recursive CTE; a
		// set-returning function may be materialized first, and under
		// load a 200-million-row series once outlived the statement
		// timeout before its first rows came).
		{"huge result stops early", def, Args{Query: "WITH RECURSIVE r(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM r) SELECT i FROM r", MaxRows: 3}, 3, "max_rows", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			res, err := tc.tool.Query(context.Background(), tc.args, false)
			if err != nil {
				t.Fatal(err)
			}
			if res.RowCount != tc.rows || len(res.Rows) != tc.rows || res.TruncatedBy != tc.by || res.Truncated != (tc.by != "") || res.ValuesCut != tc.cut {
				t.Errorf("got rows %d truncated %v by %q cut %v, want %d %q %v", res.RowCount, res.Truncated, res.TruncatedBy, res.ValuesCut, tc.rows, tc.by, tc.cut)
			}
			if n := len(res.Format()); res.Bytes > tc.tool.cfg.MaxBytes || n > tc.tool.cfg.MaxBytes || n > res.Bytes {
				t.Errorf("output is %d bytes (Bytes %d), over the cap %d", n, res.Bytes, tc.tool.cfg.MaxBytes)
			}
			if d := time.Since(start); d > 60*time.Second { // the full result would never end
				t.Errorf("took %s", d)
			}
			// The connection (possibly cancelled) does not poison the next call.
			if _, err := tc.tool.Query(context.Background(), Args{Query: "SELECT 1"}, false); err != nil {
				t.Errorf("next call: %v", err)
			}
		})
	}
}

// TestServerRunsOneStatement bypasses the classifier: the protocol itself
// refuses a second statement.
func TestServerRunsOneStatement(t *testing.T) {
	url := newDB(t)
	tool := newTool(t, Config{URL: url, ReadWrite: true})
	ctx := context.Background()
	conn, err := tool.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	_, err = tool.query(ctx, tx, stmt{q: "SELECT 1; DELETE FROM items", maxRows: 10, readWrite: true})
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "42601" {
		t.Errorf("got %v, want SQLSTATE 42601 (multiple commands)", err)
	}
}

func TestNotConfigured(t *testing.T) {
	tool := newTool(t, Config{})
	_, err := call(t, tool.Run, "SELECT 1")
	if !errors.Is(err, ErrNotConfigured) {
		t.Errorf("got %v, want %v", err, ErrNotConfigured)
	}
	if _, err := New(context.Background(), Config{Policy: "maybe"}); err == nil {
		t.Errorf("New with a bad policy: no error")
	}
	if _, err := New(context.Background(), Config{URL: "postgres://u:secret@[bad"}); err == nil || strings.Contains(err.Error(), "secret") {
		t.Errorf("New with a bad URL: %v (want an error that does not quote the password)", err)
	}
}

// TestLexerAgreesWithPostgres asks Postgres's own parser whether tricky
// queries are one statement or several, and compares with the classifier.
func TestLexerAgreesWithPostgres(t *testing.T) {
	url := newDB(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	for _, q := range []string{
		`SELECT 'a\'; SELECT 2 --'`,
		`SELECT E'a\'; SELECT 2 --'`,
		`SELECT e'a\\'; SELECT 2`,
		`SELECT $$a;b$$`,
		`SELECT $x$ $$; $x$`,
		`SELECT $x$ $y$; $x$; SELECT 2`,
		`SELECT 1 /* /* */ ; */`,
		`SELECT 1 /* /* */ */ ; SELECT 2`,
		`SELECT a$b$ FROM (SELECT 1 AS "a$b$") s; SELECT 2`,
		`SELECT U&'\0041;'`,
		`SELECT U&"a;" FROM (SELECT 1 AS "a;") s`,
		"SELECT 1 -- ;\n; SELECT 2",
		"SELECT 1 -- x\r; SELECT 2",
		`SELECT 1 AS "x;""y"; SELECT 2`,
		`SELECT 1 AS "x;""y"`,
		`SELECT N'a;'`,
		`SELECT X'1F'; SELECT 2`,
		`SELECT B'1'`,
		`SELECT 1---2; SELECT 2`,
		`SELECT 1 +-- x` + "\n" + `2; SELECT 2`,
		`SELECT 1 /*/ ; */`,
		`SELECT $1; SELECT 2`,
		`SELECT 1;`,
	} {
		t.Run(q, func(t *testing.T) {
			_, err := conn.Prepare(ctx, "", q)
			var pe *pgconn.PgError
			pgMulti := errors.As(err, &pe) && strings.Contains(pe.Message, "multiple commands")
			if err != nil && !pgMulti {
				t.Fatalf("Postgres: %v (the case must be valid SQL)", err)
			}
			v := Classify(q)
			ourMulti := strings.Contains(v.Reason, "more than one statement")
			if pgMulti != ourMulti {
				t.Errorf("Postgres multi=%v, classifier multi=%v (%v: %s)", pgMulti, ourMulti, v.Level, v.Reason)
			}
		})
	}
}

// TestTimeoutWhenTheServerStalls: a server that never serves its statement
// timeout (a stalled disk, a frozen host) still ends the call with
// ErrTimeout once the tool's slack after the timeout has passed.
func TestTimeoutWhenTheServerStalls(t *testing.T) {
	u, err := url.Parse(newDB(t))
	if err != nil {
		t.Fatal(err)
	}
	const marker = "stall_marker"
	proxy, unstall := stallingProxy(t, u.Host, marker)
	u.Host = proxy
	tool := newTool(t, Config{URL: u.String(), StatementTimeout: 100 * time.Millisecond})
	start := time.Now()
	_, err = call(t, tool.Run, "SELECT 1 AS "+marker)
	took := time.Since(start)
	// The stalled connection is closed: pgx drains a closing connection
	// for up to 15 s, which would hold the tool's Close.
	unstall()
	if !errors.Is(err, ErrTimeout) {
		t.Fatalf("got %v, want %v", err, ErrTimeout)
	}
	if took > 30*time.Second {
		t.Errorf("took %s", took)
	}
}

// stallingProxy forwards TCP to target until a client sends marker; from
// then on nothing more comes back on that connection until unstall is
// called, which closes it.
func stallingProxy(t *testing.T, target, marker string) (addr string, unstall func()) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns sync.WaitGroup
	done := make(chan struct{})
	var once sync.Once
	unstall = func() { once.Do(func() { close(done) }) }
	t.Cleanup(func() { unstall(); ln.Close(); conns.Wait() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			stalled := make(chan struct{})
			conns.Add(2)
			go func() { // client → server
				defer conns.Done()
				defer s.Close()
				buf := make([]byte, 32<<10)
				var seen bool
				for {
					n, err := c.Read(buf)
					if n > 0 {
						if !seen && bytes.Contains(buf[:n], []byte(marker)) {
							seen = true
							close(stalled)
						}
						if _, err := s.Write(buf[:n]); err != nil {
							return
						}
					}
					if err != nil {
						return
					}
				}
			}()
			go func() { // server → client, until stalled
				defer conns.Done()
				defer c.Close()
				buf := make([]byte, 32<<10)
				for {
					s.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
					n, err := s.Read(buf)
					// stalled closes before the marker is forwarded, so
					// no answer to it gets past this.
					select {
					case <-stalled:
						<-done
						return
					default:
					}
					if n > 0 {
						if _, err := c.Write(buf[:n]); err != nil {
							return
						}
					}
					if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String(), unstall
}
