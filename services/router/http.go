package router

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/agentmesh/agentmesh/services/router/rest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"
)

// The HTTP doors. Every HTTP door is a translation of the router's own
// gRPC API (invariant 11): the doors call it through Conn, with the
// caller's key forwarded as metadata, and each call runs the gRPC server's
// interceptors (authentication, roles, orgs, rates, sub-task checks) and
// the registered service's handler — a unary call in the caller's
// goroutine (inproc.go), a stream through a second gRPC server with the
// same services and interceptors listening in memory. So a REST call, an
// SSE stream, an MCP tool call or an A2A message is accepted, refused or
// rate-limited exactly as the same gRPC call would be, and reaches the bus
// only through the handlers gRPC uses.
//
// The HTTP listener (Config.HTTPListen) serves package rest at "/" and the
// doors mounted with Mount, behind rest.Edge (body limit, CORS), with the
// gRPC listener's TLS settings, connection cap and timeouts.
//
// SSE event streams run WatchTask's stream interceptors and handler in the
// stream's own goroutine too (WatchHTTP), since a stream lives long and
// idle: an idle one then costs one HTTP request, not three goroutines more.

// inprocBuffer is the in-memory pipe's buffer per direction.
const inprocBuffer = 1 << 20

// maxInprocRecv bounds an answer through the in-process connection
// (a page of 1000 tasks with their specs can pass 4 MiB).
const maxInprocRecv = 64 << 20

// ErrNoHTTP is returned by Mount when the router has no HTTP listener.
var ErrNoHTTP = errors.New("router: no HTTP listener (Config.HTTPListen is empty)")

// httpDoors is the router's HTTP side.
type httpDoors struct {
	inproc *grpc.Server
	inLis  *bufconn.Listener
	conn   *grpc.ClientConn
	direct *directConn // unary calls in the caller's goroutine (inproc.go)

	// nil without HTTPListen:
	api   http.Handler // package rest's handler, served at "/"
	srv   *http.Server
	lis   net.Listener
	conns *connLimiter
	mux   *http.ServeMux
	tls   bool
}

// newHTTP builds the in-process gRPC server and its connection, and, with
// cfg.HTTPListen, the HTTP listener.
func (s *Service) newHTTP(ctx context.Context, tlsConf *tls.Config) error {
	d := &httpDoors{inLis: bufconn.Listen(inprocBuffer)}
	d.inproc = grpc.NewServer(s.interceptors()...)
	s.register(requestDecoding{d.inproc})
	conn, err := grpc.NewClient("passthrough:///agentmesh-router",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return d.inLis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxInprocRecv)),
	)
	if err != nil {
		return fmt.Errorf("in-process connection: %w", err)
	}
	d.conn = conn
	d.direct = &directConn{methods: map[string]directMethod{}, unary: chainUnary(s.unaryInterceptors()), streams: conn}
	s.register(d.direct)
	s.doors = d
	if s.cfg.HTTPListen == "" {
		return nil
	}
	for _, o := range s.cfg.HTTPCORSOrigins {
		if _, err := rest.ParseCORSOrigins(o); err != nil || o == "" {
			return fmt.Errorf("HTTPCORSOrigins: %w", rest.ErrBadOrigin)
		}
	}
	api, err := rest.New(rest.Options{Conn: d.direct, Log: s.log, Watch: s.WatchHTTP, WatchTasks: s.watchTasksHTTP})
	if err != nil {
		return err
	}
	d.api = api
	d.mux = http.NewServeMux()
	d.mux.Handle("/", api)
	edge, err := rest.Edge(d.mux, rest.EdgeOptions{MaxBodyBytes: int64(s.cfg.MaxRequestBytes), CORSOrigins: s.cfg.HTTPCORSOrigins, AuthOff: s.authOff})
	if err != nil {
		return err
	}
	inner, err := (&net.ListenConfig{}).Listen(ctx, "tcp", s.cfg.HTTPListen)
	if err != nil {
		return fmt.Errorf("listen on %s (HTTP): %w", s.cfg.HTTPListen, err)
	}
	d.conns = newConnLimiter(inner, connLimit(s.cfg.MaxConnections), s.cfg.AuthTimeout, s.log)
	d.lis = d.conns
	d.srv = &http.Server{
		Handler:           traceHTTP(s.markAuthenticated(edge)), // tracing.go
		ReadHeaderTimeout: s.cfg.HandshakeTimeout,
		IdleTimeout:       s.cfg.IdleTimeout,
		MaxHeaderBytes:    MaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
	}
	// HTTP/1.1 and HTTP/2: over TLS as negotiated, in cleartext with prior
	// knowledge (h2c: curl --http2-prior-knowledge), so that a client's
	// many event streams can share one connection.
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	if tlsConf != nil {
		d.srv.TLSConfig = tlsConf.Clone()
		d.tls = true
		protocols.SetHTTP2(true)
	} else {
		protocols.SetUnencryptedHTTP2(true)
	}
	d.srv.Protocols = &protocols
	return nil
}

// markAuthenticated tells the connection cap that a request's connection
// presented a valid key, as the gRPC door does at its first RPC: a
// connection that never does is closed after AuthTimeout, and is the first
// to go when the listener is full.
func (s *Service) markAuthenticated(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := s.callerOf(rest.RequestKey(r)); err == nil {
			s.doors.conns.authenticated(r.RemoteAddr)
		}
		next.ServeHTTP(w, r)
	})
}

// serveHTTP starts the in-process server and the HTTP listener; the
// channel reports the listener's failure (nil channel: no listener).
func (s *Service) serveHTTP() <-chan error {
	d := s.doors
	go func() { _ = d.inproc.Serve(d.inLis) }()
	if d.srv == nil {
		return nil
	}
	errc := make(chan error, 1)
	go func() {
		var err error
		if d.tls {
			err = d.srv.ServeTLS(d.lis, "", "")
		} else {
			err = d.srv.Serve(d.lis)
		}
		if !errors.Is(err, http.ErrServerClosed) {
			errc <- err
		}
	}()
	return errc
}

// shutdownHTTP stops the HTTP listener gracefully (open event streams end
// as their watches do: the router is stopping), then the in-process server.
func (s *Service) shutdownHTTP(timeout time.Duration) {
	d := s.doors
	if d.srv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		if err := d.srv.Shutdown(ctx); err != nil {
			_ = d.srv.Close()
		}
	}
	d.inproc.GracefulStop()
	_ = d.conn.Close()
}

// closeHTTP stops the HTTP side at once.
func (s *Service) closeHTTP() {
	d := s.doors
	if d.srv != nil {
		_ = d.srv.Close()
	}
	d.inproc.Stop()
	_ = d.conn.Close()
}

// HTTPAddr is the HTTP listener's address ("" without one).
func (s *Service) HTTPAddr() string {
	if s.doors == nil || s.doors.lis == nil {
		return ""
	}
	return s.doors.lis.Addr().String()
}

// ---- the mount API of the other doors ----

// Conn is the router's own gRPC API, in process. A call through it passes
// the same interceptors as a call from the network, so a door makes its
// caller's calls with OutgoingContext and needs no check of its own: the
// answer (or the status: Unauthenticated, PermissionDenied naming the
// role, NotFound for another org's task, ResourceExhausted over the rate)
// is the router's. Streams (WatchTask) work as over the network. It is
// there whether or not the HTTP listener is.
func (s *Service) Conn() grpc.ClientConnInterface { return s.doors.direct }

// OutgoingContext returns ctx carrying an HTTP request's API key
// (Authorization: Bearer KEY or X-Api-Key), trace context and client
// address as outgoing metadata, for calls through Conn.
func OutgoingContext(ctx context.Context, r *http.Request) context.Context {
	return rest.OutgoingContext(ctx, r)
}

// REST returns the REST/JSON and SSE handler the listener serves at "/"
// (nil without an HTTP listener). A door that turns its own requests into
// REST calls — the dashboard, with the key its session holds — serves them
// through it, and so through the same gRPC calls, checks and event streams
// as any REST client.
func (s *Service) REST() http.Handler {
	if s.doors == nil {
		return nil
	}
	return s.doors.api
}

// RequestKey returns the API key an HTTP request presents, "" when none.
func RequestKey(r *http.Request) string { return rest.RequestKey(r) }

// Authenticate returns the caller an HTTP request's key stands for (its
// key name, org and role), by the lookup the gRPC door makes; an
// Unauthenticated status when the key is missing or unknown. With
// authentication off every request is an admin of org "default". It takes
// no rate token and checks no role: the calls the door then makes through
// Conn do both. For a door that must know its caller first (an agent card
// of the caller's org, a session bound to a key). A valid key marks the
// request's connection authenticated for the connection cap, as a REST
// request's own key does: a door whose requests carry its own credential
// (the dashboard's session cookie) and a key it holds keeps its
// connections past AuthTimeout.
func (s *Service) Authenticate(r *http.Request) (Caller, error) {
	c, err := s.callerOf(rest.RequestKey(r))
	if err == nil && s.doors != nil {
		s.doors.conns.authenticated(r.RemoteAddr)
	}
	return c, err
}

// RequireKey wraps h so that a request without a valid key is answered 401
// (WWW-Authenticate: Bearer, a google.rpc.Status body) before h sees it;
// h finds the caller with CallerFrom(r.Context()).
func (s *Service) RequireKey(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := s.Authenticate(r)
		if err != nil {
			rest.WriteError(w, r, err)
			return
		}
		h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), callerKey{}, c)))
	})
}

// WriteHTTPError answers err (a gRPC status, as calls through Conn return)
// over HTTP as the REST door does: the HTTP status of its code and the
// google.rpc.Status as JSON (rest.WriteError).
func WriteHTTPError(w http.ResponseWriter, r *http.Request, err error) { rest.WriteError(w, r, err) }

// Mount serves h at pattern on the HTTP listener, beside the REST API: an
// http.ServeMux pattern such as "/mcp", "/a2a", "/.well-known/agent-card.json"
// or "/ui/" (a subtree). Requests reach h after the listener's TLS,
// connection cap, body limit (413) and CORS; h authenticates as it needs
// (Authenticate, RequireKey, or simply the calls through Conn). Patterns
// under /v1/ belong to the REST API and are refused, as is a pattern
// already mounted. Mount may be called before or during Run.
func (s *Service) Mount(pattern string, h http.Handler) (err error) {
	d := s.doors
	if d == nil || d.mux == nil {
		return ErrNoHTTP
	}
	path := pattern
	if _, p, ok := strings.Cut(pattern, " "); ok {
		path = p
	}
	if path == "/" || strings.HasPrefix(path, "/v1/") || path == "/v1" {
		return fmt.Errorf("router: mount %q: the REST API serves / and /v1/", pattern)
	}
	defer func() {
		if p := recover(); p != nil { // http.ServeMux panics on a conflict
			err = fmt.Errorf("router: mount %q: %v", pattern, p)
		}
	}()
	d.mux.Handle(pattern, h)
	return nil
}
