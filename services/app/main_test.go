package app

import (
	"os"
	"testing"

	"github.com/agentmesh/agentmesh/services/executor/child"
)

// TestMain lets the test binary act as the agent child: agentmesh dev's
// executor runs os.Args[0] as `agentmesh child` (TestOneTracePerTask runs
// tasks through it).
func TestMain(m *testing.M) {
	child.RunIfChild()
	os.Exit(m.Run())
}
