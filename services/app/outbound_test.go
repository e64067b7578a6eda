package app

import (
	"strings"
	"testing"

	"github.com/agentmesh/agentmesh/pkg/subjects"
	"github.com/agentmesh/agentmesh/services/executor"
	"github.com/agentmesh/agentmesh/services/executor/sandbox"
	"github.com/agentmesh/agentmesh/services/stack"
)

func TestOutboundSettings(t *testing.T) {
	s := newSettings("executor")
	if err := s.parse([]string{"-model-allow", " 127.0.0.1:11434 , ollama.lan ,", "-model-max-bytes", "8MiB",
		"-sql-allow-privileged-role", "true", "-sql-max-row-bytes", "64k"}); err != nil {
		t.Fatal(err)
	}
	cfg, err := executorConfigOf(s)
	if err != nil {
		t.Fatal(err)
	}
	m := cfg.Model
	if strings.Join(m.Allow, "|") != "127.0.0.1:11434|ollama.lan" || m.MaxResponseBytes != 8<<20 {
		t.Errorf("got allow %q max %d", m.Allow, m.MaxResponseBytes)
	}
	tc := cfg.ToolSettings
	if !tc.SQL.AllowPrivilegedRole || tc.SQL.MaxRowBytes != 64<<10 {
		t.Errorf("got %+v", tc.SQL)
	}

	defaults := newSettings("executor")
	if err := defaults.parse(nil); err != nil {
		t.Fatal(err)
	}
	cfg, err = executorConfigOf(defaults)
	if m := cfg.Model; err != nil || m.MaxResponseBytes != 16<<20 || len(m.Allow) != 0 {
		t.Errorf("defaults: %+v %v", m, err)
	}
	if tc := cfg.ToolSettings; err != nil || tc.SQL.AllowPrivilegedRole || tc.SQL.MaxRowBytes != 1<<20 {
		t.Errorf("defaults: %+v %v", tc.SQL, err)
	}

	for _, bad := range [][]string{
		{"-model-max-bytes", "lots"}, {"-model-max-bytes", "0"}, {"-model-max-bytes", "-1M"},
		{"-sql-allow-privileged-role", "perhaps"}, {"-sql-max-row-bytes", "2G"},
	} {
		s := newSettings("executor")
		if err := s.parse(bad); err != nil {
			t.Fatal(err)
		}
		if _, err := executorConfigOf(s); err == nil {
			t.Errorf("%v: no error", bad)
		}
	}
}

// executorConfigOf reads the executor's configuration as agentmesh executor
// does: through the service table's reader, a bad value a usage error.
func executorConfigOf(s *settings) (executor.Config, error) {
	cfg, err := stack.ConfigFromEnv(s.get, subjects.ServiceExecutor)
	if err != nil {
		return executor.Config{}, usageError{err}
	}
	return cfg.Executor, nil
}

// agentmesh dev runs as an ordinary user too: an unset AGENTMESH_ISOLATION
// is best-effort there and strict for agentmesh executor; a set one wins.
func TestIsolationDefaultOfDev(t *testing.T) {
	for _, tc := range []struct {
		cmd  string
		args []string
		want sandbox.Level
	}{
		{"dev", nil, sandbox.BestEffort},
		{"executor", nil, sandbox.Strict},
		{"dev", []string{"--isolation", "strict"}, sandbox.Strict},
		{"executor", []string{"--isolation", "none"}, sandbox.None},
	} {
		s := newSettings(tc.cmd)
		if err := s.parse(tc.args); err != nil {
			t.Fatal(err)
		}
		cfg, err := executorConfigOf(s)
		if err != nil {
			t.Fatal(err)
		}
		got := cfg.Sandbox.Level
		if got == "" {
			got = sandbox.Strict
		}
		if got != tc.want {
			t.Errorf("%s %v: isolation %q, want %q", tc.cmd, tc.args, got, tc.want)
		}
	}
}
