// Package buserr holds the error type that crosses the bus (codes, not
// text) with no dependency beyond the standard library, so that packages
// linked into the agent child (pkg/taskstate through pkg/tools) can build
// such errors without pulling in the bus client, NATS and the metrics
// registry. Package bus re-exports everything here under the same names.
package buserr

import (
	"errors"
	"fmt"
)

// Codes of errors that cross the bus. They are data: a caller matches the
// code (errors.Is against the sentinels below), never the text.
const (
	CodeInvalidArgument    = "invalid_argument"
	CodeNotFound           = "not_found"
	CodeAlreadyExists      = "already_exists"
	CodeFailedPrecondition = "failed_precondition"
	// CodeConflict: a compare-and-set lost (the state moved on); the caller
	// may re-read and retry.
	CodeConflict          = "conflict"
	CodeResourceExhausted = "resource_exhausted"
	CodeUnavailable       = "unavailable"
	CodeInternal          = "internal"
	// CodePermissionDenied: the caller may not do this (e.g. an org changing
	// a shared agent).
	CodePermissionDenied = "permission_denied"
)

// Error is an error that crosses the bus.
type Error struct {
	Code    string
	Message string
	// Field names the request field the error is about, if any.
	Field string
}

func (e *Error) Error() string {
	if e.Field != "" {
		return fmt.Sprintf("%s: %s: %s", e.Code, e.Field, e.Message)
	}
	if e.Message == "" {
		return e.Code
	}
	return e.Code + ": " + e.Message
}

// Is matches errors by code, so errors.Is(err, bus.ErrNotFound) holds for
// any not_found error, local or received over the bus.
func (e *Error) Is(target error) bool {
	var t *Error
	if !errors.As(target, &t) {
		return false
	}
	return t.Code == e.Code && (t.Message == "" || t.Message == e.Message)
}

// Sentinels, one per code.
var (
	ErrInvalidArgument    = &Error{Code: CodeInvalidArgument}
	ErrNotFound           = &Error{Code: CodeNotFound}
	ErrAlreadyExists      = &Error{Code: CodeAlreadyExists}
	ErrFailedPrecondition = &Error{Code: CodeFailedPrecondition}
	ErrConflict           = &Error{Code: CodeConflict}
	ErrResourceExhausted  = &Error{Code: CodeResourceExhausted}
	ErrUnavailable        = &Error{Code: CodeUnavailable}
	ErrInternal           = &Error{Code: CodeInternal}
	ErrPermissionDenied   = &Error{Code: CodePermissionDenied}
)

// Errorf returns an *Error with code and a formatted message.
func Errorf(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// FieldError returns an invalid_argument error about one field.
func FieldError(field, format string, args ...any) *Error {
	return &Error{Code: CodeInvalidArgument, Field: field, Message: fmt.Sprintf(format, args...)}
}
