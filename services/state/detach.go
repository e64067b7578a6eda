package state

import (
	"encoding/json"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
)

// detach gives h a request of its own that replies through nc, so that a
// handler running on another goroutine (bus.Async) never writes into the
// micro request that micro's dispatcher reads for its stats once the
// dispatch returns (a data race under -race). The price: micro's
// per-endpoint error counts stay at zero; request counts are kept.
func detach(nc *nats.Conn, h micro.Handler) micro.Handler {
	return micro.HandlerFunc(func(r micro.Request) {
		h.Handle(&detached{nc: nc, subject: r.Subject(), reply: r.Reply(), data: r.Data(), headers: r.Headers()})
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
		return fmt.Errorf("%w: %s", micro.ErrRespond, err)
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
		description = code // a reply beats a request left to time out
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
