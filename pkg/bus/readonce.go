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

// ReadOnce reads the messages of stream that cfg selects through one
// ephemeral pull consumer made for this one read, and deletes the consumer
// before it returns. fn gets the messages in order, at most limit of them
// (limit < 1: all that were pending when the read began); ReadOnce returns
// how many were pending then.
//
// Reads made per request (an API list, a search's catch-up) must not leave
// their consumers behind until the server's inactivity threshold: a burst
// of them reaches the account's consumer limit, and every later read
// fails. The library's ordered consumer does not fit: each Fetch replaces
// its consumer and deletes the old one in a goroutine of its own, so a read
// made two consumers and returned before the first was gone. cfg keeps the
// ordered consumer's type for its callers; its reset attempts do not apply
// (a message missing from the read is an error, not a reset).
func ReadOnce(ctx context.Context, stream jetstream.Stream, cfg jetstream.OrderedConsumerConfig, limit int, fn func(jetstream.Msg) error) (pending int, err error) {
	if cfg.InactiveThreshold == 0 {
		cfg.InactiveThreshold = readOnceInactive
	}
	cons, err := stream.CreateConsumer(ctx, jetstream.ConsumerConfig{
		DeliverPolicy:     cfg.DeliverPolicy,
		OptStartSeq:       cfg.OptStartSeq,
		OptStartTime:      cfg.OptStartTime,
		ReplayPolicy:      cfg.ReplayPolicy,
		FilterSubjects:    cfg.FilterSubjects,
		HeadersOnly:       cfg.HeadersOnly,
		Metadata:          cfg.Metadata,
		InactiveThreshold: cfg.InactiveThreshold,
		AckPolicy:         jetstream.AckNonePolicy,
		MemoryStorage:     true,
		Replicas:          1,
	})
	if err != nil {
		return 0, err
	}
	info := cons.CachedInfo()
	if info == nil || info.Name == "" {
		return 0, errors.New("read consumer without info")
	}
	defer deleteConsumer(stream, info.Name)
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
			if err := inOrder(msg, uint64(n)); err != nil {
				return pending, err
			}
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

// inOrder reports an error when msg is not the read's nth delivery: a
// message the client dropped (a slow consumer) would otherwise go missing
// from the read without a word.
func inOrder(msg jetstream.Msg, n uint64) error {
	md, err := msg.Metadata()
	if err != nil {
		return fmt.Errorf("read: %w", err)
	}
	if md.Sequence.Consumer != n {
		return fmt.Errorf("read: delivery %d arrived as the %dth, a message went missing", md.Sequence.Consumer, n)
	}
	return nil
}

// deleteConsumer deletes a read's consumer (best effort: one left behind
// goes after readOnceInactive).
func deleteConsumer(stream jetstream.Stream, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = stream.DeleteConsumer(ctx, name)
}
