package executor

import (
	"context"
	"strings"
	"sync"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/nats-io/nats.go"
)

// Token batching: content deltas are published when this many bytes are
// pending or this long after the first pending one, whichever comes first.
const (
	tokenFlushBytes    = 256
	tokenFlushInterval = 50 * time.Millisecond
)

// tokenPublisher publishes a task's streamed model output as TOKEN events
// (agentmesh.v1.TaskEvent{type TOKEN, seq 0, token, attempt}) on
// <p>.evt.task.<id>.token with core NATS: live only, no history, no seq.
type tokenPublisher struct {
	org     string
	nc      *nats.Conn
	subject string
	taskID  string
	attempt int32
	ctx     context.Context

	mu     sync.Mutex
	buf    strings.Builder
	timer  *time.Timer
	closed bool
}

func newTokenPublisher(ctx context.Context, nc *nats.Conn, subject string, task *agentmeshv1.Task, attempt int32) *tokenPublisher {
	return &tokenPublisher{nc: nc, subject: subject, org: task.GetOrg(), taskID: task.GetId(), attempt: attempt, ctx: ctx}
}

// write adds a content delta.
func (p *tokenPublisher) write(s string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	p.buf.WriteString(s)
	if p.buf.Len() >= tokenFlushBytes {
		p.flushLocked()
		return
	}
	if p.timer == nil {
		p.timer = time.AfterFunc(tokenFlushInterval, p.flush)
	}
}

func (p *tokenPublisher) flush() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.flushLocked()
}

func (p *tokenPublisher) flushLocked() {
	if p.timer != nil {
		p.timer.Stop()
		p.timer = nil
	}
	if p.buf.Len() == 0 {
		return
	}
	ev := &agentmeshv1.TaskEvent{
		TaskId: p.taskID, Org: p.org, Type: agentmeshv1.EventType_EVENT_TYPE_TOKEN, Attempt: p.attempt, Token: p.buf.String(),
	}
	p.buf.Reset()
	msg, err := bus.NewEventMsg(p.ctx, p.subject, ev)
	if err == nil {
		err = p.nc.PublishMsg(msg)
	}
	_ = err // best effort: tokens are a live view, the step holds the text
}

// close publishes what is pending and stops.
func (p *tokenPublisher) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.flushLocked()
	p.closed = true
}
