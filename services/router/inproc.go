package router

import (
	"context"
	"io"
	"net/http"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/services/router/rest"
	"go.opentelemetry.io/otel/propagation"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// The doors' calls in process. A unary call through Conn runs, in the
// caller's goroutine, exactly what the gRPC server runs for it: the
// interceptors (unaryInterceptors: keys, roles, org, rate, sub-task ids)
// and the registered service's generated method handler — no transport,
// no encoding, the request and the answer copied. A stream (WatchTask, for
// a door other than SSE) goes through the in-memory gRPC server
// (http.go), which serves the same services with the same interceptors.
// SSE runs WatchTask's interceptors and handler directly (WatchHTTP).

// directConn is the router's API as a grpc.ClientConnInterface.
type directConn struct {
	methods map[string]directMethod
	unary   grpc.UnaryServerInterceptor
	streams grpc.ClientConnInterface
}

type directMethod struct {
	impl    any
	handler grpc.MethodHandler
}

// RegisterService records a service's unary methods: register() fills the
// gRPC servers and this table from the one list of services.
func (d *directConn) RegisterService(desc *grpc.ServiceDesc, impl any) {
	for _, m := range desc.Methods {
		d.methods["/"+desc.ServiceName+"/"+m.MethodName] = directMethod{impl: impl, handler: m.Handler}
	}
}

// Invoke runs method as the gRPC server would, with ctx's outgoing
// metadata (the caller's key) as the call's incoming metadata and its W3C
// trace context extracted, as the server's stats handler does.
func (d *directConn) Invoke(ctx context.Context, method string, args, reply any, _ ...grpc.CallOption) error {
	m, ok := d.methods[method]
	if !ok {
		return status.Errorf(codes.Unimplemented, "unknown method %s", method)
	}
	in, okIn := args.(proto.Message)
	out, okOut := reply.(proto.Message)
	if !okIn || !okOut {
		return status.Errorf(codes.Internal, "in-process call %s: messages must be protobuf", method)
	}
	md, _ := metadata.FromOutgoingContext(ctx)
	ctx = bus.Propagator().Extract(ctx, mdCarrier(md))
	ctx, span := startCall(ctx, method) // tracing.go
	err := d.invoke(ctx, m, method, md, in, out)
	endCall(span, err)
	return err
}

// invoke runs m, a call of method with metadata md, in ctx.
// Six parameters: the gRPC handler's own inputs (method, metadata, request, reply), passed through once.
func (d *directConn) invoke(ctx context.Context, m directMethod, method string, md metadata.MD, in, out proto.Message) error {
	ctx = grpc.NewContextWithServerTransportStream(metadata.NewIncomingContext(ctx, md), directTransport(method))
	dec := func(v any) error {
		dst, ok := v.(proto.Message)
		if !ok {
			return status.Errorf(codes.Internal, "in-process call %s: unexpected %T", method, v)
		}
		proto.Merge(dst, in)
		return nil
	}
	resp, err := m.handler(m.impl, ctx, dec, d.unary)
	if err != nil {
		return status.Convert(err).Err()
	}
	if r, ok := resp.(proto.Message); ok {
		proto.Reset(out)
		proto.Merge(out, r)
	}
	return nil
}

// NewStream opens a stream on the in-memory gRPC server.
func (d *directConn) NewStream(ctx context.Context, desc *grpc.StreamDesc, method string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	return d.streams.NewStream(ctx, desc, method, opts...)
}

// directTransport is the call's method for grpc.Method(ctx); headers and
// trailers a handler sets are dropped (the doors answer from the message).
type directTransport string

func (t directTransport) Method() string                 { return string(t) }
func (directTransport) SetHeader(metadata.MD) error      { return nil }
func (directTransport) SendHeader(metadata.MD) error     { return nil }
func (directTransport) SetTrailer(metadata.MD) error     { return nil }
func (directTransport) SetSendCompressor(string) error   { return nil }
func (directTransport) SetHeaderCompressor(string) error { return nil }

// mdCarrier reads a trace context from gRPC metadata.
type mdCarrier metadata.MD

func (c mdCarrier) Get(key string) string {
	if v := metadata.MD(c).Get(key); len(v) > 0 {
		return v[0]
	}
	return ""
}
func (c mdCarrier) Set(key, value string) { metadata.MD(c).Set(key, value) }
func (c mdCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}

// chainUnary is interceptors as one, first outermost (as
// grpc.ChainUnaryInterceptor chains them).
func chainUnary(interceptors []grpc.UnaryServerInterceptor) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		var next func(i int) grpc.UnaryHandler
		next = func(i int) grpc.UnaryHandler {
			if i == len(interceptors) {
				return handler
			}
			return func(ctx context.Context, req any) (any, error) { return interceptors[i](ctx, req, info, next(i+1)) }
		}
		return next(0)(ctx, req)
	}
}

// WatchHTTP runs WatchTask as the caller of an HTTP request, in the
// request's own goroutine: the gRPC servers' stream interceptors
// (authentication, role, org, rate) and WatchTask's generated handler, over
// a stream that hands each answer to out, with the request's key and trace
// context as the call's. The same code as a gRPC WatchTask, without a gRPC
// transport between: an idle stream is one goroutine of the HTTP server,
// not three more (docs/benchmarks.md). The SSE door uses it; so can any
// mounted door that streams a task's events (rest.Watcher's form). It
// returns when the task has ended (nil), the request's context ends, or
// with the router's status; out.Accepted comes once the watch stands.
func (s *Service) WatchHTTP(r *http.Request, req *agentmeshv1.WatchTaskRequest, out rest.WatchStream) error {
	return s.streamHTTP(r, "WatchTask", req, &directStream{
		req:    req,
		header: out.Accepted,
		send: func(m any) error {
			resp, ok := m.(*agentmeshv1.WatchTaskResponse)
			if !ok {
				return status.Errorf(codes.Internal, "in-process stream: unexpected %T", m)
			}
			return out.Send(resp)
		},
	})
}

// watchTasksHTTP runs WatchTasks for an SSE stream the same way.
func (s *Service) watchTasksHTTP(r *http.Request, req *agentmeshv1.WatchTasksRequest, out rest.TasksStream) error {
	return s.streamHTTP(r, "WatchTasks", req, &directStream{
		req:    req,
		header: func() error { return nil },
		send: func(m any) error {
			resp, ok := m.(*agentmeshv1.WatchTasksResponse)
			if !ok {
				return status.Errorf(codes.Internal, "in-process stream: unexpected %T", m)
			}
			return out.Send(resp)
		},
	})
}

// streamHTTP runs the TaskService stream rpc over ds in this goroutine,
// through the stream interceptors, as the caller of r.
func (s *Service) streamHTTP(r *http.Request, rpc string, req proto.Message, ds *directStream) error {
	md, _ := metadata.FromOutgoingContext(rest.OutgoingContext(context.Background(), r))
	ctx := bus.Propagator().Extract(r.Context(), propagation.HeaderCarrier(r.Header))
	ds.ctx = metadata.NewIncomingContext(ctx, md)
	info := &grpc.StreamServerInfo{FullMethod: method(agentmeshv1.TaskService_ServiceDesc.ServiceName, rpc), IsServerStream: true}
	var handler grpc.StreamHandler
	for _, sd := range agentmeshv1.TaskService_ServiceDesc.Streams {
		if sd.StreamName == rpc {
			handler = sd.Handler
		}
	}
	chain := s.streamInterceptors()
	var next func(i int) grpc.StreamHandler
	next = func(i int) grpc.StreamHandler {
		if i == len(chain) {
			return handler
		}
		return func(srv any, ss grpc.ServerStream) error { return chain[i](srv, ss, info, next(i+1)) }
	}
	return next(0)(&taskServer{s: s}, ds)
}

// directStream is a server stream in process: its one request is req, its
// header goes to header and its answers to send.
type directStream struct {
	ctx      context.Context
	req      proto.Message
	header   func() error
	send     func(any) error
	received bool
}

func (d *directStream) Context() context.Context     { return d.ctx }
func (d *directStream) SetHeader(metadata.MD) error  { return nil }
func (d *directStream) SendHeader(metadata.MD) error { return d.header() }
func (d *directStream) SetTrailer(metadata.MD)       {}
func (d *directStream) SendMsg(m any) error          { return d.send(m) }

func (d *directStream) RecvMsg(m any) error {
	if d.received {
		return io.EOF
	}
	d.received = true
	dst, ok := m.(proto.Message)
	if !ok {
		return status.Errorf(codes.Internal, "in-process stream: unexpected %T", m)
	}
	proto.Merge(dst, d.req)
	return nil
}
