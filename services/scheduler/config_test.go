package scheduler

import (
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/pkg/envconf"
	"github.com/agentmesh/agentmesh/pkg/envconf/envconftest"
)

// Every bad value refuses the start naming its variable; good ones reach
// the config, unset ones take the defaults.
func TestConfigFromEnv(t *testing.T) {
	cfg, err := ConfigFromEnv(envconf.Map(map[string]string{
		EnvOrgMaxConcurrency: "5", EnvOrgLimits: "acme=50, globex=0", EnvPriorityAging: "-1s", EnvLease: "2s",
		"AGENTMESH_PREFIX": "x", "AGENTMESH_STREAM_REPLICAS": "3",
	}))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.OrgLimit != 5 || !maps.Equal(cfg.OrgLimits, map[string]int{"acme": 50, "globex": 0}) || cfg.Aging != -time.Second ||
		cfg.LeaseTTL != 2*time.Second || cfg.Prefix != "x" || cfg.Streams.Replicas != 3 {
		t.Errorf("got %+v", cfg)
	}
	def, err := ConfigFromEnv(envconf.Map(nil))
	if err != nil || def.LeaseTTL != DefaultLeaseTTL || def.Aging != DefaultAging || def.Workers != 64 || def.NodeTTL != DefaultNodeTTL {
		t.Errorf("defaults: got %+v, %v", def, err)
	}
	envconftest.Refused(t, ConfigFromEnv, []envconftest.Bad{
		{EnvOrgMaxConcurrency, "-1"},
		{EnvOrgMaxConcurrency, "many"},
		{EnvOrgLimits, "acme"},
		{EnvOrgLimits, "acme=-1"},
		{EnvOrgLimits, "a.b=1"},
		{EnvPriorityAging, "soon"},
		{EnvLease, "100ms"},
		{EnvLease, "-6s"},
		{EnvLease, "6"},
		{"AGENTMESH_PREFIX", "a b"},
		{"AGENTMESH_STREAM_REPLICAS", "9"},
	})
}

func TestParseOrgLimits(t *testing.T) {
	tests := []struct {
		in      string
		want    map[string]int
		wantErr bool
	}{
		{"", map[string]int{}, false},
		{"acme=50", map[string]int{"acme": 50}, false},
		{" acme = 50 , globex=0 ,", map[string]int{"acme": 50, "globex": 0}, false},
		{"acme", nil, true},
		{"acme=-1", nil, true},
		{"acme=lots", nil, true},
		{"a.b=1", nil, true},
		{"=3", nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := parseOrgLimits(tt.in)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, want error %v", err, tt.wantErr)
			}
			if !tt.wantErr && !maps.Equal(got, tt.want) {
				t.Fatalf("got %v, want %v", got, tt.want)
			}
		})
	}
}

// FuzzParseOrgLimits: whatever the environment holds, the parser returns
// an error or limits that are ≥ 0 for orgs that are valid subject tokens.
func FuzzParseOrgLimits(f *testing.F) {
	for _, s := range []string{"", "acme=50", "a=1,b=2", "x=-1", "=", ",,,", "a=99999999999999999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := parseOrgLimits(s)
		if err != nil {
			return
		}
		for org, n := range got {
			if n < 0 || org == "" || strings.ContainsAny(org, ".*> \t") {
				t.Fatalf("parseOrgLimits(%q) gave %q=%d", s, org, n)
			}
		}
	})
}
