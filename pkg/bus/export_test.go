package bus

import (
	"context"

	"github.com/nats-io/nats.go"
)

// TraceRequestForTest starts and ends the client span of a request, as
// Request does.
func TraceRequestForTest(ctx context.Context, nc *nats.Conn, subject string) {
	_, span := startRequest(ctx, nc, subject)
	endSpan(span, nil)
}
