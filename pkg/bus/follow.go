package bus

import (
	"context"
	"fmt"
	"time"

	"github.com/agentmesh/agentmesh/pkg/backoff"
	"github.com/nats-io/nats.go/jetstream"
)

// Follow is list-then-follow, the way a service keeps a view of the record
// (the scheduler's queue model, the registry's workload figures and its
// candidate cache): note where the events stream is, read the record (List,
// from the state service), then follow the stream with an ordered consumer
// from the noted point. An event committed while the list was read is
// delivered too, so none is missed; the view skips what it already holds by
// the event's seq.
type Follow struct {
	// Stream is the events stream; Filters the subjects followed.
	Stream  string
	Filters []string
	// List reads the record into a fresh view; from is the stream sequence
	// following starts at. nil reads nothing (a view that starts empty and
	// only follows).
	List func(ctx context.Context, from uint64) error
	// Handle folds one event into the view.
	Handle func(jetstream.Msg)
	// Retry is the wait after a failed start (default 1s); Failed, if
	// set, is told each failure.
	Retry  time.Duration
	Failed func(error)
}

// Start lists and starts following; stop the returned ConsumeContext to
// stop following.
func (f Follow) Start(ctx context.Context, js jetstream.JetStream) (jetstream.ConsumeContext, error) {
	stream, err := js.Stream(ctx, f.Stream)
	if err != nil {
		return nil, fmt.Errorf("events stream: %w", err)
	}
	info, err := stream.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("events stream: %w", err)
	}
	from := info.State.LastSeq + 1
	if f.List != nil {
		if err := f.List(ctx, from); err != nil {
			return nil, err
		}
	}
	cons, err := js.OrderedConsumer(ctx, f.Stream, jetstream.OrderedConsumerConfig{
		FilterSubjects: f.Filters,
		DeliverPolicy:  jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:    from,
	})
	if err != nil {
		return nil, fmt.Errorf("events consumer: %w", err)
	}
	cc, err := cons.Consume(f.Handle)
	if err != nil {
		return nil, fmt.Errorf("events consumer: %w", err)
	}
	return cc, nil
}

// Run starts (trying again every Retry while the stream or the state
// service is not there yet), runs hold — the view's life, which returns
// when ctx ends or the view must be rebuilt — and stops following; then
// again, until ctx ends.
func (f Follow) Run(ctx context.Context, js jetstream.JetStream, hold func(ctx context.Context)) {
	retry := f.Retry
	if retry <= 0 {
		retry = time.Second
	}
	for ctx.Err() == nil {
		cc, err := f.Start(ctx, js)
		if err != nil {
			if ctx.Err() == nil && f.Failed != nil {
				f.Failed(err)
			}
			backoff.Sleep(ctx, retry)
			continue
		}
		hold(ctx)
		cc.Stop()
	}
}
