package sandbox_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/agentmesh/agentmesh/services/executor/sandbox"
)

// The agents' group carries the configured CPU weight and every task's
// cpu cgroup is inside it (so the weight governs the agents together
// against the executor).
func TestTasksRunInTheLowerWeightGroup(t *testing.T) {
	sb := strict(t, sandbox.Config{CPUShares: 64})
	group := sb.AgentsCPUGroup()
	if group == "" {
		t.Fatal("no agents' cpu group with strict isolation")
	}
	file, want, reset := "cpu.shares", "64", "1024"
	if _, err := os.Stat(filepath.Join(group, file)); err != nil {
		file, want, reset = "cpu.weight", "3", "39" // 1 + (shares-2)*9999/262142
	}
	// The group is the node's: leave it with the default weight.
	t.Cleanup(func() { _ = os.WriteFile(filepath.Join(group, file), []byte(reset), 0) })
	b, err := os.ReadFile(filepath.Join(group, file))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(b)); got != want {
		t.Errorf("%s/%s = %s, want %s", group, file, got, want)
	}
	task, err := sb.Prepare("weight")
	if err != nil {
		t.Fatal(err)
	}
	defer task.Cleanup()
	inside := false
	for _, dir := range task.Cgroups() {
		if strings.HasPrefix(dir, group+"/") {
			inside = true
		}
	}
	if !inside {
		t.Errorf("no cgroup of the task %v is under the agents' group %s", task.Cgroups(), group)
	}
	for _, p := range task.AgentCgroupProcs() {
		if strings.HasPrefix(p, group+"/") {
			return
		}
	}
	t.Errorf("the agent process joins %v, none under the agents' group %s", task.AgentCgroupProcs(), group)
}

// Weights the kernel does not have are refused.
func TestCPUSharesBounds(t *testing.T) {
	for _, n := range []int64{1, -5, sandbox.MaxCPUShares + 1} {
		if _, err := sandbox.New(sandbox.Config{Level: sandbox.None, CPUShares: n}); err == nil || !strings.Contains(err.Error(), strconv.FormatInt(n, 10)) {
			t.Errorf("CPUShares %d: err = %v, want a refusal naming it", n, err)
		}
	}
}
