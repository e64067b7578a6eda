package rest

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
)

// Challenge is the WWW-Authenticate header of a 401: the API takes a
// bearer token (the API key).
const Challenge = `Bearer realm="agentmesh"`

// WriteError answers err over HTTP the way every agentmesh door does: the
// HTTP status of its gRPC code (runtime.HTTPStatusFromCode: InvalidArgument
// and FailedPrecondition 400, Unauthenticated 401, PermissionDenied 403,
// NotFound 404, AlreadyExists and Aborted 409, ResourceExhausted 429 (413
// when it names a field of the request: a value over its limit),
// Unavailable 503, ...) and its google.rpc.Status as JSON
// ({"code", "message", "details"}). A 401 carries WWW-Authenticate: Bearer;
// a status with a RetryInfo detail a Retry-After header. An error that is
// no gRPC status is an internal error (its text is not sent).
func WriteError(w http.ResponseWriter, r *http.Request, err error) {
	st, ok := status.FromError(err)
	if !ok {
		st = status.New(codes.Internal, "internal error")
	}
	writeStatus(w, st, httpStatus(st))
}

// httpStatus is the HTTP status of st: runtime.HTTPStatusFromCode, but a
// ResourceExhausted that names a field of the request (a value over its
// size or count limit) is 413, not 429: sending it again will not help.
func httpStatus(st *status.Status) int {
	if st.Code() == codes.ResourceExhausted && fieldOf(st) != "" {
		return http.StatusRequestEntityTooLarge
	}
	return runtime.HTTPStatusFromCode(st.Code())
}

// fieldOf is the first field st's BadRequest detail names ("" if none).
func fieldOf(st *status.Status) string {
	for _, d := range st.Details() {
		if br, ok := d.(*errdetails.BadRequest); ok && len(br.GetFieldViolations()) > 0 {
			return br.GetFieldViolations()[0].GetField()
		}
	}
	return ""
}

// writeStatus writes st with the HTTP status code httpStatus.
func writeStatus(w http.ResponseWriter, st *status.Status, httpStatus int) {
	h := w.Header()
	h.Del("Trailer")
	h.Set("Content-Type", "application/json")
	h.Set("X-Content-Type-Options", "nosniff")
	if st.Code() == codes.Unauthenticated {
		h.Set("WWW-Authenticate", Challenge)
	}
	if d, ok := retryAfter(st); ok {
		h.Set("Retry-After", strconv.Itoa(d))
	}
	body, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(st.Proto())
	if err != nil {
		body = []byte(`{"code":13,"message":"internal error"}`)
		httpStatus = http.StatusInternalServerError
	}
	w.WriteHeader(httpStatus)
	_, _ = w.Write(append(body, '\n'))
}

// retryAfter is the whole seconds (at least 1) of st's RetryInfo.
func retryAfter(st *status.Status) (int, bool) {
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok && ri.GetRetryDelay() != nil {
			secs := math.Ceil(ri.GetRetryDelay().AsDuration().Seconds())
			return max(1, int(secs)), true
		}
	}
	return 0, false
}

// gatewayError is the gateway's error handler: the router's statuses as
// they are; the gateway's own (a body or parameter that does not decode)
// reworded to name the field.
// Six parameters: grpc-gateway's runtime.ErrorHandlerFunc.
func gatewayError(_ context.Context, _ *runtime.ServeMux, _ runtime.Marshaler, w http.ResponseWriter, r *http.Request, err error) {
	if st, ok := status.FromError(err); ok && st.Code() == codes.InvalidArgument {
		body, _ := r.Context().Value(bodyKey{}).([]byte)
		if d := decodeError(st.Message(), body); d != nil {
			err = d.Err()
		}
	}
	WriteError(w, r, err)
}

var (
	// protojson: `unknown field "inptu"`, `invalid value for string field
	// input: 5`, `missing value for field page_size` ...
	jsonFieldRe = regexp.MustCompile(`(?:(?:unknown|duplicate) field "([^"]+)"|field ([A-Za-z0-9_.\[\]]+))`)
	// the gateway's query and path parameters: `parsing field "page_size": ...`,
	// `too many values for field "page_size": 1, 2`
	paramFieldRe = regexp.MustCompile(`^(?:parsing (?:field|list)|too many values for field) "([^"]+)"`)
)

// decodeError turns the gateway's failure to decode a request into a
// status whose message says where (the body or a parameter) and which
// field, with a BadRequest detail naming it; nil for any other message.
// The field of a body is its path in the body where protojson says the
// error is ("metadata.a", not the map entry's "value"), else the name
// protojson gives.
func decodeError(msg string, body []byte) *status.Status {
	var field, text string
	switch {
	case strings.HasPrefix(msg, "proto:"):
		text = "request body is not valid JSON for this call: " + strings.TrimSpace(strings.TrimPrefix(msg, "proto:"))
		if field = fieldAtError(body, msg); field == "" {
			field = "body" // the body as a whole (null, an array …) unless protojson names a field
			if m := jsonFieldRe.FindStringSubmatch(msg); m != nil {
				field = m[1] + m[2]
			}
		}
	case paramFieldRe.MatchString(msg):
		field = paramFieldRe.FindStringSubmatch(msg)[1]
		text = fmt.Sprintf("parameter %s: %s", field, msg)
	default:
		return nil
	}
	st := status.New(codes.InvalidArgument, text)
	if field == "" {
		return st
	}
	return withField(st, field)
}

// withField returns st with a BadRequest detail naming field (the router's
// invalid arguments carry the same).
func withField(st *status.Status, field string) *status.Status {
	d, err := st.WithDetails(&errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{{Field: field, Description: st.Message()}}})
	if err != nil {
		return st
	}
	return d
}

// routingError answers a path no endpoint serves (404) or a method the
// path does not take (405, with Allow naming those it takes). An OPTIONS
// request (no CORS preflight: Edge answers those) gets 204 with Allow.
// Six parameters: grpc-gateway's runtime.RoutingErrorHandlerFunc.
func routingError(_ context.Context, _ *runtime.ServeMux, _ runtime.Marshaler, w http.ResponseWriter, r *http.Request, httpStatus int) {
	if allow := allowedMethods(r.URL.EscapedPath()); len(allow) > 0 && (r.Method == http.MethodOptions || !slices.Contains(allow, r.Method)) {
		w.Header().Set("Allow", strings.Join(allow, ", "))
		if r.Method == http.MethodOptions {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		writeStatus(w, status.Newf(codes.Unimplemented, "%s %s: method not allowed (this path takes %s)", r.Method, r.URL.EscapedPath(), strings.Join(allow, ", ")), http.StatusMethodNotAllowed)
		return
	}
	switch httpStatus {
	case http.StatusNotFound, http.StatusMethodNotAllowed:
		writeStatus(w, status.Newf(codes.NotFound, "no endpoint %s %s (the API is described at /v1/openapi.json)", r.Method, r.URL.EscapedPath()), http.StatusNotFound)
	default:
		writeStatus(w, status.Newf(codes.InvalidArgument, "bad request path %q", r.URL.Path), http.StatusBadRequest)
	}
}
