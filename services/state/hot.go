package state

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// hotKV is one of the state service's own KV buckets (working state, the
// result cache), read and written through its stream so that every write
// is a compare-and-set on the key's last sequence and carries its own TTL
// (the bucket's streams allow per-message TTLs): an expired value is
// removed by the server and leaves a marker for a second. The buckets are
// in memory: fast, and lost with the NATS server — what must survive is
// persisted to the record (wstate.go).
type hotKV struct {
	js     jetstream.JetStream
	stream jetstream.Stream
	// prefix of the bucket's subjects: "$KV.<bucket>.".
	prefix string
}

// errHotConflict: the key's last sequence was not the one expected.
var errHotConflict = errors.New("hot key changed")

// openHot creates (or updates) bucket and returns it.
// Six parameters: the bucket's four settings differ at each of its two callers.
func openHot(ctx context.Context, js jetstream.JetStream, bucket, desc string, opts bus.StreamOptions, maxBytes int64) (*hotKV, []bus.Replication, error) {
	_, reps, err := bus.EnsureKeyValue(ctx, js, jetstream.KeyValueConfig{
		Bucket: bucket, Description: desc, History: 1, Storage: jetstream.MemoryStorage,
		Replicas: bus.Replicas(js.Conn(), opts.Replicas), MaxBytes: maxBytes, LimitMarkerTTL: time.Second,
	})
	if err != nil {
		return nil, reps, err
	}
	st, err := js.Stream(ctx, "KV_"+bucket)
	if err != nil {
		return nil, reps, fmt.Errorf("bucket %s: %w", bucket, err)
	}
	prefix := "$KV." + bucket + "."
	if p := js.Options().APIPrefix; p != "" && p != jetstream.DefaultAPIPrefix {
		prefix = strings.TrimSuffix(p, ".") + "." + prefix
	}
	return &hotKV{js: js, stream: st, prefix: prefix}, reps, nil
}

// marker reports whether a message of the bucket is a deletion or an
// expiry's marker rather than a value.
func marker(h nats.Header) bool {
	op := h.Get("KV-Operation")
	return op == "DEL" || op == "PURGE" || h.Get("Nats-Marker-Reason") != ""
}

// get returns key's value, found=false when it has none (never written,
// deleted, expired), and in both cases the sequence a write must expect.
func (h *hotKV) get(ctx context.Context, key string) (data []byte, seq uint64, found bool, err error) {
	msg, err := h.stream.GetLastMsgForSubject(ctx, h.prefix+key)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, 0, false, nil
	}
	if err != nil {
		return nil, 0, false, hotError("read", err)
	}
	if marker(msg.Header) {
		return nil, msg.Sequence, false, nil
	}
	return msg.Data, msg.Sequence, true, nil
}

// put writes key's value if its last sequence is still expect, to live
// ttl (0: the bucket's own limits); errHotConflict otherwise.
func (h *hotKV) put(ctx context.Context, key string, data []byte, expect uint64, ttl time.Duration) (uint64, error) {
	opts := []jetstream.PublishOpt{jetstream.WithExpectLastSequencePerSubject(expect)}
	if ttl > 0 {
		opts = append(opts, jetstream.WithMsgTTL(max(ttl, time.Second)))
	}
	ack, err := h.js.PublishMsg(ctx, &nats.Msg{Subject: h.prefix + key, Data: data}, opts...)
	if wrongLastSeq(err) {
		return 0, errHotConflict
	}
	if err != nil {
		return 0, hotError("write", err)
	}
	return ack.Sequence, nil
}

// del writes key's deletion marker if its last sequence is still expect.
func (h *hotKV) del(ctx context.Context, key string, expect uint64) error {
	msg := nats.NewMsg(h.prefix + key)
	msg.Header.Set("KV-Operation", "DEL")
	_, err := h.js.PublishMsg(ctx, msg, jetstream.WithExpectLastSequencePerSubject(expect), jetstream.WithMsgTTL(time.Minute))
	if wrongLastSeq(err) {
		return errHotConflict
	}
	if err != nil {
		return hotError("delete", err)
	}
	return nil
}

// scan calls fn with the value of every key under filter (a wildcard of
// keys, e.g. "acme.agent.writer.>"), skipping markers.
func (h *hotKV) scan(ctx context.Context, filter string, fn func(key string, data []byte)) error {
	_, err := bus.ReadOnce(ctx, h.stream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{h.prefix + filter}, DeliverPolicy: jetstream.DeliverLastPerSubjectPolicy,
	}, 0, func(msg jetstream.Msg) error {
		if !marker(msg.Headers()) {
			fn(strings.TrimPrefix(msg.Subject(), h.prefix), msg.Data())
		}
		return nil
	})
	if err != nil {
		return hotError("scan", err)
	}
	return nil
}

func wrongLastSeq(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}

// hotError is unavailable when JetStream did not answer, internal
// otherwise; a full bucket is resource_exhausted.
func hotError(op string, err error) error {
	var apiErr *jetstream.APIError
	switch {
	case errors.As(err, &apiErr) && (strings.Contains(apiErr.Description, "maximum bytes") || strings.Contains(apiErr.Description, "resources exceeded")):
		return &bus.Error{Code: bus.CodeResourceExhausted, Message: fmt.Sprintf("working state %s: the hot store is full", op)}
	case errors.Is(err, nats.ErrNoResponders), errors.Is(err, nats.ErrTimeout), errors.Is(err, context.DeadlineExceeded),
		errors.Is(err, jetstream.ErrNoStreamResponse), errors.Is(err, nats.ErrConnectionClosed), errors.Is(err, nats.ErrDisconnected):
		return &bus.Error{Code: bus.CodeUnavailable, Message: fmt.Sprintf("working state %s: the bus did not answer; retry", op)}
	}
	return &bus.Error{Code: bus.CodeInternal, Message: fmt.Sprintf("working state %s: %v", op, err)}
}
