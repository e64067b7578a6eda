package state

import (
	"strings"
	"testing"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// The window's arithmetic on a hand-made set of tasks.
func TestMetricsCalc(t *testing.T) {
	start := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
	end := start.Add(10 * time.Minute)
	now := end
	at := func(m float64) *timestamppb.Timestamp {
		return timestamppb.New(start.Add(time.Duration(m * float64(time.Minute))))
	}
	sec := func(s int) *durationpb.Duration { return durationpb.New(time.Duration(s) * time.Second) }
	tasks := []*agentmeshv1.Task{
		// Finished in the window: 4 completed (run 1..4 min), 1 failed.
		{Agent: "a", Status: taskstate.Completed, CreatedAt: at(0), StartedAt: at(1), FinishedAt: at(2), QueueWait: sec(1), RunTime: sec(60)},
		{Agent: "a", Status: taskstate.Completed, CreatedAt: at(0), StartedAt: at(1), FinishedAt: at(3), QueueWait: sec(2), RunTime: sec(120)},
		{Agent: "a", Status: taskstate.Completed, CreatedAt: at(-5), StartedAt: at(-2), FinishedAt: at(1), QueueWait: sec(3), RunTime: sec(180)},
		{Agent: "b", Status: taskstate.Completed, CreatedAt: at(5), StartedAt: at(5), FinishedAt: at(9), QueueWait: sec(4), RunTime: sec(240)},
		{Agent: "b", Status: taskstate.Failed, CreatedAt: at(5), FinishedAt: at(6)},
		// Finished after the window: not counted as finished.
		{Agent: "b", Status: taskstate.Cancelled, CreatedAt: at(5), FinishedAt: at(11)},
		// Now: running since minute 8, queued at two priorities, blocked.
		{Agent: "a", Status: taskstate.Running, CreatedAt: at(7), StartedAt: at(8)},
		{Agent: "a", Status: taskstate.Queued, CreatedAt: at(9), Priority: agentmeshv1.Priority_PRIORITY_HIGH},
		{Agent: "a", Status: taskstate.Queued, CreatedAt: at(9), Priority: agentmeshv1.Priority_PRIORITY_HIGH},
		{Agent: "b", Status: taskstate.Queued, CreatedAt: at(9)},
		{Agent: "b", Status: taskstate.Blocked, CreatedAt: at(9), WaitingOn: []string{"x"}},
	}
	c := newCalc(start, end, now)
	for _, task := range tasks {
		c.add(task)
	}
	m := c.overall.result(c.window, 0)
	if m.Completed != 4 || m.Failed != 1 || m.Cancelled != 0 || m.Submitted != 10 {
		t.Errorf("counts: completed %d failed %d cancelled %d submitted %d, want 4 1 0 10", m.Completed, m.Failed, m.Cancelled, m.Submitted)
	}
	if m.CompletionRate != 0.8 || m.FailureRate != 0.2 || m.ThroughputPerMinute != 0.4 {
		t.Errorf("rates: %v %v %v, want 0.8 0.2 0.4", m.CompletionRate, m.FailureRate, m.ThroughputPerMinute)
	}
	if m.RunTime.Count != 4 || m.RunTime.P50.AsDuration() != 2*time.Minute || m.RunTime.P90.AsDuration() != 4*time.Minute || m.RunTime.Max.AsDuration() != 4*time.Minute {
		t.Errorf("run time: %v", m.RunTime)
	}
	if m.QueueWait.P50.AsDuration() != 2*time.Second || m.QueueWait.P99.AsDuration() != 4*time.Second {
		t.Errorf("queue wait: %v", m.QueueWait)
	}
	if m.Queued != 3 || m.Running != 1 || m.Blocked != 1 || m.Backlog != 4 {
		t.Errorf("now: queued %d running %d blocked %d backlog %d, want 3 1 1 4", m.Queued, m.Running, m.Blocked, m.Backlog)
	}
	if len(m.QueueDepth) != 2 || m.QueueDepth[0].Priority != agentmeshv1.Priority_PRIORITY_HIGH || m.QueueDepth[0].Queued != 2 ||
		m.QueueDepth[1].Priority != agentmeshv1.Priority_PRIORITY_NORMAL || m.QueueDepth[1].Queued != 1 {
		t.Errorf("queue depth: %v, want high 2 then normal 1", m.QueueDepth)
	}
	// Busy minutes inside the window: 1 + 2 + 1 (clipped at the start) + 4
	// + 2 (running since 8) = 10 over 10 minutes.
	if m.AverageRunning != 1 {
		t.Errorf("average running %v, want 1", m.AverageRunning)
	}
	a := c.agents["a"].result(c.window, 4)
	// Agent a: 1 + 2 + 1 + 2 = 6 busy minutes → 0.6 running on average, of 4.
	if a.AverageRunning != 0.6 || a.Utilization != 0.15 || a.Completed != 3 {
		t.Errorf("agent a: average %v utilization %v completed %d, want 0.6 0.15 3", a.AverageRunning, a.Utilization, a.Completed)
	}
	if p := percentiles(nil); p.Count != 0 || p.P50 != nil {
		t.Errorf("no samples: %v", p)
	}
}

// A series cuts the window into buckets: each task counts where it was
// created, finished, ran and waited queued; cost goes to the bucket it
// finished in.
func TestMetricsSeries(t *testing.T) {
	start := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
	end := start.Add(10 * time.Minute)
	at := func(m float64) *timestamppb.Timestamp {
		return timestamppb.New(start.Add(time.Duration(m * float64(time.Minute))))
	}
	mins := func(m int) *durationpb.Duration { return durationpb.New(time.Duration(m) * time.Minute) }
	tasks := []*agentmeshv1.Task{
		// Created at 1, queued 1-2, ran 2-6 (across both buckets), completed at 6 for $0.50.
		{Agent: "a", Status: taskstate.Completed, CreatedAt: at(1), QueuedAt: at(1), QueueWait: mins(1), StartedAt: at(2), FinishedAt: at(6),
			RunTime: mins(4), Usage: &agentmeshv1.Usage{TotalTokens: 100, CostUsd: 0.5}},
		// Failed at 3 after running 2-3.
		{Agent: "b", Status: taskstate.Failed, CreatedAt: at(2), QueuedAt: at(2), QueueWait: durationpb.New(0), StartedAt: at(2), FinishedAt: at(3), RunTime: mins(1)},
		// Queued since 8 at high priority, still queued at the end (now = end).
		{Agent: "a", Status: taskstate.Queued, CreatedAt: at(8), QueuedAt: at(8), Priority: agentmeshv1.Priority_PRIORITY_HIGH},
		// Ran 6-7, blocked on an approval since: not running after 7.
		{Agent: "c", Status: taskstate.Blocked, CreatedAt: at(6), QueuedAt: at(6), QueueWait: durationpb.New(0), StartedAt: at(6), UpdatedAt: at(7)},
	}
	c := newCalc(start, end, end)
	c.withSeries(5 * time.Minute)
	for _, task := range tasks {
		c.add(task)
	}
	s := c.overall.seriesResult(0)
	if len(s) != 2 || !s[0].Start.AsTime().Equal(start) || !s[1].Start.AsTime().Equal(start.Add(5*time.Minute)) {
		t.Fatalf("buckets: %v, want two of 5 minutes from the start", s)
	}
	if s[0].Submitted != 2 || s[0].Completed != 0 || s[0].Failed != 1 || s[1].Submitted != 2 || s[1].Completed != 1 {
		t.Errorf("counts: %v / %v", s[0], s[1])
	}
	// Bucket 0: task 1 ran 2-5 (3 min) + task 2 ran 2-3 (1 min) = 4 of 5 min; bucket 1: 5-6
	// and the blocked task's 6-7 = 2 of 5.
	if s[0].AverageRunning != 0.8 || s[1].AverageRunning != 0.4 {
		t.Errorf("average running %v, %v, want 0.8, 0.4", s[0].AverageRunning, s[1].AverageRunning)
	}
	// Queued: bucket 0 holds task 1's minute (normal), bucket 1 task 3's two minutes (high).
	if len(s[0].Queued) != 1 || s[0].Queued[0].Priority != agentmeshv1.Priority_PRIORITY_NORMAL || s[0].Queued[0].Average != 0.2 {
		t.Errorf("bucket 0 queued: %v, want normal 0.2", s[0].Queued)
	}
	if len(s[1].Queued) != 1 || s[1].Queued[0].Priority != agentmeshv1.Priority_PRIORITY_HIGH || s[1].Queued[0].Average != 0.4 {
		t.Errorf("bucket 1 queued: %v, want high 0.4", s[1].Queued)
	}
	if s[0].Usage.GetCostUsd() != 0 || s[1].Usage.GetCostUsd() != 0.5 || s[1].Usage.GetTotalTokens() != 100 {
		t.Errorf("usage: %v, %v, want the cost in the bucket it finished in", s[0].Usage, s[1].Usage)
	}
	if s[1].RunTime.GetCount() != 1 || s[1].RunTime.P50.AsDuration() != 4*time.Minute {
		t.Errorf("run time of bucket 1: %v", s[1].RunTime)
	}
	if u := c.overall.result(c.window, 0).Usage; u.GetCostUsd() != 0.5 {
		t.Errorf("window usage %v, want the finished task's $0.50", u)
	}
	a := c.agents["a"].seriesResult(2)
	if len(a) != 2 || a[0].Utilization != 0.3 {
		t.Errorf("agent a's series: %v, want 3 of 5 minutes running of 2 → 0.3", a)
	}
}

// A step shorter than a second or one that cuts the window into more than
// MaxSeriesBuckets is refused, naming the field.
func TestMetricsSeriesStepBounds(t *testing.T) {
	for _, tc := range []struct {
		step, window time.Duration
		ok           bool
	}{
		{time.Minute, time.Hour, true},
		{time.Second, 500 * time.Second, true},
		{time.Second, 501 * time.Second, false},
		{time.Millisecond, time.Minute, false},
		{0, time.Minute, false},
	} {
		err := checkStep(tc.step, tc.window)
		if (err == nil) != tc.ok {
			t.Errorf("step %s over %s: err %v, want ok %v", tc.step, tc.window, err, tc.ok)
		}
		if err != nil && !strings.Contains(err.Error(), "step") {
			t.Errorf("error %v does not name the field step", err)
		}
	}
}
