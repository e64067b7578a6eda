package pgstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"

	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/services/state/store"
	"github.com/jackc/pgx/v5/pgconn"
)

// dbError wraps a failure of op: unavailable when the database could not be
// reached or is going away (a caller should retry: the request may well
// succeed once Postgres is back), internal otherwise.
//
// What an unavailable error tells the caller — the message that crosses
// the bus and becomes the gRPC status — is the operation and a reason
// that names no part of the database's address: pgx's errors name the
// user, the database and the host and port (`failed to connect to
// user=… database=…: 10.0.0.5:5432 …`), which are the operator's, not the
// caller's. The full error stays in the local chain for the state
// service's log (bus.Handler logs unavailable failures).
func dbError(op string, err error) error {
	if Unreachable(err) {
		return fmt.Errorf("%w [cause: %v]", &bus.Error{Code: bus.CodeUnavailable,
			Message: fmt.Sprintf("%s: database unavailable (%s); retry", op, unreachableReason(err))}, err)
	}
	return store.Internal(op, err)
}

// unreachableReason says why the database is unreachable in words that
// name nothing of it: a SQLSTATE code, or the kind of network failure.
func unreachableReason(err error) string {
	var pgErr *pgconn.PgError
	var connErr *pgconn.ConnectError
	switch {
	case errors.As(err, &pgErr):
		return "SQLSTATE " + pgErr.Code
	case pgconn.Timeout(err), errors.Is(err, context.DeadlineExceeded):
		return "timed out"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.As(err, &connErr):
		return "cannot connect"
	}
	return "connection lost"
}

// Unreachable reports whether err says Postgres cannot be reached or is
// not accepting work: a failed connect, a broken connection, a timeout, or
// an SQLSTATE of class 08 (connection exception), 57P01–57P05 (admin or
// crash shutdown, cannot connect now, idle session timeout) or 53300 (too
// many connections).
func Unreachable(err error) bool {
	if err == nil {
		return false
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		c := pgErr.Code
		return strings.HasPrefix(c, "08") || (strings.HasPrefix(c, "57P0") && c != "57P00") || c == "53300"
	}
	var connErr *pgconn.ConnectError
	var netErr net.Error
	switch {
	case errors.As(err, &connErr), errors.As(err, &netErr),
		pgconn.Timeout(err), pgconn.SafeToRetry(err),
		errors.Is(err, context.DeadlineExceeded),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return true
	}
	// pgx reports a connection closed under it by text only.
	msg := err.Error()
	return strings.Contains(msg, "conn closed") || strings.Contains(msg, "closed pool")
}
