package bus

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// readOnceInactive is how long the server keeps a read's consumer that its
// reader could not delete (the reader died): the read itself deletes it.
const readOnceInactive = 30 * time.Second

// ReadOnce reads the messages of stream that cfg selects through an
// ephemeral ordered consumer made for this one read, and deletes the
// consumer when the read ends. fn gets the messages in order, at most
// limit of them (limit < 1: all that were pending when the read began);
// ReadOnce returns how many were pending then.
//
// Reads made per request (an API list, a search's catch-up) must not leave
// their consumers behind until the server's inactivity threshold (5
// minutes for an ordered consumer): a burst of them reaches the account's
// consumer limit, and every later read fails.
func ReadOnce(ctx context.Context, stream jetstream.Stream, cfg jetstream.OrderedConsumerConfig, limit int, fn func(jetstream.Msg) error) (pending int, err error) {
	if cfg.InactiveThreshold == 0 {
		cfg.InactiveThreshold = readOnceInactive
	}
	cons, err := stream.OrderedConsumer(ctx, cfg)
	if err != nil {
		return 0, err
	}
	defer deleteConsumer(stream, cons)
	info := cons.CachedInfo()
	if info == nil {
		return 0, errors.New("ordered consumer without info")
	}
	pending = int(info.NumPending)
	want := pending
	if limit > 0 {
		want = min(pending, limit)
	}
	for n := 0; n < want; {
		batch, err := cons.Fetch(min(want-n, 256), jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			return pending, err
		}
		got := 0
		for msg := range batch.Messages() {
			got++
			n++
			if err := fn(msg); err != nil {
				return pending, err
			}
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
			return pending, err
		}
		if got == 0 {
			return pending, fmt.Errorf("%d of %d messages read: %w", n, want, nats.ErrTimeout)
		}
	}
	return pending, nil
}

// deleteConsumer deletes the consumer an ordered consumer currently uses
// (best effort: one left behind goes after readOnceInactive).
func deleteConsumer(stream jetstream.Stream, cons jetstream.Consumer) {
	info := cons.CachedInfo()
	if info == nil || info.Name == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = stream.DeleteConsumer(ctx, info.Name)
}
