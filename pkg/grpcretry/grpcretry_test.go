package grpcretry_test

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/grpcretry"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// flaky answers GetTask with failures codes in order, then succeeds.
type flaky struct {
	agentmeshv1.UnimplementedTaskServiceServer
	calls    atomic.Int32
	failures []error
}

func (f *flaky) GetTask(ctx context.Context, req *agentmeshv1.GetTaskRequest) (*agentmeshv1.GetTaskResponse, error) {
	n := int(f.calls.Add(1))
	if n <= len(f.failures) {
		return nil, f.failures[n-1]
	}
	return &agentmeshv1.GetTaskResponse{Task: &agentmeshv1.Task{Id: req.Id}}, nil
}

func unavailable(retry bool) error {
	st := status.New(codes.Unavailable, "no service answers am.state.task.get")
	if retry {
		st, _ = st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(time.Millisecond)})
	}
	return st.Err()
}

func TestUnaryRetriesUnavailable(t *testing.T) {
	b := bus.Backoff{Initial: time.Millisecond, Max: 5 * time.Millisecond, Tries: 6}
	tests := []struct {
		name      string
		failures  []error
		wantCode  codes.Code
		wantCalls int32
	}{
		{"success after unavailable with retry info", []error{unavailable(true), unavailable(true), unavailable(true)}, codes.OK, 4},
		{"tries run out", []error{unavailable(true), unavailable(true), unavailable(true), unavailable(true), unavailable(true), unavailable(true), unavailable(true)}, codes.Unavailable, 6},
		{"without retry info: transport tries only", []error{unavailable(false), unavailable(false), unavailable(false), unavailable(false), unavailable(false)}, codes.Unavailable, grpcretry.TransportTries},
		{"other codes are answers", []error{status.Error(codes.NotFound, "no"), unavailable(true)}, codes.NotFound, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv := &flaky{failures: tc.failures}
			lis, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			g := grpc.NewServer()
			agentmeshv1.RegisterTaskServiceServer(g, srv)
			go func() { _ = g.Serve(lis) }()
			defer g.Stop()
			conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
				grpc.WithChainUnaryInterceptor(grpcretry.Unary(b)))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_, err = agentmeshv1.NewTaskServiceClient(conn).GetTask(ctx, &agentmeshv1.GetTaskRequest{Id: "01X"})
			if got := status.Code(err); got != tc.wantCode {
				t.Errorf("code: got %v (%v), want %v", got, err, tc.wantCode)
			}
			if got := srv.calls.Load(); got != tc.wantCalls {
				t.Errorf("calls: got %d, want %d", got, tc.wantCalls)
			}
		})
	}
}

func TestPushback(t *testing.T) {
	if got := grpcretry.Pushback(unavailable(true)); got != time.Millisecond {
		t.Errorf("got %v, want 1ms", got)
	}
	if got := grpcretry.Pushback(unavailable(false)); got != 0 {
		t.Errorf("got %v, want 0", got)
	}
}
