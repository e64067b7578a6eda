package bus

import (
	"context"
	"time"

	"github.com/nats-io/nats.go"
)

// TraceRequestForTest starts and ends the client span of a request, as
// Request does.
func TraceRequestForTest(ctx context.Context, nc *nats.Conn, subject string) {
	_, span := startRequest(ctx, nc, subject)
	endSpan(span, nil)
}

// NewAuditorForTest returns an auditor with its bounds set: a batch waits
// at most delay, holds at most maxRecords records and maxBytes bytes.
func NewAuditorForTest(nc *nats.Conn, subject string, delay time.Duration, maxRecords, maxBytes int) *Auditor {
	a := NewAuditor(nc, subject)
	a.delay, a.maxRecords, a.maxBytes = delay, maxRecords, maxBytes
	return a
}

// MadeForTest is the number of records the auditor has made.
func (a *Auditor) MadeForTest() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.made
}
