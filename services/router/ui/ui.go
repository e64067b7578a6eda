// Package ui is agentmesh's web dashboard, mounted at /ui/ on the router's
// HTTP listener: tasks live, a task's steps streaming with its tree, graph,
// usage and routing, approvals, agents and skills with their versions,
// proposals, metrics as charts, the org's memory (threads, long-term
// memories, working state), and the executor nodes.
//
// It owns no data and decides no access. A person signs in with an API key
// (POST /ui/signin, checked with the router's Authenticate); the key is
// sealed into an HttpOnly, SameSite=Strict session cookie (session.go) and
// every dashboard request becomes a call of the router's REST API with that
// key (GET|POST /ui/api/v1/... → /v1/..., proxy.go): the same keys, roles,
// org checks, rate limits, validation and event streams as every door
// (invariant 11). Live pages follow the REST API's Server-Sent Events: a
// task's WatchTask (/v1/tasks/{id}/events) and the org's WatchTasks
// (/v1/tasks:watch).
//
// The front end is static files embedded in the binary (static/, go:embed):
// framework-free ES modules that build the page with DOM calls (text
// nodes only: a value is never parsed as HTML) and draw charts and graphs
// as SVG. No CDN, no build step, no Node at run time. Every response
// carries a strict Content-Security-Policy (scripts from /ui/static only,
// no inline script, Trusted Types required so no string reaches an HTML
// sink), and every state-changing request must carry the session's CSRF
// token and come from the dashboard's own origin (guard.go).
package ui

import (
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/agentmesh/agentmesh/services/router"
)

// Prefix is the path the dashboard is mounted at.
const Prefix = "/ui/"

// API is what the dashboard needs of the router: who a request's key is,
// and the REST API to call as that key (router.Service has both).
type API interface {
	Authenticate(r *http.Request) (router.Caller, error)
	REST() http.Handler
}

// Deps are the dashboard's dependencies.
type Deps struct {
	API API
	Log *slog.Logger
}

// Dashboard is the /ui/ handler.
type Dashboard struct {
	api     API
	rest    http.Handler
	log     *slog.Logger
	keys    *sealer
	signins *signinLimiter // failed sign-ins, per client (signinrate.go)
	mux     *http.ServeMux
	assets  *assets
	now     func() time.Time
}

// signinRate bounds a client's failed sign-ins (per second, and the
// burst): enough for people mistyping, too few to try keys.
const (
	signinRate  = 5
	signinBurst = 20
)

// New builds the dashboard.
func New(cfg Config, deps Deps) (*Dashboard, error) {
	if deps.API == nil || deps.API.REST() == nil {
		return nil, errors.New("ui: Deps.API with a REST handler is required (the router needs an HTTP listener)")
	}
	if deps.Log == nil {
		return nil, errors.New("ui: Deps.Log is required")
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = DefaultIdleTimeout
	}
	if cfg.MaxAge <= 0 {
		cfg.MaxAge = DefaultMaxAge
	}
	if len(cfg.Secret) > 0 && len(cfg.Secret) < MinSecretBytes {
		return nil, errors.New("ui: Config.Secret must hold at least 32 bytes")
	}
	keys, err := newSealer(cfg.Secret, cfg.IdleTimeout, cfg.MaxAge)
	if err != nil {
		return nil, err
	}
	d := &Dashboard{api: deps.API, rest: deps.API.REST(), log: deps.Log, keys: keys,
		signins: newSigninLimiter(), now: time.Now}
	if err := d.routes(); err != nil {
		return nil, err
	}
	return d, nil
}

// pages are the dashboard's pages (the same shell; the page's module
// draws it from the path).
var pages = []string{"tasks", "approvals", "agents", "skills", "proposals", "metrics", "memory", "executors"}

func (d *Dashboard) routes() error {
	assets, err := newAssets()
	if err != nil {
		return err
	}
	d.assets = assets
	m := http.NewServeMux()
	m.Handle("GET /ui/static/", assets)
	m.HandleFunc("GET /ui/signin", d.signinPage)
	m.HandleFunc("POST /ui/signin", d.signin)
	m.Handle("POST /ui/signout", d.withSession(d.signout))
	m.Handle("POST /ui/org", d.withSession(d.switchOrg))
	m.Handle("/ui/api/", d.withSession(d.proxy))
	m.Handle("GET /ui/{$}", d.withSession(d.shell))
	for _, p := range pages {
		m.Handle("GET /ui/"+p, d.withSession(d.shell))
	}
	m.Handle("GET /ui/tasks/{id}", d.withSession(d.taskShell))
	m.Handle("GET /ui/agents/{name}", d.withSession(d.shell))
	m.HandleFunc("/ui/", d.notFound)
	d.mux = m
	return nil
}

// ServeHTTP serves /ui/ with the dashboard's security headers.
func (d *Dashboard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	secureHeaders(w.Header())
	d.mux.ServeHTTP(w, r)
}

// Root answers GET / for the listener: a browser (Accept: text/html) is
// sent to the dashboard, anything else gets the REST API's answer.
func (d *Dashboard) Root() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.Contains(r.Header.Get("Accept"), "text/html") {
			http.Redirect(w, r, Prefix, http.StatusSeeOther)
			return
		}
		d.rest.ServeHTTP(w, r)
	})
}

// Mount serves the dashboard on the router's HTTP listener at /ui/, and
// sends browsers asking for / there.
func Mount(svc *router.Service, cfg Config, log *slog.Logger) (*Dashboard, error) {
	d, err := New(cfg, Deps{API: svc, Log: log})
	if err != nil {
		return nil, err
	}
	if err := svc.Mount(Prefix, d); err != nil {
		return nil, err
	}
	if err := svc.Mount("GET /{$}", d.Root()); err != nil {
		return nil, err
	}
	return d, nil
}

// secureHeaders are on every dashboard response. The policy allows
// scripts, styles and connections to this origin only, no inline script
// or style attribute, no frames, no plugins, forms posting here only, and
// requires Trusted Types, so no string can reach an HTML sink.
func secureHeaders(h http.Header) {
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "+
		"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'; require-trusted-types-for 'script'; trusted-types 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "same-origin")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	h.Set("Cross-Origin-Resource-Policy", "same-origin")
}
