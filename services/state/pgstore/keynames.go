package pgstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	busv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/bus/v1"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pressly/goose/v3"
	"google.golang.org/protobuf/proto"
)

// Key names (migration 90, a Go migration: a key's name is only in its
// protobuf). A key's name is unique among its org's keys created through
// the API, revoked ones included (audit records name keys by name):
// api_keys.name holds it and the unique index api_keys_org_name on
// (org, name) makes a second create of the name fail, however the
// creates race.
//
// A database that already holds two keys of one org with one name (made
// before this migration) keeps both: nothing is renamed, revoked or
// deleted, and both keep working. The oldest (smallest id: ids are ULIDs)
// holds the name; the others keep a NULL name column, which the partial
// index leaves out, so they are listed and shown with their name as
// before but no new key gets it.

// keyNamesVersion is the migration's version (after 00080_memory.sql).
const keyNamesVersion = 90

// keyNameIndex is the unique index's name, told apart in errors.
const keyNameIndex = "api_keys_org_name"

var keyNamesMigration = goose.NewGoMigration(keyNamesVersion,
	&goose.GoFunc{RunTx: keyNamesUp},
	&goose.GoFunc{RunTx: func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `DROP INDEX `+keyNameIndex+`; ALTER TABLE api_keys DROP COLUMN name`)
		return err
	}})

func keyNamesUp(ctx context.Context, tx *sql.Tx) error {
	if _, err := tx.ExecContext(ctx, `ALTER TABLE api_keys ADD COLUMN name text`); err != nil {
		return err
	}
	rows, err := tx.QueryContext(ctx, `SELECT id, data FROM api_keys ORDER BY id`)
	if err != nil {
		return err
	}
	type named struct{ id, name string }
	var first []named
	seen := map[[2]string]bool{}
	for rows.Next() {
		var id string
		var data []byte
		if err := rows.Scan(&id, &data); err != nil {
			rows.Close()
			return err
		}
		rec := &busv1.KeyRecord{}
		if err := proto.Unmarshal(data, rec); err != nil {
			rows.Close()
			return fmt.Errorf("key %s: decode: %w", id, err)
		}
		k := [2]string{rec.GetKey().GetOrg(), rec.GetKey().GetName()}
		if !seen[k] {
			seen[k] = true
			first = append(first, named{id, k[1]})
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	for _, n := range first {
		if _, err := tx.ExecContext(ctx, `UPDATE api_keys SET name = $2 WHERE id = $1`, n.id, n.name); err != nil {
			return err
		}
	}
	_, err = tx.ExecContext(ctx, `CREATE UNIQUE INDEX `+keyNameIndex+` ON api_keys (org, name) WHERE name IS NOT NULL`)
	return err
}

// keyNameTaken reports whether err is the unique index's refusal.
func keyNameTaken(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "23505" && pgErr.ConstraintName == keyNameIndex
}
