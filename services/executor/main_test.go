package executor_test

import (
	"bytes"
	"encoding/binary"
	"io"
	"os"
	"strings"
	"testing"

	childv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/child/v1"
	"github.com/agentmesh/agentmesh/services/executor/child"
	"google.golang.org/protobuf/proto"
)

// CrashMarker in a task's input makes the test child crash right after it
// reads Start, as a buggy agent process would.
const CrashMarker = "CRASH-NOW"

// TestMain lets the test binary act as the agent child: the executor under
// test runs os.Args[0] with AGENTMESH_CHILD=1.
func TestMain(m *testing.M) {
	if os.Getenv(child.EnvChild) == "1" {
		os.Exit(testChild())
	}
	child.RunIfChild()
	os.Exit(m.Run())
}

// testChild is the real child (child.Main) with one addition: it crashes
// on a task whose input carries CrashMarker. It reads the Start frame
// unbuffered, then hands that frame and the rest of stdin to child.Main.
func testChild() int {
	var hdr [4]byte
	if _, err := io.ReadFull(os.Stdin, hdr[:]); err != nil {
		return 3
	}
	body := make([]byte, binary.BigEndian.Uint32(hdr[:]))
	if _, err := io.ReadFull(os.Stdin, body); err != nil {
		return 3
	}
	var f childv1.Frame
	if err := proto.Unmarshal(body, &f); err == nil && strings.Contains(f.GetStart().GetInput(), CrashMarker) {
		os.Stderr.WriteString("panic: simulated crash of the agent process\n")
		return 2
	}
	return child.Main(io.MultiReader(bytes.NewReader(hdr[:]), bytes.NewReader(body), os.Stdin), os.Stdout)
}
