package app

import (
	"strings"
	"testing"
)

func TestOutboundSettings(t *testing.T) {
	s := newSettings("executor")
	if err := s.parse([]string{"-model-allow", " 127.0.0.1:11434 , ollama.lan ,", "-model-max-bytes", "8MiB",
		"-sql-allow-privileged-role", "true", "-sql-max-row-bytes", "64k"}); err != nil {
		t.Fatal(err)
	}
	cfg, err := s.executorConfig()
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
	cfg, err = defaults.executorConfig()
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
		if _, err := s.executorConfig(); err == nil {
			t.Errorf("%v: no error", bad)
		}
	}
}
