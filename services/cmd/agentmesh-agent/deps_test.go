package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestAgentLinksNoServerPackages keeps the agent child small: every task
// runs one, and each package it links costs every child its init
// allocations and data (docs/benchmarks.md, "The child's memory"). The bus
// client, NATS, the metrics registry and the services are the executor's,
// never the child's.
func TestAgentLinksNoServerPackages(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Skipf("go list: %v\n%s", err, out)
	}
	forbidden := []string{
		"github.com/agentmesh/agentmesh/pkg/bus",
		"github.com/agentmesh/agentmesh/pkg/metrics",
		"github.com/agentmesh/agentmesh/pkg/api/agentmesh/bus/v1",
		"github.com/agentmesh/agentmesh/services/",
		"github.com/nats-io/",
		"github.com/prometheus/",
	}
	// The child's own packages (under services/executor/) and this one.
	allowed := []string{
		"github.com/agentmesh/agentmesh/services/executor/",
		"github.com/agentmesh/agentmesh/services/cmd/agentmesh-agent",
	}
	for _, dep := range strings.Fields(string(out)) {
		if hasAnyPrefix(dep, allowed) {
			continue
		}
		for _, f := range forbidden {
			if dep == f || (strings.HasSuffix(f, "/") && strings.HasPrefix(dep, f)) {
				t.Errorf("the agent child links %s", dep)
			}
		}
	}
}

func hasAnyPrefix(s string, prefixes []string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}
