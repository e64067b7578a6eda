package main

import (
	"os"
	"os/exec"
	"regexp"
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

// TestAgentBuildLinksNoGRPC: built as `make build` builds it (the tags of
// the Makefile's AGENT_BUILD), the child links no gRPC package. It speaks
// protobuf over its pipes and uses pkg/api's messages (its own copy of
// the child protocol, pkg/api/agentmesh/childwire/v1), never a gRPC
// service; the generated service stubs are tagged out of that build
// (`make generate`), so each child's start skips gRPC's initialisation.
func TestAgentBuildLinksNoGRPC(t *testing.T) {
	mk, err := os.ReadFile("../../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^AGENT_BUILD := .*-tags (\S+)`).FindSubmatch(mk)
	if m == nil {
		t.Fatal("Makefile: no AGENT_BUILD with -tags")
	}
	tags := strings.ReplaceAll(string(m[1]), "$(NOGRPC_TAG)", nogrpcTag(t, mk))
	out, err := exec.Command("go", "list", "-tags", tags, "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -tags %s: %v\n%s", tags, err, out)
	}
	deps := strings.Fields(string(out))
	for _, dep := range deps {
		if dep == "google.golang.org/grpc" || strings.HasPrefix(dep, "google.golang.org/grpc/") {
			t.Errorf("built with -tags %s, the agent child links %s", tags, dep)
		}
	}
	// The messages are still there: the tag removes the stubs, not the
	// package (the child's are its own copy of the child protocol).
	if !strings.Contains(" "+strings.Join(deps, " ")+" ", " github.com/agentmesh/agentmesh/pkg/api/agentmesh/childwire/v1 ") {
		t.Errorf("built with -tags %s, the agent child does not link pkg/api/agentmesh/childwire/v1: the test checks the wrong build", tags)
	}
}

// nogrpcTag is the Makefile's NOGRPC_TAG, which every generated
// *_grpc.pb.go must be built without.
func nogrpcTag(t *testing.T, mk []byte) string {
	t.Helper()
	m := regexp.MustCompile(`(?m)^NOGRPC_TAG := (\S+)$`).FindSubmatch(mk)
	if m == nil {
		t.Fatal("Makefile: no NOGRPC_TAG")
	}
	return string(m[1])
}

func hasAnyPrefix(s string, prefixes []string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}
