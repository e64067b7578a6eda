package app

import "testing"

// The agents' priority settings: the defaults reach the executor's
// configuration, and values the kernel does not have are usage errors.
func TestAgentPrioritySettings(t *testing.T) {
	s := newSettings("executor")
	if err := s.parse(nil); err != nil {
		t.Fatal(err)
	}
	cfg, err := executorConfigOf(s)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.AgentNice != 10 || cfg.Sandbox.CPUShares != 1024 {
		t.Errorf("defaults: nice %d, cpu shares %d; want 10 and 1024", cfg.AgentNice, cfg.Sandbox.CPUShares)
	}
	s = newSettings("executor")
	if err := s.parse([]string{"--agent-nice", "3", "--agent-cpu-shares", "256"}); err != nil {
		t.Fatal(err)
	}
	if cfg, err = executorConfigOf(s); err != nil {
		t.Fatal(err)
	} else if cfg.AgentNice != 3 || cfg.Sandbox.CPUShares != 256 {
		t.Errorf("nice %d, cpu shares %d; want 3 and 256", cfg.AgentNice, cfg.Sandbox.CPUShares)
	}
	for _, args := range [][]string{
		{"--agent-nice", "20"}, {"--agent-nice", "-1"}, {"--agent-nice", "low"},
		{"--agent-cpu-shares", "1"}, {"--agent-cpu-shares", "262145"}, {"--agent-cpu-shares", "x"},
	} {
		bad := newSettings("executor")
		if err := bad.parse(args); err != nil {
			t.Fatal(err)
		}
		if _, err := executorConfigOf(bad); err == nil {
			t.Errorf("%v accepted", args)
		} else if _, ok := err.(usageError); !ok {
			t.Errorf("%v: err = %T %v, want a usage error", args, err, err)
		}
	}
}
