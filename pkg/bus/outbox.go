package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// A publish to a stream can fail for a passing reason: the stream's leader
// is being elected (no responders, a 503), the connection is reconnecting,
// an acknowledgement was lost. Such a message was maybe stored, maybe not.
// Sent again with the same Nats-Msg-Id within the stream's duplicate window
// it is stored at most once, so agentmesh sends it again until the stream
// acknowledges it (stored now, or a duplicate of what it stored before).

// ErrNoMsgID refuses to retry a message without a Nats-Msg-Id: a retry
// after a lost acknowledgement would store it twice.
var ErrNoMsgID = errors.New("bus: a message published until stored needs a Nats-Msg-Id")

// PublishRetryable reports whether a failed JetStream publish may succeed
// if sent again: everything but a refusal of the message itself (an API
// error below 500: a wrong expected sequence, a message too large, a bad
// subject) and a closed connection.
func PublishRetryable(err error) bool {
	if err == nil {
		return false
	}
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		return apiErr.Code >= 500
	}
	for _, lasting := range []error{nats.ErrConnectionClosed, nats.ErrBadSubject, nats.ErrMaxPayload, nats.ErrInvalidMsg, ErrNoMsgID} {
		if errors.Is(err, lasting) {
			return false
		}
	}
	return true
}

// PublishTryTimeout bounds one try of a publish until stored.
const PublishTryTimeout = 3 * time.Second

// PublishBackoff is the wait between tries of a publish until stored: 20 ms
// doubling to 1 s, no limit on tries (the caller's context or the
// message's Wanted ends them).
var PublishBackoff = Backoff{Initial: 20 * time.Millisecond, Max: time.Second}

// PublishStored publishes msg (which must carry a Nats-Msg-Id) until the
// stream acknowledges it, a lasting error, or ctx ends. Each try is
// bounded by PublishTryTimeout.
func PublishStored(ctx context.Context, js jetstream.JetStream, msg *nats.Msg) (*jetstream.PubAck, error) {
	if msg.Header.Get(jetstream.MsgIDHeader) == "" {
		return nil, ErrNoMsgID
	}
	for n := 1; ; n++ {
		tctx, cancel := context.WithTimeout(ctx, PublishTryTimeout)
		ack, err := js.PublishMsg(tctx, msg)
		cancel()
		if err == nil {
			return ack, nil
		}
		if !PublishRetryable(err) || ctx.Err() != nil {
			return nil, err
		}
		if !sleepCtx(ctx, jittered(PublishBackoff.Delay(n))) {
			return nil, err
		}
	}
}

func jittered(d time.Duration) time.Duration {
	return d + time.Duration(rand.Int64N(int64(d)/2+1))
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// Outbox publishes messages to JetStream in the background until each is
// stored: the messages whose first publish failed for a passing reason
// (PublishRetryable), handed over so that the request that produced them
// need not wait. Messages go out in the order they were added; while the
// first cannot be stored the others wait behind it (they would fail the
// same way) and the outbox backs off (PublishBackoff). A message whose
// Wanted func says no is dropped unsent (a fenced dispatch). Messages
// still held when Run ends are lost to this process: what the record holds
// is republished at the next start (state) or by the next leader
// (scheduler).
type Outbox struct {
	js   jetstream.JetStream
	log  *slog.Logger
	what string

	mu    sync.Mutex
	queue []outMsg
	kick  chan struct{}
}

type outMsg struct {
	msg    *nats.Msg
	wanted func() bool
}

// NewOutbox returns an outbox publishing through js; what names its
// messages in logs ("event", "work").
func NewOutbox(js jetstream.JetStream, log *slog.Logger, what string) *Outbox {
	return &Outbox{js: js, log: log, what: what, kick: make(chan struct{}, 1)}
}

// Add queues msg, which must carry a Nats-Msg-Id. wanted, when not nil,
// is asked before each try: false drops the message.
func (o *Outbox) Add(msg *nats.Msg, wanted func() bool) error {
	if msg.Header.Get(jetstream.MsgIDHeader) == "" {
		return ErrNoMsgID
	}
	o.mu.Lock()
	o.queue = append(o.queue, outMsg{msg: msg, wanted: wanted})
	o.mu.Unlock()
	select {
	case o.kick <- struct{}{}:
	default:
	}
	return nil
}

// Len is how many messages wait to be stored.
func (o *Outbox) Len() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.queue)
}

// Run publishes until ctx ends.
func (o *Outbox) Run(ctx context.Context) {
	failures := 0
	for {
		if o.drain(ctx) {
			failures = 0
			select {
			case <-ctx.Done():
				o.dropAll()
				return
			case <-o.kick:
			}
			continue
		}
		failures++
		if !sleepCtx(ctx, jittered(PublishBackoff.Delay(failures))) {
			o.dropAll()
			return
		}
	}
}

// drain publishes the queue in order; it reports whether it emptied it
// (false: the head failed for a passing reason and waits for the next
// try).
func (o *Outbox) drain(ctx context.Context) bool {
	for {
		o.mu.Lock()
		if len(o.queue) == 0 {
			o.mu.Unlock()
			return true
		}
		m := o.queue[0]
		o.mu.Unlock()
		if m.wanted == nil || m.wanted() {
			tctx, cancel := context.WithTimeout(ctx, PublishTryTimeout)
			_, err := o.js.PublishMsg(tctx, m.msg)
			cancel()
			if err != nil && PublishRetryable(err) && ctx.Err() == nil {
				o.log.Debug("publish not stored yet; will retry", "what", o.what, "subject", m.msg.Subject, "err", err)
				return false
			}
			if err != nil {
				o.log.Error("publish refused; message dropped", "what", o.what, "subject", m.msg.Subject,
					"msg_id", m.msg.Header.Get(jetstream.MsgIDHeader), "err", err)
			}
		}
		o.mu.Lock()
		o.queue[0] = outMsg{}
		o.queue = o.queue[1:]
		o.mu.Unlock()
	}
}

func (o *Outbox) dropAll() {
	o.mu.Lock()
	n := len(o.queue)
	o.queue = nil
	o.mu.Unlock()
	if n > 0 {
		o.log.Warn("stopped with messages not stored on the bus", "what", o.what, "messages", n)
	}
}

// retryRespond sends a reply again while the connection refuses it for a
// passing reason — reconnecting with its reconnect buffer full (or off) —
// until ctx ends, so a reply is not lost to a reconnect and its requester
// not left to time out. A closed connection or a request without a reply
// subject is final.
func retryRespond(ctx context.Context, send func() error) error {
	for n := 1; ; n++ {
		err := send()
		if err == nil || !respondRetryable(err) {
			return err
		}
		if !sleepCtx(ctx, jittered(Backoff{Initial: 10 * time.Millisecond, Max: 200 * time.Millisecond}.Delay(n))) {
			return fmt.Errorf("%w (gave up: %v)", err, ctx.Err())
		}
	}
}

// respondRetryable: micro's responders wrap the connection's error as text,
// so the lasting ones are told by their text.
func respondRetryable(err error) bool {
	for _, lasting := range []error{nats.ErrConnectionClosed, nats.ErrConnectionDraining, nats.ErrMsgNoReply, nats.ErrMaxPayload, nats.ErrBadSubject} {
		if errors.Is(err, lasting) || strings.Contains(err.Error(), lasting.Error()) {
			return false
		}
	}
	return true
}
