package router

import (
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
)

// A value over its limit is ResourceExhausted naming the field (a
// BadRequest detail, as an invalid argument has), which the REST door
// answers 413: a 429 would tell the client to send it again.
func TestHTTPValueOverLimit(t *testing.T) {
	e, c := startHTTP(t, Config{})
	for _, tc := range []struct{ body, field string }{
		{`{"input": "` + strings.Repeat("x", 300<<10) + `"}`, "input"},
		{`{"input": "x", "idempotency_key": "` + strings.Repeat("k", 5000) + `"}`, "idempotency_key"},
	} {
		r := c.Do(t, "POST", "/v1/tasks", tc.body)
		wantStatus(t, r, 413, codes.ResourceExhausted, "over the limit", tc.field)
		if r.Header.Get("Retry-After") != "" {
			t.Errorf("%s: Retry-After %q on a request that will never fit", tc.field, r.Header.Get("Retry-After"))
		}
	}
	if n := e.fake.count("create"); n != 0 {
		t.Errorf("%d tasks created by refused requests, want 0", n)
	}
}
