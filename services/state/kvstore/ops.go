package kvstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	busv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/bus/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/services/state/store"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"
)

// Keys, schedules and webhook endpoints (issue 31) are versioned records,
// one bucket each keyed by id (<P>_STORE_KEYS, _SCHEDULES, _WEBHOOKS), with
// an in-memory index in id order for lists, kept by a watcher and by this
// process's own writes. A put is a KV create, or an update of the revision
// read. The delivery log is <P>_STORE_DELIVERIES, keyed
// "<endpoint>.<delivery>", its entries kept DeliveryLogTTL.

var _ store.Ops = (*Store)(nil)

// DeliveryLogTTL is how long the embedded store keeps a delivery's entry.
const DeliveryLogTTL = 7 * 24 * time.Hour

// opsStore holds the buckets and indexes of the records.
type opsStore struct {
	keysKV, schedulesKV, endpointsKV, deliveriesKV jetstream.KeyValue
	// keyNamesKV holds a created key's name claim (keynames.go).
	keyNamesKV jetstream.KeyValue

	keyIndex      *index[*busv1.KeyRecord]
	scheduleIndex *index[*agentmeshv1.Schedule]
	endpointIndex *index[*busv1.WebhookEndpointRecord]
}

func (s *Store) openOps(ctx, wctx context.Context, bucket func(name, desc string) (jetstream.KeyValue, error)) error {
	var err error
	if s.keysKV, err = bucket("keys", "agentmesh API keys (id → bus.v1.KeyRecord: the SHA-256, never the secret)"); err != nil {
		return err
	}
	if s.keyNamesKV, err = bucket("key_names", "agentmesh API key names (hash(org, name) → the id of the key that has it)"); err != nil {
		return err
	}
	if s.schedulesKV, err = bucket("schedules", "agentmesh schedules (id → agentmesh.v1.Schedule)"); err != nil {
		return err
	}
	if s.endpointsKV, err = bucket("webhooks", "agentmesh webhook endpoints (id → bus.v1.WebhookEndpointRecord)"); err != nil {
		return err
	}
	storage := jetstream.FileStorage
	if s.memory {
		storage = jetstream.MemoryStorage
	}
	kv, reps, err := bus.EnsureKeyValue(ctx, s.js, jetstream.KeyValueConfig{
		Bucket: s.names.StoreBucket("deliveries"), Description: "agentmesh webhook deliveries (endpoint.delivery → agentmesh.v1.WebhookDelivery)",
		History: 1, TTL: DeliveryLogTTL, Storage: storage, Replicas: s.replicas,
	})
	bus.LogReplication(s.log, reps)
	if err != nil {
		return fmt.Errorf("kvstore: bucket %s: %w", s.names.StoreBucket("deliveries"), err)
	}
	s.deliveriesKV = kv
	s.keyIndex = newIndex[*busv1.KeyRecord]()
	s.scheduleIndex = newIndex[*agentmeshv1.Schedule]()
	s.endpointIndex = newIndex[*busv1.WebhookEndpointRecord]()
	if err := watch(ctx, wctx, s, s.keysKV, onRecord(s.keyIndex, func() *busv1.KeyRecord { return &busv1.KeyRecord{} })); err != nil {
		return err
	}
	if err := watch(ctx, wctx, s, s.schedulesKV, onRecord(s.scheduleIndex, func() *agentmeshv1.Schedule { return &agentmeshv1.Schedule{} })); err != nil {
		return err
	}
	return watch(ctx, wctx, s, s.endpointsKV, onRecord(s.endpointIndex, func() *busv1.WebhookEndpointRecord { return &busv1.WebhookEndpointRecord{} }))
}

// onRecord keeps ix as the watcher sees the bucket.
func onRecord[T proto.Message](ix *index[T], newT func() T) func(jetstream.KeyValueEntry) {
	return func(e jetstream.KeyValueEntry) {
		if e.Operation() != jetstream.KeyValuePut {
			ix.del(e.Key(), e.Revision())
			return
		}
		v := newT()
		if err := proto.Unmarshal(e.Value(), v); err != nil {
			return // not ours to crash on; a get reports it
		}
		ix.put(e.Key(), v, e.Revision())
	}
}

// records is one bucket of versioned records of type T.
type records[T proto.Message] struct {
	kv   jetstream.KeyValue
	ix   *index[T]
	kind string
	// sole: this process is the store's only writer, so the index is the
	// bucket (Options.SoleWriter) and a get reads it.
	sole bool
	// as in pgstore: id, version, org, and whether a list leaves it out.
	id         func(T) string
	version    func(T) int64
	setVersion func(T, int64)
	org        func(T) string
	hidden     func(T) bool
	newT       func() T
}

// read returns the record id (nil, 0 when absent) and its revision.
func (r records[T]) read(ctx context.Context, id string) (T, uint64, error) {
	var zero T
	e, err := r.kv.Get(ctx, id)
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrInvalidKey) {
		return zero, 0, nil // an id that cannot be a key ("*") names no record
	}
	if err != nil {
		return zero, 0, kvError("get "+r.kind, err)
	}
	v := r.newT()
	if err := proto.Unmarshal(e.Value(), v); err != nil {
		return zero, 0, store.Internal("decode "+r.kind, err)
	}
	return v, e.Revision(), nil
}

func (r records[T]) put(ctx context.Context, id string, rec T, create bool, expectedVersion int64) (T, error) {
	var zero T
	rec = proto.Clone(rec).(T)
	if !create && expectedVersion > 0 {
		// The index usually holds the version asked for with its revision
		// (this process wrote or saw it last): update by that revision
		// without reading; a stale index is told by the update itself.
		if cur, rev, ok := r.ix.getRev(id); ok && r.version(cur) == expectedVersion && r.org(cur) == r.org(rec) {
			if out, ok := r.update(ctx, id, rec, expectedVersion, rev); ok {
				return out, nil
			}
		}
	}
	for range maxRetries {
		cur, rev, err := r.read(ctx, id)
		if err != nil {
			return zero, err
		}
		exists := rev != 0 && r.org(cur) == r.org(rec)
		if rev != 0 && !exists && !create {
			return zero, store.RecordNotFound(r.kind, id) // another org's
		}
		var v int64
		if rev != 0 {
			v = r.version(cur)
		}
		if err := store.CheckPut(r.kind, id, rev != 0, v, create, expectedVersion); err != nil {
			return zero, err
		}
		r.setVersion(rec, v+1)
		data, err := marshal(rec)
		if err != nil {
			return zero, err
		}
		var nrev uint64
		if rev == 0 {
			nrev, err = r.kv.Create(ctx, id, data)
		} else {
			nrev, err = r.kv.Update(ctx, id, data, rev)
		}
		if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) || isWrongLastSeq(err) {
			continue // lost a race: read again
		}
		if err != nil {
			return zero, kvError("put "+r.kind, err)
		}
		r.ix.put(id, rec, nrev)
		return rec, nil
	}
	return zero, bus.Errorf(bus.CodeConflict, "%s %q: too much contention, retry", r.kind, id)
}

// update writes rec at version v+1 over revision rev and reports whether
// the store took it.
func (r records[T]) update(ctx context.Context, id string, rec T, v int64, rev uint64) (T, bool) {
	var zero T
	next := proto.Clone(rec).(T)
	r.setVersion(next, v+1)
	data, err := marshal(next)
	if err != nil {
		return zero, false
	}
	nrev, err := r.kv.Update(ctx, id, data, rev)
	if err != nil {
		return zero, false
	}
	r.ix.put(id, next, nrev)
	return next, true
}

func (r records[T]) get(ctx context.Context, org, id string) (T, error) {
	var zero T
	if r.sole {
		v, ok := r.ix.get(id)
		if !ok || (org != "" && r.org(v) != org) {
			return zero, store.RecordNotFound(r.kind, id)
		}
		return proto.Clone(v).(T), nil
	}
	v, rev, err := r.read(ctx, id)
	if err != nil {
		return zero, err
	}
	if rev == 0 || (org != "" && r.org(v) != org) {
		return zero, store.RecordNotFound(r.kind, id)
	}
	return v, nil
}

func (r records[T]) list(q store.RecordQuery) ([]T, string, error) {
	after, err := store.DecodeToken(q.PageToken)
	if err != nil {
		return nil, "", err
	}
	n := store.PageSize(q.PageSize)
	var out []T
	more := false
	r.ix.ascend(after, func(_ string, v T) bool {
		if !q.Match(r.org(v)) || (r.hidden(v) && !q.IncludeRevoked) {
			return true
		}
		if len(out) == n {
			more = true
			return false
		}
		out = append(out, proto.Clone(v).(T))
		return true
	})
	if more {
		return out, store.EncodeToken(r.id(out[len(out)-1])), nil
	}
	return out, "", nil
}

func (r records[T]) delete(ctx context.Context, org, id string) error {
	for range maxRetries {
		cur, rev, err := r.read(ctx, id)
		if err != nil {
			return err
		}
		if rev == 0 || r.org(cur) != org {
			return store.RecordNotFound(r.kind, id)
		}
		err = r.kv.Delete(ctx, id, jetstream.LastRevision(rev))
		if errors.Is(err, jetstream.ErrKeyRevisionMismatch) || isWrongLastSeq(err) {
			continue
		}
		if err != nil {
			return kvError("delete "+r.kind, err)
		}
		r.ix.del(id, rev+1)
		return nil
	}
	return bus.Errorf(bus.CodeConflict, "%s %q: too much contention, retry", r.kind, id)
}

func (s *Store) keys() records[*busv1.KeyRecord] {
	return records[*busv1.KeyRecord]{kv: s.keysKV, ix: s.keyIndex, kind: "key", sole: s.soleWriter,
		id:         func(r *busv1.KeyRecord) string { return r.GetKey().GetId() },
		version:    func(r *busv1.KeyRecord) int64 { return r.GetKey().GetVersion() },
		setVersion: func(r *busv1.KeyRecord, v int64) { r.Key.Version = v },
		org:        func(r *busv1.KeyRecord) string { return r.GetKey().GetOrg() },
		hidden:     store.Revoked,
		newT:       func() *busv1.KeyRecord { return &busv1.KeyRecord{} },
	}
}

func (s *Store) schedules() records[*agentmeshv1.Schedule] {
	return records[*agentmeshv1.Schedule]{kv: s.schedulesKV, ix: s.scheduleIndex, kind: "schedule", sole: s.soleWriter,
		id:         func(r *agentmeshv1.Schedule) string { return r.GetId() },
		version:    func(r *agentmeshv1.Schedule) int64 { return r.GetVersion() },
		setVersion: func(r *agentmeshv1.Schedule, v int64) { r.Version = v },
		org:        func(r *agentmeshv1.Schedule) string { return r.GetOrg() },
		hidden:     func(*agentmeshv1.Schedule) bool { return false },
		newT:       func() *agentmeshv1.Schedule { return &agentmeshv1.Schedule{} },
	}
}

func (s *Store) endpoints() records[*busv1.WebhookEndpointRecord] {
	return records[*busv1.WebhookEndpointRecord]{kv: s.endpointsKV, ix: s.endpointIndex, kind: "webhook endpoint", sole: s.soleWriter,
		id:         func(r *busv1.WebhookEndpointRecord) string { return r.GetEndpoint().GetId() },
		version:    func(r *busv1.WebhookEndpointRecord) int64 { return r.GetEndpoint().GetVersion() },
		setVersion: func(r *busv1.WebhookEndpointRecord, v int64) { r.Endpoint.Version = v },
		org:        func(r *busv1.WebhookEndpointRecord) string { return r.GetEndpoint().GetOrg() },
		hidden:     func(*busv1.WebhookEndpointRecord) bool { return false },
		newT:       func() *busv1.WebhookEndpointRecord { return &busv1.WebhookEndpointRecord{} },
	}
}

// PutKey creates or replaces a key (see store.KeyStore); a create claims
// its name first (keynames.go).
func (s *Store) PutKey(ctx context.Context, rec *busv1.KeyRecord, create bool, expectedVersion int64) (*busv1.KeyRecord, error) {
	if create {
		return s.createKey(ctx, rec)
	}
	return s.keys().put(ctx, rec.GetKey().GetId(), rec, create, expectedVersion)
}

// GetKey returns a key (see store.KeyStore).
func (s *Store) GetKey(ctx context.Context, org, id string) (*busv1.KeyRecord, error) {
	return s.keys().get(ctx, org, id)
}

// ListKeys lists keys (see store.KeyStore).
func (s *Store) ListKeys(_ context.Context, q store.RecordQuery) ([]*busv1.KeyRecord, string, error) {
	return s.keys().list(q)
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
func (s *Store) ListSchedules(_ context.Context, q store.RecordQuery) ([]*agentmeshv1.Schedule, string, error) {
	return s.schedules().list(q)
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
func (s *Store) ListWebhookEndpoints(_ context.Context, q store.RecordQuery) ([]*busv1.WebhookEndpointRecord, string, error) {
	return s.endpoints().list(q)
}

// DeleteWebhookEndpoint removes an endpoint, then its deliveries (see
// store.WebhookStore).
func (s *Store) DeleteWebhookEndpoint(ctx context.Context, org, id string) error {
	if err := s.endpoints().delete(ctx, org, id); err != nil {
		return err
	}
	keys, err := s.deliveryKeys(ctx, id)
	if err != nil {
		return err
	}
	for _, k := range keys {
		if err := s.deliveriesKV.Purge(ctx, k); err != nil {
			return kvError("delete webhook deliveries", err)
		}
	}
	return nil
}

func (s *Store) deliveryKeys(ctx context.Context, endpoint string) ([]string, error) {
	lister, err := s.deliveriesKV.ListKeysFiltered(ctx, endpoint+".*")
	if err != nil {
		return nil, kvError("list webhook deliveries", err)
	}
	var keys []string
	for k := range lister.Keys() {
		keys = append(keys, k)
	}
	return keys, nil
}

func (s *Store) readDelivery(ctx context.Context, key string) (*agentmeshv1.WebhookDelivery, uint64, error) {
	e, err := s.deliveriesKV.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, kvError("get webhook delivery", err)
	}
	d := &agentmeshv1.WebhookDelivery{}
	if err := proto.Unmarshal(e.Value(), d); err != nil {
		return nil, 0, store.Internal("decode webhook delivery", err)
	}
	return d, e.Revision(), nil
}

// recordConcurrency is how many deliveries of a batch are written at once.
const recordConcurrency = 32

// RecordDeliveries stores deliveries (see store.WebhookStore), several at
// once (each is its own entry).
func (s *Store) RecordDeliveries(ctx context.Context, ds []*agentmeshv1.WebhookDelivery) error {
	sem := make(chan struct{}, recordConcurrency)
	errs := make([]error, len(ds))
	var wg sync.WaitGroup
	for i, d := range ds {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			errs[i] = s.recordDelivery(ctx, d)
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

func (s *Store) recordDelivery(ctx context.Context, d *agentmeshv1.WebhookDelivery) error {
	key := d.EndpointId + "." + d.Id
	data, err := marshal(d)
	if err != nil {
		return err
	}
	if d.Attempts <= 1 {
		// A first try's outcome is mostly the first word on it: create
		// without reading (an entry already there is read below).
		if _, err := s.deliveriesKV.Create(ctx, key, data); err == nil {
			return nil
		}
	}
	for range maxRetries {
		cur, rev, err := s.readDelivery(ctx, key)
		if err != nil {
			return err
		}
		if cur != nil && cur.Attempts > d.Attempts {
			return nil
		}
		if rev == 0 {
			_, err = s.deliveriesKV.Create(ctx, key, data)
		} else {
			_, err = s.deliveriesKV.Update(ctx, key, data, rev)
		}
		if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) || isWrongLastSeq(err) {
			continue
		}
		if err != nil {
			return kvError("record webhook delivery", err)
		}
		return nil
	}
	return bus.Errorf(bus.CodeConflict, "webhook delivery %q: too much contention, retry", d.Id)
}

// GetDelivery returns a delivery (see store.WebhookStore).
// The id is checked first: it becomes part of a key filter ("*.<id>").
func (s *Store) GetDelivery(ctx context.Context, org, id string) (*agentmeshv1.WebhookDelivery, error) {
	if err := store.CheckDeliveryID(id); err != nil {
		return nil, err
	}
	lister, err := s.deliveriesKV.ListKeysFiltered(ctx, "*."+id)
	if err != nil {
		return nil, kvError("get webhook delivery", err)
	}
	var key string
	for k := range lister.Keys() {
		key = k
	}
	if key != "" {
		d, _, err := s.readDelivery(ctx, key)
		if err != nil {
			return nil, err
		}
		if d != nil && d.Org == org {
			return d, nil
		}
	}
	return nil, store.RecordNotFound("webhook delivery", id)
}

// ListDeliveries lists an endpoint's deliveries newest first (see
// store.WebhookStore): the embedded store reads the endpoint's whole log,
// which is kept DeliveryLogTTL.
func (s *Store) ListDeliveries(ctx context.Context, q store.RecordQuery) ([]*agentmeshv1.WebhookDelivery, string, error) {
	before, err := store.DecodeToken(q.PageToken)
	if err != nil {
		return nil, "", err
	}
	if _, err := s.endpoints().get(ctx, q.Org, q.Parent); err != nil {
		return nil, "", err
	}
	keys, err := s.deliveryKeys(ctx, q.Parent)
	if err != nil {
		return nil, "", err
	}
	slices.SortFunc(keys, func(a, b string) int { return strings.Compare(b, a) })
	n := store.PageSize(q.PageSize)
	var out []*agentmeshv1.WebhookDelivery
	for _, k := range keys {
		id := strings.TrimPrefix(k, q.Parent+".")
		if before != "" && id >= before {
			continue
		}
		d, _, err := s.readDelivery(ctx, k)
		if err != nil {
			return nil, "", err
		}
		if d == nil || d.Org != q.Org {
			continue
		}
		if len(out) == n {
			return out, store.EncodeToken(out[n-1].Id), nil
		}
		out = append(out, d)
	}
	return out, "", nil
}
