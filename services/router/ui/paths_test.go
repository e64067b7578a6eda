package ui

import (
	"encoding/json"
	"net/http"
	"testing"
)

// A task page's id may hold what no URL holds raw (NUL, a control, a
// space, an escaped "/"): the page is served like any other id's (the REST
// API decides whether the task is there), never a dropped connection.
func TestTaskPageOddIDs(t *testing.T) {
	h := newHarness(t, Config{})
	c, _ := h.signIn(t, "k-admin")
	for _, p := range []string{"/ui/tasks/%00", "/ui/tasks/a%20b%7F", "/ui/tasks/x%2Fcancel", "/ui/tasks/%2e%2e"} {
		if resp := h.do(t, "GET", p, "", nil, c); resp.StatusCode != http.StatusOK {
			t.Errorf("%s: %d, want the page", p, resp.StatusCode)
		}
	}
}

// The dashboard's API hands the REST API the path as it was escaped: an
// escaped "/" or ".." stays inside its segment (the REST API then refuses
// the id), never a path of its own nor a redirect elsewhere.
func TestProxyKeepsEscapes(t *testing.T) {
	h := newHarness(t, Config{})
	c, _ := h.signIn(t, "k-admin")
	for p, want := range map[string]string{
		"/ui/api/v1/tasks/x%2Fcancel":         "/v1/tasks/x%2Fcancel",
		"/ui/api/v1/tasks/%2e%2e%2fversion":   "/v1/tasks/%2e%2e%2fversion",
		"/ui/api/v1/agents/a%20b":             "/v1/agents/a%20b",
		"/ui/api/v1/tasks?statuses=a%2Fb&x=1": "/v1/tasks",
	} {
		resp := h.do(t, "GET", p, "", nil, c)
		var got map[string]string
		if err := json.NewDecoder(resp.Body).Decode(&got); err != nil || got["escaped"] != want {
			t.Errorf("%s reached the REST API as %q (%v), want %q", p, got["escaped"], err, want)
		}
	}
}

// A dashboard path asked with a method it does not take is 405 naming the
// methods it does (OPTIONS: 204 with them), not the not-found page.
func TestMethodNotAllowed(t *testing.T) {
	h := newHarness(t, Config{})
	for _, tc := range []struct {
		method, path string
		code         int
		allow        string
	}{
		{"POST", "/ui/static/app.css", 405, "GET, HEAD, OPTIONS"},
		{"DELETE", "/ui/tasks", 405, "GET, HEAD, OPTIONS"},
		{"PUT", "/ui/signin", 405, "GET, HEAD, OPTIONS, POST"},
		{"GET", "/ui/signout", 405, "OPTIONS, POST"},
		{"OPTIONS", "/ui/tasks/T1", 204, "GET, HEAD, OPTIONS"},
		{"POST", "/ui/nope", 404, ""},
	} {
		resp := h.do(t, tc.method, tc.path, "", nil, nil)
		if resp.StatusCode != tc.code || resp.Header.Get("Allow") != tc.allow {
			t.Errorf("%s %s: %d Allow %q, want %d Allow %q", tc.method, tc.path, resp.StatusCode, resp.Header.Get("Allow"), tc.code, tc.allow)
		}
	}
}
