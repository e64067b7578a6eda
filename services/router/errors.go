package router

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/agentmesh/agentmesh/pkg/bus"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// RetryDelay is the delay the RetryInfo detail of an UNAVAILABLE status
// suggests: a service that is down is usually back within a second or two
// (a restart), and clients back off further on their own.
const RetryDelay = 100 * time.Millisecond

// busCodes maps the codes that cross the bus to gRPC codes.
var busCodes = map[string]codes.Code{
	bus.CodeInvalidArgument:    codes.InvalidArgument,
	bus.CodeNotFound:           codes.NotFound,
	bus.CodeAlreadyExists:      codes.AlreadyExists,
	bus.CodeFailedPrecondition: codes.FailedPrecondition,
	bus.CodeConflict:           codes.Aborted,
	bus.CodeResourceExhausted:  codes.ResourceExhausted,
	bus.CodeUnavailable:        codes.Unavailable,
	bus.CodePermissionDenied:   codes.PermissionDenied,
}

// toStatus is the one place where errors become gRPC statuses. A *bus.Error
// keeps its message, prefixed by its field ("input: required"), and an
// invalid argument, a value over its limit (ResourceExhausted) or a value
// already taken (AlreadyExists: a key's name) also carries a BadRequest
// detail naming the field.
// Unavailable carries a RetryInfo detail (retry after RetryDelay).
// Anything else is Internal with a generic message; the cause is logged,
// never sent.
func toStatus(log *slog.Logger, method string, err error) error {
	if err == nil {
		return nil
	}
	if st, ok := status.FromError(err); ok {
		return st.Err() // already a status (e.g. from authentication)
	}
	switch {
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, "request cancelled")
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, "deadline exceeded")
	}
	var be *bus.Error
	if !errors.As(err, &be) {
		log.Error("internal error", "method", method, "err", err)
		return status.Error(codes.Internal, "internal error")
	}
	code, ok := busCodes[be.Code]
	if !ok {
		log.Error("internal error", "method", method, "err", err)
		return status.Error(codes.Internal, "internal error")
	}
	msg := be.Message
	if msg == "" {
		msg = be.Code
	}
	if be.Field != "" {
		msg = be.Field + ": " + msg
	}
	st := status.New(code, msg)
	if (code == codes.InvalidArgument || code == codes.ResourceExhausted || code == codes.AlreadyExists) && be.Field != "" {
		if d, derr := st.WithDetails(&errdetails.BadRequest{
			FieldViolations: []*errdetails.BadRequest_FieldViolation{{Field: be.Field, Description: be.Message}},
		}); derr == nil {
			st = d
		}
	}
	if code == codes.Unavailable {
		log.Warn("bus unavailable", "method", method, "err", err)
		if d, derr := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(RetryDelay)}); derr == nil {
			st = d
		}
	}
	return st.Err()
}
