package scheduler

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	busv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/bus/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/poll"
	"github.com/agentmesh/agentmesh/pkg/subjects"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"github.com/agentmesh/agentmesh/pkg/webhook"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// sink is an HTTP receiver of webhooks on loopback.
type sink struct {
	srv *httptest.Server
	mu  sync.Mutex
	got []received
	// answer says what to answer the n-th request (1-based).
	answer func(n int, w http.ResponseWriter)
}

type received struct {
	header http.Header
	body   []byte
}

func newSink(t *testing.T, answer func(n int, w http.ResponseWriter)) *sink {
	t.Helper()
	s := &sink{answer: answer}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		s.got = append(s.got, received{header: r.Header.Clone(), body: body})
		n := len(s.got)
		s.mu.Unlock()
		if s.answer != nil {
			s.answer(n, w)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *sink) host() string { return strings.TrimPrefix(s.srv.URL, "http://") }

func (s *sink) requests() []received {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]received(nil), s.got...)
}

func (s *sink) wait(t *testing.T, n int) []received {
	t.Helper()
	poll.Until(t, 20*time.Second, func() error {
		if got := len(s.requests()); got < n {
			return fmt.Errorf("the sink got %d requests, want %d", got, n)
		}
		return nil
	})
	return s.requests()
}

var nextEndpoint int

// endpoint creates an endpoint of org at url (through state: the router's
// address check is its own test) and returns its id and secret.
func (e *opsEnv) endpoint(t *testing.T, org, url string, types ...string) (string, string) {
	t.Helper()
	secret, err := webhook.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	nextEndpoint++
	id := fmt.Sprintf("ep_%d%d", time.Now().UnixNano(), nextEndpoint)
	var resp busv1.WebhookEndpointResponse
	e.call(t, subjects.StateCreateWebhook, &busv1.PutWebhookEndpointRequest{Org: org, Record: &busv1.WebhookEndpointRecord{
		Endpoint: &agentmeshv1.WebhookEndpoint{Id: id, Url: url, EventTypes: types},
		Secrets:  []*busv1.WebhookSecret{{Secret: secret}},
	}}, &resp)
	return id, secret
}

// cancelledTask makes an event of org: a task created and cancelled.
func (e *opsEnv) cancelledTask(t *testing.T, org string) string {
	t.Helper()
	var created busv1.CreateTaskResponse
	e.call(t, subjects.StateCreateTask, &busv1.CreateTaskRequest{Task: &agentmeshv1.Task{Org: org, Agent: "writer", Input: "x"}}, &created)
	e.call(t, subjects.StateCancel, &busv1.TransitionRequest{TaskId: created.Task.Id, Org: org, To: taskstate.Cancelled}, &busv1.TransitionResponse{})
	return created.Task.Id
}

func (e *opsEnv) deliveries(t *testing.T, org, endpoint string) []*agentmeshv1.WebhookDelivery {
	t.Helper()
	var resp busv1.ListDeliveriesResponse
	e.call(t, subjects.StateListDeliveries, &busv1.ListDeliveriesRequest{Org: org, EndpointId: endpoint}, &resp)
	return resp.Deliveries
}

func (e *opsEnv) waitDelivery(t *testing.T, org, endpoint string, ok func(*agentmeshv1.WebhookDelivery) error) *agentmeshv1.WebhookDelivery {
	t.Helper()
	var d *agentmeshv1.WebhookDelivery
	poll.Until(t, 20*time.Second, func() error {
		ds := e.deliveries(t, org, endpoint)
		if len(ds) == 0 {
			return fmt.Errorf("no delivery logged")
		}
		d = ds[0]
		return ok(d)
	})
	return d
}

func verify(t *testing.T, secret string, r received) {
	t.Helper()
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		t.Fatal(err)
	}
	if err := wh.Verify(r.body, r.header); err != nil {
		t.Errorf("the reference implementation refuses the signature with secret %s…: %v", secret[:10], err)
	}
}

// A delivery is signed as Standard Webhooks says (the reference
// implementation verifies it), carries the event, and is logged; after a
// rotation it is signed with both live secrets, each verifying; a
// redelivery sends it again under the same webhook-id.
func TestWebhookSignedDeliveredLoggedRedelivered(t *testing.T) {
	e := startOps(t)
	s := newSink(t, nil)
	startReplica(t, e, Config{Webhooks: WebhookConfig{Allow: []string{s.host()}}})
	ep, secret := e.endpoint(t, "acme", s.srv.URL+"/hooks", webhook.TaskCancelled)
	other, _ := e.endpoint(t, "acme", s.srv.URL+"/completed-only", webhook.TaskCompleted)

	task := e.cancelledTask(t, "acme")
	r := s.wait(t, 1)[0]
	verify(t, secret, r)
	var body struct {
		Type string `json:"type"`
		Data struct {
			TaskID string `json:"task_id"`
			Status string `json:"status"`
			Org    string `json:"org"`
		} `json:"data"`
	}
	if err := json.Unmarshal(r.body, &body); err != nil {
		t.Fatal(err)
	}
	if body.Type != webhook.TaskCancelled || body.Data.TaskID != task || body.Data.Org != "acme" || body.Data.Status != "TASK_STATUS_CANCELLED" {
		t.Errorf("body: %s", r.body)
	}
	d := e.waitDelivery(t, "acme", ep, func(d *agentmeshv1.WebhookDelivery) error {
		if d.Status != agentmeshv1.WebhookDeliveryStatus_WEBHOOK_DELIVERY_STATUS_SUCCEEDED {
			return fmt.Errorf("status %v", d.Status)
		}
		return nil
	})
	if d.Id != r.header.Get("webhook-id") || d.Attempts != 1 || d.ResponseStatus != 204 || d.Latency == nil || d.SubjectId != task {
		t.Errorf("logged: %v", d)
	}
	if n := len(e.deliveries(t, "acme", other)); n != 0 {
		t.Errorf("an endpoint asking for task.completed got %d deliveries of a cancellation", n)
	}

	// Rotation: both secrets sign until the old one's grace ends.
	newSecret, _ := webhook.NewSecret()
	e.call(t, subjects.StateRotateWebhook, &busv1.PutWebhookEndpointRequest{Org: "acme", Record: &busv1.WebhookEndpointRecord{
		Endpoint: &agentmeshv1.WebhookEndpoint{Id: ep, PreviousSecretExpiresAt: timestamppb.New(time.Now().Add(time.Hour))},
		Secrets:  []*busv1.WebhookSecret{{Secret: newSecret}},
	}}, &busv1.WebhookEndpointResponse{})
	poll.Until(t, 20*time.Second, func() error {
		e.cancelledTask(t, "acme")
		got := s.wait(t, 2)
		last := got[len(got)-1]
		if n := len(strings.Fields(last.header.Get("webhook-signature"))); n != 2 {
			return fmt.Errorf("%d signatures (the rotation not seen yet)", n)
		}
		verify(t, secret, last)
		verify(t, newSecret, last)
		return nil
	})

	// Redelivery: the same id again.
	before := len(s.requests())
	e.call(t, subjects.StateRedeliver, &busv1.RedeliverRequest{Org: "acme", DeliveryId: d.Id}, &busv1.RedeliverResponse{})
	poll.Until(t, 20*time.Second, func() error {
		for _, r := range s.requests()[before:] {
			if r.header.Get("webhook-id") == d.Id {
				return nil
			}
		}
		return fmt.Errorf("delivery %s not sent again", d.Id)
	})
}

// A 500 is tried again, with backoff, until the endpoint takes it; an
// endpoint that never does is given up after GiveUpAfter.
func TestWebhookRetriesAfter500(t *testing.T) {
	e := startOps(t)
	flaky := newSink(t, func(n int, w http.ResponseWriter) {
		if n <= 2 {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusOK)
	})
	dead := newSink(t, func(_ int, w http.ResponseWriter) { w.WriteHeader(http.StatusBadGateway) })
	startReplica(t, e, Config{Webhooks: WebhookConfig{Allow: []string{flaky.host(), dead.host()},
		FirstRetry: 50 * time.Millisecond, MaxRetry: 200 * time.Millisecond, GiveUpAfter: 2 * time.Second}})
	ep, secret := e.endpoint(t, "acme", flaky.srv.URL)
	deadEP, _ := e.endpoint(t, "acme", dead.srv.URL)
	e.cancelledTask(t, "acme")

	got := flaky.wait(t, 3)
	id := got[0].header.Get("webhook-id")
	for i, r := range got[:3] {
		if r.header.Get("webhook-id") != id {
			t.Errorf("try %d has webhook-id %q, want %q (one message)", i+1, r.header.Get("webhook-id"), id)
		}
		verify(t, secret, r)
	}
	e.waitDelivery(t, "acme", ep, func(d *agentmeshv1.WebhookDelivery) error {
		if d.Status != agentmeshv1.WebhookDeliveryStatus_WEBHOOK_DELIVERY_STATUS_SUCCEEDED || d.Attempts != 3 {
			return fmt.Errorf("%v after %d tries", d.Status, d.Attempts)
		}
		return nil
	})
	d := e.waitDelivery(t, "acme", deadEP, func(d *agentmeshv1.WebhookDelivery) error {
		if d.Status != agentmeshv1.WebhookDeliveryStatus_WEBHOOK_DELIVERY_STATUS_FAILED {
			return fmt.Errorf("%v after %d tries", d.Status, d.Attempts)
		}
		return nil
	})
	if d.Attempts < 3 || d.ResponseStatus != http.StatusBadGateway || !strings.Contains(d.Error, "given up") {
		t.Errorf("given up: %v", d)
	}
	if n := len(dead.requests()); int32(n) != d.Attempts {
		t.Errorf("the dead endpoint got %d requests, the log says %d tries", n, d.Attempts)
	}
}

// Without the allow-list, no delivery reaches a loopback URL: it fails at
// once (no retries) and the receiver hears nothing.
func TestWebhookNoLoopbackWithoutTheAllowList(t *testing.T) {
	e := startOps(t)
	s := newSink(t, nil)
	startReplica(t, e, Config{})
	ep, _ := e.endpoint(t, "acme", s.srv.URL)
	e.cancelledTask(t, "acme")
	d := e.waitDelivery(t, "acme", ep, func(d *agentmeshv1.WebhookDelivery) error {
		if d.Status != agentmeshv1.WebhookDeliveryStatus_WEBHOOK_DELIVERY_STATUS_FAILED {
			return fmt.Errorf("%v", d.Status)
		}
		return nil
	})
	if d.Attempts != 1 || !strings.Contains(d.Error, "loopback") {
		t.Errorf("refused delivery: %v", d)
	}
	if n := len(s.requests()); n != 0 {
		t.Errorf("the loopback receiver got %d requests", n)
	}
}

// An endpoint that never answers holds at most PerEndpoint workers: another
// org's delivery goes out while it hangs.
func TestSlowEndpointDoesNotDelayOtherOrgs(t *testing.T) {
	e := startOps(t)
	release := make(chan struct{})
	slow := newSink(t, func(int, http.ResponseWriter) { <-release })
	t.Cleanup(func() { close(release) })
	fast := newSink(t, nil)
	startReplica(t, e, Config{Webhooks: WebhookConfig{Allow: []string{slow.host(), fast.host()},
		Timeout: time.Minute, Workers: 8, PerEndpoint: 2}})
	e.endpoint(t, "acme", slow.srv.URL)
	e.endpoint(t, "globex", fast.srv.URL)
	for range 20 {
		e.cancelledTask(t, "acme")
	}
	slow.wait(t, 2) // the slow endpoint holds its two tries
	e.cancelledTask(t, "globex")
	fast.wait(t, 1)
	if n := len(slow.requests()); n > 2 {
		t.Errorf("the slow endpoint got %d tries at once, want at most 2", n)
	}
}

// A schedule's failed run reaches the endpoints asking for
// schedule.run_failed, with the schedule and its reason.
func TestWebhookOfAFailedScheduleRun(t *testing.T) {
	e := startOps(t)
	s := newSink(t, nil)
	sc := e.createSchedule(t, "* * * * *", agentmeshv1.CatchupPolicy_CATCHUP_POLICY_NONE, "gone")
	clock := newFakeClock(sc.HandledThrough.AsTime())
	startReplica(t, e, Config{Clock: clock, Webhooks: WebhookConfig{Allow: []string{s.host()}}})
	_, secret := e.endpoint(t, "acme", s.srv.URL, webhook.ScheduleRunFailed)
	clock.Set(sc.HandledThrough.AsTime().Truncate(time.Minute).Add(time.Minute + time.Second))
	r := s.wait(t, 1)[0]
	verify(t, secret, r)
	var body struct {
		Type string `json:"type"`
		Data struct {
			Action   string `json:"action"`
			Schedule struct {
				ID      string `json:"id"`
				LastRun struct {
					Reason string `json:"reason"`
				} `json:"last_run"`
			} `json:"schedule"`
		} `json:"data"`
	}
	if err := json.Unmarshal(r.body, &body); err != nil {
		t.Fatal(err)
	}
	if body.Type != webhook.ScheduleRunFailed || body.Data.Schedule.ID != sc.Id || !strings.Contains(body.Data.Schedule.LastRun.Reason, "gone") {
		t.Errorf("body: %s", r.body)
	}
}
