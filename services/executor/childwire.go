package executor

// The executor holds the child protocol's frames in agentmesh.child.v1's
// types (with the public API's Step, ToolCall, Usage); the agent child in
// its own copy, agentmesh.childwire.v1, which links no public API. Both
// encode to the same bytes (a test in services/executor/childproto keeps
// them so), so where the executor runs the child's own code — the first
// request before the child, the step of an answer no child recorded — it
// converts through those bytes.

import (
	"fmt"
	"slices"

	childv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/child/v1"
	childwirev1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/childwire/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/services/executor/child"
	"github.com/agentmesh/agentmesh/services/executor/childproto"
	"google.golang.org/protobuf/proto"
)

// convert decodes the bytes of from into to (a message of the other side's
// types for the same wire) and returns to.
func convert[T proto.Message](from proto.Message, to T) T {
	b, err := proto.Marshal(from)
	if err == nil {
		err = proto.Unmarshal(b, to)
	}
	if err != nil {
		// Both sides' types describe the same wire: bytes one encodes,
		// the other decodes.
		panic(fmt.Sprintf("executor: %T does not convert to %T: %v", from, to, err))
	}
	return to
}

// firstRequest is child.FirstRequest in the executor's types.
func firstRequest(start *childv1.Start) (*childv1.ModelRequest, bool) {
	req, ok := child.FirstRequest(convert(start, &childwirev1.Start{}))
	if !ok {
		return nil, false
	}
	return convert(req, &childv1.ModelRequest{}), true
}

// childTurnStep is child.TurnStep's step in the executor's types.
func childTurnStep(resp *childv1.ModelResponse, next int32) *agentmeshv1.Step {
	step, _ := child.TurnStep(convert(resp, &childwirev1.ModelResponse{}), next)
	return convert(step, &agentmeshv1.Step{})
}

// sameRequest reports whether two model requests ask the same thing: the
// same messages and the same tools (the ids aside).
func sameRequest(a, b *childv1.ModelRequest) bool {
	return slices.EqualFunc(a.GetMessages(), b.GetMessages(), func(x, y *childv1.Message) bool { return proto.Equal(x, y) }) &&
		slices.EqualFunc(a.GetTools(), b.GetTools(), func(x, y *childv1.ToolSpec) bool { return proto.Equal(x, y) })
}

// readFrame reads a child's next frame.
func readFrame(r *childproto.Reader) (*childv1.Frame, error) {
	f := new(childv1.Frame)
	if err := r.Read(f); err != nil {
		return nil, err
	}
	return f, nil
}
