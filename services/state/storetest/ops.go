package storetest

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	busv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/bus/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/services/state/store"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// The keys, schedules and webhooks every store keeps (store.Ops).
var opsTests = []struct {
	name string
	fn   func(t *testing.T, s store.Store)
}{
	{"Keys", testKeys},
	{"KeyNamesUnique", testKeyNamesUnique},
	{"ConcurrentKeyNames", testConcurrentKeyNames},
	{"Schedules", testSchedules},
	{"WebhookEndpoints", testWebhookEndpoints},
	{"WebhookDeliveries", testWebhookDeliveries},
}

func opsOf(t *testing.T, s store.Store) store.Ops {
	t.Helper()
	o, ok := s.(store.Ops)
	if !ok {
		t.Fatalf("%T does not keep keys, schedules and webhooks (store.Ops)", s)
	}
	return o
}

func keyRec(id, org, name string) *busv1.KeyRecord {
	return &busv1.KeyRecord{Key: &agentmeshv1.ApiKey{Id: id, Org: org, Name: name, Role: "reader"}, Sha256: []byte(id)}
}

func testKeys(t *testing.T, s store.Store) {
	o, ctx := opsOf(t, s), ctxT(t)
	got, err := o.PutKey(ctx, keyRec("key_1", "org-a", "ci"), true, 0)
	if err != nil || got.Key.Version != 1 {
		t.Fatalf("create: %v, version %d", err, got.GetKey().GetVersion())
	}
	_, err = o.PutKey(ctx, keyRec("key_1", "org-b", "ci"), true, 0)
	wantCode(t, "create a taken id", err, bus.ErrAlreadyExists)
	for i := 2; i <= 5; i++ {
		if _, err := o.PutKey(ctx, keyRec(fmt.Sprintf("key_%d", i), "org-a", fmt.Sprintf("k%d", i)), true, 0); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := o.PutKey(ctx, keyRec("key_9", "org-b", "b"), true, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := o.PutKey(ctx, keyRec("key_0", "", "platform"), true, 0); err != nil {
		t.Fatal(err)
	}
	if r, err := o.GetKey(ctx, "org-a", "key_1"); err != nil || string(r.Sha256) != "key_1" {
		t.Fatalf("get: %v %v", r, err)
	}
	if r, err := o.GetKey(ctx, "", "key_9"); err != nil || r.Key.Org != "org-b" {
		t.Fatalf("get of any org: %v %v", r, err)
	}
	_, err = o.GetKey(ctx, "org-b", "key_1")
	wantCode(t, "get another org's key", err, bus.ErrNotFound)

	// Replace: compare-and-set on the version.
	rev := keyRec("key_2", "org-a", "k2")
	rev.Key.RevokedAt = timestamppb.Now()
	_, err = o.PutKey(ctx, rev, false, 7)
	wantCode(t, "replace at a wrong version", err, bus.ErrFailedPrecondition)
	if got, err = o.PutKey(ctx, rev, false, 1); err != nil || got.Key.Version != 2 {
		t.Fatalf("revoke: %v, version %d", err, got.GetKey().GetVersion())
	}
	_, err = o.PutKey(ctx, keyRec("key_404", "org-a", "k"), false, 0)
	wantCode(t, "replace an absent key", err, bus.ErrNotFound)
	_, err = o.PutKey(ctx, keyRec("key_1", "org-b", "k"), false, 0)
	wantCode(t, "replace another org's key", err, bus.ErrNotFound)

	// Lists: per org, revoked left out unless asked, in pages, any org.
	ids := func(q store.RecordQuery) []string {
		t.Helper()
		var out []string
		for {
			recs, next, err := o.ListKeys(ctx, q)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range recs {
				out = append(out, r.Key.Id)
			}
			if next == "" {
				return out
			}
			q.PageToken = next
		}
	}
	for _, tc := range []struct {
		q    store.RecordQuery
		want string
	}{
		{store.RecordQuery{Org: "org-a", PageSize: 2}, "[key_1 key_3 key_4 key_5]"},
		{store.RecordQuery{Org: "org-a", IncludeRevoked: true}, "[key_1 key_2 key_3 key_4 key_5]"},
		{store.RecordQuery{Org: "org-b"}, "[key_9]"},
		{store.RecordQuery{AnyOrg: true, PageSize: 3}, "[key_0 key_1 key_3 key_4 key_5 key_9]"},
	} {
		if got := fmt.Sprint(ids(tc.q)); got != tc.want {
			t.Errorf("list %+v: got %s, want %s", tc.q, got, tc.want)
		}
	}
}

// wantNameTaken checks err is already_exists naming the field name.
func wantNameTaken(t *testing.T, what string, err error) {
	t.Helper()
	var be *bus.Error
	if !errors.As(err, &be) || be.Code != bus.CodeAlreadyExists || be.Field != "name" {
		t.Fatalf("%s: got %v, want already_exists naming name", what, err)
	}
}

// A key's name is unique among its org's keys (the platform keys are one
// more scope), revoked ones included: audit records name keys by name.
func testKeyNamesUnique(t *testing.T, s store.Store) {
	o, ctx := opsOf(t, s), ctxT(t)
	for _, r := range []*busv1.KeyRecord{keyRec("key_1", "org-a", "x1"), keyRec("key_2", "org-b", "x1"), keyRec("key_3", "", "x1")} {
		if _, err := o.PutKey(ctx, r, true, 0); err != nil {
			t.Fatalf("create %s in org %q: %v", r.Key.Id, r.Key.Org, err)
		}
	}
	_, err := o.PutKey(ctx, keyRec("key_4", "org-a", "x1"), true, 0)
	wantNameTaken(t, "a second x1 in org-a", err)
	_, err = o.PutKey(ctx, keyRec("key_5", "", "x1"), true, 0)
	wantNameTaken(t, "a second platform x1", err)
	if _, err := o.GetKey(ctx, "", "key_4"); !errors.Is(err, bus.ErrNotFound) {
		t.Fatalf("the refused key_4 was stored: %v", err)
	}

	// Revoked, its name stays taken.
	rev := keyRec("key_1", "org-a", "x1")
	rev.Key.RevokedAt = timestamppb.Now()
	if _, err := o.PutKey(ctx, rev, false, 1); err != nil {
		t.Fatal(err)
	}
	_, err = o.PutKey(ctx, keyRec("key_6", "org-a", "x1"), true, 0)
	wantNameTaken(t, "x1 of a revoked key", err)

	// A create refused for its id does not take its name.
	_, err = o.PutKey(ctx, keyRec("key_2", "org-c", "fresh"), true, 0)
	wantCode(t, "create a taken id", err, bus.ErrAlreadyExists)
	if _, err := o.PutKey(ctx, keyRec("key_7", "org-c", "fresh"), true, 0); err != nil {
		t.Fatalf("fresh after a refused create: %v", err)
	}
	// Replacing a key (revoke, rotate) is not a second use of its name.
	if _, err := o.PutKey(ctx, keyRec("key_7", "org-c", "fresh"), false, 1); err != nil {
		t.Fatalf("replace key_7: %v", err)
	}
}

// Creates of one name at once: exactly one wins, the others are told the
// name is taken, and one key holds it.
func testConcurrentKeyNames(t *testing.T, s store.Store) {
	o, ctx := opsOf(t, s), ctxT(t)
	const n = 8
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			_, errs[i] = o.PutKey(ctx, keyRec(fmt.Sprintf("key_%d", i), "org-a", "x1"), true, 0)
		})
	}
	wg.Wait()
	won := 0
	for i, err := range errs {
		if err == nil {
			won++
			continue
		}
		wantNameTaken(t, fmt.Sprintf("create %d", i), err)
	}
	if won != 1 {
		t.Fatalf("%d creates of x1 won, want 1: %v", won, errs)
	}
	recs, _, err := o.ListKeys(ctx, store.RecordQuery{Org: "org-a", IncludeRevoked: true})
	if err != nil || len(recs) != 1 {
		t.Fatalf("org-a holds %d keys (%v), want 1", len(recs), err)
	}
}

func testSchedules(t *testing.T, s store.Store) {
	o, ctx := opsOf(t, s), ctxT(t)
	sc := &agentmeshv1.Schedule{Id: "sch_1", Org: "org-a", Name: "nightly", Spec: &agentmeshv1.ScheduleSpec{Cron: "0 2 * * *"}}
	got, err := o.PutSchedule(ctx, sc, true, 0)
	if err != nil || got.Version != 1 {
		t.Fatalf("create: %v %v", got, err)
	}
	if _, err := o.PutSchedule(ctx, &agentmeshv1.Schedule{Id: "sch_2", Org: "org-b"}, true, 0); err != nil {
		t.Fatal(err)
	}
	got.Paused = true
	if got, err = o.PutSchedule(ctx, got, false, got.Version); err != nil || got.Version != 2 || !got.Paused {
		t.Fatalf("pause: %v %v", got, err)
	}
	_, err = o.PutSchedule(ctx, got, false, 1)
	wantCode(t, "replace at an old version", err, bus.ErrFailedPrecondition)
	if r, err := o.GetSchedule(ctx, "org-a", "sch_1"); err != nil || !r.Paused || r.Spec.GetCron() != "0 2 * * *" {
		t.Fatalf("get: %v %v", r, err)
	}
	_, err = o.GetSchedule(ctx, "org-b", "sch_1")
	wantCode(t, "get another org's schedule", err, bus.ErrNotFound)
	if l, _, err := o.ListSchedules(ctx, store.RecordQuery{Org: "org-a"}); err != nil || len(l) != 1 || l[0].Id != "sch_1" {
		t.Fatalf("list org-a: %v %v", l, err)
	}
	if l, _, err := o.ListSchedules(ctx, store.RecordQuery{AnyOrg: true}); err != nil || len(l) != 2 {
		t.Fatalf("list any org: %v %v", l, err)
	}
	wantCode(t, "delete another org's schedule", o.DeleteSchedule(ctx, "org-b", "sch_1"), bus.ErrNotFound)
	if err := o.DeleteSchedule(ctx, "org-a", "sch_1"); err != nil {
		t.Fatal(err)
	}
	_, err = o.GetSchedule(ctx, "", "sch_1")
	wantCode(t, "get a deleted schedule", err, bus.ErrNotFound)
	wantCode(t, "delete twice", o.DeleteSchedule(ctx, "org-a", "sch_1"), bus.ErrNotFound)
	if l, _, err := o.ListSchedules(ctx, store.RecordQuery{AnyOrg: true}); err != nil || len(l) != 1 {
		t.Fatalf("list after delete: %v %v", l, err)
	}
}

func endpointRec(id, org string) *busv1.WebhookEndpointRecord {
	return &busv1.WebhookEndpointRecord{
		Endpoint: &agentmeshv1.WebhookEndpoint{Id: id, Org: org, Url: "https://example.com/hook"},
		Secrets:  []*busv1.WebhookSecret{{Secret: "whsec_AAAA"}},
	}
}

func testWebhookEndpoints(t *testing.T, s store.Store) {
	o, ctx := opsOf(t, s), ctxT(t)
	if _, err := o.PutWebhookEndpoint(ctx, endpointRec("ep_1", "org-a"), true, 0); err != nil {
		t.Fatal(err)
	}
	_, err := o.PutWebhookEndpoint(ctx, endpointRec("ep_1", "org-a"), true, 0)
	wantCode(t, "create twice", err, bus.ErrAlreadyExists)
	rot := endpointRec("ep_1", "org-a")
	rot.Secrets = append([]*busv1.WebhookSecret{{Secret: "whsec_BBBB"}}, &busv1.WebhookSecret{Secret: "whsec_AAAA", ExpiresAt: timestamppb.Now()})
	if got, err := o.PutWebhookEndpoint(ctx, rot, false, 1); err != nil || got.Endpoint.Version != 2 {
		t.Fatalf("rotate: %v %v", got, err)
	}
	r, err := o.GetWebhookEndpoint(ctx, "", "ep_1")
	if err != nil || len(r.Secrets) != 2 || r.Secrets[0].Secret != "whsec_BBBB" {
		t.Fatalf("get: %v %v", r, err)
	}
	_, err = o.GetWebhookEndpoint(ctx, "org-b", "ep_1")
	wantCode(t, "get another org's endpoint", err, bus.ErrNotFound)
	wantCode(t, "delete another org's endpoint", o.DeleteWebhookEndpoint(ctx, "org-b", "ep_1"), bus.ErrNotFound)
	if l, _, err := o.ListWebhookEndpoints(ctx, store.RecordQuery{Org: "org-b"}); err != nil || len(l) != 0 {
		t.Fatalf("org-b lists: %v %v", l, err)
	}
}

func delivery(id, ep, org string, attempts int32, status agentmeshv1.WebhookDeliveryStatus) *agentmeshv1.WebhookDelivery {
	return &agentmeshv1.WebhookDelivery{Id: id, EndpointId: ep, Org: org, Attempts: attempts, Status: status, EventType: "task.completed"}
}

func testWebhookDeliveries(t *testing.T, s store.Store) {
	o, ctx := opsOf(t, s), ctxT(t)
	for _, ep := range []string{"ep_1", "ep_2"} {
		if _, err := o.PutWebhookEndpoint(ctx, endpointRec(ep, "org-a"), true, 0); err != nil {
			t.Fatal(err)
		}
	}
	retrying, ok := agentmeshv1.WebhookDeliveryStatus_WEBHOOK_DELIVERY_STATUS_RETRYING, agentmeshv1.WebhookDeliveryStatus_WEBHOOK_DELIVERY_STATUS_SUCCEEDED
	var batch []*agentmeshv1.WebhookDelivery
	for i := 1; i <= 5; i++ {
		batch = append(batch, delivery(fmt.Sprintf("msg_%d", i), "ep_1", "org-a", 1, retrying))
	}
	batch = append(batch, delivery("msg_9", "ep_2", "org-a", 1, retrying))
	if err := o.RecordDeliveries(ctx, batch); err != nil {
		t.Fatal(err)
	}
	// A later try replaces; a late report of an earlier one does not.
	if err := o.RecordDeliveries(ctx, []*agentmeshv1.WebhookDelivery{delivery("msg_3", "ep_1", "org-a", 2, ok)}); err != nil {
		t.Fatal(err)
	}
	if err := o.RecordDeliveries(ctx, []*agentmeshv1.WebhookDelivery{delivery("msg_3", "ep_1", "org-a", 1, retrying)}); err != nil {
		t.Fatal(err)
	}
	d, err := o.GetDelivery(ctx, "org-a", "msg_3")
	if err != nil || d.Attempts != 2 || d.Status != ok {
		t.Fatalf("msg_3 after a late report: %v %v", d, err)
	}
	_, err = o.GetDelivery(ctx, "org-b", "msg_3")
	wantCode(t, "get another org's delivery", err, bus.ErrNotFound)
	// An id is one id, never a pattern of them.
	for _, id := range []string{"*", ">", "msg_*", "msg_3.>", "ep_1.msg_3", "", "msg 3"} {
		d, err := o.GetDelivery(ctx, "org-a", id)
		var be *bus.Error
		if !errors.As(err, &be) || be.Code != bus.CodeInvalidArgument || be.Field != "delivery_id" {
			t.Errorf("GetDelivery(%q): got %v, %v; want invalid_argument naming delivery_id", id, d, err)
		}
	}
	var got []string
	q := store.RecordQuery{Org: "org-a", Parent: "ep_1", PageSize: 2}
	for {
		page, next, err := o.ListDeliveries(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range page {
			got = append(got, d.Id)
		}
		if next == "" {
			break
		}
		q.PageToken = next
	}
	if fmt.Sprint(got) != "[msg_5 msg_4 msg_3 msg_2 msg_1]" {
		t.Errorf("deliveries of ep_1: got %v, want newest first", got)
	}
	_, _, err = o.ListDeliveries(ctx, store.RecordQuery{Org: "org-b", Parent: "ep_1"})
	wantCode(t, "list another org's deliveries", err, bus.ErrNotFound)
	for _, ep := range []string{"*", ">", "ep_*"} {
		_, _, err = o.ListDeliveries(ctx, store.RecordQuery{Org: "org-a", Parent: ep})
		wantCode(t, fmt.Sprintf("list the deliveries of endpoint %q", ep), err, bus.ErrNotFound)
	}
	// Deleting the endpoint drops its log.
	if err := o.DeleteWebhookEndpoint(ctx, "org-a", "ep_1"); err != nil {
		t.Fatal(err)
	}
	_, err = o.GetDelivery(ctx, "org-a", "msg_3")
	wantCode(t, "a deleted endpoint's delivery", err, bus.ErrNotFound)
	if page, _, err := o.ListDeliveries(ctx, store.RecordQuery{Org: "org-a", Parent: "ep_2"}); err != nil || len(page) != 1 {
		t.Fatalf("ep_2 keeps its log: %v %v", page, err)
	}
}
