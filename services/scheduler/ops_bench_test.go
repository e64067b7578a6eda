package scheduler

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	busv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/bus/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/poll"
	"github.com/agentmesh/agentmesh/pkg/subjects"
	"github.com/agentmesh/agentmesh/pkg/webhook"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Benchmarks of issue 31 (figures in docs/benchmarks.md; nothing is
// asserted):
//
//	go test -run '^$' -bench 'ScheduleMinute' -benchtime 1x -timeout 30m ./services/scheduler/
//	go test -run '^$' -bench 'WebhookDeliveries' -benchtime 1x -timeout 30m ./services/scheduler/
//
// AGENTMESH_BENCH_SCHEDULES (default 10000) and AGENTMESH_BENCH_DELIVERIES
// (default 10000) change the sizes.

func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}

func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, int(float64(len(sorted))*p))]
}

// BenchmarkScheduleMinute: N schedules of one org, every minute, no
// jitter; the fake clock is set to the minute boundary and the lag of each
// run is its task's created_at less that instant (the real time the clock
// was set).
func BenchmarkScheduleMinute(b *testing.B) {
	n := envInt("AGENTMESH_BENCH_SCHEDULES", 10000)
	for range b.N {
		benchScheduleMinute(b, n)
	}
}

func benchScheduleMinute(b *testing.B, n int) {
	e := startOps(b)
	start := time.Now()
	var wg sync.WaitGroup
	var next atomic.Int64
	var handled time.Time
	var mu sync.Mutex
	for range 32 {
		wg.Go(func() {
			for {
				i := int(next.Add(1))
				if i > n {
					return
				}
				sc := &agentmeshv1.Schedule{Id: fmt.Sprintf("sch_%08d", i), Spec: &agentmeshv1.ScheduleSpec{Cron: "* * * * *",
					Overlap: agentmeshv1.OverlapPolicy_OVERLAP_POLICY_ALLOW},
					Template:  &agentmeshv1.TaskTemplate{Input: "report", Agent: "writer"},
					CreatedBy: "acme:bench", CreatorRole: "operator"}
				var resp busv1.ScheduleResponse
				if err := bus.Request(context.Background(), e.nc, names.State(subjects.StateCreateSchedule), &busv1.PutScheduleRequest{Org: "acme", Schedule: sc}, &resp); err != nil {
					b.Error(err)
					return
				}
				mu.Lock()
				if h := resp.Schedule.HandledThrough.AsTime(); h.After(handled) {
					handled = h
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	b.Logf("%d schedules created in %s", n, time.Since(start).Round(time.Millisecond))
	boundary := handled.Truncate(time.Minute).Add(time.Minute)
	clock := newFakeClock(boundary.Add(-time.Second))
	r := startReplica(b, e, Config{Clock: clock})
	poll.Until(b, 60*time.Second, func() error {
		r.s.fires.mu.Lock()
		defer r.s.fires.mu.Unlock()
		if len(r.s.fires.byID) < n || !r.s.Leader() {
			return fmt.Errorf("%d schedules loaded", len(r.s.fires.byID))
		}
		return nil
	})
	// Count the runs as their created events come (listing them while they
	// are made would load the state service the benchmark measures).
	var created atomic.Int64
	sub, err := e.nc.Subscribe(names.TaskEventsOfType("created"), func(*nats.Msg) { created.Add(1) })
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := e.nc.Flush(); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	at := time.Now()
	clock.Set(boundary)
	poll.Until(b, 20*time.Minute, func() error {
		if c := created.Load(); c < int64(n) {
			return fmt.Errorf("%d of %d runs", c, n)
		}
		return nil
	})
	var lags []time.Duration
	for token := ""; ; {
		var resp busv1.ListTasksResponse
		if err := bus.Request(context.Background(), e.nc, names.State(subjects.StateListTasks), &busv1.ListTasksRequest{Org: "acme", PageSize: 1000, PageToken: token}, &resp); err != nil {
			b.Fatal(err)
		}
		for _, t := range resp.Tasks {
			lags = append(lags, t.CreatedAt.AsTime().Sub(at))
		}
		if token = resp.NextPageToken; token == "" {
			break
		}
	}
	b.StopTimer()
	slices.Sort(lags)
	b.ReportMetric(float64(percentile(lags, 0.5).Milliseconds()), "p50-lag-ms")
	b.ReportMetric(float64(percentile(lags, 0.99).Milliseconds()), "p99-lag-ms")
	b.ReportMetric(float64(lags[len(lags)-1].Milliseconds()), "max-lag-ms")
}

// BenchmarkWebhookDeliveries: N events of one org (task cancellations, put
// on the events stream as state puts them) fanned out to one endpoint, a
// local sink answering 204; the rate is N over the time from the first
// event to the sink's N-th request, and the log is checked to hold them.
func BenchmarkWebhookDeliveries(b *testing.B) {
	n := envInt("AGENTMESH_BENCH_DELIVERIES", 10000)
	for range b.N {
		benchWebhooks(b, n)
	}
}

func benchWebhooks(b *testing.B, n int) {
	e := startOps(b)
	var got atomic.Int64
	var last atomic.Int64
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got.Add(1)
		last.Store(time.Now().UnixNano())
		w.WriteHeader(http.StatusNoContent)
	})}
	sink := newSinkOn(b, srv)
	r := startReplica(b, e, Config{Webhooks: WebhookConfig{Allow: []string{sink}}})
	secret, _ := webhook.NewSecret()
	var resp busv1.WebhookEndpointResponse
	if err := bus.Request(context.Background(), e.nc, names.State(subjects.StateCreateWebhook), &busv1.PutWebhookEndpointRequest{Org: "acme",
		Record: &busv1.WebhookEndpointRecord{Endpoint: &agentmeshv1.WebhookEndpoint{Id: "ep_bench", Url: "http://" + sink + "/hook"},
			Secrets: []*busv1.WebhookSecret{{Secret: secret}}}}, &resp); err != nil {
		b.Fatal(err)
	}
	poll.Until(b, 10*time.Second, func() error { // the deliverer hears of the endpoint
		if r.s.hooks.eps.get("ep_bench") == nil {
			return fmt.Errorf("endpoint not loaded")
		}
		return nil
	})
	js, err := jetstream.New(e.nc)
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	start := time.Now()
	publishEvents(b, js, n)
	published := time.Since(start)
	poll.Until(b, 20*time.Minute, func() error {
		if g := got.Load(); g < int64(n) {
			return fmt.Errorf("%d of %d delivered", g, n)
		}
		return nil
	})
	elapsed := time.Unix(0, last.Load()).Sub(start)
	b.StopTimer()
	b.Logf("%d events published in %s; %d delivered in %s", n, published.Round(time.Millisecond), n, elapsed.Round(time.Millisecond))
	b.ReportMetric(float64(n)/elapsed.Seconds(), "deliveries/s")
	poll.Until(b, 5*time.Minute, func() error {
		var ds busv1.ListDeliveriesResponse
		if err := bus.Request(context.Background(), e.nc, names.State(subjects.StateListDeliveries), &busv1.ListDeliveriesRequest{Org: "acme", EndpointId: "ep_bench", PageSize: 1}, &ds); err != nil {
			return err
		}
		if len(ds.Deliveries) == 0 {
			return fmt.Errorf("no delivery logged")
		}
		return nil
	})
}

// publishEvents puts n cancellation events of org acme on the events
// stream, 256 in flight.
func publishEvents(b *testing.B, js jetstream.JetStream, n int) {
	var futures []jetstream.PubAckFuture
	for i := range n {
		ev := &agentmeshv1.TaskEvent{TaskId: fmt.Sprintf("T%025d", i), Seq: 3, Org: "acme", Type: agentmeshv1.EventType_EVENT_TYPE_STATUS,
			Status: agentmeshv1.TaskStatus_TASK_STATUS_CANCELLED, Reason: "bench"}
		msg, err := bus.NewEventMsg(context.Background(), names.TaskEvent("acme", ev.TaskId, "cancelled"), ev)
		if err != nil {
			b.Fatal(err)
		}
		msg.Header.Set(jetstream.MsgIDHeader, ev.TaskId+":3")
		f, err := js.PublishMsgAsync(msg)
		if err != nil {
			b.Fatal(err)
		}
		futures = append(futures, f)
		if len(futures) == 256 {
			awaitAll(b, futures)
			futures = futures[:0]
		}
	}
	awaitAll(b, futures)
}

func awaitAll(b *testing.B, fs []jetstream.PubAckFuture) {
	for _, f := range fs {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			b.Fatal(err)
		}
	}
}

// newSinkOn serves srv on a loopback port until the benchmark ends and
// returns its host:port.
func newSinkOn(b *testing.B, srv *http.Server) string {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go func() { _ = srv.Serve(lis) }()
	b.Cleanup(func() { _ = srv.Close() })
	return lis.Addr().String()
}
