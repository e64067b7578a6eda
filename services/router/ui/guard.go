package ui

import (
	"context"
	"net/http"
	"net/url"
	"strings"

	"github.com/agentmesh/agentmesh/services/router"
)

// The guards of every dashboard request: a session (else the sign-in page,
// or 401 for the API), and for anything that changes state — any method
// but GET and HEAD — the session's CSRF token (header X-CSRF-Token, or the
// form field csrf of a plain form) and an Origin (or Referer) of the
// dashboard's own host. The cookie's SameSite=Strict already keeps other
// sites' requests from carrying it; the token and the origin check hold
// even where a browser or a proxy does not.

// CSRFHeader carries the session's CSRF token on the dashboard's API
// requests; CSRFField in its forms.
const (
	CSRFHeader = "X-CSRF-Token"
	CSRFField  = "csrf"
)

// signedIn is a request's session and the caller its key stands for.
type signedIn struct {
	s      *session
	caller router.Caller
}

type sessionKey struct{}

func sessionFrom(ctx context.Context) *signedIn {
	si, _ := ctx.Value(sessionKey{}).(*signedIn)
	return si
}

// withSession runs h for a request with a live session whose key still
// stands, after the CSRF and origin checks of a state-changing request.
// Without one: the sign-in page for a page, 401 for the API, never data.
func (d *Dashboard) withSession(h http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		now := d.now()
		var s *session
		if c, err := r.Cookie(cookieName); err == nil {
			s, _ = d.keys.open(c.Value, now)
		}
		var caller router.Caller
		if s != nil {
			var err error
			if caller, err = d.api.Authenticate(keyRequest(r, s.Key)); err != nil {
				s = nil // the key was revoked: the session ends with it
			}
		}
		if s == nil {
			d.noSession(w, r)
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			if !sameOrigin(r) {
				d.refuse(w, r, http.StatusForbidden, "cross-origin request refused: the dashboard takes changes from its own pages only")
				return
			}
			if !sameToken(csrfToken(r), s.CSRF) {
				d.refuse(w, r, http.StatusForbidden, "missing or wrong CSRF token: reload the page")
				return
			}
		}
		if now.Unix()-s.Seen >= int64(touchEvery.Seconds()) {
			s.Seen = now.Unix()
			if err := d.keys.setCookie(w, r, s); err != nil {
				d.log.Warn("dashboard: session cookie not renewed", "err", err)
			}
		}
		h(w, r.WithContext(context.WithValue(r.Context(), sessionKey{}, &signedIn{s: s, caller: caller})))
	})
}

// noSession answers a request without a session: the API gets 401, a page
// the sign-in page (with where to go after).
func (d *Dashboard) noSession(w http.ResponseWriter, r *http.Request) {
	if _, err := r.Cookie(cookieName); err == nil {
		clearCookie(w, r)
	}
	if strings.HasPrefix(r.URL.Path, "/ui/api/") || r.Method != http.MethodGet {
		d.refuse(w, r, http.StatusUnauthorized, "not signed in (or the session ended): sign in at /ui/signin")
		return
	}
	http.Redirect(w, r, "/ui/signin?next="+url.QueryEscape(r.URL.Path), http.StatusSeeOther)
}

// refuse answers a refused request as JSON for the API and scripts, as a
// page otherwise.
func (d *Dashboard) refuse(w http.ResponseWriter, r *http.Request, code int, msg string) {
	if strings.HasPrefix(r.URL.Path, "/ui/api/") || r.Header.Get(CSRFHeader) != "" || strings.Contains(r.Header.Get("Accept"), "application/json") {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(code)
		_, _ = w.Write(jsonError(code, msg))
		return
	}
	d.page(w, code, "message", pageData{Title: http.StatusText(code), Message: msg})
}

// csrfToken is the token a request presents.
func csrfToken(r *http.Request) string {
	if v := r.Header.Get(CSRFHeader); v != "" {
		return v
	}
	if strings.HasPrefix(r.Header.Get("Content-Type"), "application/x-www-form-urlencoded") {
		return r.PostFormValue(CSRFField)
	}
	return ""
}

// sameOrigin reports whether a request comes from a page of this host:
// its Origin, else its Referer, names the host it was sent to. A request
// with neither is refused (browsers send Origin with every POST).
func sameOrigin(r *http.Request) bool {
	from := r.Header.Get("Origin")
	if from == "" || from == "null" {
		from = r.Header.Get("Referer")
	}
	if from == "" {
		return false
	}
	u, err := url.Parse(from)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") {
		return false
	}
	return strings.EqualFold(u.Host, r.Host)
}

// keyRequest is r as the REST API must see it for the session's key: the
// key as its bearer token, and nothing of the browser's own credentials.
func keyRequest(r *http.Request, key string) *http.Request {
	out := r.Clone(r.Context())
	for _, h := range []string{"Cookie", "Authorization", "X-Api-Key", router.OrgHeader, CSRFHeader} {
		out.Header.Del(h)
	}
	out.Header.Set("Authorization", "Bearer "+key)
	return out
}
