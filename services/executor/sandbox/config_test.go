package sandbox_test

import (
	"strings"
	"testing"

	"github.com/agentmesh/agentmesh/services/executor/sandbox"
)

func TestParseIDRange(t *testing.T) {
	for in, want := range map[string]sandbox.IDRange{
		"100000-165535":         {First: 100000, Count: 65536},
		" 5 - 5 ":               {First: 5, Count: 1},
		"1000000000-1000065535": {First: 1000000000, Count: 65536},
	} {
		if got, err := sandbox.ParseIDRange(in); err != nil || got != want {
			t.Errorf("ParseIDRange(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "100000", "0-10", "10-5", "a-b", "-5-10", "1-4294967295", "1-99999999999"} {
		if _, err := sandbox.ParseIDRange(in); err == nil {
			t.Errorf("ParseIDRange(%q) did not fail", in)
		}
	}
}

func FuzzParseIDRange(f *testing.F) {
	for _, s := range []string{"100000-165535", "1-1", "0-0", "9-8", "x", "1-4294967294"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := sandbox.ParseIDRange(s)
		if err != nil {
			return
		}
		if r.First <= 0 || r.Count <= 0 || r.First+r.Count-1 >= 1<<32-1 {
			t.Fatalf("ParseIDRange(%q) = %+v: out of bounds", s, r)
		}
		if back, err := sandbox.ParseIDRange(r.String()); err != nil || back != r {
			t.Fatalf("round trip of %q: %+v, %v", s, back, err)
		}
	})
}

func TestParseLevelBestEffort(t *testing.T) {
	for _, in := range []string{"best-effort", "BestEffort", "best_effort"} {
		if got, err := sandbox.ParseLevel(in); err != nil || got != sandbox.BestEffort {
			t.Errorf("ParseLevel(%q) = %q, %v", in, got, err)
		}
	}
}

func TestConfigRejected(t *testing.T) {
	for name, cfg := range map[string]sandbox.Config{
		"disk too small": {Level: sandbox.BestEffort, Disk: 4096},
		"cpu too small":  {Level: sandbox.BestEffort, CPU: 0.001},
		"uid range":      {Level: sandbox.BestEffort, UIDs: sandbox.IDRange{First: 0, Count: 10}},
		"relative path":  {Level: sandbox.BestEffort, ReadOnlyPaths: []string{"opt/x"}},
	} {
		if _, err := sandbox.New(cfg); err == nil {
			t.Errorf("%s: New accepted %+v", name, cfg)
		}
	}
}

// Best-effort on a host that has every wall is strict, and says so; none
// is labelled.
func TestIsolationLabel(t *testing.T) {
	strict(t, sandbox.Config{}) // skips (fails in CI) without strict isolation
	sb, err := sandbox.New(sandbox.Config{Level: sandbox.BestEffort})
	if err != nil {
		t.Fatal(err)
	}
	if sb.Isolation() != sandbox.IsolationStrict || sb.Label() != sandbox.IsolationStrict || len(sb.Missing()) != 0 || !strings.HasPrefix(sb.String(), "isolation strict:") {
		t.Errorf("best-effort with every wall: isolation %q (label %q), missing %v, report %q", sb.Isolation(), sb.Label(), sb.Missing(), sb)
	}
	none, err := sandbox.New(sandbox.Config{Level: sandbox.None})
	if err != nil {
		t.Fatal(err)
	}
	if none.Isolation() != sandbox.IsolationNone || none.Label() != sandbox.IsolationNone {
		t.Errorf("none: isolation %q, label %q", none.Isolation(), none.Label())
	}
}
