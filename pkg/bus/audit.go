package bus

import (
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
)

// Headers of an audit record (see Audited).
const (
	// HeaderAuditSubject is the subject the request was sent to.
	HeaderAuditSubject = "Am-Audit-Subject"
	// HeaderAuditOutcome is "ok" or the error code of the reply.
	HeaderAuditOutcome = "Am-Audit-Outcome"
)

// Audited wraps a request handler so that, after it has replied, the
// request is recorded on subject (subjects.Names.Audit), which the audit
// stream captures: the request's payload and headers as received, plus the
// subject it came on and its outcome (HeaderAuditOutcome). The record is
// published with core NATS after the reply, so it adds nothing to the
// request's latency, and a lost record does not fail the request.
//
// This replaces capturing the request subjects themselves with a stream:
// a stream that captures a request subject counts as interest, so a
// request to a service that is down would wait for its timeout instead of
// failing at once with "no responders".
func Audited(nc *nats.Conn, subject string, h micro.Handler) micro.Handler {
	return micro.HandlerFunc(func(r micro.Request) {
		a := &auditing{Request: r, outcome: "ok"}
		h.Handle(a)
		msg := &nats.Msg{Subject: subject, Data: r.Data(), Header: nats.Header{}}
		for k, v := range r.Headers() {
			msg.Header[k] = append([]string(nil), v...)
		}
		msg.Header.Set(HeaderAuditSubject, r.Subject())
		msg.Header.Set(HeaderAuditOutcome, a.outcome)
		_ = nc.PublishMsg(msg)
	})
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
