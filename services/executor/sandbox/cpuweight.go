package sandbox

import (
	"fmt"
	"path/filepath"
	"strconv"
)

// The CPU weight of the agents: every task cgroup of an executor lives
// under <the executor's own cgroup>/<CgroupName> (the agents' group),
// whose weight against the executor's own cgroup decides who runs when
// the CPU is short (a weight is not a limit: idle CPU stays the agents').
// A small weight reserves CPU for the control plane (the executor and the
// services beside it: the API, the state service) the way Kubernetes
// reserves it for the system, but it weighs all the agents together
// against each thread of the executor, and measured on 2 cores it halved
// the agents' throughput for less API gain than the spawner's nice
// (AGENTMESH_AGENT_NICE) gives: the default is the kernel's own 1024.
// The group is shared by the executors of a node: each writes its
// weight when it starts.

// Bounds of CPUShares (cgroup v1 cpu.shares).
const (
	MinCPUShares = 2
	MaxCPUShares = 262144
	// DefaultCPUShares is an ordinary process group's weight (see
	// above and docs/benchmarks.md).
	DefaultCPUShares = 1024
)

// cpuWeightV2 converts cgroup v1 cpu.shares to cgroup v2 cpu.weight (the
// conversion the container runtimes use: 2 → 1, 1024 → 39, 262144 → 10000).
func cpuWeightV2(shares int64) int64 {
	return 1 + ((shares-2)*9999)/262142
}

// setAgentsWeight gives the agents' group (the parent of the cpu
// controller's base) its weight.
func (s *Sandbox) setAgentsWeight() error {
	dir := s.AgentsCPUGroup()
	if dir == "" {
		return nil
	}
	if s.cpu.v2 {
		return writeFile(dir, "cpu.weight", strconv.FormatInt(cpuWeightV2(s.cfg.CPUShares), 10))
	}
	return writeFile(dir, "cpu.shares", strconv.FormatInt(s.cfg.CPUShares, 10))
}

// AgentsCPUGroup is the cgroup directory, in the cpu controller's
// hierarchy, that holds every task of this executor and carries the
// agents' CPU weight (Config.CPUShares); "" without cgroup limits.
func (s *Sandbox) AgentsCPUGroup() string {
	if s.cpu.base == "" {
		return ""
	}
	return filepath.Dir(s.cpu.base)
}

func checkCPUShares(n int64) error {
	if n < MinCPUShares || n > MaxCPUShares {
		return fmt.Errorf("sandbox: agents' CPU shares %d: want %d to %d", n, MinCPUShares, MaxCPUShares)
	}
	return nil
}

// Background weights: a task cgroup in the background gets the CPU only
// when the agents that run tasks leave it idle (2 cpu.shares against the
// 1,024 of every other task's; cgroup v2: cpu.weight 1 against 100).
const (
	backgroundShares = MinCPUShares
	backgroundWeight = 1
	// The kernel's defaults, which every task cgroup starts with.
	foregroundShares = DefaultCPUShares
	foregroundWeight = 100
)

// SetBackground moves the task's cpu cgroup to the background weight, or
// back to the default one. The warm pool starts its children in the
// background, so that a child starting for a later task does not take the
// CPU from the one running a task now, and brings one to the foreground
// when a task claims it. A weight is not a limit: idle CPU is used all the
// same. Without a cpu cgroup it does nothing.
func (t *Task) SetBackground(on bool) error {
	if t.cpuDir == "" {
		return nil
	}
	t.background.Store(on)
	if t.sb.cpu.v2 {
		w := foregroundWeight
		if on {
			w = backgroundWeight
		}
		return writeFile(t.cpuDir, "cpu.weight", strconv.Itoa(w))
	}
	s := int64(foregroundShares)
	if on {
		s = backgroundShares
	}
	return writeFile(t.cpuDir, "cpu.shares", strconv.FormatInt(s, 10))
}
