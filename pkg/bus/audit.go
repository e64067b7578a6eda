package bus

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	busv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/bus/v1"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Bounds of an audit batch (see Auditor): it is published when its first
// record has waited AuditFlushDelay, or when it holds auditMaxRecords
// records or auditMaxBytes bytes, whichever comes first.
const (
	AuditFlushDelay = 10 * time.Millisecond
	auditMaxRecords = 256
	auditMaxBytes   = 256 << 10
	// auditHeadroom is kept below the server's max payload for the batch
	// message's own headers.
	auditHeadroom = 4 << 10
)

// auditType is the Am-Type of a batch.
var auditType = string((&busv1.AuditBatch{}).ProtoReflect().Descriptor().FullName())

// ErrNotAuditBatch is returned for a stored message that is not a batch of
// audit records (the audit stream also holds the executors' am.exec.>).
var ErrNotAuditBatch = errors.New("not an audit batch")

// ErrBadAuditBatch is returned for an audit batch that does not decode.
var ErrBadAuditBatch = errors.New("audit batch does not decode")

// Auditor records each request one service instance handled (Wrap) in the
// audit stream, several records to a stored message: the records of the
// requests answered within AuditFlushDelay go out together as one
// busv1.AuditBatch on the auditor's subject (subjects.Names.AuditService),
// each made just after its reply. A record holds the request's payload and
// headers as received, the subject it came on, its outcome ("ok" or the
// reply's error code) and when it was answered.
//
// The guarantee is the one a record published per request had, with the
// window widened by the batch: a record is published with core NATS after
// the reply (it adds nothing to the request's latency, and a lost record
// does not fail the request), now within AuditFlushDelay of it. While the
// process lives, every record is published (Close publishes what waits);
// a crash loses the records answered in its last AuditFlushDelay, as a
// crash before the client's write loop ran lost a record before. A record
// whose payload would not fit in a stored message keeps its subject,
// headers, outcome and size, not its payload.
//
// This replaces capturing the request subjects themselves with a stream:
// a stream that captures a request subject counts as interest, so a
// request to a service that is down would wait for its timeout instead of
// failing at once with "no responders".
type Auditor struct {
	nc         *nats.Conn
	subject    string
	delay      time.Duration
	maxRecords int
	maxBytes   int

	mu     sync.Mutex
	buf    []byte // the batch: AuditBatch's records fields, encoded
	n      int    // records in buf
	made   int    // records made, all told
	timer  *time.Timer
	closed bool
}

// NewAuditor returns the auditor of a service instance that publishes its
// batches on subject.
func NewAuditor(nc *nats.Conn, subject string) *Auditor {
	a := &Auditor{nc: nc, subject: subject, delay: AuditFlushDelay, maxRecords: auditMaxRecords, maxBytes: auditMaxBytes}
	if mp := int(nc.MaxPayload()) - auditHeadroom; mp > 0 && mp < a.maxBytes {
		a.maxBytes = mp
	}
	a.timer = time.AfterFunc(time.Hour, a.Flush)
	a.timer.Stop()
	return a
}

// Wrap wraps a request handler so that, after it has replied, the request
// is recorded.
func (a *Auditor) Wrap(h micro.Handler) micro.Handler {
	return micro.HandlerFunc(func(r micro.Request) {
		o := &auditing{Request: r, outcome: "ok"}
		h.Handle(o)
		a.record(r, o.outcome)
	})
}

// record adds a request's record to the batch.
func (a *Auditor) record(r micro.Request, outcome string) {
	rec := &busv1.AuditRecord{Subject: r.Subject(), Outcome: outcome, Data: r.Data(),
		DataSize: int64(len(r.Data())), Answered: timestamppb.Now()}
	hs := r.Headers()
	for _, k := range slices.Sorted(maps.Keys(hs)) {
		rec.Headers = append(rec.Headers, &busv1.AuditHeader{Key: k, Values: hs[k]})
	}
	enc, err := proto.Marshal(rec)
	if err == nil && len(enc) > a.maxBytes {
		rec.Data = nil // too large to keep with its record: its size says so
		enc, err = proto.Marshal(rec)
	}
	if err != nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.n > 0 && len(a.buf)+len(enc)+16 > a.maxBytes {
		a.publishLocked()
	}
	a.buf = protowire.AppendTag(a.buf, 1, protowire.BytesType)
	a.buf = protowire.AppendBytes(a.buf, enc)
	a.n++
	a.made++
	switch {
	case a.closed || a.n >= a.maxRecords:
		a.publishLocked()
	case a.n == 1:
		a.timer.Reset(a.delay)
	}
}

// Flush publishes the records waiting, if any.
func (a *Auditor) Flush() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.publishLocked()
}

// Close publishes the records waiting; a record made after it (a handler
// still finishing) is published at once, alone.
func (a *Auditor) Close() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.closed = true
	a.timer.Stop()
	a.publishLocked()
}

// publishLocked publishes the batch, if any, and starts a new one. Under
// a.mu, so batches go out in the order their records were made.
func (a *Auditor) publishLocked() {
	if a.n == 0 {
		return
	}
	msg := &nats.Msg{Subject: a.subject, Data: a.buf, Header: nats.Header{}}
	msg.Header.Set(HeaderType, auditType)
	_ = a.nc.PublishMsg(msg) // copies the data into the connection's buffer
	a.buf, a.n = a.buf[:0], 0
}

// auditing notes the outcome of the reply its handler sends.
type auditing struct {
	micro.Request
	outcome string
}

func (a *auditing) Error(code, description string, data []byte, opts ...micro.RespondOpt) error {
	a.outcome = code
	return a.Request.Error(code, description, data, opts...)
}

// DecodeAuditBatch decodes a stored message of the audit stream: a
// message of another kind (am.exec.>) is ErrNotAuditBatch, a batch that
// does not decode ErrBadAuditBatch.
func DecodeAuditBatch(m *jetstream.RawStreamMsg) (*busv1.AuditBatch, error) {
	if m.Header.Get(HeaderType) != auditType {
		return nil, fmt.Errorf("%s, seq %d: %w", m.Subject, m.Sequence, ErrNotAuditBatch)
	}
	var b busv1.AuditBatch
	if err := proto.Unmarshal(m.Data, &b); err != nil {
		return nil, fmt.Errorf("%s, seq %d: %w: %w", m.Subject, m.Sequence, ErrBadAuditBatch, err)
	}
	return &b, nil
}

// ReadAudit calls fn with each audit record stored in stream after
// sequence after, in order, and returns the last sequence read. Messages
// that are not audit batches (am.exec.>) are skipped; a batch that does not
// decode ends the read with ErrBadAuditBatch.
func ReadAudit(ctx context.Context, js jetstream.JetStream, stream string, after uint64, fn func(seq uint64, rec *busv1.AuditRecord) error) (uint64, error) {
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return after, fmt.Errorf("audit stream %s: %w", stream, err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		return after, fmt.Errorf("audit stream %s: %w", stream, err)
	}
	for seq := max(after+1, info.State.FirstSeq); seq <= info.State.LastSeq; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue // deleted, or aged out meanwhile
		}
		if err != nil {
			return seq - 1, fmt.Errorf("audit stream %s, seq %d: %w", stream, seq, err)
		}
		b, err := DecodeAuditBatch(m)
		if errors.Is(err, ErrNotAuditBatch) {
			continue
		}
		if err != nil {
			return seq - 1, err
		}
		for _, rec := range b.GetRecords() {
			if err := fn(seq, rec); err != nil {
				return seq, err
			}
		}
	}
	return max(after, info.State.LastSeq), nil
}
