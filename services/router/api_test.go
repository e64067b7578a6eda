package router

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
)

// Every RPC the router serves of the public API (agentmesh.v1) is
// implemented — none answers the generated Unimplemented — and has a role
// in MethodRoles. The services and methods come from the router's own gRPC
// server, so a service or method added later is covered without a list to
// keep. Each is called with an empty request (zero bytes decode as the empty
// message of any type): any answer but Unimplemented will do (invalid
// argument, not found, unavailable from the test's bus).
func TestEveryPublicRPCIsImplementedAndHasARole(t *testing.T) {
	e := start(t, Config{})
	n := 0
	for svc, info := range e.svc.srv.GetServiceInfo() {
		if !strings.HasPrefix(svc, "agentmesh.v1.") {
			continue // health, reflection
		}
		for _, m := range info.Methods {
			full := "/" + svc + "/" + m.Name
			n++
			if _, ok := MethodRoles[full]; !ok {
				t.Errorf("%s is not in MethodRoles", full)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			var err error
			if m.IsClientStream || m.IsServerStream {
				var st grpc.ClientStream
				st, err = e.conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: m.IsServerStream, ClientStreams: m.IsClientStream}, full)
				if err == nil {
					if err = st.SendMsg(&emptypb.Empty{}); err == nil {
						_ = st.CloseSend()
						err = st.RecvMsg(&emptypb.Empty{})
					}
				}
			} else {
				err = e.conn.Invoke(ctx, full, &emptypb.Empty{}, &emptypb.Empty{})
			}
			cancel()
			if status.Code(err) == codes.Unimplemented {
				t.Errorf("%s answers Unimplemented: %v", full, err)
			}
		}
	}
	if n < 30 {
		t.Errorf("found %d public RPCs, want the whole API (30 or more)", n)
	}
}
