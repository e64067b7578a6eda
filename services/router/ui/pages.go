package ui

import (
	"bytes"
	"html/template"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sort"
	"strings"

	"github.com/agentmesh/agentmesh/services/router"
)

// The pages the server renders itself: the sign-in page, the shell every
// dashboard page shares (header, navigation, who is signed in; the page's
// module fills <main>), and messages. html/template escapes every value.

// pageData is what the templates show.
type pageData struct {
	Title   string
	Message string
	Next    string
	Page    string // the navigation's current page
	CSRF    string
	KeyName string
	Org     string
	Role    string
	Status  int // the HTTP status the shell is served with
	Nav     []navItem
	Static  string   // where the current front end is (versioned, immutable)
	Modules []string // the ES modules the shell preloads
}

type navItem struct {
	Page, Label string
}

var navigation = []navItem{
	{"tasks", "Tasks"}, {"approvals", "Approvals"}, {"agents", "Agents"}, {"skills", "Skills"},
	{"proposals", "Proposals"}, {"metrics", "Metrics"}, {"memory", "Memory"}, {"executors", "Executors"},
}

var templates = template.Must(template.New("").ParseFS(embedded, "templates/*.html"))

// page renders template name with data, answering code.
func (d *Dashboard) page(w http.ResponseWriter, code int, name string, data pageData) {
	data.Static = d.assets.base()
	var b bytes.Buffer
	if err := templates.ExecuteTemplate(&b, name+".html", data); err != nil {
		d.log.Error("dashboard: render", "page", name, "err", err)
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_, _ = w.Write(b.Bytes())
}

// safeNext is where to go after signing in: a dashboard path, else the
// task list (never another site, nor — by a "." or ".." segment, escaped
// or not, which a browser resolves — another path of this one).
func safeNext(next string) string {
	if !strings.HasPrefix(next, Prefix) || strings.HasPrefix(next, "//") || strings.ContainsAny(next, "\\\r\n") ||
		strings.HasPrefix(next, "/ui/api/") || strings.HasPrefix(next, "/ui/sign") {
		return Prefix
	}
	u, err := url.Parse(next)
	if err != nil || u.Scheme != "" || u.Host != "" || u.Opaque != "" {
		return Prefix
	}
	for _, seg := range strings.Split(u.Path, "/") {
		if seg == "." || seg == ".." {
			return Prefix
		}
	}
	return next
}

func (d *Dashboard) signinPage(w http.ResponseWriter, r *http.Request) {
	d.page(w, http.StatusOK, "signin", pageData{Title: "Sign in", Next: safeNext(r.URL.Query().Get("next"))})
}

// signin checks the key with the router and opens a session.
func (d *Dashboard) signin(w http.ResponseWriter, r *http.Request) {
	next := safeNext(r.PostFormValue("next"))
	if !sameOrigin(r) {
		d.page(w, http.StatusForbidden, "signin", pageData{Title: "Sign in", Next: next, Message: "Sign in from the dashboard's own page."})
		return
	}
	key := strings.TrimSpace(r.PostFormValue("key"))
	if key == "" {
		d.page(w, http.StatusUnauthorized, "signin", pageData{Title: "Sign in", Next: next, Message: "Enter an API key."})
		return
	}
	if d.signins.limited(r.RemoteAddr, d.now()) {
		w.Header().Set("Retry-After", "1")
		d.page(w, http.StatusTooManyRequests, "signin", pageData{Title: "Sign in", Next: next, Message: "Too many failed sign-ins: wait a moment."})
		return
	}
	if _, err := d.api.Authenticate(keyRequest(r, key)); err != nil {
		d.signins.failed(r.RemoteAddr, d.now()) // only failures count
		d.page(w, http.StatusUnauthorized, "signin", pageData{Title: "Sign in", Next: next, Message: "That API key is not valid."})
		return
	}
	if err := d.keys.setCookie(w, r, newSession(key, d.now())); err != nil {
		d.refuse(w, r, http.StatusInternalServerError, "the session could not be opened")
		return
	}
	http.Redirect(w, r, next, http.StatusSeeOther)
}

func (d *Dashboard) signout(w http.ResponseWriter, r *http.Request) {
	d.keys.end(sessionFrom(r.Context()).s, d.now())
	clearCookie(w, r)
	http.Redirect(w, r, "/ui/signin", http.StatusSeeOther)
}

// switchOrg sets the org a platform key reads (empty: none).
func (d *Dashboard) switchOrg(w http.ResponseWriter, r *http.Request) {
	si := sessionFrom(r.Context())
	if si.caller.Role != router.RolePlatform {
		d.refuse(w, r, http.StatusForbidden, "only a platform key may switch orgs; a key of an org sees its own")
		return
	}
	org := strings.TrimSpace(r.PostFormValue("org"))
	if org != "" && !router.ValidOrg(org) {
		d.refuse(w, r, http.StatusBadRequest, "org: 1-63 lower-case letters and digits with single hyphens between")
		return
	}
	si.s.Org, si.s.Seen = org, d.now().Unix()
	if err := d.keys.setCookie(w, r, si.s); err != nil {
		d.refuse(w, r, http.StatusInternalServerError, "the session could not be saved")
		return
	}
	http.Redirect(w, r, Prefix, http.StatusSeeOther)
}

// shell serves a dashboard page: the shared shell, its module draws it.
func (d *Dashboard) shell(w http.ResponseWriter, r *http.Request) {
	d.serveShell(w, r, http.StatusOK)
}

// taskShell serves a task's page, 404 when the task is not the caller's
// org's (the page then says so): the REST API's own GetTask decides.
func (d *Dashboard) taskShell(w http.ResponseWriter, r *http.Request) {
	si := sessionFrom(r.Context())
	id := r.PathValue("id")
	get := (&http.Request{Method: http.MethodGet, Header: http.Header{}, Host: r.Host, RemoteAddr: r.RemoteAddr,
		URL: &url.URL{Path: "/v1/tasks/" + id, RawPath: "/v1/tasks/" + url.PathEscape(id)}}).WithContext(r.Context())
	get = keyRequest(get, si.s.Key)
	if si.s.Org != "" {
		get.Header.Set(router.OrgHeader, si.s.Org)
	}
	rec := httptest.NewRecorder()
	d.rest.ServeHTTP(rec, get)
	code := http.StatusOK
	if rec.Code == http.StatusNotFound || rec.Code == http.StatusBadRequest {
		code = http.StatusNotFound
	}
	d.serveShell(w, r, code)
}

func (d *Dashboard) serveShell(w http.ResponseWriter, r *http.Request, code int) {
	si := sessionFrom(r.Context())
	page := strings.SplitN(strings.TrimPrefix(r.URL.Path, Prefix), "/", 2)[0]
	if page == "" {
		page = "tasks"
	}
	org := si.caller.Org
	if si.s.Org != "" {
		org = si.s.Org
	}
	d.page(w, code, "shell", pageData{
		Title: page, Page: page, CSRF: si.s.CSRF, KeyName: si.caller.KeyName, Org: org,
		Role: si.caller.Role.String(), Status: code, Nav: navigation, Modules: d.assets.modules,
	})
}

// notFound answers what no route of the dashboard serves: 405 with Allow
// when the path is served for other methods (OPTIONS: 204 with Allow),
// else the not-found page.
func (d *Dashboard) notFound(w http.ResponseWriter, r *http.Request) {
	if allow := d.allowed(r); len(allow) > 0 {
		w.Header().Set("Allow", strings.Join(allow, ", "))
		if r.Method == http.MethodOptions {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		d.refuse(w, r, http.StatusMethodNotAllowed, r.Method+" is not allowed here (this path takes "+strings.Join(allow, ", ")+")")
		return
	}
	d.page(w, http.StatusNotFound, "message", pageData{Title: "Not found", Message: "There is no such page in the dashboard."})
}

// allowed are the methods a route of the dashboard serves r's path for
// (none when only the not-found page does).
func (d *Dashboard) allowed(r *http.Request) []string {
	var out []string
	for _, m := range []string{http.MethodGet, http.MethodHead, http.MethodPost} {
		probe := &http.Request{Method: m, URL: r.URL, Host: r.Host, Header: http.Header{}}
		if _, pattern := d.mux.Handler(probe); pattern != "" && pattern != Prefix {
			out = append(out, m)
		}
	}
	if len(out) > 0 {
		out = append(out, http.MethodOptions)
		sort.Strings(out)
	}
	return out
}
