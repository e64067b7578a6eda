// Package a2a serves agentmesh to other agent platforms over the Agent2Agent
// protocol (A2A 0.3.0, JSON-RPC binding): the agent card
// (/.well-known/agent-card.json; a public card, and the org's agents and
// skills on the card a key gets) and the JSON-RPC endpoint (/a2a):
//
//	message/send, message/stream (SSE)   SubmitTask (a new task; a context
//	                                     is a thread, thread_id: a message
//	                                     continues the context's previous
//	                                     task, one runs at a time,
//	                                     metadata.thread_policy says what
//	                                     a busy one does), or, to a task
//	                                     that is input-required, the
//	                                     decision on its approval
//	                                     (ApproveToolCall, RejectToolCall)
//	tasks/get                            GetTask
//	tasks/cancel                         CancelTask
//	tasks/resubscribe (SSE)              GetTask, WatchTask
//	tasks/pushNotificationConfig/*       not supported yet (-32003)
//	agent/getAuthenticatedExtendedCard   ListAgents, ListSkills
//
// A2A task ids are agentmesh task ids; input-required is a task blocked on
// an approval. It is a door of the router (Invariant 11): every answer
// comes from the router's public gRPC API called with the caller's own
// API key (Authorization: Bearer KEY), so the API's keys, roles, org
// checks, rate limits, validation and error codes apply; it reaches no bus
// and no store, and keeps no state.
//
// Errors are JSON-RPC error objects with A2A's codes (TaskNotFound -32001,
// TaskNotCancelable -32002, PushNotificationNotSupported -32003,
// UnsupportedOperation -32004, ContentTypeNotSupported -32005) and package
// door's for the rest; no key, or an unknown one, is HTTP 401 with a
// WWW-Authenticate challenge.
package a2a

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"time"

	"github.com/agentmesh/agentmesh/services/router/door"
)

// CardPath is where the agent card is served (GET only).
const CardPath = "/.well-known/agent-card.json"

// Defaults of Config.
const (
	DefaultPath         = "/a2a"
	DefaultMaxBodyBytes = 1 << 20
	DefaultMaxWait      = 5 * time.Minute
	DefaultKeepAlive    = 15 * time.Second
)

// Version is the agent card's version.
const Version = "0.1.0"

// Config configures the A2A server. Zero values take the defaults.
type Config struct {
	// URL is the JSON-RPC endpoint's public URL, as clients reach it (the
	// card's url, e.g. "https://agents.example.com/a2a"). Empty: each card
	// names the URL its request came to (scheme, Host, Path).
	URL string
	// Path of the JSON-RPC endpoint when URL is empty; default "/a2a".
	Path string
	// MaxBodyBytes bounds a request body (413 beyond); default 1 MiB.
	MaxBodyBytes int64
	// MaxWait bounds how long a blocking message/send waits for the task
	// to end or ask for input; default 5 min.
	MaxWait time.Duration
	// KeepAlive is the interval of SSE comments on a quiet stream;
	// default 15 s.
	KeepAlive time.Duration
	// KeyTTL is how long a key that was checked is remembered
	// (door.Checker); default door.DefaultCheckTTL.
	KeyTTL time.Duration
}

func (c *Config) defaults() {
	if c.Path == "" {
		c.Path = DefaultPath
	}
	if c.MaxBodyBytes <= 0 {
		c.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if c.MaxWait <= 0 {
		c.MaxWait = DefaultMaxWait
	}
	if c.KeepAlive <= 0 {
		c.KeepAlive = DefaultKeepAlive
	}
}

// Deps are the A2A server's dependencies: Conn, a connection to the
// router's public gRPC API, and Log. Both are required.
type Deps = door.Deps

// Server is the A2A door: one http.Handler for both of its paths (GET
// serves the agent card, POST the JSON-RPC methods). Mount it at /a2a and
// at /.well-known/agent-card.json.
type Server struct {
	cfg     Config
	log     *slog.Logger
	api     *door.API
	checker *door.Checker
}

// New returns the A2A server.
func New(cfg Config, deps Deps) (*Server, error) {
	if err := deps.Check("a2a"); err != nil {
		return nil, err
	}
	cfg.defaults()
	return &Server{cfg: cfg, log: deps.Log, api: door.NewAPI(deps.Conn), checker: door.NewChecker(deps.Conn, cfg.KeyTTL)}, nil
}

// ServeHTTP serves the card (GET) and the JSON-RPC methods (POST; not at
// CardPath, which serves the card only).
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.Method == http.MethodGet || r.Method == http.MethodHead:
		s.serveCard(w, r)
	case r.URL.Path == CardPath:
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed: GET the agent card; JSON-RPC requests go to the card's url", http.StatusMethodNotAllowed)
	case r.Method == http.MethodPost:
		s.serveRPC(w, r)
	default:
		w.Header().Set("Allow", "GET, HEAD, POST")
		http.Error(w, "method not allowed: GET the agent card, POST JSON-RPC requests", http.StatusMethodNotAllowed)
	}
}

func (s *Server) serveRPC(w http.ResponseWriter, r *http.Request) {
	key := door.Key(r)
	if err := s.checker.Check(r.Context(), key); err != nil {
		door.WriteAuthError(w, err)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			door.WriteJSON(w, http.StatusRequestEntityTooLarge, door.Response{JSONRPC: "2.0", ID: nullID,
				Error: &door.RPCError{Code: door.CodeInvalidRequest, Message: "the request is over the size limit"}})
		}
		return
	}
	req, id, rerr := parseRequest(body)
	if rerr != nil {
		reply(w, id, nil, rerr)
		return
	}
	ctx := door.WithKey(r.Context(), key)
	switch req.Method {
	case MethodStream, MethodResubscribe:
		s.serveStream(ctx, w, req)
		return
	}
	result, rerr := s.call(ctx, r, req)
	reply(w, id, result, rerr)
}

// call runs a method that answers once.
func (s *Server) call(ctx context.Context, r *http.Request, req *request) (any, *door.RPCError) {
	switch req.Method {
	case MethodSend:
		return s.send(ctx, req)
	case MethodGet:
		return s.get(ctx, req)
	case MethodCancel:
		return s.cancel(ctx, req)
	case MethodExtendedCard:
		return s.extendedCard(ctx, r)
	case MethodPushSet, MethodPushGet, MethodPushList, MethodPushDelete:
		return nil, errNoPush
	}
	return nil, &door.RPCError{Code: door.CodeMethodNotFound, Message: "method not found: " + truncate(req.Method, 80)}
}

// errNoPush answers the push-notification methods: delivery is not built.
var errNoPush = &door.RPCError{Code: CodePushNotificationNotSupported,
	Message: "push notifications are not supported yet (webhook delivery is not built): follow a task with message/stream or tasks/resubscribe, or poll tasks/get"}

// truncate cuts s to at most n bytes (on a rune boundary), marking a cut
// with "…".
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return door.Cut(s, n) + "…"
}

// apiError is an API error as an A2A error; notFound is what a NotFound
// becomes (TaskNotFound where the request names a task).
func (s *Server) apiError(err error, notFound int64) *door.RPCError {
	return door.FromError(s.log, err, notFound)
}
