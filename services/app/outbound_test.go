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
	m, err := s.modelOutbound()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(m.Allow, "|") != "127.0.0.1:11434|ollama.lan" || m.MaxResponseBytes != 8<<20 {
		t.Errorf("got allow %q max %d", m.Allow, m.MaxResponseBytes)
	}
	tc, err := s.toolsConfig()
	if err != nil {
		t.Fatal(err)
	}
	if !tc.SQL.AllowPrivilegedRole || tc.SQL.MaxRowBytes != 64<<10 {
		t.Errorf("got %+v", tc.SQL)
	}

	defaults := newSettings("executor")
	if err := defaults.parse(nil); err != nil {
		t.Fatal(err)
	}
	if m, err := defaults.modelOutbound(); err != nil || m.MaxResponseBytes != 16<<20 || len(m.Allow) != 0 {
		t.Errorf("defaults: %+v %v", m, err)
	}
	if tc, err := defaults.toolsConfig(); err != nil || tc.SQL.AllowPrivilegedRole || tc.SQL.MaxRowBytes != 1<<20 {
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
		_, err1 := s.modelOutbound()
		_, err2 := s.toolsConfig()
		if err1 == nil && err2 == nil {
			t.Errorf("%v: no error", bad)
		}
	}
}

func TestParseBytes(t *testing.T) {
	for in, want := range map[string]int64{"1": 1, "1k": 1 << 10, "2KiB": 2 << 10, "16MiB": 16 << 20, "1 G": 1 << 30, "3mb": 3 << 20, "5B": 5} {
		if got, err := parseBytes(in); err != nil || got != want {
			t.Errorf("parseBytes(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "x", "1T", "-1", "99999999999G"} {
		if _, err := parseBytes(in); err == nil {
			t.Errorf("parseBytes(%q): no error", in)
		}
	}
}
