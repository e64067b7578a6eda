package state

import (
	"fmt"
	"testing"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"google.golang.org/protobuf/proto"
)

// FuzzCheckSteps: the steps of one write come from a bus request (an
// executor, or anyone holding its identity). Whatever they hold, checkSteps
// does not panic, and what it accepts is at most MaxStepsPerWrite steps
// with non-negative, increasing indexes.
func FuzzCheckSteps(f *testing.F) {
	enc := func(idx ...int32) []byte {
		var b []byte
		for _, i := range idx {
			s, _ := proto.Marshal(&agentmeshv1.Step{Index: i})
			b = append(b, byte(len(s)))
			b = append(b, s...)
		}
		return b
	}
	f.Add(enc(0, 1))
	f.Add(enc(3, 3))
	f.Add(enc(-1))
	f.Add(enc(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16))
	f.Add([]byte{0, 5, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		var steps []*agentmeshv1.Step
		for len(b) > 0 {
			n := int(b[0])
			b = b[1:]
			if n > len(b) {
				n = len(b)
			}
			st := &agentmeshv1.Step{}
			if proto.Unmarshal(b[:n], st) != nil {
				st = nil
			}
			steps = append(steps, st)
			b = b[n:]
		}
		err := checkSteps("steps", steps, func(i int) string { return fmt.Sprintf("steps[%d]", i) })
		if err != nil {
			return
		}
		if len(steps) > MaxStepsPerWrite {
			t.Fatalf("accepted %d steps", len(steps))
		}
		for i, st := range steps {
			if st == nil || st.Index < 0 || (i > 0 && st.Index <= steps[i-1].Index) {
				t.Fatalf("accepted step %d: %v after %v", i, st, steps)
			}
		}
	})
}
