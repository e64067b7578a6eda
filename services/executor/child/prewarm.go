package child

import (
	childwirev1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/childwire/v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// prewarm encodes and decodes one frame of every kind, every message field
// filled, before the child reads its Start frame. The protobuf runtime
// builds each message type's encoder and decoder on the type's first use;
// done here, a warm child (see the executor's warm pool) has built them
// while it waited, and its task's first frames do not pay for it (measured:
// ~1 ms of the first model request and of the first step, docs/benchmarks.md).
// Nothing of a task is involved: the frames are made up and thrown away.
func prewarm() {
	kinds := (&childwirev1.Frame{}).ProtoReflect().Descriptor().Oneofs().ByName("kind")
	if kinds == nil {
		return
	}
	fields := kinds.Fields()
	for i := range fields.Len() {
		f := &childwirev1.Frame{}
		m := f.ProtoReflect()
		fd := fields.Get(i)
		if fd.Kind() != protoreflect.MessageKind {
			continue
		}
		fill(m.Mutable(fd).Message(), 4)
		b, err := proto.Marshal(f)
		if err != nil {
			continue
		}
		_ = proto.Unmarshal(b, &childwirev1.Frame{})
	}
}

// fill sets every field of m: strings and bytes to a short value, each
// message field (and one element of each list of messages) filled in turn,
// down to depth levels. Maps and other scalars are left alone.
func fill(m protoreflect.Message, depth int) {
	fds := m.Descriptor().Fields()
	for i := range fds.Len() {
		fd := fds.Get(i)
		switch {
		case fd.IsMap():
		case fd.IsList():
			if fd.Kind() == protoreflect.MessageKind && depth > 0 {
				l := m.Mutable(fd).List()
				e := l.NewElement()
				fill(e.Message(), depth-1)
				l.Append(e)
			}
		case fd.Kind() == protoreflect.MessageKind:
			if depth > 0 {
				fill(m.Mutable(fd).Message(), depth-1)
			}
		case fd.Kind() == protoreflect.StringKind:
			m.Set(fd, protoreflect.ValueOfString("x"))
		case fd.Kind() == protoreflect.BytesKind:
			m.Set(fd, protoreflect.ValueOfBytes([]byte("x")))
		}
	}
}
