package router

import (
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
		EnvListen: "127.0.0.1:0", EnvAPIKeys: "k1=acme,k2=*:platform", EnvAPIKeysFile: "/keys.json",
		EnvTLSCert: "c.pem", EnvTLSKey: "k.pem", EnvTLSClientCA: "ca.pem",
		EnvMaxConnections: "10", EnvMaxWatchesPerOrg: "3", EnvAuthTimeout: "2s", EnvOrgRate: "-1", "AGENTMESH_PREFIX": "x",
	}))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Listen != "127.0.0.1:0" || len(cfg.APIKeys) != 2 || cfg.APIKeys["k2"] != "*:platform" || cfg.KeysFile != "/keys.json" ||
		cfg.TLSCert != "c.pem" || cfg.TLSKey != "k.pem" || cfg.TLSClientCA != "ca.pem" || cfg.MaxConnections != 10 ||
		cfg.MaxWatchesPerOrg != 3 || cfg.AuthTimeout != 2*time.Second || cfg.OrgRate != -1 || cfg.Prefix != "x" {
		t.Errorf("got %+v", cfg)
	}
	def, err := ConfigFromEnv(envconf.Map(nil))
	if err != nil || def.Listen != DefaultListen || def.MaxConnections != DefaultMaxConnections || def.OrgRate != DefaultOrgRate ||
		def.OrgBurst != 2*DefaultOrgRate || def.AuthTimeout != DefaultAuthTimeout || def.MaxWatchesPerOrg != DefaultMaxWatchesPerOrg {
		t.Errorf("defaults: got %+v, %v", def, err)
	}
	envconftest.Refused(t, ConfigFromEnv, []envconftest.Bad{
		{EnvAPIKeys, "k1"},
		{EnvAPIKeys, "k1=Acme"},
		{EnvMaxConnections, "-1"},
		{EnvMaxConnections, "lots"},
		{EnvMaxWatchesPerOrg, "x"},
		{EnvAuthTimeout, "-1s"},
		{EnvAuthTimeout, "10"},
		{EnvOrgRate, "0"},
		{EnvOrgRate, "NaN"},
		{EnvOrgRate, "2e6"},
		{EnvOrgRate, "fast"},
		{"AGENTMESH_PREFIX", "a b"},
	})
}

func TestParseAPIKeys(t *testing.T) {
	tests := []struct {
		in      string
		want    map[string]string
		wantErr bool
	}{
		{"", map[string]string{}, false},
		{"k1=acme", map[string]string{"k1": "acme"}, false},
		{" k1 = acme , k2=globex ,", map[string]string{"k1": "acme", "k2": "globex"}, false},
		{"k1", nil, true},
		{"=acme", nil, true},
		{"k1=", nil, true},
		{"k1=ac.me", nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := parseAPIKeys(tt.in)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, want error %v", err, tt.wantErr)
			}
			if tt.wantErr {
				return
			}
			if len(got) != len(tt.want) {
				t.Fatalf("got %v, want %v", got, tt.want)
			}
			for k, v := range tt.want {
				if got[k] != v {
					t.Fatalf("got %v, want %v", got, tt.want)
				}
			}
		})
	}
}

func FuzzParseAPIKeys(f *testing.F) {
	for _, s := range []string{"k=o", "a=b,c=d", ",,", "=", "k=o.x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		keys, err := parseAPIKeys(s)
		if err != nil {
			return
		}
		for k, org := range keys {
			if k == "" || org == "" || strings.ContainsAny(org, ".*> ") {
				t.Fatalf("parseAPIKeys(%q) accepted key %q org %q", s, k, org)
			}
		}
	})
}
