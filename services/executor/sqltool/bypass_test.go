package sqltool

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/agentmesh/agentmesh/pkg/poll"
)

// bypassForms spell calls of functions the classifier must not allow in
// every way Postgres accepts. oracle is what Postgres's own parser makes
// of the query (EXPLAIN VERBOSE, nothing runs): the text must appear in
// the plan, which shows the classifier is judging what would really run.
var bypassForms = []struct {
	name, query string
	level       Level
	oracle      string
}{
	{"U& escape", `SELECT U&"pg\005fsleep"(0)`, Approve, "pg_sleep("},
	{"U& lower-case u", `SELECT u&"pg\005Fsleep"(0)`, Approve, "pg_sleep("},
	{"U& six-digit escape", `SELECT U&"pg\+00005fsleep"(0)`, Approve, "pg_sleep("},
	{"U& every letter escaped", `SELECT U&"\0070\0067\005f\0074\0065rminate\005fbackend"(0)`, Refuse, "pg_terminate_backend("},
	{"UESCAPE", `SELECT U&"pg!005fcancel!005fbackend" UESCAPE '!' (0)`, Refuse, "pg_cancel_backend("},
	{"UESCAPE with comments", `SELECT U&"set#005fconfig"/* a */UESCAPE/* b */'#'('work_mem', '1MB', true)`, Approve, "set_config("},
	{"UESCAPE lower case, dollar-quoted", `SELECT U&"pg*005fsleep" uescape $$*$$ (0)`, Approve, "pg_sleep("},
	{"UESCAPE doubled escape", `SELECT U&"pg_sleep" UESCAPE '!' (0)`, Approve, "pg_sleep("},
	{"quoted", `SELECT "pg_sleep"(0)`, Approve, "pg_sleep("},
	{"doubled quotes", `SELECT 1 AS "a""b", "pg_terminate_backend"(0)`, Refuse, "pg_terminate_backend("},
	{"upper case", `SELECT PG_SLEEP(0)`, Approve, "pg_sleep("},
	{"mixed case schema-qualified", `SELECT Pg_Catalog.Pg_Sleep(0)`, Approve, "pg_sleep("},
	{"quoted schema", `SELECT "pg_catalog"."pg_cancel_backend"(0)`, Refuse, "pg_cancel_backend("},
	{"spaces and comment around the dot", "SELECT pg_catalog . pg_terminate_backend /* c */ (0)", Refuse, "pg_terminate_backend("},
	{"line comment before the paren", "SELECT pg_sleep -- x\n(0)", Approve, "pg_sleep("},
	{"nested comment before the paren", "SELECT pg_sleep /* a /* b */ c */ (0)", Approve, "pg_sleep("},
	{"after a dollar quote holding a quote", "SELECT $t$ ' $t$, pg_terminate_backend(0)", Refuse, "pg_terminate_backend("},
	{"after an E string with an escaped quote", `SELECT E'\'', pg_cancel_backend(0)`, Refuse, "pg_cancel_backend("},
	{"after a doubled quote", `SELECT 'it''s', set_config('work_mem', '1MB', true)`, Approve, "set_config("},
	{"in a FROM", "SELECT * FROM pg_ls_dir('.') AS d", Refuse, "pg_ls_dir("},
	{"read a server file", "SELECT pg_read_file('postgresql.conf')", Refuse, "pg_read_file("},
	{"read a binary server file quoted", `SELECT "pg_read_binary_file"('postgresql.conf')`, Refuse, "pg_read_binary_file("},
	{"large object import", "SELECT lo_import('/etc/hostname')", Refuse, "lo_import("},
	{"large object create", "SELECT lo_create(0)", Approve, "lo_create("},
	{"reload conf", "SELECT pg_reload_conf()", Refuse, "pg_reload_conf("},
	{"sequence", "SELECT nextval('s')", Approve, "nextval("},
	{"advisory lock", "SELECT pg_advisory_lock(1)", Approve, "pg_advisory_lock("},
	{"notify", "SELECT pg_notify('c', 'x')", Approve, "pg_notify("},
	{"transaction id", "SELECT txid_current()", Approve, "txid_current("},
	{"SQL as text", "SELECT query_to_xml('SELECT 1', true, false, '')", Approve, "query_to_xml("},
	{"user-defined function", "SELECT sneaky()", Approve, "sneaky("},
	{"user-defined function qualified", "SELECT public.sneaky()", Approve, "sneaky("},
	{"after OPERATOR()", "SELECT 1 OPERATOR(pg_catalog.+) sneaky()", Approve, "sneaky("},
	{"in a WHERE", "SELECT id FROM items WHERE pg_sleep(0) IS NOT NULL", Approve, "pg_sleep("},
	{"data-modifying CTE", "WITH d AS (DELETE FROM items RETURNING *) SELECT * FROM d", Approve, "Delete on"},
	{"data-modifying CTE mixed case", "WITH d AS (dElEtE FROM items RETURNING *) SELECT 1", Approve, "Delete on"},
	{"data-modifying CTE update", "WITH u AS (UPDATE items SET name = 'x' RETURNING id) SELECT * FROM u", Approve, "Update on"},
	{"data-modifying CTE insert, materialized", "WITH i AS MATERIALIZED (INSERT INTO items (id) VALUES (7) RETURNING id) SELECT * FROM i", Approve, "Insert on"},
	{"FOR UPDATE", "SELECT * FROM items FOR UPDATE", Approve, "LockRows"},
	{"FOR NO KEY UPDATE", "select * from items for no key update", Approve, "LockRows"},
	{"SELECT INTO", "SELECT * INTO copy_items FROM items", Approve, ""},
	{"COPY to a program", "COPY items TO PROGRAM 'id'", Refuse, ""},
	{"copy lower case", "copy items to program 'id'", Refuse, ""},
	{"bad UESCAPE character", `SELECT U&"pg+005fsleep" UESCAPE '+' (0)`, Refuse, ""},
	{"lone surrogate", `SELECT U&"\D800"(0)`, Refuse, ""},
}

// TestBypassForms runs every form against a real Postgres: Postgres's
// parser reads it as a call of the function (EXPLAIN VERBOSE shows it),
// the classifier refuses it or sends it to approval, and the tool (as a
// read-only role) does not run it.
func TestBypassForms(t *testing.T) {
	db := newTestDB(t)
	tool := newTool(t, Config{URL: db.ro})
	ctx := context.Background()
	super, err := pgx.Connect(ctx, db.super)
	if err != nil {
		t.Fatal(err)
	}
	defer super.Close(ctx)
	for _, tc := range bypassForms {
		t.Run(tc.name, func(t *testing.T) {
			v := Classify(tc.query)
			if v.Level != tc.level {
				t.Errorf("Classify(%q) = %v (%s), want %v", tc.query, v.Level, v.Reason, tc.level)
			}
			if tc.oracle != "" {
				plan := explain(t, super, tc.query)
				if !strings.Contains(plan, tc.oracle) {
					t.Fatalf("Postgres's plan of %q does not show %q:\n%s", tc.query, tc.oracle, plan)
				}
			}
			_, err := tool.Query(ctx, Args{Query: tc.query}, false)
			if !errors.Is(err, ErrNeedsApproval) && !errors.Is(err, ErrRefused) {
				t.Errorf("tool ran %q: %v", tc.query, err)
			}
		})
	}
}

func explain(t *testing.T, conn *pgx.Conn, q string) string {
	t.Helper()
	ctx := context.Background()
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	rows, err := tx.Query(ctx, "EXPLAIN (VERBOSE, COSTS OFF) "+q)
	if err != nil {
		t.Fatalf("EXPLAIN %q: %v", q, err)
	}
	var b strings.Builder
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			t.Fatal(err)
		}
		b.WriteString(line + "\n")
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("EXPLAIN %q: %v", q, err)
	}
	return b.String()
}

// TestBypassFormsRunWithoutTheClassifier runs two of the forms for real,
// as the read-only role in a READ ONLY transaction — what the tool would
// do had the classifier allowed them: the U& spelling of
// pg_cancel_backend cancels another session of the same role, and the
// UESCAPE spelling of set_config changes a setting.
func TestBypassFormsRunWithoutTheClassifier(t *testing.T) {
	db := newTestDB(t)
	ctx := context.Background()
	victim, err := pgx.Connect(ctx, db.ro)
	if err != nil {
		t.Fatal(err)
	}
	defer victim.Close(ctx)
	var pid uint32 = victim.PgConn().PID()
	attacker, err := pgx.Connect(ctx, db.ro)
	if err != nil {
		t.Fatal(err)
	}
	defer attacker.Close(ctx)

	var victimErr error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, victimErr = victim.Exec(ctx, "SELECT pg_sleep(60)")
	}()
	q := `SELECT U&"pg\005fcancel\005fbackend"($1)`
	if v := Classify(q); v.Level != Refuse {
		t.Errorf("Classify(%q) = %v, want refused", q, v.Level)
	}
	poll.Until(t, 30*time.Second, func() error {
		var active bool
		if err := attacker.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $1 AND state = 'active' AND query LIKE '%pg_sleep(60)%')", pid).Scan(&active); err != nil {
			return err
		}
		if !active {
			return errors.New("the victim's query has not started")
		}
		return nil
	})
	tx, err := attacker.BeginTx(ctx, pgx.TxOptions{AccessMode: pgx.ReadOnly})
	if err != nil {
		t.Fatal(err)
	}
	var ok bool
	err = tx.QueryRow(ctx, q, pid).Scan(&ok)
	tx.Rollback(ctx)
	if err != nil || !ok {
		t.Fatalf("%s: %v %v", q, ok, err)
	}
	wg.Wait()
	var pe *pgconn.PgError
	if !errors.As(victimErr, &pe) || pe.Code != "57014" {
		t.Errorf("victim's query: %v, want it cancelled (57014) by the U& call", victimErr)
	}

	q = `SELECT U&"set!005fconfig" UESCAPE '!' ('application_name', 'pwned', false)`
	if v := Classify(q); v.Level == Allow {
		t.Errorf("Classify(%q) = Allow", q)
	}
	if _, err := attacker.Exec(ctx, q); err != nil {
		t.Fatal(err)
	}
	var name string
	if err := attacker.QueryRow(ctx, "SHOW application_name").Scan(&name); err != nil || name != "pwned" {
		t.Errorf("application_name = %q (%v): the UESCAPE call of set_config did not run", name, err)
	}
}

// Allowed forms that look like calls but are not, or are calls of
// built-ins known to only read: they run without approval.
func TestAllowedLookAlikes(t *testing.T) {
	db := newTestDB(t)
	tool := newTool(t, Config{URL: db.ro})
	for _, q := range []string{
		"SELECT * FROM generate_series(1, 3) AS g(i)",
		"SELECT * FROM generate_series(1, 3) g(i)",
		"SELECT i FROM (VALUES (1), (2)) v(i)",
		"WITH x(a) AS (SELECT 1) SELECT a FROM x",
		"WITH RECURSIVE x(a) AS (SELECT 1 UNION ALL SELECT a + 1 FROM x WHERE a < 3), y (b) AS MATERIALIZED (SELECT 2) SELECT * FROM x, y",
		"SELECT count(*) FILTER (WHERE id > 1), max(id) OVER () FROM items GROUP BY id",
		"SELECT CAST(1 AS numeric(10, 2)), 'a'::varchar(3), 'x'::character varying(5), now()::timestamp(0)",
		"SELECT id FROM items WHERE id IN (1, 2) AND EXISTS (SELECT 1) AND id = ANY (ARRAY[1, 2])",
		"SELECT coalesce(name, 'x'), lower(name), length(name), substring(name FROM 1 FOR 2), trim(both ' ' FROM name) FROM items",
		"SELECT pg_catalog.upper('a'), jsonb_build_object('a', 1), to_char(now(), 'YYYY'), extract(year FROM now())",
		"SELECT row_number() OVER (PARTITION BY ok ORDER BY id) FROM items",
		"SELECT * FROM items TABLESAMPLE BERNOULLI (50) REPEATABLE (1)",
		"SELECT ROW(1, 2), ARRAY(SELECT 1)",
		"SELECT current_setting('search_path'), has_table_privilege('items', 'SELECT')",
		"SELECT U&\"d\\0061ta\" FROM (SELECT 1 AS data) s",
	} {
		t.Run(q, func(t *testing.T) {
			if v := Classify(q); v.Level != Allow {
				t.Errorf("Classify(%q) = %v (%s), want Allow", q, v.Level, v.Reason)
			}
			if _, err := tool.Query(context.Background(), Args{Query: q}, false); err != nil {
				t.Errorf("Query(%q): %v", q, err)
			}
		})
	}
}

// The role is checked at start: a superuser, a server-file role, or a
// role that can write on a read-only tool is refused with the reason,
// unless the operator allows it.
func TestRoleCheckedAtStart(t *testing.T) {
	db := newTestDB(t)
	ctx := context.Background()
	super, err := pgx.Connect(ctx, db.super)
	if err != nil {
		t.Fatal(err)
	}
	defer super.Close(ctx)
	filesRole := strings.TrimSuffix(roleOf(t, db.ro), "_ro") + "_files"
	for _, q := range []string{"CREATE ROLE " + filesRole + " LOGIN PASSWORD 'pw' IN ROLE pg_read_server_files"} {
		if _, err := super.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { _, _ = super.Exec(context.Background(), "DROP ROLE "+filesRole) })
	filesURL := strings.Replace(db.ro, roleOf(t, db.ro)+":", filesRole+":", 1)

	cases := []struct {
		name string
		cfg  Config
		want []string // "" = accepted
	}{
		{"superuser", Config{URL: db.super}, []string{"is a superuser"}},
		{"superuser read-write", Config{URL: db.super, ReadWrite: true}, []string{"is a superuser"}},
		{"superuser allowed", Config{URL: db.super, AllowPrivilegedRole: true}, nil},
		{"server files", Config{URL: filesURL}, []string{"pg_read_server_files"}},
		{"writer on a read-only tool", Config{URL: db.rw}, []string{"can write while sql_query is read-only", "items"}},
		{"writer on a read-write tool", Config{URL: db.rw, ReadWrite: true}, nil},
		{"reader", Config{URL: db.ro}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tool, err := New(ctx, tc.cfg)
			if tc.want == nil {
				if err != nil {
					t.Fatalf("New: %v", err)
				}
				defer tool.Close()
				if _, err := tool.Query(ctx, Args{Query: "SELECT 1"}, false); err != nil {
					t.Errorf("Query: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrPrivilegedRole) {
				t.Fatalf("New: %v, want %v", err, ErrPrivilegedRole)
			}
			t.Logf("New: %v", err)
			for _, w := range append(tc.want, "AGENTMESH_SQL_ALLOW_PRIVILEGED_ROLE") {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "pw") {
				t.Errorf("error %q quotes the password", err)
			}
		})
	}
	t.Run("a role made superuser later is refused on its next connection", func(t *testing.T) {
		tool := newTool(t, Config{URL: db.ro, MaxConns: 1})
		role := roleOf(t, db.ro)
		if _, err := super.Exec(ctx, "ALTER ROLE "+role+" SUPERUSER"); err != nil {
			t.Fatal(err)
		}
		defer super.Exec(context.Background(), "ALTER ROLE "+role+" NOSUPERUSER")
		tool.pool.Reset() // drop the open connection
		if _, err := tool.Query(ctx, Args{Query: "SELECT 1"}, false); !errors.Is(err, ErrPrivilegedRole) {
			t.Errorf("Query: %v, want %v", err, ErrPrivilegedRole)
		}
	})
}

func roleOf(t *testing.T, u string) string {
	t.Helper()
	cfg, err := pgx.ParseConfig(u)
	if err != nil {
		t.Fatal(err)
	}
	return cfg.User
}

// A 300 MB value is never read: the row is refused at its header, the
// rows before it are returned with a note, the executor allocates a small
// fraction of it, and the next call works.
func TestHugeValueCappedWhileReading(t *testing.T) {
	db := newTestDB(t)
	tool := newTool(t, Config{URL: db.ro, MaxConns: 1})
	q := "SELECT g, CASE WHEN g = 3 THEN repeat('x', 300 * 1024 * 1024) ELSE 'small' END AS v FROM generate_series(1, 5) g"
	var res *Result
	var qerr error
	allocated := allocDuring(func() { res, qerr = tool.Query(context.Background(), Args{Query: q}, false) })
	t.Logf("a 300 MiB value: allocated %d KiB", allocated>>10)
	if qerr != nil {
		t.Fatal(qerr)
	}
	if res.RowCount != 2 || !res.Truncated || res.TruncatedBy != "max_row_bytes" || !strings.Contains(res.Note, "larger than") {
		t.Errorf("got %d rows, truncated %v by %q, note %q; want 2 rows cut by max_row_bytes", res.RowCount, res.Truncated, res.TruncatedBy, res.Note)
	}
	if allocated > 32<<20 {
		t.Errorf("reading the result allocated %d MiB", allocated>>20)
	}
	if _, err := tool.Query(context.Background(), Args{Query: "SELECT 1"}, false); err != nil {
		t.Errorf("next call: %v", err)
	}
}

// allocDuring returns the bytes the process allocated while fn ran.
func allocDuring(fn func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}
