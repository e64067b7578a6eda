// Package bus carries agentmesh's protobuf messages over NATS: typed
// request/reply with errors that keep their code across the wire, trace
// context in headers, and handlers for nats.go micro services that build a
// context per request and never let a malformed message crash a service.
package bus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"time"

	busv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/bus/v1"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"google.golang.org/protobuf/proto"
)

// Header names agentmesh sets on messages.
const (
	// HeaderType names the protobuf message type of the payload, so a tap
	// with any NATS client knows how to decode it.
	HeaderType = "Am-Type"
	// HeaderErrorCode is set (by micro) on a reply that carries an error.
	HeaderErrorCode = micro.ErrorCodeHeader
)

// DefaultTimeout bounds a request whose context has no deadline.
const DefaultTimeout = 10 * time.Second

// MaxPayload is the largest message agentmesh puts on the bus. The router
// refuses larger requests with ResourceExhausted before they get here.
const MaxPayload = 1 << 20

// NewMsg builds a message for subject carrying m, with its type header and
// ctx's trace context.
func NewMsg(ctx context.Context, subject string, m proto.Message) (*nats.Msg, error) {
	data, err := proto.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("marshal %T: %w", m, err)
	}
	msg := nats.NewMsg(subject)
	msg.Data = data
	msg.Header.Set(HeaderType, string(m.ProtoReflect().Descriptor().FullName()))
	Inject(ctx, msg.Header)
	return msg, nil
}

// request is Request (observe.go) without the metrics.
func request(ctx context.Context, nc *nats.Conn, subject string, req, resp proto.Message) error {
	ctx, cancel := context.WithTimeout(ctx, DefaultTimeout)
	defer cancel()
	msg, err := NewMsg(ctx, subject, req)
	if err != nil {
		return err
	}
	reply, err := nc.RequestMsgWithContext(ctx, msg)
	if err != nil {
		if errors.Is(err, nats.ErrNoResponders) {
			return &Error{Code: CodeUnavailable, Message: "no service answers " + subject}
		}
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) {
			return &Error{Code: CodeUnavailable, Message: "timed out waiting for " + subject}
		}
		return fmt.Errorf("request %s: %w", subject, err)
	}
	if code := reply.Header.Get(HeaderErrorCode); code != "" {
		var pe busv1.Error
		if err := proto.Unmarshal(reply.Data, &pe); err != nil || pe.Code == "" {
			return &Error{Code: code, Message: reply.Header.Get(micro.ErrorHeader)}
		}
		return FromProto(&pe)
	}
	if err := proto.Unmarshal(reply.Data, resp); err != nil {
		return fmt.Errorf("decode reply of %s: %w", subject, err)
	}
	return nil
}

// HandlerFunc serves one typed request.
type HandlerFunc[Req, Resp proto.Message] func(ctx context.Context, req Req) (Resp, error)

// Handler adapts a typed function to a micro handler. Each request gets a
// context with a deadline and the caller's trace context. A payload that
// does not decode is answered with invalid_argument and logged; a panic in
// fn is answered with internal and logged; neither stops the service. A
// reply the connection refuses for a passing reason (reconnecting) is sent
// again until the request's deadline, not left for the caller to time out.
func Handler[Req, Resp proto.Message](log *slog.Logger, newReq func() Req, fn HandlerFunc[Req, Resp]) micro.Handler {
	return micro.HandlerFunc(func(r micro.Request) {
		ctx, cancel := context.WithTimeout(context.Background(), DefaultTimeout)
		defer cancel()
		ctx, span := startServe(Extract(ctx, nats.Header(r.Headers())), r.Subject())
		err := serve(ctx, log, r, newReq, fn)
		endSpan(span, err)
	})
}

// serve decodes r, runs fn and replies (the reply carrying the server
// span's trace context); the error is the request's outcome.
func serve[Req, Resp proto.Message](ctx context.Context, log *slog.Logger, r micro.Request, newReq func() Req, fn HandlerFunc[Req, Resp]) error {
	req := newReq()
	if err := proto.Unmarshal(r.Data(), req); err != nil {
		log.WarnContext(ctx, "malformed bus request set aside", "subject", r.Subject(), "bytes", len(r.Data()), "err", err)
		err := &Error{Code: CodeInvalidArgument, Message: "malformed request: " + err.Error()}
		respondError(ctx, log, r, err)
		return err
	}
	resp, err := safeCall(ctx, fn, req)
	if err != nil {
		logFailure(ctx, log, r.Subject(), err)
		respondError(ctx, log, r, err)
		return err
	}
	data, err := proto.Marshal(resp)
	if err != nil {
		err = fmt.Errorf("marshal reply: %w", err)
		respondError(ctx, log, r, err)
		return err
	}
	var opts []micro.RespondOpt
	if h := traceHeaders(ctx); h != nil {
		opts = append(opts, micro.WithHeaders(micro.Headers(h)))
	}
	if err := retryRespond(ctx, func() error { return r.Respond(data, opts...) }); err != nil {
		log.WarnContext(ctx, "reply not sent", "subject", r.Subject(), "err", err)
	}
	return nil
}

func safeCall[Req, Resp proto.Message](ctx context.Context, fn HandlerFunc[Req, Resp], req Req) (resp Resp, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = &Error{Code: CodeInternal, Message: fmt.Sprintf("panic: %v", p)}
			slog.Error("handler panic", "panic", p, "stack", string(debug.Stack()))
		}
	}()
	return fn(ctx, req)
}

func respondError(ctx context.Context, log *slog.Logger, r micro.Request, err error) {
	pe := ToProto(err)
	data, _ := proto.Marshal(pe)
	desc := pe.Message
	if desc == "" {
		desc = pe.Code // micro refuses an empty description; a reply beats a timeout
	}
	var opts []micro.RespondOpt
	if h := traceHeaders(ctx); h != nil {
		opts = append(opts, micro.WithHeaders(micro.Headers(h)))
	}
	if rerr := retryRespond(ctx, func() error { return r.Error(pe.Code, desc, data, opts...) }); rerr != nil {
		log.Warn("error reply not sent", "subject", r.Subject(), "err", rerr)
	}
}

// Async runs h in its own goroutine per request, at most cap(sem) at once,
// so one slow request does not hold up the others of a subscription. The
// handler gets a request of its own that replies straight through nc:
// micro reads its request's error state for stats once the dispatch
// returns, which would race with a handler still running on another
// goroutine. The price is that micro's per-endpoint error counts stay at
// zero; request counts are kept.
func Async(nc *nats.Conn, sem chan struct{}, h micro.Handler) micro.Handler {
	return micro.HandlerFunc(func(r micro.Request) {
		d := &detached{nc: nc, subject: r.Subject(), reply: r.Reply(), data: r.Data(), headers: r.Headers()}
		sem <- struct{}{}
		go func() {
			defer func() { <-sem }()
			h.Handle(d)
		}()
	})
}

type detached struct {
	nc      *nats.Conn
	subject string
	reply   string
	data    []byte
	headers micro.Headers
}

func (d *detached) respond(m *nats.Msg, opts []micro.RespondOpt) error {
	if d.reply == "" {
		return nats.ErrMsgNoReply
	}
	for _, opt := range opts {
		opt(m)
	}
	m.Subject = d.reply
	if err := d.nc.PublishMsg(m); err != nil {
		return fmt.Errorf("%w: %w", micro.ErrRespond, err)
	}
	return nil
}

func (d *detached) Respond(data []byte, opts ...micro.RespondOpt) error {
	return d.respond(&nats.Msg{Data: data}, opts)
}

func (d *detached) RespondJSON(v any, opts ...micro.RespondOpt) error {
	b, err := json.Marshal(v)
	if err != nil {
		return micro.ErrMarshalResponse
	}
	return d.Respond(b, opts...)
}

func (d *detached) Error(code, description string, data []byte, opts ...micro.RespondOpt) error {
	if code == "" {
		return fmt.Errorf("%w: error code", micro.ErrArgRequired)
	}
	if description == "" {
		description = code
	}
	m := &nats.Msg{Data: data, Header: nats.Header{
		micro.ErrorHeader:     []string{description},
		micro.ErrorCodeHeader: []string{code},
	}}
	return d.respond(m, opts)
}

func (d *detached) Data() []byte           { return d.data }
func (d *detached) Headers() micro.Headers { return d.headers }
func (d *detached) Subject() string        { return d.subject }
func (d *detached) Reply() string          { return d.reply }

// logFailure logs a request that failed on this side: internal errors
// always, unavailable ones (a store that cannot reach its database: the
// cause stays here, the caller is told only that it is unavailable) at most
// once per subject every failureLogEvery.
func logFailure(ctx context.Context, log *slog.Logger, subject string, err error) {
	switch CodeOf(err) {
	case CodeInternal:
		log.ErrorContext(ctx, "request failed", "subject", subject, "err", err)
	case CodeUnavailable:
		if failureLog.allow(subject, time.Now()) {
			log.WarnContext(ctx, "request failed: unavailable (logged once per subject every 5s)", "subject", subject, "err", err)
		}
	}
}

const failureLogEvery = 5 * time.Second

// failureLog remembers when a failure of each subject was last logged.
var failureLog = &rateLog{last: map[string]time.Time{}}

type rateLog struct {
	mu   sync.Mutex
	last map[string]time.Time
}

func (r *rateLog) allow(key string, now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if t, ok := r.last[key]; ok && now.Sub(t) < failureLogEvery {
		return false
	}
	if len(r.last) > 4096 {
		clear(r.last)
	}
	r.last[key] = now
	return true
}
