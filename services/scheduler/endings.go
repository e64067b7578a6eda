package scheduler

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/subjects"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// endings is the shape the resolver (deps.go) and the tree keeper
// (trees.go) share: a durable consumer of the terminal task events (new
// events only) whose handler's success acks the event, and a sweep of the
// record at start and every interval for what the events did not carry.
type endings struct {
	cons     jetstream.Consumer
	log      *slog.Logger
	interval time.Duration
	what     string // what a handler does, for the logs: "release dependents"
	handle   func(context.Context, *agentmeshv1.TaskEvent) error
	sweep    func(context.Context) (int, error)
}

// consumeEndings creates (or updates) the durable consumer of the
// completed, failed and cancelled task events.
func consumeEndings(ctx context.Context, js jetstream.JetStream, names subjects.Names, durable, description string) (jetstream.Consumer, error) {
	var filters []string
	for _, st := range []agentmeshv1.TaskStatus{taskstate.Completed, taskstate.Failed, taskstate.Cancelled} {
		filters = append(filters, names.TaskEventsOfType(subjects.StatusToken(st)))
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, names.EventsStream(), jetstream.ConsumerConfig{
		Durable:        durable,
		Description:    description,
		FilterSubjects: filters,
		AckPolicy:      jetstream.AckExplicitPolicy,
		AckWait:        30 * time.Second,
		MaxAckPending:  10000,
		DeliverPolicy:  jetstream.DeliverNewPolicy,
	})
	if err != nil {
		return nil, fmt.Errorf("%s consumer: %w", durable, err)
	}
	return cons, nil
}

// run consumes terminal events and sweeps until ctx ends.
func (e *endings) run(ctx context.Context) error {
	cc, err := e.cons.Consume(func(m jetstream.Msg) { e.onMsg(ctx, m) }, jetstream.PullMaxMessages(64))
	if err != nil {
		return fmt.Errorf("%s: consume: %w", e.what, err)
	}
	t := time.NewTicker(e.interval)
	defer t.Stop()
	for {
		if n, err := e.sweep(ctx); err != nil && ctx.Err() == nil {
			e.log.Warn("sweep failed", "err", err)
		} else if n > 0 {
			e.log.Info("the sweep did what the events had not", "tasks", n)
		}
		select {
		case <-ctx.Done():
			cc.Drain()
			<-cc.Closed()
			return nil
		case <-t.C:
		}
	}
}

// onMsg acks an event once its handler succeeded, redelivers it a second
// later when the handler failed, and drops what is not a terminal event.
// An end that state marked as followed by nothing (bus.HeaderFollowers) has
// nothing to settle or release: it is acked at once.
func (e *endings) onMsg(ctx context.Context, m jetstream.Msg) {
	if m.Headers().Get(bus.HeaderFollowers) == bus.FollowersNone {
		_ = m.Ack()
		return
	}
	var ev agentmeshv1.TaskEvent
	if err := bus.DecodeEvent(m.Data(), &ev); err != nil || ev.TaskId == "" || !taskstate.Terminal(ev.Status) {
		_ = m.Term()
		return
	}
	ctx = bus.Extract(ctx, nats.Header(m.Headers()))
	if err := e.handle(ctx, &ev); err != nil {
		if ctx.Err() != nil {
			_ = m.Nak()
			return
		}
		e.log.WarnContext(ctx, e.what+" failed; will retry", "task_id", ev.TaskId, "err", err)
		_ = m.NakWithDelay(time.Second)
		return
	}
	_ = m.Ack()
}
