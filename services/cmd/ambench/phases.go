package main

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
)

// c1Task is one task of the concurrency-1 phase, with the client's own
// clock readings: before SubmitTask, when it returned, and when the
// terminal event reached the watching client.
type c1Task struct {
	id                      string
	submit, accepted, ended time.Time
}

// phaseName names the gap between an event and the one before it (or
// the client's readings) by what happened in it.
func phaseName(prev, ev *agentmeshv1.TaskEvent) string {
	name := func(e *agentmeshv1.TaskEvent) string {
		switch e.Type {
		case agentmeshv1.EventType_EVENT_TYPE_CREATED:
			return "created"
		case agentmeshv1.EventType_EVENT_TYPE_STATUS:
			return strings.ToLower(strings.TrimPrefix(e.Status.String(), "TASK_STATUS_"))
		case agentmeshv1.EventType_EVENT_TYPE_STEP:
			return "step " + strings.ToLower(strings.TrimPrefix(e.GetStep().GetKind().String(), "STEP_KIND_"))
		default:
			return strings.ToLower(strings.TrimPrefix(e.Type.String(), "EVENT_TYPE_"))
		}
	}
	return name(prev) + " → " + name(ev)
}

// phases reads the history of each concurrency-1 task and prints the p50,
// p90 and p99 of every gap between consecutive events (their state-service
// timestamps), plus the client's own gaps: submit sent → created, and the
// terminal event → seen by the watching client. The client and the server
// run on the same machine, so their clocks agree.
func phases(tasks agentmeshv1.TaskServiceClient, runs []c1Task) error {
	gaps := map[string][]time.Duration{}
	var order []string
	add := func(k string, d time.Duration) {
		if _, ok := gaps[k]; !ok {
			order = append(order, k)
		}
		gaps[k] = append(gaps[k], d)
	}
	for _, r := range runs {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		h, err := tasks.GetTaskHistory(ctx, &agentmeshv1.GetTaskHistoryRequest{Id: r.id})
		cancel()
		if err != nil {
			return fmt.Errorf("history of %s: %w", r.id, err)
		}
		evs := h.Events
		if len(evs) == 0 {
			continue
		}
		add("client: SubmitTask sent → created (event time)", evs[0].Time.AsTime().Sub(r.submit))
		add("client: created → SubmitTask returned", r.accepted.Sub(evs[0].Time.AsTime()))
		for i := 1; i < len(evs); i++ {
			add(phaseName(evs[i-1], evs[i]), evs[i].Time.AsTime().Sub(evs[i-1].Time.AsTime()))
			if s := evs[i].GetStep(); s != nil && s.Duration != nil && s.GetKind() == agentmeshv1.StepKind_STEP_KIND_MODEL_TURN {
				add("  (model call inside: step duration)", s.Duration.AsDuration())
			}
		}
		last := evs[len(evs)-1]
		if taskstate.Terminal(last.Status) {
			add("client: terminal event → seen by WatchTask", r.ended.Sub(last.Time.AsTime()))
		}
		add("total: submit → seen", r.ended.Sub(r.submit))
	}
	fmt.Printf("  concurrency-1 phases (%d tasks; p50 / p90 / p99 of each gap):\n", len(runs))
	for _, k := range order {
		d := gaps[k]
		sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
		fmt.Printf("    %-55s %8s %8s %8s  (n=%d)\n", k, ms(d[len(d)/2]), ms(d[min(len(d)-1, len(d)*9/10)]), ms(d[min(len(d)-1, len(d)*99/100)]), len(d))
	}
	return nil
}
