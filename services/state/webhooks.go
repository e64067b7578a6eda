package state

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"time"

	busv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/bus/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/webhook"
	"github.com/agentmesh/agentmesh/services/state/store"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Webhook endpoints and their delivery log (webhook.<op>). The router
// creates, changes and reads an org's endpoints (never their secrets after
// the answer that made them); the scheduler reads them with their secrets
// (webhook.signing.*) to sign, and records the outcome of each try
// (webhook.deliveries.record). A redelivery asked through the API is put
// on the deliveries stream here. Endpoint changes are announced on
// <p>.evt.<org>.webhook.<id> (agentmesh.v1.WebhookEndpointEvent), which
// every scheduler replica follows.

// MaxDeliveriesPerRecord bounds the outcomes one request records.
const MaxDeliveriesPerRecord = 1000

// maxURLBytes bounds an endpoint's URL.
const maxURLBytes = 2048

// checkEndpoint checks what a caller sets on an endpoint.
func checkEndpoint(ep *agentmeshv1.WebhookEndpoint) error {
	u, err := url.Parse(ep.GetUrl())
	switch {
	case ep.GetUrl() == "":
		return bus.FieldError("url", "an http or https URL is required")
	case len(ep.GetUrl()) > maxURLBytes:
		return bus.FieldError("url", "longer than %d bytes", maxURLBytes)
	case err != nil:
		return bus.FieldError("url", "does not parse: %v", err)
	case u.Scheme != "http" && u.Scheme != "https":
		return bus.FieldError("url", "scheme %q: only http and https", u.Scheme)
	case u.Hostname() == "":
		return bus.FieldError("url", "names no host")
	case u.User != nil:
		return bus.FieldError("url", "must not carry credentials (user:password@)")
	case len(ep.GetDescription()) > 1024:
		return bus.FieldError("description", "longer than 1024 bytes")
	}
	for i, t := range ep.GetEventTypes() {
		if !webhook.ValidEventType(t) {
			return bus.FieldError(fmt.Sprintf("event_types[%d]", i), "%q is not an event type (%s)", t, strings.Join(webhook.EventTypes, ", "))
		}
	}
	return nil
}

// public returns rec without its secrets (what the router may show).
func public(rec *busv1.WebhookEndpointRecord) *busv1.WebhookEndpointRecord {
	return &busv1.WebhookEndpointRecord{Endpoint: rec.GetEndpoint()}
}

func (s *Service) createWebhook(ctx context.Context, req *busv1.PutWebhookEndpointRequest) (*busv1.WebhookEndpointResponse, error) {
	ops, err := s.opsStore()
	if err != nil {
		return nil, err
	}
	rec := proto.Clone(req.GetRecord()).(*busv1.WebhookEndpointRecord)
	ep := rec.GetEndpoint()
	switch {
	case checkOrgRequired(req.Org) != nil:
		return nil, checkOrgRequired(req.Org)
	case ep == nil || !store.ValidRecordID(ep.Id, "ep"):
		return nil, bus.FieldError("record.endpoint.id", "%q is not an endpoint id (ep_ and letters or digits)", ep.GetId())
	case len(rec.Secrets) != 1 || rec.Secrets[0].ExpiresAt != nil:
		return nil, bus.FieldError("record.secrets", "a new endpoint has one signing secret")
	}
	if err := checkEndpoint(ep); err != nil {
		return nil, err
	}
	ep.Org, ep.CreatedAt, ep.UpdatedAt = req.Org, timestamppb.Now(), timestamppb.Now()
	ep.SecretHint, ep.PreviousSecretExpiresAt = webhook.Hint(rec.Secrets[0].Secret), nil
	got, err := ops.PutWebhookEndpoint(ctx, rec, true, 0)
	if err != nil {
		return nil, fmt.Errorf("create webhook endpoint: %w", err)
	}
	s.publishEndpoint(ctx, got.Endpoint, "created")
	return &busv1.WebhookEndpointResponse{Record: public(got)}, nil
}

// changeWebhook reads org's endpoint id, lets change change it and puts it
// (at version expected when > 0), then announces action.
// Six parameters: the one read-change-put of every endpoint mutation (address, version, action, change).
func (s *Service) changeWebhook(ctx context.Context, org, id string, expected int64, action string, change func(*busv1.WebhookEndpointRecord) error) (*busv1.WebhookEndpointRecord, error) {
	ops, err := s.opsStore()
	if err != nil {
		return nil, err
	}
	if err := checkOrgRequired(org); err != nil {
		return nil, err
	}
	got, _, err := update(ctx, expected > 0,
		func(ctx context.Context) (*busv1.WebhookEndpointRecord, error) {
			return ops.GetWebhookEndpoint(ctx, org, id)
		},
		func(cur *busv1.WebhookEndpointRecord) (*busv1.WebhookEndpointRecord, bool, error) {
			if expected > 0 && cur.Endpoint.Version != expected {
				return nil, false, bus.Errorf(bus.CodeFailedPrecondition, "webhook endpoint %s is at version %d, not %d", id, cur.Endpoint.Version, expected)
			}
			next := proto.Clone(cur).(*busv1.WebhookEndpointRecord)
			next.Endpoint.UpdatedAt = timestamppb.Now()
			return next, true, change(next)
		},
		func(ctx context.Context, rec *busv1.WebhookEndpointRecord) (*busv1.WebhookEndpointRecord, error) {
			return ops.PutWebhookEndpoint(ctx, rec, false, rec.Endpoint.Version)
		})
	if err != nil {
		return nil, fmt.Errorf("%s webhook endpoint %s: %w", action, id, err)
	}
	s.publishEndpoint(ctx, got.Endpoint, action)
	return got, nil
}

func (s *Service) updateWebhook(ctx context.Context, req *busv1.PutWebhookEndpointRequest) (*busv1.WebhookEndpointResponse, error) {
	in := req.GetRecord().GetEndpoint()
	if err := checkEndpoint(in); err != nil {
		return nil, err
	}
	got, err := s.changeWebhook(ctx, req.Org, in.GetId(), req.ExpectedVersion, "updated", func(rec *busv1.WebhookEndpointRecord) error {
		ep := rec.Endpoint
		ep.Url, ep.Description, ep.EventTypes, ep.Disabled = in.Url, in.Description, in.EventTypes, in.Disabled
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &busv1.WebhookEndpointResponse{Record: public(got)}, nil
}

// rotateWebhook makes the request's secret the endpoint's, keeping the
// current one until the request's previous_secret_expires_at (none when
// unset or past).
func (s *Service) rotateWebhook(ctx context.Context, req *busv1.PutWebhookEndpointRequest) (*busv1.WebhookEndpointResponse, error) {
	in := req.GetRecord()
	if len(in.GetSecrets()) != 1 || !strings.HasPrefix(in.Secrets[0].GetSecret(), webhook.SecretPrefix) {
		return nil, bus.FieldError("record.secrets", "the new signing secret is required")
	}
	until := in.GetEndpoint().GetPreviousSecretExpiresAt()
	got, err := s.changeWebhook(ctx, req.Org, in.GetEndpoint().GetId(), 0, "rotated", func(rec *busv1.WebhookEndpointRecord) error {
		secrets := []*busv1.WebhookSecret{{Secret: in.Secrets[0].Secret}}
		rec.Endpoint.PreviousSecretExpiresAt = nil
		if until != nil && until.AsTime().After(time.Now()) && len(rec.Secrets) > 0 {
			secrets = append(secrets, &busv1.WebhookSecret{Secret: rec.Secrets[0].Secret, ExpiresAt: until})
			rec.Endpoint.PreviousSecretExpiresAt = until
		}
		rec.Secrets = secrets
		rec.Endpoint.SecretHint = webhook.Hint(in.Secrets[0].Secret)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &busv1.WebhookEndpointResponse{Record: public(got)}, nil
}

func (s *Service) getWebhook(ctx context.Context, req *busv1.GetWebhookEndpointRequest) (*busv1.WebhookEndpointResponse, error) {
	if err := checkOrgRequired(req.Org); err != nil {
		return nil, err
	}
	rec, err := s.readWebhook(ctx, req.Org, req.Id)
	if err != nil {
		return nil, err
	}
	return &busv1.WebhookEndpointResponse{Record: public(rec)}, nil
}

// signingWebhook reads an endpoint with its secrets (the scheduler).
func (s *Service) signingWebhook(ctx context.Context, req *busv1.GetWebhookEndpointRequest) (*busv1.WebhookEndpointResponse, error) {
	org := req.Org
	if req.AnyOrg {
		org = ""
	} else if err := checkOrgRequired(org); err != nil {
		return nil, err
	}
	rec, err := s.readWebhook(ctx, org, req.Id)
	if err != nil {
		return nil, err
	}
	return &busv1.WebhookEndpointResponse{Record: rec}, nil
}

func (s *Service) readWebhook(ctx context.Context, org, id string) (*busv1.WebhookEndpointRecord, error) {
	ops, err := s.opsStore()
	if err != nil {
		return nil, err
	}
	return ops.GetWebhookEndpoint(ctx, org, id)
}

func (s *Service) listWebhooks(ctx context.Context, req *busv1.ListWebhookEndpointsRequest) (*busv1.ListWebhookEndpointsResponse, error) {
	if err := checkOrgRequired(req.Org); err != nil {
		return nil, err
	}
	resp, err := s.listEndpoints(ctx, store.RecordQuery{Org: req.Org, PageSize: int(req.PageSize), PageToken: req.PageToken})
	if err != nil {
		return nil, err
	}
	for i, r := range resp.Records {
		resp.Records[i] = public(r)
	}
	return resp, nil
}

// signingWebhooks lists every org's endpoints with their secrets (the
// scheduler's view).
func (s *Service) signingWebhooks(ctx context.Context, req *busv1.ListWebhookEndpointsRequest) (*busv1.ListWebhookEndpointsResponse, error) {
	if !req.AnyOrg {
		if err := checkOrgRequired(req.Org); err != nil {
			return nil, err
		}
	}
	return s.listEndpoints(ctx, store.RecordQuery{Org: req.Org, AnyOrg: req.AnyOrg, PageSize: int(req.PageSize), PageToken: req.PageToken})
}

func (s *Service) listEndpoints(ctx context.Context, q store.RecordQuery) (*busv1.ListWebhookEndpointsResponse, error) {
	ops, err := s.opsStore()
	if err != nil {
		return nil, err
	}
	if q.PageSize < 0 {
		return nil, bus.FieldError("page_size", "must not be negative")
	}
	recs, next, err := ops.ListWebhookEndpoints(ctx, q)
	if err != nil {
		return nil, err
	}
	return &busv1.ListWebhookEndpointsResponse{Records: recs, NextPageToken: next}, nil
}

func (s *Service) deleteWebhook(ctx context.Context, req *busv1.GetWebhookEndpointRequest) (*busv1.WebhookEndpointResponse, error) {
	ops, err := s.opsStore()
	if err != nil {
		return nil, err
	}
	if err := checkOrgRequired(req.Org); err != nil {
		return nil, err
	}
	rec, err := ops.GetWebhookEndpoint(ctx, req.Org, req.Id)
	if err != nil {
		return nil, err
	}
	if err := ops.DeleteWebhookEndpoint(ctx, req.Org, req.Id); err != nil {
		return nil, fmt.Errorf("delete webhook endpoint %s: %w", req.Id, err)
	}
	s.publishRecord(ctx, s.names.WebhookEvent(req.Org, req.Id), fmt.Sprintf("webhook:%s:%d:deleted", req.Id, rec.Endpoint.Version),
		&agentmeshv1.WebhookEndpointEvent{Endpoint: rec.Endpoint, Action: "deleted"})
	return &busv1.WebhookEndpointResponse{Record: public(rec)}, nil
}

func (s *Service) publishEndpoint(ctx context.Context, ep *agentmeshv1.WebhookEndpoint, action string) {
	s.publishRecord(ctx, s.names.WebhookEvent(ep.Org, ep.Id), fmt.Sprintf("webhook:%s:%d", ep.Id, ep.Version),
		&agentmeshv1.WebhookEndpointEvent{Endpoint: ep, Action: action})
}

func (s *Service) recordDeliveries(ctx context.Context, req *busv1.RecordDeliveriesRequest) (*busv1.RecordDeliveriesResponse, error) {
	ops, err := s.opsStore()
	if err != nil {
		return nil, err
	}
	if len(req.Deliveries) > MaxDeliveriesPerRecord {
		return nil, bus.FieldError("deliveries", "%d; at most %d in one request", len(req.Deliveries), MaxDeliveriesPerRecord)
	}
	for i, d := range req.Deliveries {
		if !store.ValidRecordID(d.GetId(), "msg") || checkOrgRequired(d.GetOrg()) != nil || d.GetEndpointId() == "" || d.GetAttempts() < 1 {
			return nil, bus.FieldError(fmt.Sprintf("deliveries[%d]", i), "a delivery needs its id, org, endpoint and attempts")
		}
	}
	if err := ops.RecordDeliveries(ctx, req.Deliveries); err != nil {
		return nil, fmt.Errorf("record deliveries: %w", err)
	}
	return &busv1.RecordDeliveriesResponse{}, nil
}

func (s *Service) listDeliveries(ctx context.Context, req *busv1.ListDeliveriesRequest) (*busv1.ListDeliveriesResponse, error) {
	ops, err := s.opsStore()
	if err != nil {
		return nil, err
	}
	if err := checkOrgRequired(req.Org); err != nil {
		return nil, err
	}
	if req.EndpointId == "" {
		return nil, bus.FieldError("endpoint_id", "an endpoint id is required")
	}
	if req.PageSize < 0 {
		return nil, bus.FieldError("page_size", "must not be negative")
	}
	ds, next, err := ops.ListDeliveries(ctx, store.RecordQuery{Org: req.Org, Parent: req.EndpointId, PageSize: int(req.PageSize), PageToken: req.PageToken})
	if err != nil {
		return nil, err
	}
	return &busv1.ListDeliveriesResponse{Deliveries: ds, NextPageToken: next}, nil
}

// redeliver puts a delivery on the deliveries stream again, as a job of its
// own (the same webhook-id), and answers once the stream stored it.
func (s *Service) redeliver(ctx context.Context, req *busv1.RedeliverRequest) (*busv1.RedeliverResponse, error) {
	ops, err := s.opsStore()
	if err != nil {
		return nil, err
	}
	if err := checkOrgRequired(req.Org); err != nil {
		return nil, err
	}
	d, err := ops.GetDelivery(ctx, req.Org, req.DeliveryId)
	if err != nil {
		return nil, err
	}
	if _, err := ops.GetWebhookEndpoint(ctx, req.Org, d.EndpointId); err != nil {
		return nil, err
	}
	job := &busv1.WebhookJob{DeliveryId: d.Id, Org: d.Org, EndpointId: d.EndpointId, EventType: d.EventType, SubjectId: d.SubjectId,
		Body: []byte(d.Payload), CreatedAt: d.CreatedAt, Manual: true, PriorAttempts: d.Attempts}
	msg, err := bus.NewMsg(ctx, s.names.WebhookJob(d.Org, d.EndpointId), job)
	if err != nil {
		return nil, err
	}
	msg.Header.Set(jetstream.MsgIDHeader, fmt.Sprintf("%s:manual:%d", d.Id, time.Now().UnixNano()))
	if _, err := bus.PublishStored(ctx, s.js, msg); err != nil {
		return nil, &bus.Error{Code: bus.CodeUnavailable, Message: fmt.Sprintf("redelivery not queued: %v", err)}
	}
	return &busv1.RedeliverResponse{Delivery: d}, nil
}
