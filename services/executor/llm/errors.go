package llm

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
)

// Kind says what a failed model call means for the task: whether a retry
// can change it, and whether it is only a wait.
type Kind int

const (
	// KindTransient: the model is out or flaked (5xx, 529 overloaded, 408,
	// a connection reset, a timeout, a stream cut short) and the call's
	// retries were spent. A later attempt may succeed (FailureKind MODEL,
	// which a task's retry policy may retry).
	KindTransient Kind = iota
	// KindRejected: the provider refused the request as such (400, 401,
	// 403, 404, 413, 422 …), the answer does not parse, or the endpoint is
	// not allowed. No retry changes it: the call is not retried, and the
	// task fails with FailureKind MODEL_REJECTED, which no policy retries.
	KindRejected
	// KindRateLimited: the model has no budget before Error.Until (the
	// cluster's limits, or the provider's 429). The task waits for it
	// without holding a process: it goes back to the queue, not dispatched
	// before Until (with the budget reserved for it then when
	// Error.Reserved).
	KindRateLimited
)

func (k Kind) String() string {
	switch k {
	case KindRejected:
		return "rejected"
	case KindRateLimited:
		return "rate_limited"
	}
	return "transient"
}

// FailureKind is the task's failure kind of a model call that failed with
// k.
func (k Kind) FailureKind() agentmeshv1.FailureKind {
	if k == KindRejected {
		return agentmeshv1.FailureKind_FAILURE_KIND_MODEL_REJECTED
	}
	return agentmeshv1.FailureKind_FAILURE_KIND_MODEL
}

// Error is a model call that failed. Its text names the model, the URL
// and the cause (at most ErrorTextMax bytes); it wraps the last try's
// error.
type Error struct {
	Kind Kind
	// Status is the last HTTP status the server answered (0: none).
	Status int
	// Until (KindRateLimited) is when the budget is there; Reserved says
	// it is reserved for the task's next call then (see Request.Task).
	// NotBefore is when the task should be dispatched again: a little
	// before a reserved slot (the call then waits the rest in place and
	// leaves on time), else Until.
	Until     time.Time
	Reserved  bool
	NotBefore time.Time
	// Scope names the limit that made the call wait ("key.gpt-4o",
	// "org.acme", "agent.acme.helper", or "provider" for the server's own
	// 429).
	Scope string

	text  string
	cause error
}

// NewError is a failed call of kind k whose text is cause's (cut at
// ErrorTextMax): for code that fails a call outside the client, and tests.
func NewError(k Kind, cause error) *Error {
	return &Error{Kind: k, text: cutText(cause.Error(), ErrorTextMax), cause: cause}
}

func (e *Error) Error() string { return e.text }
func (e *Error) Unwrap() error { return e.cause }

// KindOf is the kind of a model call's error: an *Error's, else
// KindRejected (a call that could not be made as configured).
func KindOf(err error) Kind {
	var e *Error
	if errors.As(err, &e) {
		return e.Kind
	}
	return KindRejected
}

// httpError is a 4xx or 5xx answer (the wait it asked for, if any, is
// in its call: hearTransport).
type httpError struct {
	status int
	msg    string // the server's message, cut
}

func (e *httpError) Error() string {
	if e.msg == "" {
		return fmt.Sprintf("HTTP %d %s", e.status, http.StatusText(e.status))
	}
	return fmt.Sprintf("HTTP %d: %s", e.status, e.msg)
}

// errUnparsable wraps an answer that does not parse: the same server
// answers the same request the same way, so it is not retried.
var errUnparsable = errors.New("the answer does not parse")

// unparsable wraps err as an answer that does not parse.
func unparsable(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errUnparsable, fmt.Sprintf(format, args...))
}

// errStreamError is an error event inside a stream (OpenAI's
// {"error": …}, vLLM's {"object": "error"}, Anthropic's event: error).
type streamError struct {
	typ    string // the provider's error type (overloaded_error …)
	status int    // its code, when it gave one
	msg    string
}

func (e *streamError) Error() string {
	return fmt.Sprintf("the server sent an error in the stream: %s", strings.TrimSpace(e.typ+" "+e.msg))
}

// classify is the kind of one try's error: whether the next try may help.
func classify(err error) Kind {
	var he *httpError
	var se *streamError
	switch {
	case errors.Is(err, errUnparsable), notRetryable(err):
		return KindRejected
	case errors.As(err, &he):
		return statusKind(he.status)
	case errors.As(err, &se):
		return streamErrorKind(se)
	case errors.Is(err, context.Canceled):
		return KindRejected // the caller's end, not the server's
	}
	return KindTransient // the network, a timeout, a stream cut short
}

// statusKind classifies an HTTP error status: 429 is a rate limit; 408,
// 409 (a lock held a moment), 425, 5xx and 529 (overloaded) may pass;
// every other 4xx is the request's own fault.
func statusKind(status int) Kind {
	switch {
	case status == http.StatusTooManyRequests:
		return KindRateLimited
	case status == http.StatusRequestTimeout, status == http.StatusConflict, status == http.StatusTooEarly, status >= 500:
		return KindTransient
	}
	return KindRejected
}

// streamErrorKind classifies an error sent inside a stream, by its code or
// its type.
func streamErrorKind(e *streamError) Kind {
	if e.status >= 400 {
		return statusKind(e.status)
	}
	switch e.typ {
	case "rate_limit_error", "rate_limit_exceeded", "requests", "tokens":
		return KindRateLimited
	case "invalid_request_error", "authentication_error", "permission_error", "not_found_error", "request_too_large", "BadRequestError":
		return KindRejected
	}
	return KindTransient // overloaded_error, api_error, server_error, unknown
}
