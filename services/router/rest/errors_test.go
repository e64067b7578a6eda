package rest

import (
	"net/http/httptest"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// A ResourceExhausted that names a field (a value over its limit) is 413:
// retrying will not help; one that names none (a rate, a count of open
// streams) stays 429.
func TestResourceExhaustedStatus(t *testing.T) {
	over, _ := status.New(codes.ResourceExhausted, "input: 300000 bytes is over the limit of 262144 bytes").
		WithDetails(&errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{{Field: "input", Description: "over"}}})
	for _, tc := range []struct {
		st   *status.Status
		code int
	}{
		{over, 413},
		{status.New(codes.ResourceExhausted, `org "acme" already has 256 WatchTask streams open`), 429},
	} {
		w := httptest.NewRecorder()
		WriteError(w, httptest.NewRequest("POST", "/v1/tasks", nil), tc.st.Err())
		if w.Code != tc.code {
			t.Errorf("%s: HTTP %d, want %d", tc.st.Message(), w.Code, tc.code)
		}
	}
}
