package sqltool

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/agentmesh/agentmesh/pkg/pgtest"
)

var fuzzSeeds = []string{
	"SELECT 1", "SELECT 1;", "SELECT 1; SELECT 2", "SELECT 'a;b'", `SELECT E'\';' ; DELETE FROM t`,
	"SELECT $$;$$; DROP TABLE t", "SELECT $a$ $$ ; $$ $a$", "SELECT 1 /* /* ; */ */", "SELECT 1 -- ;\n; DELETE FROM t",
	`SELECT "a;" FROM t`, `SELECT U&'\0041;' ; DROP TABLE t`, "WITH d AS (DELETE FROM t RETURNING *) SELECT 1",
	"EXPLAIN ANALYZE DELETE FROM t", "SELECT pg_sleep(1)", "COPY t TO PROGRAM 'x'", "select 1;;;", "SELECT a$b$ ; SELECT 2",
	"SELECT 1 /* x */; SELECT 2", "SELECT e'\\\\'; SELECT 2", "SELECT b'1';SELECT 2", "SELECT 1-- x\r; SELECT 2",
	`SELECT U&"pg\005fsleep"(0)`, `SELECT U&"pg!005fsleep" UESCAPE '!' (0)`, `SELECT u&"a" uescape $$*$$`,
	`SELECT U&'\0041' UESCAPE '!'`, `SELECT "pg_catalog"."pg_sleep"(0)`, "SELECT pg_catalog . pg_sleep /* x */ (0)",
	"SELECT * FROM generate_series(1, 3) g(i)", "WITH x(a) AS (SELECT 1) SELECT * FROM x", "SELECT 1 OPERATOR(pg_catalog.+) f(1)",
}

// FuzzClassify checks the classifier on arbitrary input: it never panics,
// the tokenizer loses nothing, and a query with a second statement after
// a top-level semicolon is never allowed. When Postgres is at hand, its
// own parser is the judge of "a second statement": a query Postgres
// reports as several commands must not be classified Allow, and an
// allowed query must not try to write (SQLSTATE 25006) in a read-only
// transaction.
func FuzzClassify(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add(s, "DELETE FROM t")
	}
	var conn *pgx.Conn
	if _, err := pgtest.BinDir(); err == nil || os.Getenv(pgtest.EnvURL) != "" {
		url := pgtest.NewDatabase(f)
		c, err := pgx.Connect(context.Background(), url)
		if err != nil {
			f.Fatal(err)
		}
		f.Cleanup(func() { c.Close(context.Background()) })
		if _, err := c.Exec(context.Background(), "CREATE TABLE t (a int)"); err != nil {
			f.Fatal(err)
		}
		conn = c
	}
	f.Fuzz(func(t *testing.T, q, second string) {
		v := Classify(q)
		if v.Level < Allow || v.Level > Refuse {
			t.Fatalf("Classify(%q) level %d", q, v.Level)
		}
		var b strings.Builder
		unterminated, endsInLineComment, stmts := false, false, 0
		inStmt := false
		for _, tk := range lex(q) {
			b.WriteString(tk.text)
			unterminated = unterminated || tk.unterminated
			endsInLineComment = tk.kind == tokComment && strings.HasPrefix(tk.text, "--")
			switch tk.kind {
			case tokSpace, tokComment:
			case tokSemi:
				inStmt = false
			default:
				if !inStmt {
					stmts++
				}
				inStmt = true
			}
			if tk.kind != tokSpace && tk.kind != tokComment {
				endsInLineComment = false
			}
		}
		if b.String() != q {
			t.Fatalf("lex(%q) lost text: %q", q, b.String())
		}
		if stmts > 1 && v.Level == Allow {
			t.Fatalf("Classify(%q) = Allow with %d statements", q, stmts)
		}
		// Structural: q; second — with q complete and second a statement —
		// is two statements and never allowed.
		if !unterminated && !endsInLineComment && stmts > 0 {
			sv := Classify(second)
			if sv.Reason != "empty query" && !strings.Contains(sv.Reason, "unterminated") {
				joined := q + ";" + second
				if got := Classify(joined); got.Level != Refuse {
					t.Fatalf("Classify(%q) = %v (%s), want refused as a multi-statement", joined, got.Level, got.Reason)
				}
			}
		}
		if conn == nil || v.Level != Allow {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := conn.Prepare(ctx, "", q)
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "42601" && strings.Contains(pe.Message, "multiple commands") {
			t.Fatalf("Classify(%q) = Allow, Postgres sees several statements", q)
		}
		if err != nil {
			return
		}
		tx, err := conn.BeginTx(ctx, pgx.TxOptions{AccessMode: pgx.ReadOnly})
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		if _, err := tx.Exec(ctx, "SET LOCAL statement_timeout = 200"); err != nil {
			t.Fatal(err)
		}
		_, err = tx.Exec(ctx, q)
		if errors.As(err, &pe) && pe.Code == "25006" {
			t.Fatalf("Classify(%q) = Allow, but it writes: %v", q, err)
		}
	})
}
