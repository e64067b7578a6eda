package rest

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// EdgeOptions configure Edge.
type EdgeOptions struct {
	// MaxBodyBytes bounds a request's body: a larger one is answered 413
	// before any handler sees it. Required (> 0).
	MaxBodyBytes int64
	// BodyTimeout bounds how long a request's body may take to arrive
	// once its headers have (a client trickling it holds a connection and
	// a goroutine): a slower one is answered 408 and its connection
	// closed. Default DefaultBodyTimeout.
	BodyTimeout time.Duration
	// CORSOrigins are the origins (scheme://host[:port], or "*" for any)
	// browsers may call the listener from; none means no CORS headers at
	// all (ParseCORSOrigins reads them).
	CORSOrigins []string
	// AuthOff says the router runs without API keys (every caller is the
	// admin of org "default"): then only a Host that is localhost or an
	// IP address is served, so a web page that rebinds its own DNS name to
	// this address cannot use the API (403).
	AuthOff bool
}

// Edge wraps h with what every request on the router's HTTP listener
// passes before any door sees it: CORS for the configured origins (a
// preflight is answered here), the body limit (413, with the body read
// into memory, so no door reads past it) and the body timeout (408).
func Edge(h http.Handler, o EdgeOptions) (http.Handler, error) {
	if o.MaxBodyBytes <= 0 {
		return nil, errors.New("rest: EdgeOptions.MaxBodyBytes must be positive")
	}
	if o.BodyTimeout <= 0 {
		o.BodyTimeout = DefaultBodyTimeout
	}
	e := &edge{next: h, max: o.MaxBodyBytes, bodyTimeout: o.BodyTimeout, origins: map[string]bool{}, authOff: o.AuthOff}
	e.crossSite = http.NewCrossOriginProtection()
	for _, orig := range o.CORSOrigins {
		e.origins[orig] = true
		if orig != "*" {
			if err := e.crossSite.AddTrustedOrigin(orig); err != nil {
				return nil, fmt.Errorf("rest: CORS origin %q: %w", orig, err)
			}
		}
	}
	return e, nil
}

// DefaultBodyTimeout is EdgeOptions.BodyTimeout's default: a body of the
// largest size (4 MiB by default) then needs about 70 KB/s.
const DefaultBodyTimeout = time.Minute

type edge struct {
	next        http.Handler
	max         int64
	bodyTimeout time.Duration
	origins     map[string]bool // "*" allows any
	// crossSite refuses a browser's request from another site that is not
	// GET, HEAD or OPTIONS, unless its origin is one of origins.
	crossSite *http.CrossOriginProtection
	authOff   bool
}

func (e *edge) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if e.refused(w, r) || e.cors(w, r) {
		return
	}
	if r.ContentLength > e.max {
		e.tooLarge(w, fmt.Sprintf("%d bytes", r.ContentLength))
		return
	}
	if r.Body != nil && r.Body != http.NoBody {
		body, ok := e.readBody(w, r)
		if !ok {
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.ContentLength = int64(len(body))
	}
	e.next.ServeHTTP(w, r)
}

// readBody reads r's body within the body limit and timeout; false when
// it answered the request instead (413, 408 or 400).
func (e *edge) readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	rc := http.NewResponseController(w)
	// A writer without deadlines (a test's recorder) has no connection to
	// hold: the error is ignored.
	_ = rc.SetReadDeadline(time.Now().Add(e.bodyTimeout))
	body, err := io.ReadAll(io.LimitReader(r.Body, e.max+1))
	_ = rc.SetReadDeadline(time.Time{})
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded):
		w.Header().Set("Connection", "close")
		writeStatus(w, status.Newf(codes.DeadlineExceeded, "request body not received within %s (%d bytes came)", e.bodyTimeout, len(body)), http.StatusRequestTimeout)
		return nil, false
	case err != nil:
		WriteError(w, r, status.Errorf(codes.InvalidArgument, "request body could not be read: %v", err))
		return nil, false
	case int64(len(body)) > e.max:
		e.tooLarge(w, "more bytes")
		return nil, false
	}
	return body, true
}

func (e *edge) tooLarge(w http.ResponseWriter, size string) {
	w.Header().Set("Connection", "close")
	writeStatus(w, status.Newf(codes.ResourceExhausted, "request body of %s is over the limit of %d bytes", size, e.max), http.StatusRequestEntityTooLarge)
}

// refused answers 403 to what a browser must not do here, and says so
// (true): a request of another site that changes something — a page's form
// or no-cors fetch, which a browser sends without a preflight, carrying a
// plain-text JSON body the API reads — unless its origin is configured
// (any origin with "*"); and, with authentication off, a request by a host
// name other than localhost (DNS rebinding: the page's own name, resolved
// to this address, makes the request same-origin).
func (e *edge) refused(w http.ResponseWriter, r *http.Request) bool {
	if e.authOff && !localOrIP(r.Host) {
		writeStatus(w, status.Newf(codes.PermissionDenied,
			"authentication is off: requests by host name %q are refused (a web page could rebind it to this address); use localhost or an IP address, or configure API keys", r.Host), http.StatusForbidden)
		return true
	}
	if e.origins["*"] {
		return false
	}
	if err := e.crossSite.Check(r); err != nil {
		writeStatus(w, status.Newf(codes.PermissionDenied,
			"a browser request of another site (origin %q) may not %s here; allow its origin with AGENTMESH_HTTP_CORS_ORIGINS", r.Header.Get("Origin"), r.Method), http.StatusForbidden)
		return true
	}
	return false
}

// localOrIP reports whether host (a Host header, with or without a port)
// is an IP address, localhost or a name under .localhost.
func localOrIP(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	if _, err := netip.ParseAddr(strings.Trim(host, "[]")); err == nil {
		return true
	}
	return host == "localhost" || strings.HasSuffix(host, ".localhost")
}

// cors adds the CORS headers for an allowed origin and answers a
// preflight (then it returns true). Without configured origins it does
// nothing: browsers then refuse cross-origin calls.
func (e *edge) cors(w http.ResponseWriter, r *http.Request) bool {
	origin := r.Header.Get("Origin")
	if len(e.origins) == 0 || origin == "" {
		return false
	}
	h := w.Header()
	h.Add("Vary", "Origin")
	preflight := r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != ""
	if !e.origins["*"] && !e.origins[strings.ToLower(origin)] {
		if preflight {
			writeStatus(w, status.Newf(codes.PermissionDenied, "origin %q may not call this API (AGENTMESH_HTTP_CORS_ORIGINS)", origin), http.StatusForbidden)
			return true
		}
		return false
	}
	if e.origins["*"] {
		h.Set("Access-Control-Allow-Origin", "*")
	} else {
		h.Set("Access-Control-Allow-Origin", origin)
	}
	h.Set("Access-Control-Expose-Headers", "Retry-After, WWW-Authenticate, Mcp-Session-Id")
	if !preflight {
		return false
	}
	h.Add("Vary", "Access-Control-Request-Method")
	h.Add("Vary", "Access-Control-Request-Headers")
	h.Set("Access-Control-Allow-Methods", "GET, POST, PUT, PATCH, DELETE")
	if req := r.Header.Get("Access-Control-Request-Headers"); req != "" {
		h.Set("Access-Control-Allow-Headers", req)
	}
	h.Set("Access-Control-Max-Age", "600")
	w.WriteHeader(http.StatusNoContent)
	return true
}

// ErrBadOrigin is a CORS origin that is neither "*" nor scheme://host[:port].
var ErrBadOrigin = errors.New("want comma-separated origins, each http(s)://host[:port] or *")

// ParseCORSOrigins reads a comma-separated list of origins (the
// AGENTMESH_HTTP_CORS_ORIGINS form): each "*" or an http or https origin
// without path, query or user. They come back lower-case, as browsers send
// them.
func ParseCORSOrigins(v string) ([]string, error) {
	var out []string
	for _, o := range strings.Split(v, ",") {
		o = strings.ToLower(strings.TrimSpace(o))
		if o == "" {
			continue
		}
		if o == "*" {
			out = append(out, o)
			continue
		}
		u, err := url.Parse(o)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil ||
			(u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
			return nil, fmt.Errorf("%w: got %q", ErrBadOrigin, o)
		}
		out = append(out, u.Scheme+"://"+u.Host)
	}
	return out, nil
}
