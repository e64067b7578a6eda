package pgstore

import (
	"context"
	"errors"
	"fmt"

	busv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/bus/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/services/state/store"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"google.golang.org/protobuf/proto"
)

// Keys, schedules and webhook endpoints are versioned records in tables of
// one shape (id, org, version, hidden, data: migrations/00070_ops.sql); the
// delivery log is webhook_deliveries.

var _ store.Ops = (*Store)(nil)

// records is one table of versioned records of type T.
type records[T proto.Message] struct {
	s     *Store
	table string
	kind  string // in errors: "key", "schedule", "webhook endpoint"
	// version and setVersion read and write T's version; org its org;
	// hidden whether a list leaves it out (a revoked key).
	version    func(T) int64
	setVersion func(T, int64)
	org        func(T) string
	hidden     func(T) bool
	newT       func() T
	// name, when set, is T's unique name among its org's (the table's
	// name column, written by a create; api_keys only: keynames.go).
	name func(T) string
}

// put creates or replaces rec (id) and returns it at its new version.
func (r records[T]) put(ctx context.Context, id string, rec T, create bool, expectedVersion int64) (T, error) {
	var zero T
	rec = proto.Clone(rec).(T)
	if create {
		r.setVersion(rec, 1)
		data, err := marshal(rec)
		if err != nil {
			return zero, err
		}
		var tag pgconn.CommandTag
		if r.name == nil {
			tag, err = r.s.pool.Exec(ctx, `INSERT INTO `+r.table+` (id, org, version, hidden, data) VALUES ($1, $2, 1, $3, $4) ON CONFLICT (id) DO NOTHING`,
				id, r.org(rec), r.hidden(rec), data)
		} else {
			tag, err = r.s.pool.Exec(ctx, `INSERT INTO `+r.table+` (id, org, version, hidden, data, name) VALUES ($1, $2, 1, $3, $4, $5) ON CONFLICT (id) DO NOTHING`,
				id, r.org(rec), r.hidden(rec), data, r.name(rec))
		}
		if r.name != nil && keyNameTaken(err) {
			return zero, store.KeyNameTaken(r.org(rec), r.name(rec))
		}
		if err != nil {
			return zero, dbError("put "+r.kind, err)
		}
		if tag.RowsAffected() == 0 {
			return zero, store.CheckPut(r.kind, id, true, 0, true, 0)
		}
		return rec, nil
	}
	for range maxRetries {
		cur, err := r.get(ctx, r.org(rec), id)
		if err != nil {
			return zero, err
		}
		v := r.version(cur)
		if err := store.CheckPut(r.kind, id, true, v, false, expectedVersion); err != nil {
			return zero, err
		}
		r.setVersion(rec, v+1)
		data, err := marshal(rec)
		if err != nil {
			return zero, err
		}
		tag, err := r.s.pool.Exec(ctx, `UPDATE `+r.table+` SET version = $3, hidden = $4, data = $5 WHERE id = $1 AND org = $2 AND version = $6`,
			id, r.org(rec), v+1, r.hidden(rec), data, v)
		if err != nil {
			return zero, dbError("put "+r.kind, err)
		}
		if tag.RowsAffected() == 1 {
			return rec, nil
		}
	}
	return zero, store.Internal("put "+r.kind, fmt.Errorf("%q: too much contention", id))
}

// get returns the record id of org ("" = any org) or not_found.
func (r records[T]) get(ctx context.Context, org, id string) (T, error) {
	var zero T
	var data []byte
	var err error
	if org == "" {
		err = r.s.pool.QueryRow(ctx, `SELECT data FROM `+r.table+` WHERE id = $1`, id).Scan(&data)
	} else {
		err = r.s.pool.QueryRow(ctx, `SELECT data FROM `+r.table+` WHERE id = $1 AND org = $2`, id, org).Scan(&data)
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return zero, store.RecordNotFound(r.kind, id)
	}
	if err != nil {
		return zero, dbError("get "+r.kind, err)
	}
	return r.decode(data)
}

func (r records[T]) decode(data []byte) (T, error) {
	t := r.newT()
	if err := proto.Unmarshal(data, t); err != nil {
		var zero T
		return zero, store.Internal("decode "+r.kind, err)
	}
	return t, nil
}

// list returns one page ordered by id.
func (r records[T]) list(ctx context.Context, q store.RecordQuery) ([]T, string, error) {
	after, err := store.DecodeToken(q.PageToken)
	if err != nil {
		return nil, "", err
	}
	n := store.PageSize(q.PageSize)
	rows, err := r.s.pool.Query(ctx, `SELECT id, data FROM `+r.table+`
		WHERE ($1 OR org = $2) AND id > $3 AND ($4 OR NOT hidden) ORDER BY id LIMIT $5`,
		q.AnyOrg, q.Org, after, q.IncludeRevoked, n+1)
	if err != nil {
		return nil, "", dbError("list "+r.kind, err)
	}
	defer rows.Close()
	var out []T
	var ids []string
	for rows.Next() {
		var id string
		var data []byte
		if err := rows.Scan(&id, &data); err != nil {
			return nil, "", dbError("list "+r.kind, err)
		}
		t, err := r.decode(data)
		if err != nil {
			return nil, "", err
		}
		out, ids = append(out, t), append(ids, id)
	}
	if err := rows.Err(); err != nil {
		return nil, "", dbError("list "+r.kind, err)
	}
	if len(out) > n {
		return out[:n], store.EncodeToken(ids[n-1]), nil
	}
	return out, "", nil
}

// delete removes the record id of org or answers not_found.
func (r records[T]) delete(ctx context.Context, org, id string) error {
	tag, err := r.s.pool.Exec(ctx, `DELETE FROM `+r.table+` WHERE id = $1 AND org = $2`, id, org)
	if err != nil {
		return dbError("delete "+r.kind, err)
	}
	if tag.RowsAffected() == 0 {
		return store.RecordNotFound(r.kind, id)
	}
	return nil
}

func (s *Store) keys() records[*busv1.KeyRecord] {
	return records[*busv1.KeyRecord]{s: s, table: "api_keys", kind: "key",
		version:    func(r *busv1.KeyRecord) int64 { return r.GetKey().GetVersion() },
		setVersion: func(r *busv1.KeyRecord, v int64) { r.Key.Version = v },
		org:        func(r *busv1.KeyRecord) string { return r.GetKey().GetOrg() },
		hidden:     store.Revoked,
		newT:       func() *busv1.KeyRecord { return &busv1.KeyRecord{} },
		name:       func(r *busv1.KeyRecord) string { return r.GetKey().GetName() },
	}
}

func (s *Store) schedules() records[*agentmeshv1.Schedule] {
	return records[*agentmeshv1.Schedule]{s: s, table: "schedules", kind: "schedule",
		version:    func(r *agentmeshv1.Schedule) int64 { return r.GetVersion() },
		setVersion: func(r *agentmeshv1.Schedule, v int64) { r.Version = v },
		org:        func(r *agentmeshv1.Schedule) string { return r.GetOrg() },
		hidden:     func(*agentmeshv1.Schedule) bool { return false },
		newT:       func() *agentmeshv1.Schedule { return &agentmeshv1.Schedule{} },
	}
}

func (s *Store) endpoints() records[*busv1.WebhookEndpointRecord] {
	return records[*busv1.WebhookEndpointRecord]{s: s, table: "webhook_endpoints", kind: "webhook endpoint",
		version:    func(r *busv1.WebhookEndpointRecord) int64 { return r.GetEndpoint().GetVersion() },
		setVersion: func(r *busv1.WebhookEndpointRecord, v int64) { r.Endpoint.Version = v },
		org:        func(r *busv1.WebhookEndpointRecord) string { return r.GetEndpoint().GetOrg() },
		hidden:     func(*busv1.WebhookEndpointRecord) bool { return false },
		newT:       func() *busv1.WebhookEndpointRecord { return &busv1.WebhookEndpointRecord{} },
	}
}

// PutKey creates or replaces a key (see store.KeyStore).
func (s *Store) PutKey(ctx context.Context, rec *busv1.KeyRecord, create bool, expectedVersion int64) (*busv1.KeyRecord, error) {
	return s.keys().put(ctx, rec.GetKey().GetId(), rec, create, expectedVersion)
}

// GetKey returns a key (see store.KeyStore).
func (s *Store) GetKey(ctx context.Context, org, id string) (*busv1.KeyRecord, error) {
	return s.keys().get(ctx, org, id)
}

// ListKeys lists keys (see store.KeyStore).
func (s *Store) ListKeys(ctx context.Context, q store.RecordQuery) ([]*busv1.KeyRecord, string, error) {
	return s.keys().list(ctx, q)
}

// PutSchedule creates or replaces a schedule (see store.ScheduleStore).
func (s *Store) PutSchedule(ctx context.Context, sc *agentmeshv1.Schedule, create bool, expectedVersion int64) (*agentmeshv1.Schedule, error) {
	return s.schedules().put(ctx, sc.GetId(), sc, create, expectedVersion)
}

// GetSchedule returns a schedule (see store.ScheduleStore).
func (s *Store) GetSchedule(ctx context.Context, org, id string) (*agentmeshv1.Schedule, error) {
	return s.schedules().get(ctx, org, id)
}

// ListSchedules lists schedules (see store.ScheduleStore).
func (s *Store) ListSchedules(ctx context.Context, q store.RecordQuery) ([]*agentmeshv1.Schedule, string, error) {
	q.IncludeRevoked = true
	return s.schedules().list(ctx, q)
}

// DeleteSchedule removes a schedule (see store.ScheduleStore).
func (s *Store) DeleteSchedule(ctx context.Context, org, id string) error {
	return s.schedules().delete(ctx, org, id)
}

// PutWebhookEndpoint creates or replaces an endpoint (see store.WebhookStore).
func (s *Store) PutWebhookEndpoint(ctx context.Context, rec *busv1.WebhookEndpointRecord, create bool, expectedVersion int64) (*busv1.WebhookEndpointRecord, error) {
	return s.endpoints().put(ctx, rec.GetEndpoint().GetId(), rec, create, expectedVersion)
}

// GetWebhookEndpoint returns an endpoint (see store.WebhookStore).
func (s *Store) GetWebhookEndpoint(ctx context.Context, org, id string) (*busv1.WebhookEndpointRecord, error) {
	return s.endpoints().get(ctx, org, id)
}

// ListWebhookEndpoints lists endpoints (see store.WebhookStore).
func (s *Store) ListWebhookEndpoints(ctx context.Context, q store.RecordQuery) ([]*busv1.WebhookEndpointRecord, string, error) {
	q.IncludeRevoked = true
	return s.endpoints().list(ctx, q)
}

// DeleteWebhookEndpoint removes an endpoint and, by the foreign key, its
// deliveries (see store.WebhookStore).
func (s *Store) DeleteWebhookEndpoint(ctx context.Context, org, id string) error {
	return s.endpoints().delete(ctx, org, id)
}

// RecordDeliveries stores deliveries in one batch (see store.WebhookStore).
// A delivery of an endpoint deleted meanwhile is dropped.
func (s *Store) RecordDeliveries(ctx context.Context, ds []*agentmeshv1.WebhookDelivery) error {
	if len(ds) == 0 {
		return nil
	}
	var b pgx.Batch
	for _, d := range ds {
		data, err := marshal(d)
		if err != nil {
			return err
		}
		b.Queue(`INSERT INTO webhook_deliveries (id, org, endpoint_id, attempts, data)
			SELECT $1, $2, $3, $4, $5 WHERE EXISTS (SELECT 1 FROM webhook_endpoints WHERE id = $3 AND org = $2)
			ON CONFLICT (id) DO UPDATE SET attempts = EXCLUDED.attempts, data = EXCLUDED.data
			WHERE webhook_deliveries.attempts <= EXCLUDED.attempts`,
			d.Id, d.Org, d.EndpointId, d.Attempts, data)
	}
	br := s.pool.SendBatch(ctx, &b)
	defer func() { _ = br.Close() }()
	for range ds {
		if _, err := br.Exec(); err != nil {
			var pgErr *pgconn.PgError
			if errors.As(err, &pgErr) && pgErr.Code == "23503" {
				continue // the endpoint was deleted between the check and the insert
			}
			return dbError("record deliveries", err)
		}
	}
	return nil
}

// GetDelivery returns a delivery (see store.WebhookStore).
func (s *Store) GetDelivery(ctx context.Context, org, id string) (*agentmeshv1.WebhookDelivery, error) {
	if err := store.CheckDeliveryID(id); err != nil {
		return nil, err
	}
	var data []byte
	err := s.pool.QueryRow(ctx, `SELECT data FROM webhook_deliveries WHERE id = $1 AND org = $2`, id, org).Scan(&data)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, store.RecordNotFound("webhook delivery", id)
	}
	if err != nil {
		return nil, dbError("get webhook delivery", err)
	}
	d := &agentmeshv1.WebhookDelivery{}
	if err := proto.Unmarshal(data, d); err != nil {
		return nil, store.Internal("decode webhook delivery", err)
	}
	return d, nil
}

// ListDeliveries lists an endpoint's deliveries, newest first (see
// store.WebhookStore).
func (s *Store) ListDeliveries(ctx context.Context, q store.RecordQuery) ([]*agentmeshv1.WebhookDelivery, string, error) {
	before, err := store.DecodeToken(q.PageToken)
	if err != nil {
		return nil, "", err
	}
	if _, err := s.endpoints().get(ctx, q.Org, q.Parent); err != nil {
		return nil, "", err
	}
	n := store.PageSize(q.PageSize)
	rows, err := s.pool.Query(ctx, `SELECT data FROM webhook_deliveries
		WHERE endpoint_id = $1 AND org = $2 AND ($3 = '' OR id < $3) ORDER BY id DESC LIMIT $4`,
		q.Parent, q.Org, before, n+1)
	if err != nil {
		return nil, "", dbError("list webhook deliveries", err)
	}
	defer rows.Close()
	var out []*agentmeshv1.WebhookDelivery
	for rows.Next() {
		var data []byte
		if err := rows.Scan(&data); err != nil {
			return nil, "", dbError("list webhook deliveries", err)
		}
		d := &agentmeshv1.WebhookDelivery{}
		if err := proto.Unmarshal(data, d); err != nil {
			return nil, "", store.Internal("decode webhook delivery", err)
		}
		out = append(out, d)
	}
	if err := rows.Err(); err != nil {
		return nil, "", dbError("list webhook deliveries", err)
	}
	if len(out) > n {
		return out[:n], store.EncodeToken(out[n-1].Id), nil
	}
	return out, "", nil
}
