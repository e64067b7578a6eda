package router

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
)

// rawCodec sends bytes as they are: a client that writes what no protobuf
// library would (invalid wire format, strings that are not UTF-8).
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return *v.(*[]byte), nil }
func (rawCodec) Unmarshal(data []byte, v any) error {
	*v.(*[]byte) = append([]byte(nil), data...)
	return nil
}
func (rawCodec) Name() string { return "proto" }

var _ encoding.Codec = rawCodec{}

// A request message that does not decode is the client's error: every
// public RPC, unary or streaming, answers InvalidArgument saying why, not
// gRPC's default Internal (which says the server failed).
func TestUndecodableRequestIsInvalidArgument(t *testing.T) {
	e := start(t, Config{})
	badWire := []byte{0xff, 0xff, 0xff} // a field tag that does not parse
	n := 0
	for svc, info := range e.svc.srv.GetServiceInfo() {
		if !strings.HasPrefix(svc, "agentmesh.v1.") {
			continue
		}
		for _, m := range info.Methods {
			full := "/" + svc + "/" + m.Name
			n++
			err := callRaw(t, e.conn, full, m.IsServerStream, badWire)
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), "cannot parse") {
				t.Errorf("%s with invalid wire format: got %v, want InvalidArgument saying why", full, err)
			}
		}
	}
	if n < 30 {
		t.Fatalf("found %d public RPCs, want the whole API (30 or more)", n)
	}
	// A string field (SubmitTaskRequest.input, field 2) that is not UTF-8,
	// and a value nested past protobuf's depth limit (SetStateRequest.value,
	// field 4: a google.protobuf.Value holding lists 10,001 deep).
	notUTF8 := protowire.AppendBytes(protowire.AppendTag(nil, 2, protowire.BytesType), []byte{'a', 0xff})
	if err := callRaw(t, e.conn, "/agentmesh.v1.TaskService/SubmitTask", false, notUTF8); status.Code(err) != codes.InvalidArgument ||
		!strings.Contains(status.Convert(err).Message(), "UTF-8") {
		t.Errorf("SubmitTask with input not UTF-8: got %v, want InvalidArgument naming UTF-8", err)
	}
	if err := callRaw(t, e.conn, "/agentmesh.v1.MemoryService/SetState", false, deepValue(4, 10001)); status.Code(err) != codes.InvalidArgument ||
		!strings.Contains(status.Convert(err).Message(), "depth") {
		t.Errorf("SetState with a value 10,001 deep: got %v, want InvalidArgument naming the depth", err)
	}
	// The reserved field number is no field of any request: refused too.
	reserved := protowire.AppendString(protowire.AppendTag(nil, undecodableField, protowire.BytesType), "mine")
	if err := callRaw(t, e.conn, "/agentmesh.v1.TaskService/GetTask", false, reserved); status.Code(err) != codes.InvalidArgument {
		t.Errorf("GetTask carrying field %d: got %v, want InvalidArgument", undecodableField, err)
	}
	// A well-formed request still reaches the service (and its own checks).
	if _, err := e.tasks.SubmitTask(testCtx(t), nil); status.Code(err) != codes.InvalidArgument ||
		!strings.Contains(status.Convert(err).Message(), "input") {
		t.Errorf("empty SubmitTask: got %v, want the service's InvalidArgument on input", err)
	}
}

// callRaw sends payload as the request of method and returns the error
// the call (or the stream's first receive) ended with.
func callRaw(t *testing.T, conn *grpc.ClientConn, method string, stream bool, payload []byte) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out []byte
	if !stream {
		return conn.Invoke(ctx, method, &payload, &out, grpc.ForceCodec(rawCodec{}))
	}
	st, err := conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, method, grpc.ForceCodec(rawCodec{}))
	if err != nil {
		return err
	}
	if err := st.SendMsg(&payload); err != nil {
		return err
	}
	_ = st.CloseSend()
	return st.RecvMsg(&out)
}

// deepValue is field (a google.protobuf.Value) holding depth nested list
// values: list_value (field 6) → values (field 1) → list_value → ...
func deepValue(field protowire.Number, depth int) []byte {
	v := protowire.AppendBytes(protowire.AppendTag(nil, 3, protowire.BytesType), []byte("x")) // string_value
	for i := 0; i < depth; i++ {
		list := protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), v) // ListValue.values
		v = protowire.AppendBytes(protowire.AppendTag(nil, 6, protowire.BytesType), list)  // Value.list_value
	}
	return protowire.AppendBytes(protowire.AppendTag(nil, field, protowire.BytesType), v)
}

// FuzzRequestCodec: whatever bytes a client sends as a request, the
// servers' codec never fails and never panics on an API message, and the
// handlers' check answers either nil (the bytes decoded: the message is
// what gRPC's own codec makes of them) or InvalidArgument.
func FuzzRequestCodec(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{0xff, 0xff, 0xff})
	f.Add(protowire.AppendBytes(protowire.AppendTag(nil, 2, protowire.BytesType), []byte{'a', 0xff}))
	f.Add(protowire.AppendString(protowire.AppendTag(nil, undecodableField, protowire.BytesType), "x"))
	f.Add(protowire.AppendVarint(protowire.AppendTag(nil, undecodableField, protowire.VarintType), 1))
	f.Add(deepValue(4, 50))
	codec := newRequestCodec()
	f.Fuzz(func(t *testing.T, data []byte) {
		var m agentmeshv1.SetStateRequest
		if err := codec.Unmarshal(mem.BufferSlice{mem.SliceBuffer(data)}, &m); err != nil {
			t.Fatalf("Unmarshal failed: %v", err)
		}
		err := undecodable(&m)
		var want agentmeshv1.SetStateRequest
		if proto.Unmarshal(data, &want) != nil {
			if status.Code(err) != codes.InvalidArgument {
				t.Fatalf("bytes that do not decode: got %v, want InvalidArgument", err)
			}
			return
		}
		if err == nil && !proto.Equal(&m, &want) {
			t.Fatalf("decoded %v, want %v", &m, &want)
		}
		if err != nil && status.Code(err) != codes.InvalidArgument {
			t.Fatalf("got %v, want nil or InvalidArgument", err)
		}
	})
}
