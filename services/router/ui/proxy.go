package ui

import (
	"encoding/json"
	"net/http"
	"strings"

	"github.com/agentmesh/agentmesh/services/router"
)

// The dashboard's API: /ui/api/v1/... is the REST API's /v1/... called
// with the session's key (and, for a platform key, the org it chose), so a
// page's data and actions are exactly what that key may read and do over
// REST — the router's roles, org checks, rate limits, validation and
// errors. Event streams pass through as they are (text/event-stream).

// apiPrefix is the dashboard API's path prefix.
const apiPrefix = "/ui/api"

// proxy serves /ui/api/v1/... through the REST API as the session's key.
func (d *Dashboard) proxy(w http.ResponseWriter, r *http.Request) {
	si := sessionFrom(r.Context())
	path := strings.TrimPrefix(r.URL.Path, apiPrefix)
	if !strings.HasPrefix(path, "/v1/") {
		d.refuse(w, r, http.StatusNotFound, "the dashboard's API is /ui/api/v1/...: the REST API's paths")
		return
	}
	out := keyRequest(r, si.s.Key)
	// The escaped path too: an escaped "/" or ".." in an id stays inside
	// its segment (the REST API refuses the id), never a path of its own.
	out.URL.Path, out.URL.RawPath = path, strings.TrimPrefix(r.URL.EscapedPath(), apiPrefix)
	out.RequestURI = ""
	if si.s.Org != "" && !strings.HasPrefix(path, "/v1/executors") {
		out.Header.Set(router.OrgHeader, si.s.Org)
	}
	w.Header().Set("Cache-Control", "no-store")
	d.rest.ServeHTTP(w, out)
}

// jsonError is the body of a refusal: a google.rpc.Status, as the REST
// API's errors are.
func jsonError(httpCode int, msg string) []byte {
	code := 2 // UNKNOWN
	switch httpCode {
	case http.StatusUnauthorized:
		code = 16 // UNAUTHENTICATED
	case http.StatusForbidden:
		code = 7 // PERMISSION_DENIED
	case http.StatusNotFound:
		code = 5 // NOT_FOUND
	case http.StatusMethodNotAllowed:
		code = 12 // UNIMPLEMENTED
	case http.StatusBadRequest:
		code = 3 // INVALID_ARGUMENT
	case http.StatusTooManyRequests:
		code = 8 // RESOURCE_EXHAUSTED
	}
	b, _ := json.Marshal(map[string]any{"code": code, "message": msg, "details": []any{}})
	return b
}
