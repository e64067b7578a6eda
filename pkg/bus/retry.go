package bus

import (
	"context"
	"errors"
	"time"

	"github.com/agentmesh/agentmesh/pkg/backoff"
)

// Transient reports whether a failed request is worth sending again as it
// is: the service did not answer (unavailable: no responder, a timeout, a
// store that cannot reach its database) or lost a race it says to retry
// (conflict). Everything else is an answer.
func Transient(err error) bool {
	return errors.Is(err, ErrUnavailable) || errors.Is(err, ErrConflict)
}

// Backoff says how Retry waits between tries: exponential from Initial,
// doubling up to Max, each wait jittered by up to a half; at most Tries
// tries (0: until the context ends). It is backoff.Backoff, named here for
// the callers of Retry.
type Backoff = backoff.Backoff

// DefaultBackoff retries a transient failure for about ten seconds: long
// enough for a service to restart, short enough that a caller with a
// deadline of its own still hears the error.
var DefaultBackoff = Backoff{Initial: 20 * time.Millisecond, Max: time.Second, Tries: 16}

// Retry calls fn until it succeeds, fails with an error that is not
// Transient, the tries run out or ctx ends; it returns fn's last error (or
// ctx's, if it ended while waiting and fn never ran to an answer).
func Retry(ctx context.Context, b Backoff, fn func(ctx context.Context) error) error {
	for n := 1; ; n++ {
		err := fn(ctx)
		if err == nil || !Transient(err) || (b.Tries > 0 && n >= b.Tries) {
			return err
		}
		if !backoff.Sleep(ctx, b.Jittered(n)) {
			return err
		}
	}
}
