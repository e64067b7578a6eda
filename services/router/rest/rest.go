// Package rest is agentmesh's REST/JSON and Server-Sent Events door: an
// http.Handler that translates each HTTP call into a call of the router's
// own gRPC API (a grpc.ClientConnInterface the router hands it, in process),
// with the caller's key forwarded as metadata. So every HTTP request passes
// the same authentication, roles, org checks, rate limits, validation and
// error codes as a gRPC call (invariant 11): this package decides none of
// them.
//
// What it serves (the router mounts it at "/" of its HTTP listener):
//
//	/v1/...                 every annotated method of proto/agentmesh/v1
//	                        (google.api.http), by the grpc-gateway handlers
//	                        generated into pkg/api (*.pb.gw.go)
//	GET /v1/tasks/{id}/events  a task's events as text/event-stream, built
//	                        on WatchTask (sse.go; Options.Watch runs it)
//	GET /v1/tasks:watch     the org's task changes as text/event-stream,
//	                        built on WatchTasks (changes.go)
//	GET /v1/openapi.json    the OpenAPI (Swagger 2.0) document generated
//	                        from the proto (openapi/, `make generate`)
//
// JSON field names are the proto names (snake_case; lowerCamelCase is
// accepted on input), enums their names, unknown fields refused; a body
// must be unencoded UTF-8 JSON (body.go: 415 for another Content-Type or
// a Content-Encoding). Errors are google.rpc.Status JSON with the HTTP
// status of the gRPC code (errors.go). HTTP's method semantics hold
// (methods.go): 405 with Allow, OPTIONS, HEAD wherever GET is. An escaped
// "/" stays inside its path parameter. Edge (edge.go) bounds request
// bodies (413) and the time they take to arrive (408), and answers CORS
// for the configured origins only.
package rest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/textproto"
	"strings"
	"sync"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
)

// DefaultKeepAlive is how often an idle event stream gets a comment line,
// so proxies and clients see it alive.
const DefaultKeepAlive = 15 * time.Second

// Options configure the handler.
type Options struct {
	// Conn reaches the router's gRPC API; required.
	Conn grpc.ClientConnInterface
	// Log receives what cannot be answered to the client; required.
	Log *slog.Logger
	// KeepAlive between comment lines of an idle event stream; default
	// DefaultKeepAlive.
	KeepAlive time.Duration
	// Watch runs the event streams' WatchTask; default ConnWatcher(Conn).
	// The router passes one that runs the gRPC server's own interceptors
	// and handler in the stream's goroutine (no gRPC transport between).
	Watch Watcher
	// WatchTasks runs the org-wide change streams (GET /v1/tasks:watch);
	// default ConnTasksWatcher(Conn).
	WatchTasks TasksWatcher
}

// strictQueryOnce sets the gateway's query parser once per process.
var strictQueryOnce sync.Once

// ErrNoConn is returned by New without Options.Conn.
var ErrNoConn = errors.New("rest: Options.Conn is required")

// registration mounts one service's generated gateway handlers.
type registration func(context.Context, *runtime.ServeMux, grpc.ClientConnInterface) error

// handlers is the registration of a service: its generated
// Register…HandlerClient over its client on the connection.
func handlers[C any](register func(context.Context, *runtime.ServeMux, C) error, client func(grpc.ClientConnInterface) C) registration {
	return func(ctx context.Context, m *runtime.ServeMux, c grpc.ClientConnInterface) error {
		return register(ctx, m, client(c))
	}
}

// registrations are the generated gateway handlers of the public API, one
// per service: each turns the HTTP call into that service's client call.
var registrations = []registration{
	handlers(agentmeshv1.RegisterTaskServiceHandlerClient, agentmeshv1.NewTaskServiceClient),
	handlers(agentmeshv1.RegisterTaskGraphServiceHandlerClient, agentmeshv1.NewTaskGraphServiceClient),
	handlers(agentmeshv1.RegisterMetricsServiceHandlerClient, agentmeshv1.NewMetricsServiceClient),
	handlers(agentmeshv1.RegisterAgentServiceHandlerClient, agentmeshv1.NewAgentServiceClient),
	handlers(agentmeshv1.RegisterSkillServiceHandlerClient, agentmeshv1.NewSkillServiceClient),
	handlers(agentmeshv1.RegisterApprovalServiceHandlerClient, agentmeshv1.NewApprovalServiceClient),
	handlers(agentmeshv1.RegisterProposalServiceHandlerClient, agentmeshv1.NewProposalServiceClient),
	handlers(agentmeshv1.RegisterToolServiceHandlerClient, agentmeshv1.NewToolServiceClient),
	handlers(agentmeshv1.RegisterTapServiceHandlerClient, agentmeshv1.NewTapServiceClient),
	handlers(agentmeshv1.RegisterRunServiceHandlerClient, agentmeshv1.NewRunServiceClient),
	handlers(agentmeshv1.RegisterVersionServiceHandlerClient, agentmeshv1.NewVersionServiceClient),
	handlers(agentmeshv1.RegisterExecutorServiceHandlerClient, agentmeshv1.NewExecutorServiceClient),
	handlers(agentmeshv1.RegisterKeyServiceHandlerClient, agentmeshv1.NewKeyServiceClient),
	handlers(agentmeshv1.RegisterScheduleServiceHandlerClient, agentmeshv1.NewScheduleServiceClient),
	handlers(agentmeshv1.RegisterWebhookServiceHandlerClient, agentmeshv1.NewWebhookServiceClient),
	handlers(agentmeshv1.RegisterMemoryServiceHandlerClient, agentmeshv1.NewMemoryServiceClient),
	handlers(agentmeshv1.RegisterThreadServiceHandlerClient, agentmeshv1.NewThreadServiceClient),
}

// jsonMarshaler is the wire form of every JSON body, in and out.
var jsonMarshaler = &runtime.JSONPb{
	MarshalOptions:   protojson.MarshalOptions{UseProtoNames: true},
	UnmarshalOptions: protojson.UnmarshalOptions{DiscardUnknown: false},
}

// New returns the REST and SSE handler.
func New(o Options) (http.Handler, error) {
	if o.Conn == nil {
		return nil, ErrNoConn
	}
	if o.Log == nil {
		return nil, errors.New("rest: Options.Log is required")
	}
	if o.KeepAlive <= 0 {
		o.KeepAlive = DefaultKeepAlive
	}
	if o.Watch == nil {
		o.Watch = ConnWatcher(o.Conn)
	}
	if o.WatchTasks == nil {
		o.WatchTasks = ConnTasksWatcher(o.Conn)
	}
	opts := []runtime.ServeMuxOption{
		runtime.WithMarshalerOption(runtime.MIMEWildcard, jsonMarshaler),
		runtime.WithIncomingHeaderMatcher(forwardHeader),
		runtime.WithOutgoingHeaderMatcher(func(string) (string, bool) { return "", false }),
		runtime.WithOutgoingTrailerMatcher(func(string) (string, bool) { return "", false }),
		runtime.WithErrorHandler(gatewayError),
		runtime.WithRoutingErrorHandler(routingError),
		runtime.WithDisableHTTPMethodOverride(),
		// An escaped "/" stays in its path parameter ("a%2Fb" is one id,
		// which the API then refuses), never a path of its own.
		runtime.WithUnescapingMode(runtime.UnescapingModeAllExceptSlash),
	}
	// A query parameter that names no field is refused (query.go). The
	// parser is the gateway's global: set once, as a handler made while
	// another serves must not write what that one reads.
	strictQueryOnce.Do(func() { opts = append(opts, runtime.SetQueryParameterParser(&strictQuery{})) })
	gw := runtime.NewServeMux(opts...)
	// The handlers only keep ctx for their registration; nothing to cancel.
	for _, register := range registrations {
		if err := register(context.Background(), gw, o.Conn); err != nil {
			return nil, fmt.Errorf("rest: register gateway: %w", err)
		}
	}
	mux := http.NewServeMux()
	mux.Handle("/", jsonBody(gw))
	mux.Handle("GET /v1/tasks/{id}/events", &events{watch: o.Watch, log: o.Log, keepAlive: o.KeepAlive})
	mux.Handle("GET /v1/tasks:watch", &changes{watch: o.WatchTasks, log: o.Log, keepAlive: o.KeepAlive})
	mux.HandleFunc("GET /v1/openapi.json", serveOpenAPI)
	return mux, nil
}

// jsonBody is what every gateway call passes first: its answer is not
// to be stored (Cache-Control: no-store). HEAD is served as
// GET (the server sends the headers only). A body is refused, naming what
// is wrong, when it is encoded (415: Content-Encoding), of a media type
// that is not JSON (415: Content-Type) or not JSON at all (400, saying
// where it breaks: the gateway's decoder would say only "unexpected EOF");
// a body that is JSON but not the call's message is the gateway's to
// refuse, naming the field (gatewayError).
func jsonBody(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// An answer is the caller's own (its key's org): no cache keeps it
		// (a request with X-Api-Key, unlike Authorization, is one a shared
		// cache may store), and no browser reads it as anything but JSON.
		h := w.Header()
		h.Set("Cache-Control", "no-store")
		h.Set("X-Content-Type-Options", "nosniff")
		if r.Method == http.MethodHead || r.Header.Get("Grpc-Timeout") != "" {
			r = r.Clone(r.Context())
			if r.Method == http.MethodHead {
				r.Method = http.MethodGet
			}
			// A gRPC transport header the gateway would obey: an HTTP
			// client times its own calls (its expiry read as a 503).
			r.Header.Del("Grpc-Timeout")
		}
		if r.Body == nil || r.Body == http.NoBody {
			next.ServeHTTP(w, r)
			return
		}
		body, err := io.ReadAll(r.Body)
		if err != nil {
			WriteError(w, r, status.Errorf(codes.InvalidArgument, "request body could not be read: %v", err))
			return
		}
		if len(bytes.TrimSpace(body)) > 0 {
			if st := unsupportedBody(r.Header); st != nil {
				w.Header().Set("Accept-Encoding", "identity")
				writeStatus(w, st, http.StatusUnsupportedMediaType)
				return
			}
			if err := checkJSON(body); err != nil {
				WriteError(w, r, err)
				return
			}
		}
		r = r.WithContext(context.WithValue(r.Context(), bodyKey{}, body))
		r.Body = io.NopCloser(bytes.NewReader(body))
		next.ServeHTTP(w, r)
	})
}

// forwarded are the request headers, besides Authorization (which the
// gateway always forwards), that reach the gRPC API as metadata: the other
// form of the API key, the org a platform key reads and the W3C trace
// context (invariant 5).
var forwarded = map[string]string{
	"X-Api-Key": "x-api-key",
	// A platform key's choice of the org it reads (router.OrgHeader).
	"X-Agentmesh-Org": "x-agentmesh-org",
	"Traceparent":     "traceparent",
	"Tracestate":      "tracestate",
}

func forwardHeader(key string) (string, bool) {
	md, ok := forwarded[textproto.CanonicalMIMEHeaderKey(key)]
	return md, ok
}

// RequestKey returns the API key an HTTP request presents:
// "Authorization: Bearer KEY", else "X-Api-Key: KEY"; "" when none.
func RequestKey(r *http.Request) string {
	for _, v := range r.Header.Values("Authorization") {
		scheme, tok, ok := strings.Cut(strings.TrimSpace(v), " ")
		if tok = strings.TrimSpace(tok); ok && strings.EqualFold(scheme, "bearer") && tok != "" {
			return tok
		}
	}
	for _, v := range r.Header.Values("X-Api-Key") {
		if v = strings.TrimSpace(v); v != "" {
			return v
		}
	}
	return ""
}

// OutgoingContext returns ctx carrying what an HTTP request says about its
// caller as outgoing gRPC metadata, for calls through the router's
// in-process connection: its API key (as "authorization: Bearer KEY"), its
// trace context and its client address (x-forwarded-for). The router then
// authenticates the call exactly as a gRPC caller's.
func OutgoingContext(ctx context.Context, r *http.Request) context.Context {
	var pairs []string
	if key := RequestKey(r); key != "" {
		pairs = append(pairs, "authorization", "Bearer "+key)
	}
	for h, md := range forwarded {
		if h == "X-Api-Key" {
			continue
		}
		if v := r.Header.Get(h); v != "" {
			pairs = append(pairs, md, v)
		}
	}
	if host, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		pairs = append(pairs, "x-forwarded-for", host)
	}
	return metadata.AppendToOutgoingContext(ctx, pairs...)
}
