// Package grpcretry retries agentmesh API calls that failed with
// UNAVAILABLE — the gRPC convention for "try again": the router could not
// reach a service, or the store could not reach its database. It waits
// with jittered exponential backoff (pkg/backoff), at least as long as
// the server's RetryInfo detail asks, and gives up after a bounded number
// of tries or when the call's context ends. Other codes are answers and
// are returned at once.
//
// Only calls that are safe to send twice should be retried: reads, and
// writes the server de-duplicates (SubmitTask with an idempotency key,
// transitions guarded by compare-and-set). Unary returns an interceptor
// that retries every unary call; callers give writes an idempotency key.
package grpcretry

import (
	"context"
	"time"

	"github.com/agentmesh/agentmesh/pkg/backoff"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Default is the backoff of Unary(Default): 20 ms doubling to 2 s, 10
// tries (about 10 s in all).
var Default = bus.Backoff{Initial: 20 * time.Millisecond, Max: 2 * time.Second, Tries: 10}

// TransportTries bounds the tries of an UNAVAILABLE that carries no
// RetryInfo: the server could not be reached at all (nothing listens, a
// router restarting), so a user with a wrong address hears so quickly. The
// router's own UNAVAILABLE (a service or the database down) carries
// RetryInfo and gets the backoff's full tries.
const TransportTries = 4

// maxPushback bounds how long a server's RetryInfo can make us wait.
const maxPushback = 10 * time.Second

// Unary returns a client interceptor that retries UNAVAILABLE with b.
func Unary(b bus.Backoff) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		for n := 1; ; n++ {
			err := invoker(ctx, method, req, reply, cc, opts...)
			if status.Code(err) != codes.Unavailable {
				return err
			}
			limit := b.Tries
			if Pushback(err) == 0 && (limit <= 0 || limit > TransportTries) {
				// No server said "retry": the server itself may not be
				// there (a wrong address, a router restarting).
				limit = TransportTries
			}
			if n >= limit {
				return err
			}
			if !backoff.Sleep(ctx, Wait(b, n, err)) {
				return err
			}
		}
	}
}

// Wait is how long to wait before try n+1 after err: the backoff's delay
// with up to a half of jitter, or the server's RetryInfo delay if longer
// (bounded).
func Wait(b bus.Backoff, n int, err error) time.Duration {
	d := b.Jittered(n)
	if p := Pushback(err); p > d {
		d = min(p, maxPushback)
	}
	return d
}

// Pushback returns the retry delay a status's RetryInfo detail asks for,
// or 0.
func Pushback(err error) time.Duration {
	st, ok := status.FromError(err)
	if !ok {
		return 0
	}
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok && ri.GetRetryDelay() != nil {
			return ri.GetRetryDelay().AsDuration()
		}
	}
	return 0
}
