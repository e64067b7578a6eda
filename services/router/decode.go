package router

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// A request message the server cannot read — bytes that are not protobuf,
// a string field that is not UTF-8, messages nested past protobuf's depth
// limit — is the client's error, answered InvalidArgument with the
// decoder's reason. gRPC itself answers Internal ("failed to unmarshal the
// received message"), and writes that status before a handler or an
// interceptor sees the error, so the decoding is changed at its source:
//
//   - requestCodec, the servers' codec, does not fail on an agentmesh.v1
//     message: it leaves the message empty with the reason recorded in an
//     unknown field of a number no message uses (undecodableField);
//   - requestDecoding registers the services with handlers that look for
//     that record right after decoding (a unary method's decode function,
//     a stream's RecvMsg) and answer InvalidArgument — before the
//     interceptors and the service, so nothing acts on the empty message.
//
// Other messages (health, reflection) decode as gRPC's own codec does.

// undecodableField is protobuf's largest field number: no agentmesh.v1
// message has it, so a request carrying it is refused like an undecodable
// one.
const undecodableField protowire.Number = protowire.MaxValidNumber

// apiPackage is the protobuf package of the public API.
const apiPackage = "agentmesh.v1"

// requestCodec is gRPC's proto codec, except that an agentmesh.v1 message
// that does not decode is recorded as such instead of failing.
type requestCodec struct{ encoding.CodecV2 }

func newRequestCodec() requestCodec { return requestCodec{encoding.GetCodecV2("proto")} }

// Unmarshal decodes data into v; see requestCodec.
func (c requestCodec) Unmarshal(data mem.BufferSlice, v any) error {
	err := c.CodecV2.Unmarshal(data, v)
	m, ok := v.(proto.Message)
	if err == nil || !ok || m.ProtoReflect().Descriptor().ParentFile().Package() != apiPackage {
		return err
	}
	proto.Reset(m)
	b := protowire.AppendTag(nil, undecodableField, protowire.BytesType)
	m.ProtoReflect().SetUnknown(protowire.AppendString(b, err.Error()))
	return nil
}

// requestDecoding registers services so that their handlers refuse a
// request requestCodec recorded as undecodable.
type requestDecoding struct{ grpc.ServiceRegistrar }

// RegisterService registers a copy of desc whose handlers check each
// decoded request with undecodable.
func (r requestDecoding) RegisterService(desc *grpc.ServiceDesc, impl any) {
	d := *desc
	d.Methods = make([]grpc.MethodDesc, len(desc.Methods))
	for i, m := range desc.Methods {
		handler := m.Handler
		m.Handler = func(srv any, ctx context.Context, dec func(any) error, in grpc.UnaryServerInterceptor) (any, error) {
			checked := func(v any) error {
				if err := dec(v); err != nil {
					return err
				}
				return undecodable(v)
			}
			return handler(srv, ctx, checked, in)
		}
		d.Methods[i] = m
	}
	d.Streams = make([]grpc.StreamDesc, len(desc.Streams))
	for i, s := range desc.Streams {
		handler := s.Handler
		s.Handler = func(srv any, stream grpc.ServerStream) error {
			return handler(srv, decodingStream{stream})
		}
		d.Streams[i] = s
	}
	r.ServiceRegistrar.RegisterService(&d, impl)
}

// decodingStream is a server stream whose received messages are checked
// with undecodable.
type decodingStream struct{ grpc.ServerStream }

func (s decodingStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	return undecodable(m)
}

// undecodable answers InvalidArgument, with the decoder's reason, for a
// message that carries undecodableField; nil for any other.
func undecodable(v any) error {
	m, ok := v.(proto.Message)
	if !ok {
		return nil
	}
	for b := m.ProtoReflect().GetUnknown(); len(b) > 0; {
		num, typ, n := protowire.ConsumeField(b)
		if n < 0 {
			return nil
		}
		if num == undecodableField {
			reason := "field number reserved"
			if typ == protowire.BytesType {
				_, _, tn := protowire.ConsumeTag(b)
				if s, sn := protowire.ConsumeString(b[tn:]); sn >= 0 {
					reason = s
				}
			}
			return status.Error(codes.InvalidArgument, "request message does not decode: "+reason)
		}
		b = b[n:]
	}
	return nil
}
