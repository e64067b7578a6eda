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
