package bus

import (
	"errors"

	busv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/bus/v1"
	"github.com/agentmesh/agentmesh/pkg/buserr"
)

// The error type and its codes live in package buserr (a leaf the agent
// child can link without the bus client); these are the same names.

// Codes of errors that cross the bus. They are data: a caller matches the
// code (errors.Is against the sentinels below), never the text.
const (
	CodeInvalidArgument    = buserr.CodeInvalidArgument
	CodeNotFound           = buserr.CodeNotFound
	CodeAlreadyExists      = buserr.CodeAlreadyExists
	CodeFailedPrecondition = buserr.CodeFailedPrecondition
	// CodeConflict: a compare-and-set lost (the state moved on); the caller
	// may re-read and retry.
	CodeConflict          = buserr.CodeConflict
	CodeResourceExhausted = buserr.CodeResourceExhausted
	CodeUnavailable       = buserr.CodeUnavailable
	CodeInternal          = buserr.CodeInternal
	// CodePermissionDenied: the caller may not do this (e.g. an org changing
	// a shared agent).
	CodePermissionDenied = buserr.CodePermissionDenied
)

// Error is an error that crosses the bus (buserr.Error).
type Error = buserr.Error

// Sentinels, one per code (buserr's).
var (
	ErrInvalidArgument    = buserr.ErrInvalidArgument
	ErrNotFound           = buserr.ErrNotFound
	ErrAlreadyExists      = buserr.ErrAlreadyExists
	ErrFailedPrecondition = buserr.ErrFailedPrecondition
	ErrConflict           = buserr.ErrConflict
	ErrResourceExhausted  = buserr.ErrResourceExhausted
	ErrUnavailable        = buserr.ErrUnavailable
	ErrInternal           = buserr.ErrInternal
	ErrPermissionDenied   = buserr.ErrPermissionDenied
)

// Errorf returns an *Error with code and a formatted message.
func Errorf(code, format string, args ...any) *Error { return buserr.Errorf(code, format, args...) }

// FieldError returns an invalid_argument error about one field.
func FieldError(field, format string, args ...any) *Error {
	return buserr.FieldError(field, format, args...)
}

// CodeOf returns the bus code of err: its own if it carries one, else internal.
func CodeOf(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return CodeInternal
}

// ToProto converts err for the wire.
func ToProto(err error) *busv1.Error {
	var e *Error
	if errors.As(err, &e) {
		return &busv1.Error{Code: e.Code, Message: e.Message, Field: e.Field}
	}
	return &busv1.Error{Code: CodeInternal, Message: err.Error()}
}

// FromProto converts a wire error back.
func FromProto(p *busv1.Error) *Error {
	if p == nil || p.Code == "" {
		return &Error{Code: CodeInternal, Message: "error without a code"}
	}
	return &Error{Code: p.Code, Message: p.Message, Field: p.Field}
}
