package kvstore

import (
	"context"
	"strconv"
	"sync"

	"github.com/nats-io/nats.go"
)

// directReplies receives the answers to the history stream's batched
// direct gets (directBatch) on one long-lived wildcard subscription,
// <inbox>.*, each read answered on <inbox>.<its token>. Before, every read
// subscribed to an inbox of its own and unsubscribed after: two protocol
// messages and an insert and a removal in the server's subscription list
// (which empties its match cache) per history read — and a WatchTask, a
// retried attempt and the router's catch-ups each make one. A read's
// answers (up to its batch, then the end-of-batch or a 404) arrive in
// order on the subscription's goroutine and wait in the read's queue.
type directReplies struct {
	nc *nats.Conn

	mu     sync.Mutex
	sub    *nats.Subscription // nil until the first read
	prefix string             // <inbox>.
	next   uint64
	reads  map[string]*directRead
}

// directRead is one read's queue of answers.
type directRead struct {
	mu   sync.Mutex
	msgs []*nats.Msg
	wake chan struct{} // one slot: something was queued
}

func newDirectReplies(nc *nats.Conn) *directReplies {
	return &directReplies{nc: nc, reads: map[string]*directRead{}}
}

// open registers a read and returns the subject its answers come to; the
// caller must close it. The subscription is made at the first read (and
// again after a failed one).
func (d *directReplies) open() (string, *directRead, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.sub == nil {
		prefix := d.nc.NewInbox() + "."
		sub, err := d.nc.Subscribe(prefix+"*", d.deliver)
		if err != nil {
			return "", nil, err
		}
		d.sub, d.prefix = sub, prefix
	}
	d.next++
	token := strconv.FormatUint(d.next, 36)
	r := &directRead{wake: make(chan struct{}, 1)}
	d.reads[token] = r
	return d.prefix + token, r, nil
}

// close forgets the read answered on subject; answers still on their way
// are dropped.
func (d *directReplies) close(subject string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.reads, subject[len(d.prefix):])
}

// deliver queues an answer for its read (the subscription's handler).
func (d *directReplies) deliver(m *nats.Msg) {
	d.mu.Lock()
	r := d.reads[m.Subject[min(len(d.prefix), len(m.Subject)):]]
	d.mu.Unlock()
	if r == nil {
		return // a read that gave up
	}
	r.mu.Lock()
	r.msgs = append(r.msgs, m)
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// stop ends the subscription (Store.Close).
func (d *directReplies) stop() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.sub != nil {
		_ = d.sub.Unsubscribe()
		d.sub = nil
	}
}

// next returns the read's next answer, in order, waiting for it until ctx
// ends.
func (r *directRead) next(ctx context.Context) (*nats.Msg, error) {
	for {
		r.mu.Lock()
		if len(r.msgs) > 0 {
			m := r.msgs[0]
			r.msgs[0] = nil
			r.msgs = r.msgs[1:]
			r.mu.Unlock()
			return m, nil
		}
		r.mu.Unlock()
		select {
		case <-r.wake:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}
