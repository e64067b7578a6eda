// Package services_test holds checks across the services.
package services_test

import (
	"os/exec"
	"strings"
	"testing"
)

const mod = "github.com/agentmesh/agentmesh/services/"

// Services talk only over the bus: none imports another service's
// packages. (stack, app and the mains wire them together; they are not
// services.)
func TestServicesDoNotImportEachOther(t *testing.T) {
	services := []string{"router", "registry", "scheduler", "executor", "state"}
	for _, svc := range services {
		t.Run(svc, func(t *testing.T) {
			out, err := exec.Command("go", "list", "-deps", "./"+svc+"/...").CombinedOutput()
			if err != nil {
				t.Fatalf("go list: %v\n%s", err, out)
			}
			for _, dep := range strings.Fields(string(out)) {
				for _, other := range services {
					if other == svc {
						continue
					}
					if dep == mod+other || strings.HasPrefix(dep, mod+other+"/") {
						t.Errorf("%s imports %s: services talk only over the bus", svc, dep)
					}
				}
			}
		})
	}
}

// The agent child (one process per task) links neither the public API
// (its descriptors, and the HTTP annotations and descriptorpb they pull
// in) nor the MCP SDK (and the HTTP stack and encoding/gob it pulls in):
// each package linked costs every child its initialisation at start
// (docs/benchmarks.md, "The agent child without the public API and the
// MCP SDK"). It speaks its own copy of the child protocol
// (pkg/api/agentmesh/childwire/v1) and pkg/mcp's own stdio client.
func TestAgentChildLinksNoPublicAPIOrMCPSDK(t *testing.T) {
	forbidden := []string{
		"github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1",
		"github.com/agentmesh/agentmesh/pkg/api/agentmesh/child/v1",
		"github.com/agentmesh/agentmesh/pkg/mcp/mcphttp",
		"github.com/modelcontextprotocol/go-sdk/",
		"google.golang.org/genproto/",
		"google.golang.org/protobuf/types/descriptorpb",
		"encoding/gob",
		"net/http",
	}
	// As `make build` builds it (AGENT_BUILD's tags) and without tags.
	for _, tags := range []string{"grpcnotrace,agentmesh_nogrpc", ""} {
		out, err := exec.Command("go", "list", "-deps", "-tags", tags, "./cmd/agentmesh-agent").CombinedOutput()
		if err != nil {
			t.Fatalf("go list: %v\n%s", err, out)
		}
		for _, dep := range strings.Fields(string(out)) {
			for _, f := range forbidden {
				if dep == f || (strings.HasSuffix(f, "/") && strings.HasPrefix(dep, f)) {
					t.Errorf("tags %q: the agent child links %s", tags, dep)
				}
			}
		}
	}
}
