package state

import (
	"slices"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"github.com/agentmesh/agentmesh/services/state/store"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// GetMetrics' series (GetMetricsRequest.step): the window cut into buckets
// of one step, each with the figures of the tasks created, finished,
// running and queued in it. They come from the same scan as the window's
// figures (one pass over the org's live and recently finished tasks), so a
// series costs memory per bucket, not another read.

// MaxSeriesBuckets bounds a series (window / step).
const MaxSeriesBuckets = 500

// MinSeriesStep is the shortest step of a series.
const MinSeriesStep = time.Second

// checkStep validates a series' step against the window.
func checkStep(step, window time.Duration) error {
	switch {
	case step < MinSeriesStep:
		return bus.FieldError("step", "at least %s, got %s", MinSeriesStep, step)
	case (window+step-1)/step > MaxSeriesBuckets:
		return bus.FieldError("step", "at most %d buckets in the window: %s / %s is %d; take a longer step", MaxSeriesBuckets, window, step, (window+step-1)/step)
	}
	return nil
}

// series accumulates one set of tasks (the org's, or an agent's) per bucket.
type series struct {
	start   time.Time
	end     time.Time
	step    time.Duration
	buckets []*bucketAcc
}

type bucketAcc struct {
	submitted, completed, failed, cancelled int64
	busy                                    time.Duration
	queued                                  map[agentmeshv1.Priority]time.Duration
	waits, runs                             []time.Duration
	usage                                   agentmeshv1.Usage
}

func newSeries(start, end time.Time, step time.Duration) *series {
	n := int((end.Sub(start) + step - 1) / step)
	s := &series{start: start, end: end, step: step, buckets: make([]*bucketAcc, n)}
	for i := range s.buckets {
		s.buckets[i] = &bucketAcc{queued: map[agentmeshv1.Priority]time.Duration{}}
	}
	return s
}

// at returns the bucket of ts, nil outside the window.
func (s *series) at(ts *timestamppb.Timestamp) *bucketAcc {
	if ts == nil {
		return nil
	}
	t := ts.AsTime()
	if t.Before(s.start) || !t.Before(s.end) {
		return nil
	}
	return s.buckets[int(t.Sub(s.start)/s.step)]
}

// spread adds the part of [from, to) that falls in each bucket.
func (s *series) spread(from, to time.Time, add func(b *bucketAcc, d time.Duration)) {
	from, to = later(from, s.start), earlier(to, s.end)
	if !to.After(from) {
		return
	}
	for i := int(from.Sub(s.start) / s.step); i < len(s.buckets); i++ {
		bs := s.start.Add(time.Duration(i) * s.step)
		be := earlier(bs.Add(s.step), s.end)
		if !bs.Before(to) {
			return
		}
		if d := earlier(be, to).Sub(later(bs, from)); d > 0 {
			add(s.buckets[i], d)
		}
	}
}

// add counts one task. now is when the scan runs: a task still running or
// queued is counted until then.
func (s *series) add(t *agentmeshv1.Task, now time.Time) {
	if b := s.at(t.CreatedAt); b != nil {
		b.submitted++
	}
	if taskstate.Terminal(t.Status) {
		if b := s.at(t.FinishedAt); b != nil {
			switch t.Status {
			case taskstate.Completed:
				b.completed++
			case taskstate.Failed:
				b.failed++
			case taskstate.Cancelled:
				b.cancelled++
			}
			if t.QueueWait != nil {
				b.waits = append(b.waits, t.QueueWait.AsDuration())
			}
			if t.RunTime != nil {
				b.runs = append(b.runs, t.RunTime.AsDuration())
			}
			taskstate.AddUsage(&b.usage, t.Usage)
		}
	}
	if from, to, ok := runSpan(t, now); ok {
		s.spread(from, to, func(b *bucketAcc, d time.Duration) { b.busy += d })
	}
	if from, to, ok := queueSpan(t, now); ok {
		p := store.EffectivePriority(t.Priority)
		s.spread(from, to, func(b *bucketAcc, d time.Duration) { b.queued[p] += d })
	}
}

// runSpan is when the task ran: from its first start until it finished,
// or until now while it runs, or until its last change while it is
// blocked (waiting for an approval, sub-tasks or a proposal holds no
// slot). The task records no more than that: a task blocked and resumed
// counts its wait as running time.
func runSpan(t *agentmeshv1.Task, now time.Time) (time.Time, time.Time, bool) {
	if t.StartedAt == nil || t.Status == taskstate.Queued || t.Status == taskstate.Assigned {
		return time.Time{}, time.Time{}, false
	}
	to := now
	switch {
	case taskstate.Terminal(t.Status) && t.FinishedAt != nil:
		to = t.FinishedAt.AsTime()
	case t.Status == taskstate.Blocked && t.UpdatedAt != nil:
		to = t.UpdatedAt.AsTime()
	}
	return t.StartedAt.AsTime(), to, true
}

// queueSpan is the task's last wait in the queue: from when it last
// entered queued until it started (queued_at + queue_wait), or until now
// while it is still queued. Earlier waits (before a retry) are not
// recorded on the task and are not counted.
func queueSpan(t *agentmeshv1.Task, now time.Time) (time.Time, time.Time, bool) {
	if t.QueuedAt == nil {
		return time.Time{}, time.Time{}, false
	}
	from := t.QueuedAt.AsTime()
	switch {
	case t.Status == taskstate.Queued:
		return from, now, true
	case t.QueueWait != nil:
		return from, from.Add(t.QueueWait.AsDuration()), true
	}
	return time.Time{}, time.Time{}, false
}

// result is the series as the API answers it; limit is the agent's
// max_concurrency (0: no utilization).
func (s *series) result(limit int32) []*agentmeshv1.MetricsBucket {
	out := make([]*agentmeshv1.MetricsBucket, len(s.buckets))
	for i, b := range s.buckets {
		bs := s.start.Add(time.Duration(i) * s.step)
		secs := earlier(bs.Add(s.step), s.end).Sub(bs).Seconds()
		m := &agentmeshv1.MetricsBucket{
			Start: timestamppb.New(bs), Submitted: b.submitted, Completed: b.completed, Failed: b.failed, Cancelled: b.cancelled,
			QueueWait: percentiles(b.waits), RunTime: percentiles(b.runs), Usage: usageCopy(&b.usage),
		}
		if secs > 0 {
			m.AverageRunning = b.busy.Seconds() / secs
			prios := make([]agentmeshv1.Priority, 0, len(b.queued))
			for p := range b.queued {
				prios = append(prios, p)
			}
			slices.Sort(prios)
			slices.Reverse(prios)
			for _, p := range prios {
				m.Queued = append(m.Queued, &agentmeshv1.QueueLevel{Priority: p, Average: b.queued[p].Seconds() / secs})
			}
		}
		if limit > 0 {
			m.Utilization = m.AverageRunning / float64(limit)
		}
		out[i] = m
	}
	return out
}

func usageCopy(u *agentmeshv1.Usage) *agentmeshv1.Usage {
	return &agentmeshv1.Usage{PromptTokens: u.PromptTokens, CompletionTokens: u.CompletionTokens, TotalTokens: u.TotalTokens, CostUsd: u.CostUsd}
}
