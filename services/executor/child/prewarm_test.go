package child

import (
	"testing"

	childwirev1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/childwire/v1"
	"google.golang.org/protobuf/proto"
)

// TestPrewarmFillsEveryFrameKind: fill reaches the nested messages of every
// frame kind (so their encoders are built before the task), and a filled
// frame survives a round trip.
func TestPrewarmFillsEveryFrameKind(t *testing.T) {
	prewarm() // must not panic
	kinds := (&childwirev1.Frame{}).ProtoReflect().Descriptor().Oneofs().ByName("kind").Fields()
	for i := range kinds.Len() {
		fd := kinds.Get(i)
		f := &childwirev1.Frame{}
		fill(f.ProtoReflect().Mutable(fd).Message(), 4)
		b, err := proto.Marshal(f)
		if err != nil {
			t.Fatalf("%s: marshal: %v", fd.Name(), err)
		}
		var g childwirev1.Frame
		if err := proto.Unmarshal(b, &g); err != nil || !proto.Equal(f, &g) {
			t.Fatalf("%s: round trip: err %v, equal %v", fd.Name(), err, proto.Equal(f, &g))
		}
	}
	// A model request carries a message with a tool call: nested lists are filled.
	f := &childwirev1.Frame{}
	fill(f.ProtoReflect().Mutable(kinds.ByName("model_request")).Message(), 4)
	msgs := f.GetModelRequest().GetMessages()
	if len(msgs) != 1 || len(msgs[0].GetToolCalls()) != 1 || msgs[0].GetRole() != "x" {
		t.Fatalf("model request not filled: %v", f.GetModelRequest())
	}
}
