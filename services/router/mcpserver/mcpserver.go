// Package mcpserver serves agentmesh as a Model Context Protocol server —
// the "task liaison" an outer assistant (Claude Desktop, an IDE, any MCP
// client) delegates work to and checks on later — over streamable HTTP
// (Handler, mounted by the router's HTTP listener at /mcp) and over stdio
// (ServeStdio, `amctl mcp`).
//
// It is a door of the router (Invariant 11): every answer comes from the
// router's public gRPC API, called with the caller's own API key
// (Authorization: Bearer KEY on HTTP; the configured key on stdio), so the
// API's keys, roles, org checks, rate limits, validation and error codes
// apply; it reaches no bus and no store, and holds no state but the live
// subscriptions of its connected clients.
//
// What it serves (on the MCP Go SDK, protocol revisions 2024-11-05 to
// 2026-07-28):
//
//	tools      delegate, check_status, list_tasks, cancel_task, get_result
//	           (tools.go): SubmitTask, GetTask, ListTasks, CancelTask,
//	           WatchTask; progress notifications while a call waits
//	resources  subtask://{id}, a task as JSON (resources.go): GetTask,
//	           ListTasks; subscriptions follow the task with WatchTask and
//	           send notifications/resources/updated on every recorded event
//	tasks      the io.modelcontextprotocol/tasks extension (tasksext.go):
//	           delegate answered with a task, tasks/get, tasks/update (an
//	           approval the task waits on, as input_required; ApproveToolCall
//	           or RejectToolCall), tasks/cancel
//
// Errors: a tool's failure is a tool result with isError (the words of the
// API's status); the protocol's own requests (resources, tasks) fail with
// JSON-RPC error objects (package door's codes); nothing carries a stack or
// an internal address. On HTTP a body that is not JSON-RPC 2.0 is checked
// before the SDK reads it (jsonrpc.go): parse error, invalid request (an id
// must be a string or an integer within ±2^53-1, which the SDK repeats
// exactly), method not found, all JSON-RPC error objects; an unknown
// notification is ignored (202).
//
// Sessions: an API key holds at most MaxSessionsPerKey HTTP sessions; one
// more closes the key's least recently used (sessions.go).
package mcpserver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/agentmesh/agentmesh/services/router/door"
	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Defaults of Config.
const (
	DefaultSessionTimeout = 30 * time.Minute
	DefaultMaxBodyBytes   = 1 << 20
	DefaultPollInterval   = time.Second
	DefaultMaxWait        = 5 * time.Minute
	// DefaultMaxSessionsPerKey: generous for a key a team shares (one
	// client holds one session), small beside the router's memory.
	DefaultMaxSessionsPerKey = 64
)

// Version is the server version the MCP handshake reports.
const Version = "0.1.0"

// modernRevision is the first MCP revision without sessions (SEP-2575):
// its requests go to the stateless handler.
const modernRevision = "2026-07-28"

// Config configures the MCP server. Zero values take the defaults.
type Config struct {
	// SessionTimeout closes an HTTP session (revisions up to 2025-11-25)
	// idle this long, with its subscriptions; default 30 min.
	SessionTimeout time.Duration
	// MaxBodyBytes bounds an HTTP request body (413 beyond) and a stdio
	// line (an invalid-request error beyond); default 1 MiB.
	MaxBodyBytes int64
	// PollInterval is the poll interval the tasks extension suggests
	// (pollIntervalMs); default 1 s.
	PollInterval time.Duration
	// MaxWait caps a tool's wait_seconds; default 5 min.
	MaxWait time.Duration
	// MaxSessionsPerKey bounds the HTTP sessions one API key holds open:
	// one more closes the key's least recently used session (its id is
	// then 404, and the client initializes again); default 64.
	MaxSessionsPerKey int
	// KeyTTL is how long a key that was checked is remembered
	// (door.Checker); default door.DefaultCheckTTL.
	KeyTTL time.Duration
	// AnyHost turns off the SDK's DNS-rebinding protection, which refuses
	// a request that arrived on a loopback address with a Host header that
	// is not loopback: set it when a reverse proxy on the same host
	// forwards requests for a public name.
	AnyHost bool
}

func (c *Config) defaults() {
	if c.SessionTimeout <= 0 {
		c.SessionTimeout = DefaultSessionTimeout
	}
	if c.MaxBodyBytes <= 0 {
		c.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if c.PollInterval <= 0 {
		c.PollInterval = DefaultPollInterval
	}
	if c.MaxWait <= 0 {
		c.MaxWait = DefaultMaxWait
	}
	if c.MaxSessionsPerKey <= 0 {
		c.MaxSessionsPerKey = DefaultMaxSessionsPerKey
	}
}

// Deps are the MCP server's dependencies: Conn, a connection to the
// router's public gRPC API, and Log. Both are required.
type Deps = door.Deps

// server is one MCP server (the SDK's) with agentmesh's tools, resources
// and the tasks extension on it.
type server struct {
	cfg Config
	log *slog.Logger
	api *door.API
	mcp *mcp.Server
	// fixedKey is stdio's key ("" on HTTP, where every request brings its
	// own, and on stdio when the connection carries credentials).
	fixedKey string
	stdio    bool
	subs     *subscriptions
	sessions *sessionLimit
}

func newServer(cfg Config, deps Deps, stdio bool, key string) *server {
	cfg.defaults()
	s := &server{cfg: cfg, log: deps.Log, api: door.NewAPI(deps.Conn), fixedKey: key, stdio: stdio}
	s.subs = newSubscriptions(s)
	s.sessions = newSessionLimit(cfg.MaxSessionsPerKey)
	s.mcp = mcp.NewServer(&mcp.Implementation{Name: "agentmesh", Title: "agentmesh", Version: Version}, &mcp.ServerOptions{
		Instructions: instructions,
		Logger:       quiet(deps.Log),
		Capabilities: &mcp.ServerCapabilities{
			Extensions: map[string]any{TasksExtension: map[string]any{}},
		},
		SubscribeHandler:   s.subs.subscribe,
		UnsubscribeHandler: s.subs.unsubscribe,
		SetCacheable:       cacheable,
	})
	s.addTools()
	s.addResources()
	if err := s.addTaskMethods(); err != nil {
		panic(err) // the method names are constants: a programming error
	}
	s.mcp.AddReceivingMiddleware(s.middleware)
	return s
}

// cacheScopePrivate: only the asking client may cache the result.
const cacheScopePrivate = "private"

// cacheable marks what belongs to the caller's org (a task: resources/read;
// the org's tasks: resources/list) private: the SDK's default, public, lets
// any intermediary serve one org's answer to anyone. The tools, the same
// for every key, stay public.
func cacheable(_ context.Context, req mcp.Request, c *mcp.Cacheable) {
	switch req.(type) {
	case *mcp.ReadResourceRequest, *mcp.ListResourcesRequest:
		c.CacheScope = cacheScopePrivate
	}
}

// quiet is log for the SDK: warnings and errors only (it logs every
// notification it sends at info).
func quiet(log *slog.Logger) *slog.Logger {
	return slog.New(atLeast{Handler: log.Handler(), min: slog.LevelWarn})
}

// atLeast drops records below min.
type atLeast struct {
	slog.Handler
	min slog.Level
}

func (h atLeast) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= h.min && h.Handler.Enabled(ctx, l)
}

func (h atLeast) WithAttrs(attrs []slog.Attr) slog.Handler {
	return atLeast{Handler: h.Handler.WithAttrs(attrs), min: h.min}
}

func (h atLeast) WithGroup(name string) slog.Handler {
	return atLeast{Handler: h.Handler.WithGroup(name), min: h.min}
}

// instructions tell the client's model what the server is for.
const instructions = "agentmesh runs tasks on agents (language-model workers with tools) of your org. " +
	"delegate hands a task over and returns its id at once (or waits with wait_seconds); " +
	"check_status and get_result follow it, cancel_task stops it, list_tasks finds tasks. " +
	"A task is also the resource subtask://{id} (subscribe to be told when it changes)."

// middleware runs first for every request: it puts the caller's key in
// ctx, counts the key's HTTP sessions (sessionLimit), answers delegate with a task for clients of the tasks extension,
// and lists the org's tasks as resources.
func (s *server) middleware(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		key := s.fixedKey
		if ex := req.GetExtra(); ex != nil && ex.Header != nil {
			key = door.KeyOf(ex.Header)
		}
		ctx = door.WithKey(ctx, key)
		if ss, ok := req.GetSession().(*mcp.ServerSession); ok && !s.stdio {
			if method == "initialize" {
				s.sessions.opened(door.Fingerprint(key), ss)
			} else if ended := s.sessions.used(ss); ended != nil {
				var cancel context.CancelFunc
				ctx, cancel = context.WithCancel(ctx)
				defer context.AfterFunc(ended, cancel)()
				defer cancel()
			}
		}
		switch method {
		case "tools/call":
			return s.callTool(ctx, next, method, req)
		case "resources/list":
			if r, ok := req.(*mcp.ListResourcesRequest); ok {
				return s.listResources(ctx, r)
			}
		}
		res, err := next(ctx, method, req)
		return res, coded(method, err)
	}
}

// coded gives an error the SDK raised without a JSON-RPC code (it would
// send code 0, which JSON-RPC does not define) one: a second initialize is
// invalid request; the rest are the server's own failures.
func coded(method string, err error) error {
	var rpcErr *jsonrpc.Error
	if err == nil || errors.As(err, &rpcErr) {
		return err
	}
	if method == "initialize" {
		return &jsonrpc.Error{Code: door.CodeInvalidRequest, Message: err.Error()}
	}
	return &jsonrpc.Error{Code: door.CodeInternal, Message: err.Error()}
}

// Handler serves MCP over streamable HTTP: requests of the 2026-07-28
// revision (MCP-Protocol-Version header) statelessly, older ones in
// sessions bound to the key that opened them. Every request needs an API
// key the router knows: without one it gets 401 and a WWW-Authenticate
// challenge.
type Handler struct {
	srv       *server
	checker   *door.Checker
	stateful  http.Handler
	stateless http.Handler
	closeOnce sync.Once
}

// New returns the HTTP handler (mount it at /mcp).
func New(cfg Config, deps Deps) (*Handler, error) {
	if err := deps.Check("mcpserver"); err != nil {
		return nil, err
	}
	s := newServer(cfg, deps, false, "")
	get := func(*http.Request) *mcp.Server { return s.mcp }
	opts := func(stateless bool) *mcp.StreamableHTTPOptions {
		return &mcp.StreamableHTTPOptions{
			Stateless:                  stateless,
			Logger:                     quiet(deps.Log),
			DisableLocalhostProtection: s.cfg.AnyHost,
			SessionTimeout:             s.cfg.SessionTimeout,
			MaxRequestBodyBytes:        s.cfg.MaxBodyBytes,
		}
	}
	// The SDK binds a session to the UserID of the token that opened it;
	// the key was checked before (ServeHTTP), so the verifier only names it.
	bind := auth.RequireBearerToken(func(_ context.Context, token string, _ *http.Request) (*auth.TokenInfo, error) {
		return &auth.TokenInfo{UserID: door.Fingerprint(token)}, nil
	}, &auth.RequireBearerTokenOptions{AllowMissingExpiration: true})
	return &Handler{
		srv:       s,
		checker:   door.NewChecker(deps.Conn, cfg.KeyTTL),
		stateful:  bind(mcp.NewStreamableHTTPHandler(get, opts(false))),
		stateless: bind(mcp.NewStreamableHTTPHandler(get, opts(true))),
	}, nil
}

// ServeHTTP checks the key, then hands the request to the SDK's handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	key := door.Key(r)
	if err := h.checker.Check(r.Context(), key); err != nil {
		door.WriteAuthError(w, err)
		return
	}
	r = r.Clone(r.Context())
	if r.Header.Get("Authorization") == "" {
		// X-API-Key: the SDK reads the bearer form only.
		r.Header.Set("Authorization", "Bearer "+key)
	}
	if id := r.Header.Get("Mcp-Session-Id"); r.Method == http.MethodDelete && id != "" {
		// The SDK's close of the session waits for its calls in flight.
		h.srv.sessions.ended(door.Fingerprint(key), id)
	}
	if r.Method == http.MethodPost {
		pe, ok := h.readBody(w, r)
		if !ok {
			return
		}
		defer pe.finish()
		w = pe
	}
	if v := r.Header.Get("MCP-Protocol-Version"); v >= modernRevision {
		h.stateless.ServeHTTP(w, r)
		return
	}
	h.stateful.ServeHTTP(w, r)
}

// needsSession reports whether msg is a call that needs a session it does
// not name: in the revisions with sessions, anything but initialize, ping
// and server/discover (the SDK answered it with an error of code 0).
func needsSession(r *http.Request, msg message) bool {
	if len(msg.id) == 0 || msg.method == "" || r.Header.Get("Mcp-Session-Id") != "" || r.Header.Get("MCP-Protocol-Version") >= modernRevision {
		return false
	}
	switch msg.method {
	case "initialize", "ping", "server/discover":
		return false
	}
	return true
}

// readBody reads a POST's body (at most MaxBodyBytes) and checks its
// JSON-RPC shape (checkBody), answering a bad one itself; the SDK reads
// the body from r again, and answers through the plainErrors returned.
func (h *Handler) readBody(w http.ResponseWriter, r *http.Request) (*plainErrors, bool) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, h.srv.cfg.MaxBodyBytes))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			writeRPCError(w, http.StatusRequestEntityTooLarge, nil, &door.RPCError{Code: door.CodeInvalidRequest,
				Message: fmt.Sprintf("the request is over the size limit (%d bytes)", h.srv.cfg.MaxBodyBytes)})
		}
		return nil, false
	}
	msg, rerr := checkBody(body)
	if rerr == nil && needsSession(r, msg) {
		rerr = &door.RPCError{Code: door.CodeInvalidRequest, Message: fmt.Sprintf(
			"Mcp-Session-Id: required for %.80s: initialize a session first (revisions before %s have sessions)", msg.method, modernRevision)}
	}
	if rerr != nil {
		writeRPCError(w, http.StatusBadRequest, msg.id, rerr)
		return nil, false
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	return &plainErrors{ResponseWriter: w, msg: msg}, true
}

// Close ends every subscription's watch. Sessions end with their HTTP
// requests (and SessionTimeout).
func (h *Handler) Close() {
	h.closeOnce.Do(h.srv.subs.close)
}

// ServeStdio serves one MCP client on in and out (newline-delimited
// JSON-RPC, the stdio transport) until the client hangs up or ctx ends; a
// line that is not JSON-RPC 2.0 gets its error and the session goes on
// (lineFilter).
// Every call carries key; with key "" the calls carry what Deps.Conn
// carries (amctl's connection sends its own key).
// Six parameters: a session's inputs (config, dependencies, its key, its two
// pipes), each given by a different caller (amctl mcp, the tests).
func ServeStdio(ctx context.Context, cfg Config, deps Deps, key string, in io.ReadCloser, out io.WriteCloser) error {
	if err := deps.Check("mcpserver"); err != nil {
		return err
	}
	s := newServer(cfg, deps, true, key)
	defer s.subs.close()
	w := &lockedWriter{w: out}
	err := s.mcp.Run(ctx, &mcp.IOTransport{Reader: newLineFilter(in, w, int(s.cfg.MaxBodyBytes)), Writer: w})
	if err != nil && ctx.Err() == nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("mcp stdio: %w", err)
	}
	return nil
}
