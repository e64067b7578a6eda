package scheduler

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	busv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/bus/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/backoff"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/netguard"
	"github.com/agentmesh/agentmesh/pkg/subjects"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"github.com/agentmesh/agentmesh/pkg/webhook"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Webhooks (issue 31) are delivered by every scheduler replica, not only
// the leader: deliveries are independent of each other, so replicas share
// them through durable pull consumers, and a replica's death costs nothing
// but the tries it had in flight (their jobs are redelivered after
// AckWait).
//
//   - Fan-out (durable "webhooks" on the events stream, the event types an
//     endpoint may ask for): each event becomes one job per endpoint of its
//     org that wants it, published to the deliveries stream
//     (<p>.whk.<org>.<endpoint>, work queue) with Nats-Msg-Id the delivery
//     id, a hash of the endpoint and the event's own id, so an event read
//     twice queues each delivery once. The event is acknowledged once its
//     jobs are stored.
//   - Delivery (durable "deliveries" on the deliveries stream): a worker
//     signs the job (Standard Webhooks: every live secret of the endpoint)
//     and POSTs it through the outbound address policy (pkg/netguard, with
//     AGENTMESH_WEBHOOK_ALLOW). A 2xx ends it. Anything else is a failed
//     try: its job is published again with the try counted and a
//     not-before time (backoff from 5s doubling to 1h, jittered), and
//     acknowledged — the next try waits on the stream, not in a process —
//     until a day has passed since the event (then it has failed). A
//     refused address fails at once.
//   - Each try's outcome (status, HTTP status, latency, attempts) is
//     recorded by state in batches: the delivery log.
//
// A slow or dead endpoint never holds more than PerEndpoint of a replica's
// workers: a job for an endpoint at its limit is put back for a fraction of
// a second and the worker takes the next, so other endpoints — other
// orgs' — go on.

// deliverer runs the fan-out and the deliveries of one replica.
type deliverer struct {
	s      *Service
	cfg    WebhookConfig
	client *http.Client
	fanout jetstream.Consumer
	jobs   jetstream.Consumer
	eps    *endpointCache
	rec    *recorder

	mu   sync.Mutex
	busy map[string]chan struct{} // endpoint → its places on this replica (PerEndpoint)
	// fanning holds a place for each event whose jobs are being stored.
	fanning chan struct{}
}

func newDeliverer(ctx context.Context, s *Service) (*deliverer, error) {
	cfg := s.cfg.Webhooks
	guard, err := netguard.New(cfg.Allow, netguard.Options{Dialer: net.Dialer{Timeout: cfg.Timeout}})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", EnvWebhookAllow, err)
	}
	tr := &http.Transport{
		Proxy: nil, DialContext: guard.DialContext, ForceAttemptHTTP2: true,
		TLSHandshakeTimeout: cfg.Timeout, ResponseHeaderTimeout: cfg.Timeout, MaxResponseHeaderBytes: 64 << 10,
		MaxIdleConnsPerHost: cfg.PerEndpoint, IdleConnTimeout: 90 * time.Second,
	}
	d := &deliverer{s: s, cfg: cfg, eps: newEndpointCache(), busy: map[string]chan struct{}{}, fanning: make(chan struct{}, fanInFlight),
		// A redirect is the endpoint's answer: not a 2xx, so a failed try.
		client: &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }},
	}
	d.rec = &recorder{s: s, in: make(chan *agentmeshv1.WebhookDelivery, 4096)}
	if err := bus.WaitStream(ctx, s.js, s.names.WebhooksStream()); err != nil {
		return nil, err
	}
	var filters []string
	for _, st := range []agentmeshv1.TaskStatus{taskstate.Completed, taskstate.Failed, taskstate.Cancelled, taskstate.Blocked} {
		filters = append(filters, s.names.TaskEventsOfType(subjects.StatusToken(st)))
	}
	filters = append(filters, s.names.TaskEventsOfType(subjects.EventProposal), s.names.ScheduleEvents())
	if d.fanout, err = s.js.CreateOrUpdateConsumer(ctx, s.names.EventsStream(), jetstream.ConsumerConfig{
		Durable: subjects.ConsumerWebhookFanout, FilterSubjects: filters, DeliverPolicy: jetstream.DeliverNewPolicy,
		AckPolicy: jetstream.AckExplicitPolicy, AckWait: 30 * time.Second, MaxDeliver: -1, MaxAckPending: 1024,
	}); err != nil {
		return nil, fmt.Errorf("webhook fan-out consumer: %w", err)
	}
	if d.jobs, err = s.js.CreateOrUpdateConsumer(ctx, s.names.WebhooksStream(), jetstream.ConsumerConfig{
		Durable: subjects.ConsumerWebhookDeliveries, FilterSubject: s.names.WebhookJobsAll(),
		AckPolicy: jetstream.AckExplicitPolicy, AckWait: 2*cfg.Timeout + 30*time.Second, MaxDeliver: -1, MaxAckPending: 1 << 16,
	}); err != nil {
		return nil, fmt.Errorf("webhook deliveries consumer: %w", err)
	}
	return d, nil
}

// run loads the endpoints, follows their changes and, once they are
// loaded, fans out and delivers until ctx ends.
func (d *deliverer) run(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	rctx, stopRec := context.WithCancel(context.WithoutCancel(ctx))
	wg.Go(func() { d.rec.run(rctx) })
	defer stopRec()
	// The consumer's callback may still be handing a job over when it is
	// stopped: the workers end with ctx, the channel is never closed.
	work := make(chan jetstream.Msg, d.cfg.Workers)
	for range d.cfg.Workers {
		wg.Go(func() {
			for {
				select {
				case m := <-work:
					d.deliver(ctx, m)
				case <-ctx.Done():
					return
				}
			}
		})
	}
	follow := bus.Follow{
		Stream: d.s.names.EventsStream(), Filters: []string{d.s.names.WebhookEvents()},
		List: d.load, Handle: d.onEndpointEvent,
		Failed: func(err error) { d.s.log.Warn("webhooks: listing the endpoints failed; retrying", "err", err) },
	}
	follow.Run(ctx, d.s.js, func(ctx context.Context) {
		fan, err := d.fanout.Consume(func(m jetstream.Msg) { d.fan(ctx, m) })
		if err != nil {
			d.s.log.Error("webhooks: fan-out not started", "err", err)
			<-ctx.Done()
			return
		}
		defer fan.Stop()
		jobs, err := d.jobs.Consume(func(m jetstream.Msg) {
			select {
			case work <- m:
			case <-ctx.Done():
			}
		}, jetstream.PullMaxMessages(d.cfg.Workers))
		if err != nil {
			d.s.log.Error("webhooks: delivery not started", "err", err)
			<-ctx.Done()
			return
		}
		defer jobs.Stop()
		<-ctx.Done()
	})
}

// ---- endpoints ----

// endpointCache holds every org's endpoints with their secrets.
type endpointCache struct {
	mu    sync.RWMutex
	byID  map[string]*busv1.WebhookEndpointRecord
	byOrg map[string]map[string]bool
}

func newEndpointCache() *endpointCache {
	return &endpointCache{byID: map[string]*busv1.WebhookEndpointRecord{}, byOrg: map[string]map[string]bool{}}
}

func (c *endpointCache) put(rec *busv1.WebhookEndpointRecord) {
	ep := rec.GetEndpoint()
	c.mu.Lock()
	defer c.mu.Unlock()
	if cur := c.byID[ep.Id]; cur != nil && cur.Endpoint.Version > ep.Version {
		return
	}
	c.byID[ep.Id] = rec
	if c.byOrg[ep.Org] == nil {
		c.byOrg[ep.Org] = map[string]bool{}
	}
	c.byOrg[ep.Org][ep.Id] = true
}

func (c *endpointCache) drop(org, id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.byID, id)
	delete(c.byOrg[org], id)
}

func (c *endpointCache) get(id string) *busv1.WebhookEndpointRecord {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.byID[id]
}

// wanting returns org's enabled endpoints that ask for events of type t.
func (c *endpointCache) wanting(org, t string) []*busv1.WebhookEndpointRecord {
	c.mu.RLock()
	defer c.mu.RUnlock()
	var out []*busv1.WebhookEndpointRecord
	for id := range c.byOrg[org] {
		if rec := c.byID[id]; rec != nil && !rec.Endpoint.Disabled && webhook.Wants(rec.Endpoint.EventTypes, t) {
			out = append(out, rec)
		}
	}
	return out
}

func (d *deliverer) load(ctx context.Context, _ uint64) error {
	fresh := newEndpointCache()
	for token := ""; ; {
		var resp busv1.ListWebhookEndpointsResponse
		if err := bus.Request(ctx, d.s.nc, d.s.names.State(subjects.StateSigningWebhooks),
			&busv1.ListWebhookEndpointsRequest{AnyOrg: true, PageSize: 1000, PageToken: token}, &resp); err != nil {
			return err
		}
		for _, rec := range resp.Records {
			fresh.put(rec)
		}
		if token = resp.NextPageToken; token == "" {
			break
		}
	}
	d.eps.mu.Lock()
	d.eps.byID, d.eps.byOrg = fresh.byID, fresh.byOrg
	d.eps.mu.Unlock()
	return nil
}

func (d *deliverer) onEndpointEvent(m jetstream.Msg) {
	var ev agentmeshv1.WebhookEndpointEvent
	if err := bus.DecodeEvent(m.Data(), &ev); err != nil || ev.GetEndpoint().GetId() == "" {
		d.s.log.Warn("malformed endpoint event skipped", "subject", m.Subject(), "err", err)
		return
	}
	ep := ev.Endpoint
	if ev.Action == "deleted" {
		d.eps.drop(ep.Org, ep.Id)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var resp busv1.WebhookEndpointResponse
	err := bus.Retry(ctx, bus.DefaultBackoff, func(ctx context.Context) error {
		return bus.Request(ctx, d.s.nc, d.s.names.State(subjects.StateSigningWebhook), &busv1.GetWebhookEndpointRequest{Id: ep.Id, AnyOrg: true}, &resp)
	})
	switch {
	case errors.Is(err, bus.ErrNotFound):
		d.eps.drop(ep.Org, ep.Id)
	case err != nil:
		d.s.log.Warn("webhooks: a changed endpoint could not be read", "endpoint", ep.Id, "err", err)
	default:
		d.eps.put(resp.Record)
	}
}

// ---- fan-out ----

// fan queues the deliveries of one event: its jobs are published at once
// and the event acknowledged when the stream has stored them all (or read
// again a second later when one failed), so events are fanned out one
// after the other without waiting on each other's round trips.
func (d *deliverer) fan(ctx context.Context, m jetstream.Msg) {
	typ, org, subjectID, at := d.classify(m)
	if typ == "" {
		_ = m.Ack()
		return
	}
	eps := d.eps.wanting(org, typ)
	if len(eps) == 0 {
		_ = m.Ack()
		return
	}
	body, err := webhook.Body(typ, at, m.Data())
	if err != nil {
		d.s.log.Error("webhooks: event body not built; event skipped", "subject", m.Subject(), "err", err)
		_ = m.Term()
		return
	}
	eventID := m.Headers().Get(jetstream.MsgIDHeader)
	if eventID == "" {
		meta, _ := m.Metadata()
		eventID = fmt.Sprintf("seq:%d", meta.Sequence.Stream)
	}
	futures := make([]jetstream.PubAckFuture, 0, len(eps))
	for _, rec := range eps {
		job := &busv1.WebhookJob{DeliveryId: webhook.DeliveryID(rec.Endpoint.Id, eventID, at), Org: org, EndpointId: rec.Endpoint.Id,
			EventType: typ, SubjectId: subjectID, Body: body, CreatedAt: timestamppb.New(at)}
		f, err := d.queueAsync(ctx, job, job.DeliveryId)
		if err != nil {
			d.s.log.Warn("webhooks: delivery not queued; the event is read again", "endpoint", rec.Endpoint.Id, "err", err)
			_ = m.NakWithDelay(time.Second)
			return
		}
		futures = append(futures, f)
	}
	d.fanning <- struct{}{}
	go func() {
		defer func() { <-d.fanning }()
		for _, f := range futures {
			select {
			case <-f.Ok():
			case err := <-f.Err():
				d.s.log.Warn("webhooks: delivery not stored; the event is read again", "subject", f.Msg().Subject, "err", err)
				_ = m.NakWithDelay(time.Second)
				return
			case <-ctx.Done():
				return // read again by the next deliverer after AckWait
			}
		}
		_ = m.Ack()
	}()
}

// fanInFlight bounds the events whose jobs are being stored at once.
const fanInFlight = 256

// classify says which event type m is (""): none an endpoint may ask
// for), of which org and subject, and when it happened.
func (d *deliverer) classify(m jetstream.Msg) (typ, org, subjectID string, at time.Time) {
	subj, ok := d.s.names.ParseEvent(m.Subject())
	if !ok || subj.Org == subjects.NoOrg || subj.Org == subjects.SharedOrg {
		return "", "", "", time.Time{}
	}
	switch subj.Kind {
	case subjects.KindTask:
		var ev agentmeshv1.TaskEvent
		if bus.DecodeEvent(m.Data(), &ev) != nil {
			return "", "", "", time.Time{}
		}
		return webhook.TaskEventType(&ev), subj.Org, ev.TaskId, ev.GetTime().AsTime()
	case subjects.KindSchedule:
		var ev agentmeshv1.ScheduleEvent
		if bus.DecodeEvent(m.Data(), &ev) != nil || ev.Action != "run_failed" {
			return "", "", "", time.Time{}
		}
		return webhook.ScheduleRunFailed, subj.Org, ev.GetSchedule().GetId(), ev.GetSchedule().GetLastRun().GetFiredAt().AsTime()
	}
	return "", "", "", time.Time{}
}

// jobMsg is job on the deliveries stream with Nats-Msg-Id msgID.
func (d *deliverer) jobMsg(ctx context.Context, job *busv1.WebhookJob, msgID string) (*nats.Msg, error) {
	msg, err := bus.NewMsg(ctx, d.s.names.WebhookJob(job.Org, job.EndpointId), job)
	if err != nil {
		return nil, err
	}
	msg.Header.Set(jetstream.MsgIDHeader, msgID)
	return msg, nil
}

// queue publishes job and waits until it is stored.
func (d *deliverer) queue(ctx context.Context, job *busv1.WebhookJob, msgID string) error {
	msg, err := d.jobMsg(ctx, job, msgID)
	if err != nil {
		return err
	}
	tctx, cancel := context.WithTimeout(ctx, bus.PublishTryTimeout)
	defer cancel()
	_, err = d.s.js.PublishMsg(tctx, msg)
	return err
}

// queueAsync starts publishing job.
func (d *deliverer) queueAsync(ctx context.Context, job *busv1.WebhookJob, msgID string) (jetstream.PubAckFuture, error) {
	msg, err := d.jobMsg(ctx, job, msgID)
	if err != nil {
		return nil, err
	}
	return d.s.js.PublishMsgAsync(msg)
}

// ---- delivery ----

// deliver makes one try of a job.
func (d *deliverer) deliver(ctx context.Context, m jetstream.Msg) {
	var job busv1.WebhookJob
	if err := proto.Unmarshal(m.Data(), &job); err != nil || job.DeliveryId == "" {
		d.s.log.Warn("webhooks: malformed job set aside", "subject", m.Subject(), "err", err)
		_ = m.Term()
		return
	}
	if nb := job.GetNotBefore(); nb != nil && time.Until(nb.AsTime()) > 0 {
		_ = m.NakWithDelay(time.Until(nb.AsTime()))
		return
	}
	rec := d.eps.get(job.EndpointId)
	if rec == nil || rec.Endpoint.Org != job.Org {
		_ = m.Ack() // the endpoint is gone, and its log with it
		return
	}
	if rec.Endpoint.Disabled {
		d.finish(m, &job, d.outcome(&job, job.PriorAttempts, 0, 0, errors.New("endpoint disabled"), agentmeshv1.WebhookDeliveryStatus_WEBHOOK_DELIVERY_STATUS_FAILED))
		return
	}
	if !d.take(ctx, job.EndpointId) {
		// At its limit here: back in a moment, the worker takes the next job.
		_ = m.NakWithDelay(time.Duration(50+rand.IntN(200)) * time.Millisecond)
		return
	}
	attempt := job.PriorAttempts + 1
	code, latency, err := d.post(ctx, rec, &job)
	d.release(job.EndpointId)
	switch {
	case err == nil:
		d.finish(m, &job, d.outcome(&job, attempt, code, latency, nil, agentmeshv1.WebhookDeliveryStatus_WEBHOOK_DELIVERY_STATUS_SUCCEEDED))
	case errors.Is(err, netguard.ErrBlocked):
		d.finish(m, &job, d.outcome(&job, attempt, code, latency, err, agentmeshv1.WebhookDeliveryStatus_WEBHOOK_DELIVERY_STATUS_FAILED))
	default:
		d.retry(ctx, m, &job, d.outcome(&job, attempt, code, latency, err, agentmeshv1.WebhookDeliveryStatus_WEBHOOK_DELIVERY_STATUS_RETRYING))
	}
}

// takeWait is how long a worker waits for a place of an endpoint at its
// limit before it puts the job back: long enough that a busy endpoint's
// jobs wait here rather than go round the stream, short enough that a
// stuck one holds the worker only that long.
const takeWait = 100 * time.Millisecond

// take holds one of the endpoint's places on this replica, waiting up to
// takeWait; false: none came free.
func (d *deliverer) take(ctx context.Context, endpoint string) bool {
	d.mu.Lock()
	sem := d.busy[endpoint]
	if sem == nil {
		sem = make(chan struct{}, d.cfg.PerEndpoint)
		d.busy[endpoint] = sem
	}
	d.mu.Unlock()
	select {
	case sem <- struct{}{}:
		return true
	default:
	}
	t := time.NewTimer(takeWait)
	defer t.Stop()
	select {
	case sem <- struct{}{}:
		return true
	case <-t.C:
	case <-ctx.Done():
	}
	return false
}

func (d *deliverer) release(endpoint string) {
	d.mu.Lock()
	sem := d.busy[endpoint]
	d.mu.Unlock()
	<-sem
}

// post signs and sends the job; err is nil for a 2xx answer.
func (d *deliverer) post(ctx context.Context, rec *busv1.WebhookEndpointRecord, job *busv1.WebhookJob) (int, time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, d.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, rec.Endpoint.Url, bytes.NewReader(job.Body))
	if err != nil {
		return 0, 0, fmt.Errorf("%w: %v", netguard.ErrBlocked, err) // a URL that never worked: no retry
	}
	now := time.Now()
	var secrets []string
	for _, sec := range rec.Secrets {
		if sec.ExpiresAt == nil || sec.ExpiresAt.AsTime().After(now) {
			secrets = append(secrets, sec.Secret)
		}
	}
	if err := webhook.Sign(req.Header, job.DeliveryId, now, job.Body, secrets); err != nil {
		return 0, 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "agentmesh-webhooks/1")
	resp, err := d.client.Do(req)
	latency := time.Since(now)
	if err != nil {
		return 0, latency, err // netguard.ErrBlocked stays in the chain
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
	_ = resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return resp.StatusCode, latency, fmt.Errorf("the endpoint answered %s", resp.Status)
	}
	return resp.StatusCode, latency, nil
}

// outcome is the delivery log entry of a try.
// Six parameters: one try's result (attempt, status code, latency, error, status), recorded as given.
func (d *deliverer) outcome(job *busv1.WebhookJob, attempt int32, code int, latency time.Duration, err error, st agentmeshv1.WebhookDeliveryStatus) *agentmeshv1.WebhookDelivery {
	out := &agentmeshv1.WebhookDelivery{Id: job.DeliveryId, Org: job.Org, EndpointId: job.EndpointId, EventType: job.EventType,
		SubjectId: job.SubjectId, Status: st, Attempts: max(attempt, job.PriorAttempts, 1), ResponseStatus: int32(code),
		Latency: durationpb.New(latency), CreatedAt: job.CreatedAt, LastAttemptAt: timestamppb.Now(), Payload: string(job.Body)}
	if err != nil {
		out.Error = cut(err.Error(), 1024)
	}
	return out
}

func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "")
}

// finish records a delivery's last word and acknowledges its job.
func (d *deliverer) finish(m jetstream.Msg, _ *busv1.WebhookJob, out *agentmeshv1.WebhookDelivery) {
	d.rec.add(out)
	_ = m.Ack()
}

// retry puts the job of the next try on the stream, or gives the delivery
// up once a day (GiveUpAfter) has passed since its event.
func (d *deliverer) retry(ctx context.Context, m jetstream.Msg, job *busv1.WebhookJob, out *agentmeshv1.WebhookDelivery) {
	delay := backoff.Backoff{Initial: d.cfg.FirstRetry, Max: d.cfg.MaxRetry}.Jittered(int(out.Attempts))
	if time.Since(job.CreatedAt.AsTime())+delay > d.cfg.GiveUpAfter {
		out.Status = agentmeshv1.WebhookDeliveryStatus_WEBHOOK_DELIVERY_STATUS_FAILED
		out.Error = cut(out.Error+fmt.Sprintf("; given up after %d tries over %s", out.Attempts, d.cfg.GiveUpAfter), 1024)
		d.finish(m, job, out)
		return
	}
	next := proto.Clone(job).(*busv1.WebhookJob)
	next.PriorAttempts = out.Attempts
	next.NotBefore = timestamppb.New(time.Now().Add(delay))
	out.NextAttemptAt = next.NotBefore
	base, _, _ := strings.Cut(m.Headers().Get(jetstream.MsgIDHeader), ">")
	if err := d.queue(ctx, next, fmt.Sprintf("%s>%d", base, out.Attempts)); err != nil {
		// Not queued: this job comes back after the delay instead.
		_ = m.NakWithDelay(delay)
		d.rec.add(out)
		return
	}
	d.finish(m, job, out)
}

// ---- the log ----

// recorder sends outcomes to state in batches.
type recorder struct {
	s  *Service
	in chan *agentmeshv1.WebhookDelivery
}

const (
	recordBatch    = 200
	recordEvery    = 100 * time.Millisecond
	recordInFlight = 4
)

func (r *recorder) add(d *agentmeshv1.WebhookDelivery) { r.in <- d }

func (r *recorder) run(ctx context.Context) {
	var batch []*agentmeshv1.WebhookDelivery
	tick := time.NewTicker(recordEvery)
	defer tick.Stop()
	inflight := make(chan struct{}, recordInFlight)
	var wg sync.WaitGroup
	defer wg.Wait()
	flush := func() {
		if len(batch) == 0 {
			return
		}
		b := batch
		batch = nil
		inflight <- struct{}{}
		wg.Go(func() {
			defer func() { <-inflight }()
			r.record(b)
		})
	}
	for {
		select {
		case d := <-r.in:
			if batch = append(batch, d); len(batch) >= recordBatch {
				flush()
			}
		case <-tick.C:
			flush()
		case <-ctx.Done():
			for {
				select {
				case d := <-r.in:
					batch = append(batch, d)
				default:
					flush()
					return
				}
			}
		}
	}
}

// record sends one batch, trying again for a while.
func (r *recorder) record(batch []*agentmeshv1.WebhookDelivery) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := bus.Retry(ctx, bus.DefaultBackoff, func(ctx context.Context) error {
		return bus.Request(ctx, r.s.nc, r.s.names.State(subjects.StateRecordDeliveries), &busv1.RecordDeliveriesRequest{Deliveries: batch}, &busv1.RecordDeliveriesResponse{})
	})
	if err != nil {
		r.s.log.Warn("webhooks: delivery outcomes not recorded", "deliveries", len(batch), "err", err)
	}
}
