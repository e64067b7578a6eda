package pgstore

import (
	"context"
	"errors"
	"fmt"
	"testing"

	busv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/bus/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/pgtest"
	"github.com/agentmesh/agentmesh/services/state/store"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// A database made before migration 90 that holds two keys of one org with
// one name keeps both (listed, their names as before); the oldest holds
// the name, and no new key gets it.
func TestKeyNamesMigrationKeepsDuplicates(t *testing.T) {
	ctx := context.Background()
	url := pgtest.NewDatabase(t)
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	db := stdlib.OpenDB(*cfg)
	defer db.Close()
	p, err := migrator(db)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.UpTo(ctx, keyNamesVersion-1); err != nil {
		t.Fatal(err)
	}
	for _, k := range []*agentmeshv1.ApiKey{
		{Id: "key_01", Org: "acme", Name: "x1"}, {Id: "key_02", Org: "acme", Name: "x1"},
		{Id: "key_03", Org: "globex", Name: "x1"}, {Id: "key_04", Org: "acme", Name: "y"},
	} {
		k.Role, k.Version = "reader", 1
		data, err := proto.Marshal(&busv1.KeyRecord{Key: k, Sha256: []byte(k.Id)})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := db.ExecContext(ctx, `INSERT INTO api_keys (id, org, version, data) VALUES ($1, $2, 1, $3)`, k.Id, k.Org, data); err != nil {
			t.Fatal(err)
		}
	}

	s, err := Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	recs, _, err := s.ListKeys(ctx, store.RecordQuery{Org: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range recs {
		got = append(got, r.Key.Id+":"+r.Key.Name)
	}
	if fmt.Sprint(got) != "[key_01:x1 key_02:x1 key_04:y]" {
		t.Errorf("acme's keys after the migration: %v", got)
	}
	for _, name := range []string{"x1", "y"} {
		_, err := s.PutKey(ctx, &busv1.KeyRecord{Key: &agentmeshv1.ApiKey{Id: "key_1" + name, Org: "acme", Name: name, Role: "reader"}, Sha256: []byte("s")}, true, 0)
		var be *bus.Error
		if !errors.As(err, &be) || be.Code != bus.CodeAlreadyExists || be.Field != "name" {
			t.Errorf("create %s in acme after the migration: %v, want already_exists naming name", name, err)
		}
	}
	var holder string
	if err := s.pool.QueryRow(ctx, `SELECT id FROM api_keys WHERE org = 'acme' AND name = 'x1'`).Scan(&holder); err != nil || holder != "key_01" {
		t.Errorf("x1 of acme is held by %q (%v), want the oldest, key_01", holder, err)
	}
	// Revoking the duplicate (its row is updated) works as before.
	rec, err := s.GetKey(ctx, "acme", "key_02")
	if err != nil {
		t.Fatal(err)
	}
	rec.Key.RevokedBy, rec.Key.RevokedAt = "admin", timestamppb.Now()
	if _, err := s.PutKey(ctx, rec, false, 1); err != nil {
		t.Errorf("revoke the duplicate: %v", err)
	}
}
