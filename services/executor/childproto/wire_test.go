package childproto

import (
	"bytes"
	"fmt"
	"testing"

	childv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/child/v1"
	childwirev1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/childwire/v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// The executor speaks agentmesh.child.v1, the agent child its own copy,
// agentmesh.childwire.v1: they must describe the same wire. Every message
// of the protocol itself (child.v1's) has the same fields in both; a
// message of the public API the frames carry (agentmesh.v1's Step,
// ToolCall, Usage, McpServer) may lack fields in the child's copy (it
// keeps them as unknown fields), but each field it has matches.
func TestChildWireMatchesChildProtocol(t *testing.T) {
	full := (&childv1.Frame{}).ProtoReflect().Descriptor()
	wire := (&childwirev1.Frame{}).ProtoReflect().Descriptor()
	for _, p := range compareMessages(full, wire, map[protoreflect.FullName]bool{}) {
		t.Error(p)
	}
}

// compareMessages lists how wire's fields differ from full's (recursively).
func compareMessages(full, wire protoreflect.MessageDescriptor, seen map[protoreflect.FullName]bool) []string {
	if seen[full.FullName()] {
		return nil
	}
	seen[full.FullName()] = true
	protocol := full.ParentFile().Package() == "agentmesh.child.v1"
	var problems []string
	ff, wf := full.Fields(), wire.Fields()
	for i := range ff.Len() {
		f := ff.Get(i)
		w := wf.ByNumber(f.Number())
		if w == nil {
			if protocol {
				problems = append(problems, fmt.Sprintf("%s: field %s (%d) missing in %s", full.FullName(), f.Name(), f.Number(), wire.FullName()))
			}
			continue
		}
		problems = append(problems, compareFields(f, w, seen)...)
	}
	for i := range wf.Len() {
		if w := wf.Get(i); ff.ByNumber(w.Number()) == nil {
			problems = append(problems, fmt.Sprintf("%s: field %s (%d) has no counterpart in %s", wire.FullName(), w.Name(), w.Number(), full.FullName()))
		}
	}
	return problems
}

// compareFields lists how two fields of the same number differ.
func compareFields(f, w protoreflect.FieldDescriptor, seen map[protoreflect.FullName]bool) []string {
	where := fmt.Sprintf("%s (%d)", f.FullName(), f.Number())
	switch {
	case f.Name() != w.Name():
		return []string{fmt.Sprintf("%s: named %s in the child's copy", where, w.Name())}
	case f.Kind() != w.Kind() || f.Cardinality() != w.Cardinality() || f.IsPacked() != w.IsPacked() || f.IsMap() != w.IsMap():
		return []string{fmt.Sprintf("%s: %v %v in the executor's, %v %v in the child's", where, f.Cardinality(), f.Kind(), w.Cardinality(), w.Kind())}
	case (f.ContainingOneof() == nil) != (w.ContainingOneof() == nil):
		return []string{where + ": in a oneof on one side only"}
	}
	switch {
	case f.IsMap():
		return append(compareFields(f.MapKey(), w.MapKey(), seen), compareFields(f.MapValue(), w.MapValue(), seen)...)
	case f.Enum() != nil:
		return compareEnums(f.Enum(), w.Enum())
	case f.Message() != nil && f.Message().ParentFile().Package() == "google.protobuf":
		if f.Message().FullName() != w.Message().FullName() {
			return []string{fmt.Sprintf("%s: %s in the executor's, %s in the child's", where, f.Message().FullName(), w.Message().FullName())}
		}
	case f.Message() != nil:
		return compareMessages(f.Message(), w.Message(), seen)
	}
	return nil
}

// compareEnums lists the values of full missing in wire (or numbered
// otherwise); an enum's value names differ by their prefix only.
func compareEnums(full, wire protoreflect.EnumDescriptor) []string {
	var problems []string
	fv, wv := full.Values(), wire.Values()
	if fv.Len() != wv.Len() {
		problems = append(problems, fmt.Sprintf("%s: %d values, the child's copy %d", full.FullName(), fv.Len(), wv.Len()))
	}
	for i := range fv.Len() {
		if wv.ByNumber(fv.Get(i).Number()) == nil {
			problems = append(problems, fmt.Sprintf("%s: value %s missing in the child's copy", full.FullName(), fv.Get(i).Name()))
		}
	}
	return problems
}

// A frame of every kind, every field set, read by the child's copy and
// written back, is the frame the executor wrote.
func TestChildWireRoundTrip(t *testing.T) {
	kinds := (&childv1.Frame{}).ProtoReflect().Descriptor().Oneofs().ByName("kind").Fields()
	for i := range kinds.Len() {
		fd := kinds.Get(i)
		f := &childv1.Frame{}
		fillAll(f.ProtoReflect().Mutable(fd).Message(), 4)
		b, err := proto.Marshal(f)
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		if err := NewWriter(&buf).Write(f); err != nil {
			t.Fatal(err)
		}
		w := &childwirev1.Frame{}
		if err := NewReader(&buf).Read(w); err != nil {
			t.Fatalf("%s: the child's copy cannot read it: %v", fd.Name(), err)
		}
		if len(w.ProtoReflect().GetUnknown()) > 0 {
			t.Errorf("%s: the child's copy does not know a field of the frame", fd.Name())
		}
		back, err := proto.MarshalOptions{Deterministic: true}.Marshal(w)
		if err != nil {
			t.Fatal(err)
		}
		again := &childv1.Frame{}
		if err := proto.Unmarshal(back, again); err != nil || !proto.Equal(again, f) {
			t.Errorf("%s: %d bytes written, read back as %v (%v), want %v", fd.Name(), len(b), again, err, f)
		}
	}
}

// fillAll sets every field of m to a value that is not its zero: strings
// "x", numbers 7, bools true, enums their last value, one map entry, one
// element of each list, messages filled in turn, down to depth levels.
func fillAll(m protoreflect.Message, depth int) {
	fds := m.Descriptor().Fields()
	for i := range fds.Len() {
		fd := fds.Get(i)
		if fd.ContainingOneof() != nil && m.WhichOneof(fd.ContainingOneof()) != nil {
			continue
		}
		switch {
		case fd.IsMap():
			m.Mutable(fd).Map().Set(scalar(fd.MapKey()).MapKey(), scalar(fd.MapValue()))
		case fd.IsList() && fd.Kind() == protoreflect.MessageKind:
			if depth > 0 {
				l := m.Mutable(fd).List()
				e := l.NewElement()
				fillAll(e.Message(), depth-1)
				l.Append(e)
			}
		case fd.IsList():
			m.Mutable(fd).List().Append(scalar(fd))
		case fd.Kind() == protoreflect.MessageKind:
			if depth > 0 {
				fillAll(m.Mutable(fd).Message(), depth-1)
			}
		default:
			m.Set(fd, scalar(fd))
		}
	}
}

// scalar is a value of fd's (scalar) kind that is not its zero.
func scalar(fd protoreflect.FieldDescriptor) protoreflect.Value {
	switch fd.Kind() {
	case protoreflect.StringKind:
		return protoreflect.ValueOfString("x")
	case protoreflect.BytesKind:
		return protoreflect.ValueOfBytes([]byte("x"))
	case protoreflect.BoolKind:
		return protoreflect.ValueOfBool(true)
	case protoreflect.EnumKind:
		vs := fd.Enum().Values()
		return protoreflect.ValueOfEnum(vs.Get(vs.Len() - 1).Number())
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return protoreflect.ValueOfInt32(7)
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return protoreflect.ValueOfInt64(7)
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return protoreflect.ValueOfUint32(7)
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return protoreflect.ValueOfUint64(7)
	case protoreflect.FloatKind:
		return protoreflect.ValueOfFloat32(7)
	case protoreflect.DoubleKind:
		return protoreflect.ValueOfFloat64(7)
	}
	return protoreflect.Value{}
}

// The comparison finds a difference where there is one.
func TestCompareMessagesFindsDifferences(t *testing.T) {
	full := (&childv1.Start{}).ProtoReflect().Descriptor()
	other := (&childwirev1.ModelRequest{}).ProtoReflect().Descriptor()
	if p := compareMessages(full, other, map[protoreflect.FullName]bool{}); len(p) == 0 {
		t.Error("Start and ModelRequest compare equal")
	}
}
