package router

import (
	"strings"
	"testing"

	busv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/bus/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/natstest"
	"github.com/agentmesh/agentmesh/pkg/webhook"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// startOpsStack is state, the registry's match (agent "writer" of any org)
// and a router whose webhooks may reach 127.0.0.1:9.
func startOpsStack(t *testing.T) *opsRouter {
	t.Helper()
	srv := natstest.Start(t)
	startState(t, srv)
	nc := natstest.Connect(t, srv)
	respond(t, nc, names.Registry("match"), func() *busv1.MatchRequest { return new(busv1.MatchRequest) },
		func(req *busv1.MatchRequest) (*busv1.MatchResponse, error) {
			if req.Agent != "" && req.Agent != "writer" {
				return nil, bus.Errorf(bus.CodeNotFound, "agent %q not found", req.Agent)
			}
			return &busv1.MatchResponse{Agent: &agentmeshv1.Agent{Name: "writer", Org: req.Org, Version: 1}}, nil
		})
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return startOpsRouter(t, srv, func(c *Config) { c.WebhookAllow = []string{"127.0.0.1:9"} })
}

func (r *opsRouter) schedules() agentmeshv1.ScheduleServiceClient {
	return agentmeshv1.NewScheduleServiceClient(r.conn)
}

func (r *opsRouter) webhooks() agentmeshv1.WebhookServiceClient {
	return agentmeshv1.NewWebhookServiceClient(r.conn)
}

var nightly = &agentmeshv1.CreateScheduleRequest{Name: "nightly",
	Spec:     &agentmeshv1.ScheduleSpec{Cron: "0 2 * * *", TimeZone: "Europe/Paris"},
	Template: &agentmeshv1.TaskTemplate{Input: "the nightly report", Agent: "writer"}}

// For every new RPC of ScheduleService and WebhookService: another org's
// schedule or endpoint is not found (and stays as it was), the roles
// decide who may change what, a platform key reaches neither.
func TestOpsTenancy(t *testing.T) {
	r := startOpsStack(t)
	sc, err := r.schedules().CreateSchedule(as("acme-op-secret"), nightly)
	if err != nil {
		t.Fatal(err)
	}
	if sc.Schedule.CreatedBy != "acme:"+r.configuredName(t, "acme", RoleOperator) || sc.Schedule.CreatorRole != "operator" || sc.Schedule.NextRunAt == nil {
		t.Errorf("created: %v", sc.Schedule)
	}
	ep, err := r.webhooks().CreateWebhookEndpoint(as("acme-admin-secret"), &agentmeshv1.CreateWebhookEndpointRequest{Url: "http://127.0.0.1:9/hook"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(ep.Secret, webhook.SecretPrefix) || ep.Endpoint.SecretHint != webhook.Hint(ep.Secret) {
		t.Errorf("created endpoint: %v", ep)
	}
	id, epID := sc.Schedule.Id, ep.Endpoint.Id
	upd := &agentmeshv1.UpdateScheduleRequest{Id: id, Spec: nightly.Spec, Template: nightly.Template}
	s, w := r.schedules(), r.webhooks()
	tests := []struct {
		name, key string
		call      func(key string) error
		want      codes.Code
	}{
		{"get schedule", "globex-admin-secret", func(k string) error { _, e := s.GetSchedule(as(k), &agentmeshv1.GetScheduleRequest{Id: id}); return e }, codes.NotFound},
		{"update schedule", "globex-admin-secret", func(k string) error { _, e := s.UpdateSchedule(as(k), upd); return e }, codes.NotFound},
		{"pause schedule", "globex-admin-secret", func(k string) error {
			_, e := s.PauseSchedule(as(k), &agentmeshv1.PauseScheduleRequest{Id: id})
			return e
		}, codes.NotFound},
		{"resume schedule", "globex-admin-secret", func(k string) error {
			_, e := s.ResumeSchedule(as(k), &agentmeshv1.ResumeScheduleRequest{Id: id})
			return e
		}, codes.NotFound},
		{"trigger schedule", "globex-admin-secret", func(k string) error {
			_, e := s.TriggerSchedule(as(k), &agentmeshv1.TriggerScheduleRequest{Id: id})
			return e
		}, codes.NotFound},
		{"delete schedule", "globex-admin-secret", func(k string) error {
			_, e := s.DeleteSchedule(as(k), &agentmeshv1.DeleteScheduleRequest{Id: id})
			return e
		}, codes.NotFound},
		{"reader creates a schedule", "acme-reader-secret", func(k string) error { _, e := s.CreateSchedule(as(k), nightly); return e }, codes.PermissionDenied},
		{"reader triggers", "acme-reader-secret", func(k string) error {
			_, e := s.TriggerSchedule(as(k), &agentmeshv1.TriggerScheduleRequest{Id: id})
			return e
		}, codes.PermissionDenied},
		{"reader reads a schedule", "acme-reader-secret", func(k string) error { _, e := s.GetSchedule(as(k), &agentmeshv1.GetScheduleRequest{Id: id}); return e }, codes.OK},
		{"platform lists schedules", "platform-secret", func(k string) error { _, e := s.ListSchedules(as(k), &agentmeshv1.ListSchedulesRequest{}); return e }, codes.PermissionDenied},

		{"get endpoint", "globex-admin-secret", func(k string) error {
			_, e := w.GetWebhookEndpoint(as(k), &agentmeshv1.GetWebhookEndpointRequest{Id: epID})
			return e
		}, codes.NotFound},
		{"update endpoint", "globex-admin-secret", func(k string) error {
			_, e := w.UpdateWebhookEndpoint(as(k), &agentmeshv1.UpdateWebhookEndpointRequest{Id: epID, Url: "http://127.0.0.1:9/mine"})
			return e
		}, codes.NotFound},
		{"rotate endpoint", "globex-admin-secret", func(k string) error {
			_, e := w.RotateWebhookSecret(as(k), &agentmeshv1.RotateWebhookSecretRequest{Id: epID})
			return e
		}, codes.NotFound},
		{"list deliveries", "globex-admin-secret", func(k string) error {
			_, e := w.ListWebhookDeliveries(as(k), &agentmeshv1.ListWebhookDeliveriesRequest{EndpointId: epID})
			return e
		}, codes.NotFound},
		{"redeliver", "globex-admin-secret", func(k string) error {
			_, e := w.RedeliverWebhook(as(k), &agentmeshv1.RedeliverWebhookRequest{DeliveryId: "msg_1"})
			return e
		}, codes.NotFound},
		{"delete endpoint", "globex-admin-secret", func(k string) error {
			_, e := w.DeleteWebhookEndpoint(as(k), &agentmeshv1.DeleteWebhookEndpointRequest{Id: epID})
			return e
		}, codes.NotFound},
		{"operator creates an endpoint", "acme-op-secret", func(k string) error {
			_, e := w.CreateWebhookEndpoint(as(k), &agentmeshv1.CreateWebhookEndpointRequest{Url: "http://127.0.0.1:9/x"})
			return e
		}, codes.PermissionDenied},
		{"reader reads an endpoint", "acme-reader-secret", func(k string) error {
			_, e := w.GetWebhookEndpoint(as(k), &agentmeshv1.GetWebhookEndpointRequest{Id: epID})
			return e
		}, codes.OK},
		{"reader rotates", "acme-reader-secret", func(k string) error {
			_, e := w.RotateWebhookSecret(as(k), &agentmeshv1.RotateWebhookSecretRequest{Id: epID})
			return e
		}, codes.PermissionDenied},
		{"platform lists endpoints", "platform-secret", func(k string) error {
			_, e := w.ListWebhookEndpoints(as(k), &agentmeshv1.ListWebhookEndpointsRequest{})
			return e
		}, codes.PermissionDenied},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := status.Code(tc.call(tc.key)); got != tc.want {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
	for _, k := range []string{"globex-admin-secret"} {
		if l, err := s.ListSchedules(as(k), &agentmeshv1.ListSchedulesRequest{}); err != nil || len(l.Schedules) != 0 {
			t.Errorf("globex lists schedules: %v %v", l, err)
		}
		if l, err := w.ListWebhookEndpoints(as(k), &agentmeshv1.ListWebhookEndpointsRequest{}); err != nil || len(l.Endpoints) != 0 {
			t.Errorf("globex lists endpoints: %v %v", l, err)
		}
	}
	got, err := s.GetSchedule(as("acme-op-secret"), &agentmeshv1.GetScheduleRequest{Id: id})
	if err != nil || got.Schedule.Version != sc.Schedule.Version || got.Schedule.Paused || got.Schedule.Runs != 0 {
		t.Errorf("acme's schedule after globex's tries: %v %v", got, err)
	}
	// The owner's own calls work: a trigger makes a run as the org.
	trig, err := s.TriggerSchedule(as("acme-op-secret"), &agentmeshv1.TriggerScheduleRequest{Id: id})
	if err != nil || trig.Run.Outcome != agentmeshv1.ScheduleRunOutcome_SCHEDULE_RUN_OUTCOME_STARTED || trig.Task.GetOrg() != "acme" || !trig.Run.Manual {
		t.Errorf("trigger: %v %v", trig, err)
	}
	if p, err := s.PauseSchedule(as("acme-op-secret"), &agentmeshv1.PauseScheduleRequest{Id: id, Reason: "holiday"}); err != nil || !p.Schedule.Paused || p.Schedule.NextRunAt != nil {
		t.Errorf("pause: %v %v", p, err)
	}
	if p, err := s.ResumeSchedule(as("acme-op-secret"), &agentmeshv1.ResumeScheduleRequest{Id: id}); err != nil || p.Schedule.Paused || p.Schedule.NextRunAt == nil {
		t.Errorf("resume: %v %v", p, err)
	}
	gotEP, err := w.GetWebhookEndpoint(as("acme-admin-secret"), &agentmeshv1.GetWebhookEndpointRequest{Id: epID})
	if err != nil || gotEP.Endpoint.Version != ep.Endpoint.Version || gotEP.Endpoint.Url != "http://127.0.0.1:9/hook" {
		t.Errorf("acme's endpoint after globex's tries: %v %v", gotEP, err)
	}
}

// Bad input: an invalid cron expression or time zone is InvalidArgument
// naming the field and the position; a template's unknown agent is
// FailedPrecondition; a URL outside the address policy is refused at
// create.
func TestOpsBadInput(t *testing.T) {
	r := startOpsStack(t)
	spec := func(cron, tz string) *agentmeshv1.CreateScheduleRequest {
		return &agentmeshv1.CreateScheduleRequest{Spec: &agentmeshv1.ScheduleSpec{Cron: cron, TimeZone: tz}, Template: nightly.Template}
	}
	tests := []struct {
		name string
		call func() error
		want codes.Code
		says []string
	}{
		{"hour 25", func() error {
			_, e := r.schedules().CreateSchedule(as("acme-op-secret"), spec("0 25 * * *", ""))
			return e
		},
			codes.InvalidArgument, []string{"spec.cron", "hour", "position 3"}},
		{"four fields", func() error {
			_, e := r.schedules().CreateSchedule(as("acme-op-secret"), spec("0 2 * *", ""))
			return e
		},
			codes.InvalidArgument, []string{"spec.cron", "4 fields"}},
		{"bad zone", func() error {
			_, e := r.schedules().CreateSchedule(as("acme-op-secret"), spec("@daily", "Mars/Olympus"))
			return e
		},
			codes.InvalidArgument, []string{"spec.time_zone", "Mars/Olympus"}},
		{"jitter over an hour", func() error {
			req := spec("@hourly", "")
			req.Spec.Jitter = durationpb.New(2 * 3600e9)
			_, e := r.schedules().CreateSchedule(as("acme-op-secret"), req)
			return e
		}, codes.InvalidArgument, []string{"spec.jitter"}},
		{"no input", func() error {
			req := spec("@hourly", "")
			req.Template = &agentmeshv1.TaskTemplate{Agent: "writer"}
			_, e := r.schedules().CreateSchedule(as("acme-op-secret"), req)
			return e
		}, codes.InvalidArgument, []string{"template.input"}},
		{"a schedule's own tag", func() error {
			req := spec("@hourly", "")
			req.Template = &agentmeshv1.TaskTemplate{Agent: "writer", Input: "x", Tags: []string{"schedule:sch_1"}}
			_, e := r.schedules().CreateSchedule(as("acme-op-secret"), req)
			return e
		}, codes.InvalidArgument, []string{"template.tags[0]"}},
		{"unknown agent", func() error {
			req := spec("@hourly", "")
			req.Template = &agentmeshv1.TaskTemplate{Agent: "nobody", Input: "x"}
			_, e := r.schedules().CreateSchedule(as("acme-op-secret"), req)
			return e
		}, codes.FailedPrecondition, []string{"nobody"}},
		{"loopback URL", func() error {
			_, e := r.webhooks().CreateWebhookEndpoint(as("acme-admin-secret"), &agentmeshv1.CreateWebhookEndpointRequest{Url: "http://127.0.0.1:8080/h"})
			return e
		}, codes.InvalidArgument, []string{"url", "loopback", "AGENTMESH_WEBHOOK_ALLOW"}},
		{"localhost", func() error {
			_, e := r.webhooks().CreateWebhookEndpoint(as("acme-admin-secret"), &agentmeshv1.CreateWebhookEndpointRequest{Url: "http://localhost/h"})
			return e
		}, codes.InvalidArgument, []string{"url"}},
		{"cloud metadata", func() error {
			_, e := r.webhooks().CreateWebhookEndpoint(as("acme-admin-secret"), &agentmeshv1.CreateWebhookEndpointRequest{Url: "http://169.254.169.254/latest"})
			return e
		}, codes.InvalidArgument, []string{"link-local"}},
		{"private by a numeric spelling", func() error {
			_, e := r.webhooks().CreateWebhookEndpoint(as("acme-admin-secret"), &agentmeshv1.CreateWebhookEndpointRequest{Url: "http://0x0a.1/h"})
			return e
		}, codes.InvalidArgument, []string{"url"}},
		{"ftp", func() error {
			_, e := r.webhooks().CreateWebhookEndpoint(as("acme-admin-secret"), &agentmeshv1.CreateWebhookEndpointRequest{Url: "ftp://example.com/"})
			return e
		}, codes.InvalidArgument, []string{"url", "scheme"}},
		{"unknown event type", func() error {
			_, e := r.webhooks().CreateWebhookEndpoint(as("acme-admin-secret"), &agentmeshv1.CreateWebhookEndpointRequest{Url: "https://example.com/h", EventTypes: []string{"task.exploded"}})
			return e
		}, codes.InvalidArgument, []string{"event_types[0]"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			st := status.Convert(err)
			if st.Code() != tc.want {
				t.Fatalf("got %v (%s), want %v", st.Code(), st.Message(), tc.want)
			}
			for _, w := range tc.says {
				if !strings.Contains(st.Message(), w) {
					t.Errorf("message %q does not say %q", st.Message(), w)
				}
			}
		})
	}
}
