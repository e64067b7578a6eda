package door

import (
	"context"
	"errors"
	"log/slog"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// JSON-RPC 2.0 error codes, and the server-defined ones of agentmesh's
// doors (-32050 to -32059, clear of MCP's -32002 and -32020 to -32042 and
// of A2A's -32001 to -32007).
const (
	CodeParseError     = -32700
	CodeInvalidRequest = -32600
	CodeMethodNotFound = -32601
	CodeInvalidParams  = -32602
	CodeInternal       = -32603

	// CodePermissionDenied: the key's role may not do this (the message
	// names the role needed).
	CodePermissionDenied = -32050
	// CodeFailedPrecondition: the task is not in a state that allows it
	// (e.g. cancelling a finished task where the protocol has no code of
	// its own for that).
	CodeFailedPrecondition = -32051
	// CodeResourceExhausted: the org is over its request rate or a limit.
	CodeResourceExhausted = -32052
	// CodeUnavailable: agentmesh could not answer now; retry.
	CodeUnavailable = -32053
	// CodeConflict: it exists already, or a concurrent change won.
	CodeConflict = -32054
	// CodeUnauthenticated: the key is missing or unknown.
	CodeUnauthenticated = -32055
	// CodeTimeout: the call ran out of time or was cancelled.
	CodeTimeout = -32056
)

// RPCError is a JSON-RPC error object. Data carries {"status": NAME}, the
// gRPC status name the error came from (e.g. "NOT_FOUND"), when it came
// from the API.
type RPCError struct {
	Code    int64  `json:"code"`
	Message string `json:"message"`
	Data    any    `json:"data,omitempty"`
}

func (e *RPCError) Error() string { return e.Message }

// StatusData is the Data of an RPCError that came from the API.
type StatusData struct {
	Status string `json:"status"`
}

// Messages of the errors whose text could name an internal address or
// cause (a transport failure, a panic): they are replaced by these.
const (
	msgUnavailable = "agentmesh is unavailable, retry"
	msgInternal    = "internal error"
	msgTimeout     = "the call timed out or was cancelled"
)

// FromError turns an error of a gRPC call into a JSON-RPC error object.
// notFound is the code a NotFound becomes (each protocol names its own:
// A2A's TaskNotFound -32001, the MCP tasks extension's -32602, MCP's
// resource not found -32002). The API's messages are kept (they say what
// was wrong, naming the field or the role, and never an internal detail);
// Unavailable, Internal, Unknown and timeouts get fixed words, because a
// transport failure's text names addresses. The cause of those is logged.
func FromError(log *slog.Logger, err error, notFound int64) *RPCError {
	if err == nil {
		return nil
	}
	var re *RPCError
	if errors.As(err, &re) {
		return re
	}
	st, ok := status.FromError(err)
	if !ok {
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return &RPCError{Code: CodeTimeout, Message: msgTimeout}
		}
		log.Error("door: internal error", "err", err)
		return &RPCError{Code: CodeInternal, Message: msgInternal}
	}
	code, msg := int64(CodeInternal), st.Message()
	switch st.Code() {
	case codes.InvalidArgument, codes.OutOfRange:
		code = CodeInvalidParams
	case codes.NotFound:
		code = notFound
	case codes.PermissionDenied:
		code = CodePermissionDenied
	case codes.FailedPrecondition:
		code = CodeFailedPrecondition
	case codes.ResourceExhausted:
		code = CodeResourceExhausted
	case codes.AlreadyExists, codes.Aborted:
		code = CodeConflict
	case codes.Unauthenticated:
		code = CodeUnauthenticated
	case codes.Unavailable:
		log.Warn("door: API unavailable", "err", err)
		code, msg = CodeUnavailable, msgUnavailable
	case codes.DeadlineExceeded, codes.Canceled:
		code, msg = CodeTimeout, msgTimeout
	default:
		log.Error("door: internal error", "err", err)
		msg = msgInternal
	}
	return &RPCError{Code: code, Message: msg, Data: StatusData{Status: StatusName(st.Code())}}
}

// StatusName is the canonical upper-case name of a gRPC code, as
// google.rpc.Code spells it in JSON ("NOT_FOUND").
func StatusName(c codes.Code) string {
	if n, ok := statusNames[c]; ok {
		return n
	}
	return "UNKNOWN"
}

var statusNames = map[codes.Code]string{
	codes.OK: "OK", codes.Canceled: "CANCELLED", codes.Unknown: "UNKNOWN",
	codes.InvalidArgument: "INVALID_ARGUMENT", codes.DeadlineExceeded: "DEADLINE_EXCEEDED",
	codes.NotFound: "NOT_FOUND", codes.AlreadyExists: "ALREADY_EXISTS",
	codes.PermissionDenied: "PERMISSION_DENIED", codes.ResourceExhausted: "RESOURCE_EXHAUSTED",
	codes.FailedPrecondition: "FAILED_PRECONDITION", codes.Aborted: "ABORTED",
	codes.OutOfRange: "OUT_OF_RANGE", codes.Unimplemented: "UNIMPLEMENTED",
	codes.Internal: "INTERNAL", codes.Unavailable: "UNAVAILABLE", codes.DataLoss: "DATA_LOSS",
	codes.Unauthenticated: "UNAUTHENTICATED",
}

// Sentence is an API error as one line for a person or a model: the
// status in words and the API's message ("not found: task "x" not found"),
// with the same safe replacements as FromError.
func Sentence(log *slog.Logger, err error) string {
	re := FromError(log, err, CodeInvalidParams)
	d, ok := re.Data.(StatusData)
	if !ok {
		return re.Message
	}
	return words(d.Status) + ": " + re.Message
}

func words(status string) string {
	b := []byte(status)
	for i, c := range b {
		switch {
		case c == '_':
			b[i] = ' '
		case c >= 'A' && c <= 'Z':
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}
