package store

import (
	"context"
	"fmt"
	"strings"

	busv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/bus/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
)

// Keys, schedules and webhooks (issue 31) are kept beside the tasks by
// interfaces of their own: Ops is what the state service asks of a store
// that keeps them (both pgstore and kvstore do; storetest checks both).
//
// Each kind is a record keyed by an id unique across orgs ("key_…",
// "sch_…", "ep_…", "msg_…"), carrying its org and a version. A put is
// compare-and-set on the version: create (already_exists when the id is
// taken), or replace the version read (not_found when absent;
// failed_precondition when expectedVersion > 0 and the record is at
// another). What a change does is decided by the state service, which reads,
// plans and puts again when it lost a race (conflict).
type Ops interface {
	KeyStore
	ScheduleStore
	WebhookStore
}

// KeyStore keeps the API keys created through the API: their SHA-256,
// never the secret.
type KeyStore interface {
	// PutKey creates or replaces rec (by rec.Key.Id); it sets
	// rec.Key.Version to the version stored. A create whose name the
	// org's keys already use (revoked ones too) is KeyNameTaken, also
	// when creates race; a replace keeps the stored name's claim (a
	// key's name never changes).
	PutKey(ctx context.Context, rec *busv1.KeyRecord, create bool, expectedVersion int64) (*busv1.KeyRecord, error)
	// GetKey returns the key id of org ("" = of any org), or not_found.
	GetKey(ctx context.Context, org, id string) (*busv1.KeyRecord, error)
	// ListKeys returns one page of keys ordered by id.
	ListKeys(ctx context.Context, q RecordQuery) ([]*busv1.KeyRecord, string, error)
}

// ScheduleStore keeps the schedules.
type ScheduleStore interface {
	// PutSchedule creates or replaces sc (by sc.Id); it sets sc.Version.
	PutSchedule(ctx context.Context, sc *agentmeshv1.Schedule, create bool, expectedVersion int64) (*agentmeshv1.Schedule, error)
	// GetSchedule returns the schedule id of org ("" = of any org), or
	// not_found.
	GetSchedule(ctx context.Context, org, id string) (*agentmeshv1.Schedule, error)
	// ListSchedules returns one page of schedules ordered by id.
	ListSchedules(ctx context.Context, q RecordQuery) ([]*agentmeshv1.Schedule, string, error)
	// DeleteSchedule removes the schedule id of org or answers not_found.
	DeleteSchedule(ctx context.Context, org, id string) error
}

// WebhookStore keeps the webhook endpoints (with their secrets) and the
// log of their deliveries.
type WebhookStore interface {
	// PutWebhookEndpoint creates or replaces rec (by rec.Endpoint.Id); it
	// sets rec.Endpoint.Version.
	PutWebhookEndpoint(ctx context.Context, rec *busv1.WebhookEndpointRecord, create bool, expectedVersion int64) (*busv1.WebhookEndpointRecord, error)
	// GetWebhookEndpoint returns the endpoint id of org ("" = of any org),
	// or not_found.
	GetWebhookEndpoint(ctx context.Context, org, id string) (*busv1.WebhookEndpointRecord, error)
	// ListWebhookEndpoints returns one page of endpoints ordered by id.
	ListWebhookEndpoints(ctx context.Context, q RecordQuery) ([]*busv1.WebhookEndpointRecord, string, error)
	// DeleteWebhookEndpoint removes the endpoint id of org and its
	// deliveries, or answers not_found.
	DeleteWebhookEndpoint(ctx context.Context, org, id string) error
	// RecordDeliveries stores each delivery (by id) unless the one stored
	// has more attempts (a late report of an earlier try changes nothing).
	RecordDeliveries(ctx context.Context, ds []*agentmeshv1.WebhookDelivery) error
	// GetDelivery returns the delivery id of org, or not_found; an id
	// that is not one (CheckDeliveryID) is invalid_argument.
	GetDelivery(ctx context.Context, org, id string) (*agentmeshv1.WebhookDelivery, error)
	// ListDeliveries returns one page of the deliveries of q.Org's endpoint
	// q.Parent, newest (highest id) first.
	ListDeliveries(ctx context.Context, q RecordQuery) ([]*agentmeshv1.WebhookDelivery, string, error)
}

// RecordQuery pages a list of records.
type RecordQuery struct {
	// Org whose records are listed; AnyOrg lists every org's (Org empty).
	Org    string
	AnyOrg bool
	// Parent: the endpoint whose deliveries are listed.
	Parent string
	// IncludeRevoked lists revoked keys too.
	IncludeRevoked bool
	PageSize       int
	PageToken      string
}

// Match reports whether a record of org belongs to the query's orgs.
func (q RecordQuery) Match(org string) bool { return q.AnyOrg || org == q.Org }

// CheckPut refuses a put that the version rule forbids; exists and
// curVersion describe the record stored.
// Six parameters: the version rule's plain inputs, as both stores have them at hand.
func CheckPut(kind, id string, exists bool, curVersion int64, create bool, expectedVersion int64) error {
	switch {
	case create && exists:
		return bus.Errorf(bus.CodeAlreadyExists, "%s %q already exists", kind, id)
	case !create && !exists:
		return RecordNotFound(kind, id)
	case !create && expectedVersion > 0 && curVersion != expectedVersion:
		return bus.Errorf(bus.CodeFailedPrecondition, "%s %q is at version %d, not %d", kind, id, curVersion, expectedVersion)
	}
	return nil
}

// RecordNotFound is the error for an unknown key, schedule, endpoint or
// delivery ("webhook endpoint" → "webhook endpoint \"ep_…\" not found").
func RecordNotFound(kind, id string) error {
	return bus.Errorf(bus.CodeNotFound, "%s %q not found", kind, id)
}

// ValidRecordID reports whether id may name a record: a prefix, an
// underscore and 1-64 letters and digits (ids are subject tokens and
// storage keys).
func ValidRecordID(id, prefix string) bool {
	rest, ok := strings.CutPrefix(id, prefix+"_")
	if !ok || rest == "" || len(rest) > 64 {
		return false
	}
	for _, r := range rest {
		if !(r >= '0' && r <= '9' || r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z') {
			return false
		}
	}
	return true
}

// KeyNameTaken is the error for a created key whose name its org's keys
// created here already use (revoked ones included: a task's created_by
// and an approval's decided_by name keys by name, so a name is never
// given to a second key). Platform keys (org "") are one scope.
func KeyNameTaken(org, name string) error {
	if org == "" {
		return &bus.Error{Code: bus.CodeAlreadyExists, Field: "name", Message: fmt.Sprintf("a platform key named %q already exists", name)}
	}
	return &bus.Error{Code: bus.CodeAlreadyExists, Field: "name", Message: fmt.Sprintf("org %s already has a key named %q", org, name)}
}

// CheckDeliveryID refuses what cannot be a webhook delivery's id
// (invalid_argument naming delivery_id): a store looks an id up as
// itself, never as a pattern ('*', '>', '.') that would match another
// delivery.
func CheckDeliveryID(id string) error {
	if !ValidRecordID(id, "msg") {
		return bus.FieldError("delivery_id", "%.80q is not a delivery id (msg_ and 1-64 letters or digits)", id)
	}
	return nil
}

// Revoked reports whether a key record is revoked.
func Revoked(rec *busv1.KeyRecord) bool { return rec.GetKey().GetRevokedAt() != nil }
