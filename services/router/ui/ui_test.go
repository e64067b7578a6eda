package ui

import (
	"crypto/tls"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/pkg/envconf"
	"github.com/agentmesh/agentmesh/services/router"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// fakeAPI stands in for the router: keys → callers, and a REST handler
// that answers what it was asked (path, bearer key, org header, cookies).
type fakeAPI struct {
	keys map[string]router.Caller
}

func (f *fakeAPI) Authenticate(r *http.Request) (router.Caller, error) {
	key := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
	if c, ok := f.keys[key]; ok {
		return c, nil
	}
	return router.Caller{}, status.Error(codes.Unauthenticated, "unknown API key")
}

func (f *fakeAPI) REST() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/v1/tasks/") && strings.Contains(r.URL.Path, "other") {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]string{
			"path": r.URL.Path, "query": r.URL.RawQuery, "auth": r.Header.Get("Authorization"), "org": r.Header.Get(router.OrgHeader),
			"cookie": r.Header.Get("Cookie"), "csrf": r.Header.Get(CSRFHeader), "method": r.Method, "escaped": r.URL.EscapedPath(),
		})
	})
}

var testKeys = map[string]router.Caller{
	"k-admin":  {KeyName: "admin", Org: "acme", Role: router.RoleAdmin},
	"k-reader": {KeyName: "reader", Org: "acme", Role: router.RoleReader},
	"k-plat":   {KeyName: "plat", Role: router.RolePlatform},
}

// harness is a dashboard on a test server, with a clock the test moves.
type harness struct {
	d   *Dashboard
	srv *httptest.Server
	api *fakeAPI
	now time.Time
}

func newHarness(t *testing.T, cfg Config) *harness {
	t.Helper()
	api := &fakeAPI{keys: map[string]router.Caller{}}
	for k, v := range testKeys {
		api.keys[k] = v
	}
	d, err := New(cfg, Deps{API: api, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{d: d, api: api, now: time.Now()}
	d.now = func() time.Time { return h.now }
	mux := http.NewServeMux()
	mux.Handle(Prefix, d)
	mux.Handle("GET /{$}", d.Root())
	h.srv = httptest.NewServer(mux)
	t.Cleanup(h.srv.Close)
	return h
}

// client does not follow redirects, so the tests see them.
func (h *harness) client() *http.Client {
	return &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

func (h *harness) do(t *testing.T, method, path string, body string, hdr map[string]string, cookie *http.Cookie) *http.Response {
	t.Helper()
	req, err := http.NewRequest(method, h.srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	if cookie != nil {
		req.AddCookie(cookie)
	}
	resp, err := h.client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = resp.Body.Close() })
	return resp
}

func sessionCookie(resp *http.Response) *http.Cookie {
	for _, c := range resp.Cookies() {
		if c.Name == cookieName {
			return c
		}
	}
	return nil
}

// signIn signs key in and returns the session cookie and its CSRF token.
func (h *harness) signIn(t *testing.T, key string) (*http.Cookie, string) {
	t.Helper()
	resp := h.do(t, "POST", "/ui/signin", url.Values{"key": {key}}.Encode(), map[string]string{"Origin": h.srv.URL}, nil)
	c := sessionCookie(resp)
	if resp.StatusCode != http.StatusSeeOther || c == nil {
		t.Fatalf("sign in with %s: %d %v", key, resp.StatusCode, resp.Header)
	}
	s, err := h.d.keys.open(c.Value, h.now)
	if err != nil {
		t.Fatalf("the cookie does not open: %v", err)
	}
	return c, s.CSRF
}

func body(t *testing.T, resp *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// Without a session a page sends to the sign-in page and the API answers
// 401: never data. A wrong key does not sign in; a good one gets a sealed,
// HttpOnly, SameSite=Strict cookie that is not the key.
func TestSignIn(t *testing.T) {
	h := newHarness(t, Config{})
	resp := h.do(t, "GET", "/ui/tasks", "", nil, nil)
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/ui/signin?next=%2Fui%2Ftasks" {
		t.Errorf("page without a session: %d %s, want 303 to the sign-in page", resp.StatusCode, resp.Header.Get("Location"))
	}
	resp = h.do(t, "GET", "/ui/api/v1/tasks", "", nil, nil)
	if b := body(t, resp); resp.StatusCode != http.StatusUnauthorized || strings.Contains(b, "path") {
		t.Errorf("API without a session: %d %s, want 401 and no data", resp.StatusCode, b)
	}
	for _, key := range []string{"", "k-wrong"} {
		resp = h.do(t, "POST", "/ui/signin", url.Values{"key": {key}}.Encode(), map[string]string{"Origin": h.srv.URL}, nil)
		if resp.StatusCode != http.StatusUnauthorized || sessionCookie(resp) != nil {
			t.Errorf("sign in with %q: %d, cookie %v; want 401 and none", key, resp.StatusCode, sessionCookie(resp))
		}
	}
	resp = h.do(t, "POST", "/ui/signin", url.Values{"key": {"k-admin"}, "next": {"//evil.example/x"}}.Encode(), map[string]string{"Origin": h.srv.URL}, nil)
	c := sessionCookie(resp)
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/ui/" || c == nil {
		t.Fatalf("good key: %d to %q, cookie %v; want 303 to /ui/ (next refused) with a cookie", resp.StatusCode, resp.Header.Get("Location"), c)
	}
	if !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.Path != "/ui/" || c.Secure || strings.Contains(c.Value, "k-admin") {
		t.Errorf("cookie %+v: want HttpOnly, SameSite=Strict, Path /ui/, not Secure over plain HTTP, the key sealed", c)
	}
	resp = h.do(t, "GET", "/ui/api/v1/tasks?page_size=5", "", nil, c)
	var got map[string]string
	if err := json.Unmarshal([]byte(body(t, resp)), &got); err != nil || got["path"] != "/v1/tasks" || got["query"] != "page_size=5" ||
		got["auth"] != "Bearer k-admin" || got["cookie"] != "" {
		t.Errorf("API with the session: %v %v, want /v1/tasks as the session's key, no cookie passed on", got, err)
	}
	// A sign-in from another site's page is refused.
	resp = h.do(t, "POST", "/ui/signin", url.Values{"key": {"k-admin"}}.Encode(), map[string]string{"Origin": "http://evil.example"}, nil)
	if resp.StatusCode != http.StatusForbidden || sessionCookie(resp) != nil {
		t.Errorf("cross-origin sign-in: %d, want 403 and no cookie", resp.StatusCode)
	}
}

// Over TLS the cookie is Secure.
func TestCookieSecureOverTLS(t *testing.T) {
	h := newHarness(t, Config{})
	w := httptest.NewRecorder()
	r := httptest.NewRequest("POST", "https://dash.example/ui/signin", strings.NewReader("key=k-admin"))
	r.TLS = &tls.ConnectionState{}
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	r.Header.Set("Origin", "https://dash.example")
	h.d.ServeHTTP(w, r)
	c := sessionCookie(w.Result())
	if c == nil || !c.Secure {
		t.Fatalf("cookie over TLS: %+v, want Secure", c)
	}
}

// Every change (any method but GET) needs the session's CSRF token and a
// same-origin Origin or Referer.
func TestCSRF(t *testing.T) {
	h := newHarness(t, Config{})
	c, token := h.signIn(t, "k-admin")
	for _, tc := range []struct {
		name string
		hdr  map[string]string
		want int
	}{
		{"no token", map[string]string{"Origin": h.srv.URL}, http.StatusForbidden},
		{"wrong token", map[string]string{"Origin": h.srv.URL, CSRFHeader: token + "x"}, http.StatusForbidden},
		{"another site", map[string]string{"Origin": "http://evil.example", CSRFHeader: token}, http.StatusForbidden},
		{"no origin or referer", map[string]string{CSRFHeader: token}, http.StatusForbidden},
		{"referer of another site", map[string]string{"Referer": "http://evil.example/ui/", CSRFHeader: token}, http.StatusForbidden},
		{"good", map[string]string{"Origin": h.srv.URL, CSRFHeader: token}, http.StatusOK},
		{"good, by referer", map[string]string{"Referer": h.srv.URL + "/ui/tasks", CSRFHeader: token}, http.StatusOK},
	} {
		resp := h.do(t, "POST", "/ui/api/v1/tasks", "", tc.hdr, c)
		b := body(t, resp)
		if resp.StatusCode != tc.want {
			t.Errorf("%s: %d %s, want %d", tc.name, resp.StatusCode, b, tc.want)
		}
		if tc.want == http.StatusForbidden && strings.Contains(b, `"path"`) {
			t.Errorf("%s: the REST API was called: %s", tc.name, b)
		}
		if tc.want == http.StatusOK && !strings.Contains(b, `"csrf":""`) {
			t.Errorf("%s: the token was passed on to the REST API: %s", tc.name, b)
		}
	}
	// A plain form carries the token as a field (sign out).
	resp := h.do(t, "POST", "/ui/signout", "", map[string]string{"Origin": h.srv.URL}, c)
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("sign out without the token: %d, want 403", resp.StatusCode)
	}
	resp = h.do(t, "POST", "/ui/signout", url.Values{CSRFField: {token}}.Encode(), map[string]string{"Origin": h.srv.URL}, c)
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("sign out with the token: %d, want 303", resp.StatusCode)
	}
	// Signed out: the same cookie no longer works (on this replica).
	if resp := h.do(t, "GET", "/ui/api/v1/tasks", "", nil, c); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("after sign out: %d, want 401", resp.StatusCode)
	}
}

// Sessions end: idle, at their absolute age, when the key is revoked, and
// when the cookie was sealed under another secret or changed.
func TestSessionsExpire(t *testing.T) {
	h := newHarness(t, Config{IdleTimeout: 10 * time.Minute, MaxAge: time.Hour})
	get := func(c *http.Cookie) *http.Response { return h.do(t, "GET", "/ui/api/v1/tasks", "", nil, c) }
	c, _ := h.signIn(t, "k-admin")
	start := h.now
	h.now = start.Add(9 * time.Minute)
	resp := get(c)
	renewed := sessionCookie(resp)
	if resp.StatusCode != http.StatusOK || renewed == nil {
		t.Fatalf("after 9 idle minutes: %d, renewed %v; want 200 and a renewed cookie", resp.StatusCode, renewed)
	}
	h.now = start.Add(18 * time.Minute)
	if resp := get(c); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("the old cookie 18 minutes on (idle 18): %d, want 401", resp.StatusCode)
	}
	resp = get(renewed)
	if resp.StatusCode != http.StatusOK || sessionCookie(resp) == nil {
		t.Fatalf("the renewed cookie (idle 9): %d, want 200 and renewed again", resp.StatusCode)
	}
	// Used every few minutes, it still ends an hour after sign-in.
	cur := sessionCookie(resp)
	for _, m := range []int{24, 30, 36, 42, 48, 54, 59, 61, 66} {
		h.now = start.Add(time.Duration(m) * time.Minute)
		resp := get(cur)
		if n := sessionCookie(resp); n != nil && n.Value != "" {
			cur = n
		}
		if want := m < 60; (resp.StatusCode == http.StatusOK) != want {
			t.Errorf("minute %d: %d, want ok %v", m, resp.StatusCode, want)
		}
	}
	// A revoked key ends its sessions at once.
	h.now = time.Now()
	h.d.now = func() time.Time { return h.now }
	c2, _ := h.signIn(t, "k-reader")
	delete(h.api.keys, "k-reader")
	if resp := get(c2); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("revoked key: %d, want 401", resp.StatusCode)
	}
	// Another secret, or a changed cookie: no session.
	c3, _ := h.signIn(t, "k-admin")
	other := newHarness(t, Config{Secret: []byte(strings.Repeat("s", 32))})
	if resp := other.do(t, "GET", "/ui/api/v1/tasks", "", nil, c3); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("a cookie of another secret: %d, want 401", resp.StatusCode)
	}
	bad := *c3
	bad.Value = c3.Value[:len(c3.Value)-2] + "AA"
	if resp := get(&bad); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("a changed cookie: %d, want 401", resp.StatusCode)
	}
}

// Two replicas with the same secret honour each other's sessions.
func TestSharedSecret(t *testing.T) {
	secret := []byte("a-secret-of-at-least-32-bytes-123456")
	a, b := newHarness(t, Config{Secret: secret}), newHarness(t, Config{Secret: secret})
	c, token := a.signIn(t, "k-admin")
	if resp := b.do(t, "GET", "/ui/api/v1/agents", "", nil, c); resp.StatusCode != http.StatusOK {
		t.Errorf("replica b with a's session: %d, want 200", resp.StatusCode)
	}
	u, _ := url.Parse(b.srv.URL)
	if resp := b.do(t, "POST", "/ui/api/v1/tasks", "", map[string]string{"Origin": "http://" + u.Host, CSRFHeader: token}, c); resp.StatusCode != http.StatusOK {
		t.Errorf("replica b, a change with a's token: %d, want 200", resp.StatusCode)
	}
}

// A platform key chooses the org it reads; the API calls then name it
// (except the executors, the platform's own); a key of an org cannot.
func TestSwitchOrg(t *testing.T) {
	h := newHarness(t, Config{})
	c, token := h.signIn(t, "k-plat")
	hdr := map[string]string{"Origin": h.srv.URL}
	resp := h.do(t, "POST", "/ui/org", url.Values{"org": {"globex"}, CSRFField: {token}}.Encode(), hdr, c)
	next := sessionCookie(resp)
	if resp.StatusCode != http.StatusSeeOther || next == nil {
		t.Fatalf("switch: %d, want 303 and a new cookie", resp.StatusCode)
	}
	var got map[string]string
	_ = json.Unmarshal([]byte(body(t, h.do(t, "GET", "/ui/api/v1/tasks", "", nil, next))), &got)
	if got["org"] != "globex" {
		t.Errorf("tasks after switching: org header %q, want globex", got["org"])
	}
	_ = json.Unmarshal([]byte(body(t, h.do(t, "GET", "/ui/api/v1/executors", "", nil, next))), &got)
	if got["org"] != "" {
		t.Errorf("executors: org header %q, want none", got["org"])
	}
	if resp := h.do(t, "POST", "/ui/org", url.Values{"org": {"Bad Org"}, CSRFField: {token}}.Encode(), hdr, next); resp.StatusCode != http.StatusBadRequest {
		t.Errorf("a bad org: %d, want 400", resp.StatusCode)
	}
	ca, ta := h.signIn(t, "k-admin")
	if resp := h.do(t, "POST", "/ui/org", url.Values{"org": {"globex"}, CSRFField: {ta}}.Encode(), hdr, ca); resp.StatusCode != http.StatusForbidden {
		t.Errorf("an org's key switching: %d, want 403", resp.StatusCode)
	}
}

// The shell: the navigation and who is signed in, values escaped; a task
// the REST API does not find is a 404 page. Every response carries the
// security headers.
func TestShell(t *testing.T) {
	h := newHarness(t, Config{})
	h.api.keys["k-xss"] = router.Caller{KeyName: `<script>alert(1)</script>`, Org: "acme", Role: router.RoleAdmin}
	c, token := h.signIn(t, "k-xss")
	resp := h.do(t, "GET", "/ui/approvals", "", nil, c)
	b := body(t, resp)
	if resp.StatusCode != http.StatusOK || !strings.Contains(b, `href="/ui/approvals" aria-current="page"`) || !strings.Contains(b, token) ||
		strings.Contains(b, "<script>alert") || !strings.Contains(b, "&lt;script&gt;alert(1)&lt;/script&gt;") {
		t.Errorf("shell: %d\n%s", resp.StatusCode, b)
	}
	csp := resp.Header.Get("Content-Security-Policy")
	for _, want := range []string{"script-src 'self'", "default-src 'none'", "require-trusted-types-for 'script'", "frame-ancestors 'none'"} {
		if !strings.Contains(csp, want) {
			t.Errorf("CSP %q lacks %q", csp, want)
		}
	}
	if strings.Contains(csp, "unsafe-inline") || strings.Contains(csp, "unsafe-eval") {
		t.Errorf("CSP %q allows inline or eval", csp)
	}
	if resp := h.do(t, "GET", "/ui/tasks/other-org-task", "", nil, c); resp.StatusCode != http.StatusNotFound {
		t.Errorf("another org's task: %d, want 404", resp.StatusCode)
	}
	if resp := h.do(t, "GET", "/ui/tasks/T1", "", nil, c); resp.StatusCode != http.StatusOK {
		t.Errorf("a task of the org: %d, want 200", resp.StatusCode)
	}
	for _, p := range []string{"/ui/nope", "/ui/api/v2/tasks"} {
		if resp := h.do(t, "GET", p, "", nil, c); resp.StatusCode != http.StatusNotFound || resp.Header.Get("Content-Security-Policy") == "" {
			t.Errorf("%s: %d, want 404 with the headers", p, resp.StatusCode)
		}
	}
}

// Browsers asking for / go to the dashboard; other clients get the REST
// API's answer.
func TestRoot(t *testing.T) {
	h := newHarness(t, Config{})
	resp := h.do(t, "GET", "/", "", map[string]string{"Accept": "text/html,application/xhtml+xml"}, nil)
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/ui/" {
		t.Errorf("browser at /: %d %s", resp.StatusCode, resp.Header.Get("Location"))
	}
	resp = h.do(t, "GET", "/", "", map[string]string{"Accept": "application/json"}, nil)
	if b := body(t, resp); !strings.Contains(b, `"path":"/"`) {
		t.Errorf("API client at /: %d %s, want the REST API's answer", resp.StatusCode, b)
	}
}

// The front end is served from the binary with a content hash as ETag.
func TestAssets(t *testing.T) {
	h := newHarness(t, Config{})
	resp := h.do(t, "GET", "/ui/static/js/app.js", "", nil, nil)
	etag := resp.Header.Get("ETag")
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/javascript") || etag == "" {
		t.Fatalf("app.js: %d %v", resp.StatusCode, resp.Header)
	}
	if resp := h.do(t, "GET", "/ui/static/js/app.js", "", map[string]string{"If-None-Match": etag}, nil); resp.StatusCode != http.StatusNotModified {
		t.Errorf("revalidation: %d, want 304", resp.StatusCode)
	}
	// The pages load the versioned, immutable copy.
	v := h.d.assets.base() + "/js/app.js"
	resp = h.do(t, "GET", v, "", nil, nil)
	if resp.StatusCode != http.StatusOK || !strings.Contains(resp.Header.Get("Cache-Control"), "immutable") || resp.Header.Get("ETag") != etag {
		t.Errorf("%s: %d %v, want the same file, immutable", v, resp.StatusCode, resp.Header)
	}
	c, _ := h.signIn(t, "k-admin")
	if b := body(t, h.do(t, "GET", "/ui/tasks", "", nil, c)); !strings.Contains(b, `<script type="module" src="`+v+`">`) ||
		!strings.Contains(b, `rel="modulepreload" href="`+h.d.assets.base()+`/js/tasks.js"`) {
		t.Errorf("the shell does not load %s (and preload the modules):\n%s", v, b)
	}
	for _, p := range []string{"/ui/static/nope.js", "/ui/static/../ui.go", "/ui/static/000000000000/js/app.js/x"} {
		if resp := h.do(t, "GET", p, "", nil, nil); resp.StatusCode == http.StatusOK {
			t.Errorf("%s: %d, want not found", p, resp.StatusCode)
		}
	}
}

// Failed sign-ins are rate limited per client; good keys are not
// counted, and one client's failures do not lock another out.
func TestSignInRate(t *testing.T) {
	h := newHarness(t, Config{})
	hdr := map[string]string{"Origin": h.srv.URL}
	var last int
	for range signinBurst + 1 {
		last = h.do(t, "POST", "/ui/signin", "key=wrong", hdr, nil).StatusCode
	}
	if last != http.StatusTooManyRequests {
		t.Errorf("sign-in %d after %d failures: %d, want 429", signinBurst+1, signinBurst, last)
	}
	// Another client (another loopback address) still signs in.
	other := h.client()
	other.Transport = &http.Transport{DialContext: (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}).DialContext}
	for key, want := range map[string]int{"wrong": http.StatusUnauthorized, "k-admin": http.StatusSeeOther} {
		req, _ := http.NewRequest("POST", h.srv.URL+"/ui/signin", strings.NewReader("key="+key))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Origin", h.srv.URL)
		resp, err := other.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("another client's sign-in with %s: %d, want %d", key, resp.StatusCode, want)
		}
	}
}

// A client is its IP address; an IPv6 one its /64.
func TestClientKey(t *testing.T) {
	for addr, want := range map[string]string{
		"192.0.2.7:5000":             "192.0.2.7",
		"[::ffff:192.0.2.7]:5000":    "192.0.2.7",
		"[2001:db8:1:2:3:4:5:6]:443": "2001:db8:1:2::/64",
		"[2001:db8:1:2:ff::1]:443":   "2001:db8:1:2::/64",
		"not an address":             "not an address",
	} {
		if got := clientKey(addr); got != want {
			t.Errorf("clientKey(%q) = %q, want %q", addr, got, want)
		}
	}
}

// ConfigFrom names the variable of a bad value.
func TestConfigFrom(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"AGENTMESH_UI_SECRET": "short"}, "AGENTMESH_UI_SECRET"},
		{map[string]string{"AGENTMESH_UI": "maybe"}, "AGENTMESH_UI"},
		{map[string]string{"AGENTMESH_UI_SESSION_IDLE": "10s"}, "AGENTMESH_UI_SESSION_IDLE"},
		{map[string]string{"AGENTMESH_UI_SESSION_MAX": "soon"}, "AGENTMESH_UI_SESSION_MAX"},
	} {
		if _, err := ConfigFrom(envconf.Map(tc.env)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want an error naming %s", tc.env, err, tc.want)
		}
	}
	c, err := ConfigFrom(envconf.Map(map[string]string{"AGENTMESH_UI": "off", "AGENTMESH_UI_SECRET": strings.Repeat("x", 40), "AGENTMESH_UI_SESSION_IDLE": "5m"}))
	if err != nil || !c.Off || len(c.Secret) != 40 || c.IdleTimeout != 5*time.Minute {
		t.Errorf("good config: %+v %v", c, err)
	}
}

// FuzzOpenSession: a cookie value from outside never opens unless it was
// sealed here, and never panics.
func FuzzOpenSession(f *testing.F) {
	k, err := newSealer(nil, time.Hour, time.Hour)
	if err != nil {
		f.Fatal(err)
	}
	good, _ := k.seal(newSession("key", time.Now()))
	for _, s := range []string{good, "v1.", "v1.AAAA", "", "v2." + good[3:], good + "A", strings.Repeat("A", 5000)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		s, err := k.open(v, time.Now())
		if err == nil && v != good {
			t.Fatalf("%q opened as %+v", v, s)
		}
	})
}

// FuzzSafeNext: where a sign-in goes is always a dashboard path.
func FuzzSafeNext(f *testing.F) {
	for _, s := range []string{"/ui/tasks", "//evil.example", "/ui/../x", "https://evil.example/ui/", "/ui/\\evil", "", "/ui/api/v1/tasks",
		"/ui/%2e%2e/x", "/ui/tasks/./../../x", "/ui/tasks?x=/../"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, next string) {
		got := safeNext(next)
		if !strings.HasPrefix(got, "/ui/") || strings.HasPrefix(got, "//") || strings.ContainsAny(got, "\\\r\n") {
			t.Fatalf("safeNext(%q) = %q", next, got)
		}
		u, err := url.Parse(got)
		if err != nil || u.Host != "" || u.Scheme != "" {
			t.Fatalf("safeNext(%q) = %q leaves the site", next, got)
		}
		// Where a browser goes: the path with its dot segments (escaped
		// ones too) resolved.
		base, _ := url.Parse("http://h/ui/signin")
		if to := base.ResolveReference(&url.URL{Path: u.Path}); !strings.HasPrefix(to.Path, "/ui/") {
			t.Fatalf("safeNext(%q) = %q sends the browser to %s", next, got, to.Path)
		}
	})
}
