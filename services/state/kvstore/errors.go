package kvstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/services/state/store"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// kvError wraps a failure of op: unavailable when JetStream could not be
// reached or did not answer in time (a caller should retry), internal
// otherwise.
func kvError(op string, err error) error {
	if unreachable(err) {
		return &bus.Error{Code: bus.CodeUnavailable, Message: fmt.Sprintf("%s: store unavailable: %v", op, err)}
	}
	return store.Internal(op, err)
}

// Unreachable reports whether err says JetStream could not be reached or
// is not ready yet (no responders, a timeout, a closed or reconnecting
// connection, JetStream not enabled yet): worth trying again.
func Unreachable(err error) bool { return unreachable(err) }

func unreachable(err error) bool {
	return errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrNoStreamResponse) ||
		errors.Is(err, nats.ErrTimeout) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, nats.ErrConnectionClosed) || errors.Is(err, nats.ErrConnectionDraining) ||
		errors.Is(err, nats.ErrConnectionReconnecting) || errors.Is(err, nats.ErrDisconnected) ||
		errors.Is(err, jetstream.ErrJetStreamNotEnabled)
}
