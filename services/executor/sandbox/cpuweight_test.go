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
	// A group of the test's own: the node's "agentmesh" group is shared
	// with every executor started meanwhile (other test packages run in
	// parallel), and each writes its weight when it starts.
	sb := strict(t, sandbox.Config{CPUShares: 64, CgroupName: "agentmesh-weight-" + strconv.Itoa(os.Getpid())})
	group := sb.AgentsCPUGroup()
	if group == "" {
		t.Fatal("no agents' cpu group with strict isolation")
	}
	file, want := "cpu.shares", "64"
	if _, err := os.Stat(filepath.Join(group, file)); err != nil {
		file, want = "cpu.weight", "3" // 1 + (shares-2)*9999/262142
	}
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
	t.Cleanup(func() {
		task.Cleanup()
		// Leave no group behind: the executor's base, then the group,
		// under each controller (the kernel removes empty cgroups only).
		for _, dir := range task.Cgroups() {
			_ = os.Remove(filepath.Dir(dir))
			_ = os.Remove(filepath.Dir(filepath.Dir(dir)))
		}
	})
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
