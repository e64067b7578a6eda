// Package door owns what the router's HTTP doors that speak JSON-RPC (the
// MCP server, services/router/mcpserver, and A2A, services/router/a2a)
// share: reading the caller's API key from an HTTP request, answering a
// request without a usable key with 401 and a WWW-Authenticate challenge,
// forwarding the key to the router's own gRPC API as metadata, checking a
// key once per request (with a short cache), and turning the API's gRPC
// statuses into JSON-RPC error objects.
//
// A door is a translation of the public gRPC API (Invariant 11): it holds
// no data and reaches no bus or store; every answer comes from a gRPC call
// made with the caller's own key, so the router's keys, roles, org checks,
// rate limits, validation and error codes apply unchanged.
package door

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// Realm is the realm of the doors' WWW-Authenticate challenge.
const Realm = "agentmesh"

// Challenge is the WWW-Authenticate value of a 401.
const Challenge = `Bearer realm="` + Realm + `"`

// Key returns the API key an HTTP request presents: `Authorization: Bearer
// KEY` or `X-API-Key: KEY` (the two forms the gRPC API accepts), or "".
func Key(r *http.Request) string { return KeyOf(r.Header) }

// KeyOf is Key of a request's header.
func KeyOf(h http.Header) string {
	for _, v := range h.Values("Authorization") {
		scheme, tok, ok := strings.Cut(strings.TrimSpace(v), " ")
		if ok && strings.EqualFold(scheme, "bearer") {
			if tok = strings.TrimSpace(tok); tok != "" {
				return tok
			}
		}
	}
	for _, v := range h.Values("X-API-Key") {
		if v = strings.TrimSpace(v); v != "" {
			return v
		}
	}
	return ""
}

// Fingerprint names a key without revealing it: the hex SHA-256 of the key.
func Fingerprint(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

// Outgoing returns ctx carrying key as the gRPC metadata the API reads
// (`authorization: Bearer KEY`). An empty key adds nothing (the connection
// may carry credentials of its own, as amctl's does).
func Outgoing(ctx context.Context, key string) context.Context {
	if key == "" {
		return ctx
	}
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+key)
}

// Errors of Checker.Check.
var (
	// ErrNoKey: the request presented no API key.
	ErrNoKey = errors.New("missing API key: send the header \"Authorization: Bearer <key>\"")
	// ErrBadKey: the API does not know the key.
	ErrBadKey = errors.New("unknown API key")
	// ErrUnavailable: the key could not be checked (the API did not answer).
	ErrUnavailable = errors.New("agentmesh API unavailable, retry")
)

// Defaults of Checker.
const (
	DefaultCheckTTL  = 10 * time.Second
	defaultCheckKeys = 4096
)

// Checker tells whether the API knows a key, by making the cheapest
// authenticated call there is (ToolService.ListTools, answered by the
// router itself, no bus request) with it. A known key is remembered for
// TTL, so a client's stream of requests costs one check per TTL; a revoked
// key stays "known" here for at most TTL, which only delays its 401: every
// call a door makes carries the key again and the API refuses it then.
type Checker struct {
	tools agentmeshv1.ToolServiceClient
	ttl   time.Duration

	mu   sync.Mutex
	good map[[sha256.Size]byte]time.Time // key hash → known until
}

// NewChecker returns a Checker calling the API over conn; ttl ≤ 0 means
// DefaultCheckTTL.
func NewChecker(conn grpc.ClientConnInterface, ttl time.Duration) *Checker {
	if ttl <= 0 {
		ttl = DefaultCheckTTL
	}
	return &Checker{tools: agentmeshv1.NewToolServiceClient(conn), ttl: ttl, good: map[[sha256.Size]byte]time.Time{}}
}

// Check returns nil for a key the API knows, ErrNoKey, ErrBadKey, or
// ErrUnavailable (the API could not be asked).
func (c *Checker) Check(ctx context.Context, key string) error {
	if key == "" {
		return ErrNoKey
	}
	sum := sha256.Sum256([]byte(key))
	now := time.Now()
	c.mu.Lock()
	until, ok := c.good[sum]
	c.mu.Unlock()
	if ok && now.Before(until) {
		return nil
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err := c.tools.ListTools(Outgoing(cctx, key), &agentmeshv1.ListToolsRequest{})
	switch status.Code(err) {
	case codes.OK, codes.PermissionDenied, codes.ResourceExhausted:
		// The key is known (a role that may not list tools, or an org over
		// its rate, is still a key): the calls themselves will say.
	case codes.Unauthenticated:
		return ErrBadKey
	default:
		return ErrUnavailable
	}
	c.mu.Lock()
	if len(c.good) >= defaultCheckKeys {
		for k, t := range c.good {
			if now.After(t) || len(c.good) >= defaultCheckKeys {
				delete(c.good, k)
			}
		}
	}
	c.good[sum] = now.Add(c.ttl)
	c.mu.Unlock()
	return nil
}

// WriteAuthError answers a request whose key Check refused: 401 with the
// WWW-Authenticate challenge for a missing or unknown key, 503 when the
// key could not be checked; the body is a JSON-RPC error response (id
// null), which both JSON-RPC doors' clients read.
func WriteAuthError(w http.ResponseWriter, err error) {
	code, httpStatus := int64(CodeUnauthenticated), http.StatusUnauthorized
	msg := err.Error()
	switch {
	case errors.Is(err, ErrNoKey), errors.Is(err, ErrBadKey):
		w.Header().Set("WWW-Authenticate", Challenge)
	default:
		code, httpStatus, msg = CodeUnavailable, http.StatusServiceUnavailable, ErrUnavailable.Error()
		w.Header().Set("Retry-After", "1")
	}
	WriteJSON(w, httpStatus, Response{JSONRPC: "2.0", ID: nil, Error: &RPCError{Code: code, Message: msg}})
}

// Response is a JSON-RPC 2.0 response: Result or Error. ID is the
// request's id as it came (raw JSON), or nil (null) when it could not be
// read.
type Response struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Result  any             `json:"result,omitempty"`
	Error   *RPCError       `json:"error,omitempty"`
}

// WriteJSON writes v as a JSON body with the status.
func WriteJSON(w http.ResponseWriter, httpStatus int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		http.Error(w, `{"error":"internal error"}`, http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(httpStatus)
	_, _ = w.Write(body)
}
