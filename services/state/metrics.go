package state

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	busv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/bus/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/metrics"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"github.com/agentmesh/agentmesh/services/state/store"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// DefaultMetricsWindow is GetMetrics' window when the request sets no start.
const DefaultMetricsWindow = time.Hour

// MaxMetricsWindow bounds GetMetrics' window.
const MaxMetricsWindow = 31 * 24 * time.Hour

var taskDeletes = metrics.TasksDeleted

// observe counts a recorded event in the Prometheus metrics.
func observe(t *agentmeshv1.Task, ev *agentmeshv1.TaskEvent) {
	if t == nil || ev == nil {
		return
	}
	typ := strings.ToLower(strings.TrimPrefix(ev.Type.String(), "EVENT_TYPE_"))
	metrics.TaskEvents.WithLabelValues(typ, taskstate.Name(ev.Status)).Inc()
	if ev.Type == agentmeshv1.EventType_EVENT_TYPE_CREATED {
		metrics.TasksCreated.WithLabelValues(t.Agent).Inc()
	}
	if ev.Type != agentmeshv1.EventType_EVENT_TYPE_STATUS {
		return
	}
	switch {
	case ev.Status == taskstate.Running && t.QueueWait != nil && ev.FromStatus != taskstate.Blocked:
		metrics.QueueWait.WithLabelValues(t.Agent).Observe(t.QueueWait.AsDuration().Seconds())
	case taskstate.Terminal(ev.Status):
		metrics.TasksFinished.WithLabelValues(t.Agent, taskstate.Name(ev.Status)).Inc()
		if t.RunTime != nil {
			metrics.RunTime.WithLabelValues(t.Agent).Observe(t.RunTime.AsDuration().Seconds())
		}
	}
}

// gaugeLoop refreshes agentmesh_tasks from the record every 15 s.
func (s *Service) gaugeLoop(ctx context.Context) {
	t := time.NewTicker(15 * time.Second)
	defer t.Stop()
	for {
		s.refreshGauges(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (s *Service) refreshGauges(ctx context.Context) {
	type key struct{ agent, status, prio string }
	counts := map[key]float64{}
	err := s.store.ScanTasks(ctx, store.TaskQuery{Statuses: []agentmeshv1.TaskStatus{
		taskstate.Created, taskstate.Queued, taskstate.Assigned, taskstate.Running, taskstate.Blocked,
	}}, func(t *agentmeshv1.Task) bool {
		counts[key{t.Agent, taskstate.Name(t.Status), priorityName(t.Priority)}]++
		return ctx.Err() == nil
	})
	if err != nil {
		return
	}
	metrics.Tasks.Reset()
	for k, n := range counts {
		metrics.Tasks.WithLabelValues(k.agent, k.status, k.prio).Set(n)
	}
}

func priorityName(p agentmeshv1.Priority) string {
	return strings.ToLower(strings.TrimPrefix(store.EffectivePriority(p).String(), "PRIORITY_"))
}

// metrics answers GetMetrics for one org.
func (s *Service) metrics(ctx context.Context, req *busv1.MetricsRequest) (*busv1.MetricsResponse, error) {
	if req.Org == "" {
		return nil, bus.FieldError("org", "an org is required")
	}
	q := req.GetQuery()
	end := time.Now()
	if q.GetEnd() != nil {
		if err := q.End.CheckValid(); err != nil {
			return nil, bus.FieldError("end", "%v", err)
		}
		end = q.End.AsTime()
	}
	start := end.Add(-DefaultMetricsWindow)
	if q.GetStart() != nil {
		if err := q.Start.CheckValid(); err != nil {
			return nil, bus.FieldError("start", "%v", err)
		}
		start = q.Start.AsTime()
	}
	switch {
	case !start.Before(end):
		return nil, bus.FieldError("start", "must be before end")
	case end.Sub(start) > MaxMetricsWindow:
		return nil, bus.FieldError("start", "the window is at most %s", MaxMetricsWindow)
	}
	now := time.Now()
	c := newCalc(start, end, now)
	if st := q.GetStep(); st != nil {
		if err := st.CheckValid(); err != nil {
			return nil, bus.FieldError("step", "%v", err)
		}
		if err := checkStep(st.AsDuration(), end.Sub(start)); err != nil {
			return nil, err
		}
		c.withSeries(st.AsDuration())
	}
	dl := newDelegations(start, end)
	err := s.store.ScanTasks(ctx, store.TaskQuery{Org: req.Org, Agent: q.GetAgent(), LiveOrFinishedAfter: start}, func(t *agentmeshv1.Task) bool {
		c.add(t)
		dl.add(t)
		return ctx.Err() == nil
	})
	if err != nil {
		return nil, fmt.Errorf("metrics of org %s: %w", req.Org, err)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	resp := &agentmeshv1.GetMetricsResponse{
		Org: req.Org, Start: timestamppb.New(start), End: timestamppb.New(end), Overall: c.overall.result(c.window, 0),
		Series: c.overall.seriesResult(0),
	}
	names := make([]string, 0, len(c.agents))
	for n := range c.agents {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		var limit int32
		if a, err := s.getAgent(ctx, &busv1.GetAgentRequest{Org: req.Org, Name: n}); err == nil {
			limit = a.GetAgent().GetMaxConcurrency()
		}
		resp.Agents = append(resp.Agents, &agentmeshv1.AgentMetrics{Agent: n, MaxConcurrency: limit, Metrics: c.agents[n].result(c.window, limit), Series: c.agents[n].seriesResult(limit)})
	}
	resp.Delegations = dl.result(ctx, s.store.GetTask)
	return &busv1.MetricsResponse{Metrics: resp}, nil
}

// calc accumulates the metrics of a window.
type calc struct {
	start, end, now time.Time
	window          time.Duration
	step            time.Duration // of the series; 0: none
	overall         *acc
	agents          map[string]*acc
}

type acc struct {
	completed, failed, cancelled, submitted int64
	queued, running, blocked, created       int64
	depth                                   map[agentmeshv1.Priority]int64
	waits, runs                             []time.Duration
	busy                                    time.Duration
	usage                                   agentmeshv1.Usage
	series                                  *series // nil without a step
}

func newCalc(start, end, now time.Time) *calc {
	return &calc{start: start, end: end, now: now, window: end.Sub(start), overall: newAcc(), agents: map[string]*acc{}}
}

func newAcc() *acc { return &acc{depth: map[agentmeshv1.Priority]int64{}} }

// withSeries makes the calc keep a series of buckets of step (before the
// first add).
func (c *calc) withSeries(step time.Duration) {
	c.step = step
	c.overall.series = newSeries(c.start, c.end, step)
}

func (c *calc) newAcc() *acc {
	a := newAcc()
	if c.step > 0 {
		a.series = newSeries(c.start, c.end, c.step)
	}
	return a
}

// seriesResult is the acc's series (nil without a step).
func (x *acc) seriesResult(limit int32) []*agentmeshv1.MetricsBucket {
	if x.series == nil {
		return nil
	}
	return x.series.result(limit)
}

func (c *calc) add(t *agentmeshv1.Task) {
	a := c.agents[t.Agent]
	if a == nil {
		a = c.newAcc()
		c.agents[t.Agent] = a
	}
	for _, x := range []*acc{c.overall, a} {
		c.addTo(x, t)
	}
}

func in(ts *timestamppb.Timestamp, start, end time.Time) bool {
	if ts == nil {
		return false
	}
	t := ts.AsTime()
	return !t.Before(start) && t.Before(end)
}

func (c *calc) addTo(x *acc, t *agentmeshv1.Task) {
	if in(t.CreatedAt, c.start, c.end) {
		x.submitted++
	}
	if taskstate.Terminal(t.Status) && in(t.FinishedAt, c.start, c.end) {
		switch t.Status {
		case taskstate.Completed:
			x.completed++
		case taskstate.Failed:
			x.failed++
		case taskstate.Cancelled:
			x.cancelled++
		}
		if t.QueueWait != nil {
			x.waits = append(x.waits, t.QueueWait.AsDuration())
		}
		if t.RunTime != nil {
			x.runs = append(x.runs, t.RunTime.AsDuration())
		}
		taskstate.AddUsage(&x.usage, t.Usage)
	}
	if x.series != nil {
		x.series.add(t, c.now)
	}
	switch t.Status {
	case taskstate.Queued:
		x.queued++
		x.depth[store.EffectivePriority(t.Priority)]++
	case taskstate.Assigned, taskstate.Running:
		x.running++
	case taskstate.Blocked:
		x.blocked++
	case taskstate.Created:
		x.created++
	}
	// Run time inside the window.
	if from, to, ok := runSpan(t, c.now); ok {
		from, to = later(from, c.start), earlier(to, c.end)
		if to.After(from) {
			x.busy += to.Sub(from)
		}
	}
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func earlier(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func (x *acc) result(window time.Duration, limit int32) *agentmeshv1.TaskMetrics {
	m := &agentmeshv1.TaskMetrics{
		Completed: x.completed, Failed: x.failed, Cancelled: x.cancelled, Submitted: x.submitted,
		Queued: x.queued, Running: x.running, Blocked: x.blocked, Backlog: x.queued + x.blocked + x.created,
		QueueWait: percentiles(x.waits), RunTime: percentiles(x.runs), Usage: usageCopy(&x.usage),
	}
	if done := x.completed + x.failed + x.cancelled; done > 0 {
		m.CompletionRate = float64(x.completed) / float64(done)
		m.FailureRate = float64(x.failed) / float64(done)
	}
	if window > 0 {
		m.ThroughputPerMinute = float64(x.completed) / window.Minutes()
		m.AverageRunning = x.busy.Seconds() / window.Seconds()
	}
	if limit > 0 {
		m.Utilization = m.AverageRunning / float64(limit)
	}
	prios := make([]agentmeshv1.Priority, 0, len(x.depth))
	for p := range x.depth {
		prios = append(prios, p)
	}
	slices.Sort(prios)
	slices.Reverse(prios)
	for _, p := range prios {
		m.QueueDepth = append(m.QueueDepth, &agentmeshv1.QueueDepth{Priority: p, Queued: x.depth[p]})
	}
	return m
}

// percentiles by nearest rank.
func percentiles(ds []time.Duration) *agentmeshv1.DurationPercentiles {
	if len(ds) == 0 {
		return &agentmeshv1.DurationPercentiles{}
	}
	slices.Sort(ds)
	rank := func(p float64) *durationpb.Duration {
		i := int(p*float64(len(ds))+0.999999) - 1
		return durationpb.New(ds[min(max(i, 0), len(ds)-1)])
	}
	return &agentmeshv1.DurationPercentiles{
		P50: rank(0.50), P90: rank(0.90), P99: rank(0.99), Max: durationpb.New(ds[len(ds)-1]), Count: int64(len(ds)),
	}
}
