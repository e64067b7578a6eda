package router

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	busv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/bus/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/netguard"
	"github.com/agentmesh/agentmesh/pkg/subjects"
	"github.com/agentmesh/agentmesh/pkg/webhook"
	"github.com/oklog/ulid/v2"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// webhookServer implements agentmeshv1.WebhookService: the caller's org's
// endpoints, kept by the state service (webhook.<op>), delivered by the
// scheduler. An endpoint's URL is checked against the outbound address
// policy here — a loopback, private or link-local address, or "localhost",
// is refused at create unless AGENTMESH_WEBHOOK_ALLOW names it — and again
// at every connection the deliverer makes (a name is resolved then, so a
// name that resolves to such an address is refused at delivery).
type webhookServer struct {
	agentmeshv1.UnimplementedWebhookServiceServer
	s *Service
}

// Bounds of WebhookService.
const (
	DefaultWebhookGrace = 24 * time.Hour
	MaxWebhookGrace     = 7 * 24 * time.Hour
)

// checkWebhookURL refuses a URL the deliverer may not reach.
func (s *Service) checkWebhookURL(ctx context.Context, raw string) error {
	u, err := url.Parse(strings.TrimSpace(raw))
	switch {
	case raw == "":
		return bus.FieldError("url", "an http or https URL is required")
	case err != nil:
		return bus.FieldError("url", "does not parse: %v", err)
	case u.Scheme != "http" && u.Scheme != "https":
		return bus.FieldError("url", "scheme %q: only http and https", u.Scheme)
	case u.Hostname() == "":
		return bus.FieldError("url", "names no host")
	case u.User != nil:
		return bus.FieldError("url", "must not carry credentials (user:password@)")
	}
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	if _, err := s.guard.Addrs(ctx, u.Hostname(), port, false); err != nil {
		if errors.Is(err, netguard.ErrBlocked) {
			return bus.FieldError("url", "%v: outside the outbound address policy (the operator may allow it with %s)", err, EnvWebhookAllow)
		}
		return bus.FieldError("url", "%v", err)
	}
	return nil
}

func checkEventTypes(types []string) error {
	for i, t := range types {
		if !webhook.ValidEventType(t) {
			return bus.FieldError(fmt.Sprintf("event_types[%d]", i), "%q is not an event type (%s)", t, strings.Join(webhook.EventTypes, ", "))
		}
	}
	return nil
}

func (s *Service) checkEndpoint(ctx context.Context, rawURL, description string, types []string) error {
	if err := s.checkWebhookURL(ctx, rawURL); err != nil {
		return err
	}
	if len(description) > 1024 {
		return bus.FieldError("description", "longer than 1024 bytes")
	}
	return checkEventTypes(types)
}

func (w *webhookServer) CreateWebhookEndpoint(ctx context.Context, req *agentmeshv1.CreateWebhookEndpointRequest) (*agentmeshv1.CreateWebhookEndpointResponse, error) {
	resp, err := w.s.createWebhook(ctx, req)
	return resp, toStatus(w.s.log, "CreateWebhookEndpoint", err)
}

func (s *Service) createWebhook(ctx context.Context, req *agentmeshv1.CreateWebhookEndpointRequest) (*agentmeshv1.CreateWebhookEndpointResponse, error) {
	if err := s.checkEndpoint(ctx, req.GetUrl(), req.GetDescription(), req.GetEventTypes()); err != nil {
		return nil, err
	}
	secret, err := webhook.NewSecret()
	if err != nil {
		return nil, err
	}
	rec := &busv1.WebhookEndpointRecord{
		Endpoint: &agentmeshv1.WebhookEndpoint{Id: "ep_" + ulid.Make().String(), Url: strings.TrimSpace(req.GetUrl()), Description: req.GetDescription(),
			EventTypes: req.GetEventTypes(), Disabled: req.GetDisabled(), CreatedBy: createdBy(ctx)},
		Secrets: []*busv1.WebhookSecret{{Secret: secret}},
	}
	var resp busv1.WebhookEndpointResponse
	if err := bus.Request(ctx, s.nc, s.names.State(subjects.StateCreateWebhook), &busv1.PutWebhookEndpointRequest{Org: orgFrom(ctx), Record: rec}, &resp); err != nil {
		return nil, err
	}
	return &agentmeshv1.CreateWebhookEndpointResponse{Endpoint: resp.Record.GetEndpoint(), Secret: secret}, nil
}

// endpointOp makes a state request about one endpoint and answers it.
func (s *Service) endpointOp(ctx context.Context, op string, req *busv1.GetWebhookEndpointRequest) (*agentmeshv1.WebhookEndpoint, error) {
	if req.Id == "" {
		return nil, bus.FieldError("id", "an endpoint id is required")
	}
	req.Org = orgFrom(ctx)
	var resp busv1.WebhookEndpointResponse
	if err := bus.Request(ctx, s.nc, s.names.State(op), req, &resp); err != nil {
		return nil, err
	}
	return resp.Record.GetEndpoint(), nil
}

func (w *webhookServer) GetWebhookEndpoint(ctx context.Context, req *agentmeshv1.GetWebhookEndpointRequest) (*agentmeshv1.GetWebhookEndpointResponse, error) {
	ep, err := w.s.endpointOp(ctx, subjects.StateGetWebhook, &busv1.GetWebhookEndpointRequest{Id: req.GetId()})
	if err != nil {
		return nil, toStatus(w.s.log, "GetWebhookEndpoint", err)
	}
	return &agentmeshv1.GetWebhookEndpointResponse{Endpoint: ep}, nil
}

func (w *webhookServer) DeleteWebhookEndpoint(ctx context.Context, req *agentmeshv1.DeleteWebhookEndpointRequest) (*agentmeshv1.DeleteWebhookEndpointResponse, error) {
	if _, err := w.s.endpointOp(ctx, subjects.StateDeleteWebhook, &busv1.GetWebhookEndpointRequest{Id: req.GetId()}); err != nil {
		return nil, toStatus(w.s.log, "DeleteWebhookEndpoint", err)
	}
	return &agentmeshv1.DeleteWebhookEndpointResponse{}, nil
}

func (w *webhookServer) ListWebhookEndpoints(ctx context.Context, req *agentmeshv1.ListWebhookEndpointsRequest) (*agentmeshv1.ListWebhookEndpointsResponse, error) {
	if req.GetPageSize() < 0 {
		return nil, toStatus(w.s.log, "ListWebhookEndpoints", bus.FieldError("page_size", "must not be negative"))
	}
	var resp busv1.ListWebhookEndpointsResponse
	err := bus.Request(ctx, w.s.nc, w.s.names.State(subjects.StateListWebhooks), &busv1.ListWebhookEndpointsRequest{
		Org: orgFrom(ctx), PageSize: req.GetPageSize(), PageToken: req.GetPageToken(),
	}, &resp)
	if err != nil {
		return nil, toStatus(w.s.log, "ListWebhookEndpoints", err)
	}
	out := &agentmeshv1.ListWebhookEndpointsResponse{NextPageToken: resp.NextPageToken}
	for _, r := range resp.Records {
		out.Endpoints = append(out.Endpoints, r.Endpoint)
	}
	return out, nil
}

func (w *webhookServer) UpdateWebhookEndpoint(ctx context.Context, req *agentmeshv1.UpdateWebhookEndpointRequest) (*agentmeshv1.UpdateWebhookEndpointResponse, error) {
	resp, err := w.s.updateWebhook(ctx, req)
	return resp, toStatus(w.s.log, "UpdateWebhookEndpoint", err)
}

func (s *Service) updateWebhook(ctx context.Context, req *agentmeshv1.UpdateWebhookEndpointRequest) (*agentmeshv1.UpdateWebhookEndpointResponse, error) {
	if req.GetId() == "" {
		return nil, bus.FieldError("id", "an endpoint id is required")
	}
	if req.GetExpectedVersion() < 0 {
		return nil, bus.FieldError("expected_version", "must not be negative")
	}
	if err := s.checkEndpoint(ctx, req.GetUrl(), req.GetDescription(), req.GetEventTypes()); err != nil {
		return nil, err
	}
	var resp busv1.WebhookEndpointResponse
	err := bus.Request(ctx, s.nc, s.names.State(subjects.StateUpdateWebhook), &busv1.PutWebhookEndpointRequest{
		Org: orgFrom(ctx), ExpectedVersion: req.GetExpectedVersion(),
		Record: &busv1.WebhookEndpointRecord{Endpoint: &agentmeshv1.WebhookEndpoint{Id: req.GetId(), Url: strings.TrimSpace(req.GetUrl()),
			Description: req.GetDescription(), EventTypes: req.GetEventTypes(), Disabled: req.GetDisabled()}},
	}, &resp)
	if err != nil {
		return nil, err
	}
	return &agentmeshv1.UpdateWebhookEndpointResponse{Endpoint: resp.Record.GetEndpoint()}, nil
}

func (w *webhookServer) RotateWebhookSecret(ctx context.Context, req *agentmeshv1.RotateWebhookSecretRequest) (*agentmeshv1.RotateWebhookSecretResponse, error) {
	resp, err := w.s.rotateWebhook(ctx, req)
	return resp, toStatus(w.s.log, "RotateWebhookSecret", err)
}

func (s *Service) rotateWebhook(ctx context.Context, req *agentmeshv1.RotateWebhookSecretRequest) (*agentmeshv1.RotateWebhookSecretResponse, error) {
	if req.GetId() == "" {
		return nil, bus.FieldError("id", "an endpoint id is required")
	}
	grace := DefaultWebhookGrace
	if g := req.GetGrace(); g != nil {
		if err := g.CheckValid(); err != nil || g.AsDuration() < 0 || g.AsDuration() > MaxWebhookGrace {
			return nil, bus.FieldError("grace", "must be between 0 and %s", MaxWebhookGrace)
		}
		grace = g.AsDuration()
	}
	secret, err := webhook.NewSecret()
	if err != nil {
		return nil, err
	}
	ep := &agentmeshv1.WebhookEndpoint{Id: req.GetId()}
	if grace > 0 {
		ep.PreviousSecretExpiresAt = timestamppb.New(time.Now().Add(grace))
	}
	var resp busv1.WebhookEndpointResponse
	err = bus.Request(ctx, s.nc, s.names.State(subjects.StateRotateWebhook), &busv1.PutWebhookEndpointRequest{
		Org: orgFrom(ctx), Record: &busv1.WebhookEndpointRecord{Endpoint: ep, Secrets: []*busv1.WebhookSecret{{Secret: secret}}},
	}, &resp)
	if err != nil {
		return nil, err
	}
	return &agentmeshv1.RotateWebhookSecretResponse{Endpoint: resp.Record.GetEndpoint(), Secret: secret}, nil
}

func (w *webhookServer) ListWebhookDeliveries(ctx context.Context, req *agentmeshv1.ListWebhookDeliveriesRequest) (*agentmeshv1.ListWebhookDeliveriesResponse, error) {
	if req.GetEndpointId() == "" {
		return nil, toStatus(w.s.log, "ListWebhookDeliveries", bus.FieldError("endpoint_id", "an endpoint id is required"))
	}
	if req.GetPageSize() < 0 {
		return nil, toStatus(w.s.log, "ListWebhookDeliveries", bus.FieldError("page_size", "must not be negative"))
	}
	var resp busv1.ListDeliveriesResponse
	err := bus.Request(ctx, w.s.nc, w.s.names.State(subjects.StateListDeliveries), &busv1.ListDeliveriesRequest{
		Org: orgFrom(ctx), EndpointId: req.GetEndpointId(), PageSize: req.GetPageSize(), PageToken: req.GetPageToken(),
	}, &resp)
	if err != nil {
		return nil, toStatus(w.s.log, "ListWebhookDeliveries", err)
	}
	return &agentmeshv1.ListWebhookDeliveriesResponse{Deliveries: resp.Deliveries, NextPageToken: resp.NextPageToken}, nil
}

func (w *webhookServer) RedeliverWebhook(ctx context.Context, req *agentmeshv1.RedeliverWebhookRequest) (*agentmeshv1.RedeliverWebhookResponse, error) {
	if req.GetDeliveryId() == "" {
		return nil, toStatus(w.s.log, "RedeliverWebhook", bus.FieldError("delivery_id", "a delivery id is required"))
	}
	// One key token of state's store (msg_<ULID>): a NATS wildcard would
	// match some other delivery of the org.
	if id := req.GetDeliveryId(); len(id) > maxIDBytes || !idRe.MatchString(id) {
		return nil, toStatus(w.s.log, "RedeliverWebhook", bus.FieldError("delivery_id", "malformed delivery id %.40q", id))
	}
	var resp busv1.RedeliverResponse
	err := bus.Request(ctx, w.s.nc, w.s.names.State(subjects.StateRedeliver), &busv1.RedeliverRequest{Org: orgFrom(ctx), DeliveryId: req.GetDeliveryId()}, &resp)
	if err != nil {
		return nil, toStatus(w.s.log, "RedeliverWebhook", err)
	}
	return &agentmeshv1.RedeliverWebhookResponse{Delivery: resp.Delivery}, nil
}
