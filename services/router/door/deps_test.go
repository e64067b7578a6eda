package door

import (
	"os/exec"
	"strings"
	"testing"
)

// Every door is the router (Invariant 11): the doors reach agentmesh only
// through the public gRPC API. None of them imports a NATS client, the
// bus, the subjects, a store, a service, or the router's own package.
func TestDoorsReachOnlyTheAPI(t *testing.T) {
	const mod = "github.com/agentmesh/agentmesh/"
	forbidden := []string{
		"github.com/nats-io/", mod + "pkg/bus", mod + "pkg/subjects", mod + "pkg/busauth", mod + "pkg/embednats",
		mod + "services/router", mod + "services/state", mod + "services/registry", mod + "services/scheduler",
		mod + "services/executor", mod + "services/stack", "github.com/jackc/pgx",
	}
	allowed := []string{mod + "services/router/door", mod + "services/router/mcpserver", mod + "services/router/a2a"}
	for _, pkg := range []string{"../door", "../mcpserver", "../a2a"} {
		out, err := exec.Command("go", "list", "-deps", pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list %s: %v\n%s", pkg, err, out)
		}
		for _, dep := range strings.Fields(string(out)) {
			for _, f := range forbidden {
				under := dep == f || strings.HasPrefix(dep, strings.TrimSuffix(f, "/")+"/")
				if under && !inList(dep, allowed) {
					t.Errorf("%s imports %s: a door speaks only the public gRPC API", pkg, dep)
				}
			}
		}
	}
}

func inList(s string, list []string) bool {
	for _, x := range list {
		if s == x {
			return true
		}
	}
	return false
}
