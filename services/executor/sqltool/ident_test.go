package sqltool

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agentmesh/agentmesh/pkg/pgtest"
)

var identSeeds = []string{
	`abc`, `ABC`, `MiXeD_Case$1`, `"Quoted"`, `"a""b"`, `"with space"`, `U&"d\0061t\+000061"`,
	`u&"\0041\0042"`, `U&"d!0061t" UESCAPE '!'`, `U&"x#0041" uescape '#'`, `U&"a\\b"`, `U&"\D83D\DE00"`,
	`U&"d*0061" UESCAPE $$*$$`, `U&"d?0061" /* c */ UESCAPE /* d */ E'?'`, `ÄBC`, `"ÄBC"`, `ſelect`,
	strings.Repeat("a", 70), `"` + strings.Repeat("é", 40) + `"`, strings.Repeat("B", 64),
	`U&"` + strings.Repeat(`\0061`, 70) + `"`, `U&"\0000"`, `U&"\D800"`, `U&"\zzzz"`, `U&"a" UESCAPE '+'`,
	`"pg_sleep"`, `U&"pg\005fsleep"`,
}

// identOf is what the classifier makes of the first identifier of src:
// the name, or an error.
func identOf(src string) (string, error) {
	var ts []token
	for _, t := range lex(src) {
		if t.kind != tokSpace && t.kind != tokComment {
			ts = append(ts, t)
		}
	}
	ts, err := applyUescape(ts)
	if err != nil {
		return "", err
	}
	if len(ts) == 0 {
		return "", nil
	}
	return ts[0].ident()
}

// FuzzIdent checks the identifier decoder against Postgres itself: for
// "SELECT 1 AS <ident>", the column name Postgres reports is the name the
// classifier must see; a spelling Postgres rejects must not decode to a
// name of a function either. Without Postgres only the decoder's
// robustness is checked.
func FuzzIdent(f *testing.F) {
	for _, s := range identSeeds {
		f.Add(s)
	}
	var conn *pgx.Conn
	if _, err := pgtest.BinDir(); err == nil || os.Getenv(pgtest.EnvURL) != "" {
		c, err := pgx.Connect(context.Background(), pgtest.NewDatabase(f))
		if err != nil {
			f.Fatal(err)
		}
		f.Cleanup(func() { c.Close(context.Background()) })
		conn = c
	}
	f.Fuzz(func(t *testing.T, src string) {
		ours, ourErr := identOf(src)
		if conn == nil || strings.ContainsAny(src, ";\x00") {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		sd, err := conn.Prepare(ctx, "", "SELECT 1 AS "+src)
		if err != nil {
			return // not an identifier Postgres accepts
		}
		if len(sd.Fields) != 1 {
			return
		}
		if pg := sd.Fields[0].Name; ourErr != nil || ours != pg {
			t.Fatalf("identifier %q: Postgres names it %q, the classifier %q (%v)", src, pg, ours, ourErr)
		}
	})
}

func TestDecodeUnicodeEscapesRejects(t *testing.T) {
	for _, s := range []string{`\0000`, `\D800`, `\DC00`, `\D800x`, `\zzzz`, `\00`, `\+11000`, `\+110000`, `\D800\0041`} {
		if got, err := decodeUnicodeEscapes(s, '\\'); err == nil {
			t.Errorf("decodeUnicodeEscapes(%q) = %q, want an error", s, got)
		}
	}
}
