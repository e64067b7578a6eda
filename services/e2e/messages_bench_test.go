package e2e

import (
	"fmt"
	"sync"
	"testing"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/poll"
	"github.com/agentmesh/agentmesh/pkg/subjects"
	"github.com/nats-io/nats.go/jetstream"
)

// BenchmarkBusMessagesPerTask counts what b.N tasks, submitted by 50
// concurrent clients on the embedded store (the scripted model: a tool
// call, then a final answer), cost the bus per task: the requests served
// (each is a request and a reply into the NATS server), the messages
// stored in each stream, the audit stream's batches among them, and the
// audit records per batch (docs/benchmarks.md):
//
//	go test -run '^$' -bench BusMessagesPerTask -benchtime 300x ./services/e2e/
func BenchmarkBusMessagesPerTask(b *testing.B) {
	const clients = 50
	e := start(b, opts{quickAnswers: true})
	if _, err := e.agents.CreateAgent(b.Context(), &agentmeshv1.CreateAgentRequest{Agent: &agentmeshv1.Agent{
		Name: "rt", SystemPrompt: "You are a test agent.", Tools: []string{"echo", "current_time"},
	}}); err != nil {
		b.Fatal(err)
	}
	names := subjects.Must("")
	js, err := jetstream.New(dialAdmin(b, e))
	if err != nil {
		b.Fatal(err)
	}
	streams := []string{names.EventsStream(), names.WorkStream(), names.StoreHistoryStream(), "KV_" + names.StoreBucket("tasks")}
	audit := &auditTally{names: names}
	// The setup's records go out a batch delay after its requests: count
	// from when nothing moves.
	var before busCounts
	poll.Until(b, time.Minute, func() error {
		now := snapshotBus(b, js, audit, streams)
		moved := before.requests == nil || now.minus(before).totalReqs != 0 || now.minus(before).totalPubs != 0
		before = now
		if moved {
			return fmt.Errorf("still moving")
		}
		return nil
	})
	b.ResetTimer()
	var wg sync.WaitGroup
	next := make(chan int)
	for range clients {
		wg.Go(func() {
			for i := range next {
				if _, err := e.tasks.SubmitTask(b.Context(), &agentmeshv1.SubmitTaskRequest{Agent: "rt", Input: fmt.Sprint("task ", i)}); err != nil {
					b.Errorf("submit: %v", err)
				}
			}
		})
	}
	for i := range b.N {
		next <- i
	}
	close(next)
	wg.Wait()
	var last busCounts
	poll.Until(b, 5*time.Minute, func() error {
		d := snapshotBus(b, js, audit, streams).minus(before)
		if d.completed < b.N {
			return fmt.Errorf("%d of %d completed", d.completed, b.N)
		}
		if last.requests == nil || d.totalReqs != last.totalReqs || d.totalPubs != last.totalPubs {
			last = d
			return fmt.Errorf("still moving")
		}
		return nil
	})
	b.StopTimer()
	n := float64(b.N)
	batches := last.publishes[names.AuditStream()]
	b.ReportMetric(float64(last.totalReqs)/n, "requests/task")
	b.ReportMetric(float64(last.totalPubs)/n, "stored/task")
	b.ReportMetric(float64(batches)/n, "audit-msgs/task")
	b.ReportMetric(float64(last.totalReqs)/float64(max(batches, 1)), "records/batch")
	b.ReportMetric(float64(2*last.totalReqs+last.totalPubs)/n, "msgs-in/task")
	b.Logf("%d tasks, %d clients:\n%s", b.N, clients, last)
}
