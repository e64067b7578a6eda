package app

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/agentmesh/agentmesh/services/registry"
)

// Bad match weights refuse to start, naming the weight; good ones reach
// the registry's config.
func TestRegistryConfigWeights(t *testing.T) {
	for _, tt := range []struct{ env, mention string }{
		{"capability=0.5,workload=-0.1", "workload"},
		{"capability=lots", "capability"},
		{"speed=1", "speed"},
	} {
		t.Setenv("AGENTMESH_MATCH_WEIGHTS", tt.env)
		s := newSettings("registry")
		if err := s.parse(nil); err != nil {
			t.Fatal(err)
		}
		_, err := registryConfig(s)
		var ue usageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), "AGENTMESH_MATCH_WEIGHTS") || !strings.Contains(err.Error(), tt.mention) {
			t.Errorf("%q: got %v, want a usage error naming %s", tt.env, err, tt.mention)
		}
	}
	t.Setenv("AGENTMESH_MATCH_WEIGHTS", "capability=1,affinity=1")
	s := newSettings("registry")
	if err := s.parse([]string{"--match-affinity-window", "2h"}); err != nil {
		t.Fatal(err)
	}
	cfg, err := registryConfig(s)
	if err != nil || *cfg.Weights != (registry.Weights{Capability: 1, Affinity: 1}) || cfg.AffinityWindow.Hours() != 2 {
		t.Fatalf("got %+v %v", cfg, err)
	}
}

// The task analysis settings: auto uses the operator's model, fallback
// none, off none at all; anything else or a bad timeout refuses to start.
func TestRegistryConfigAnalysis(t *testing.T) {
	t.Setenv("AGENTMESH_MODEL_BASE_URL", "http://model.example/v1")
	t.Setenv("AGENTMESH_MODEL", "small")
	for _, tt := range []struct {
		mode, timeout string
		base          string
		off           bool
		bad           string
	}{
		{mode: "auto", base: "http://model.example/v1"},
		{mode: "fallback"},
		{mode: "off", off: true},
		{mode: "sometimes", bad: "AGENTMESH_ANALYSIS"},
		{mode: "auto", timeout: "2h", bad: "AGENTMESH_ANALYSIS_TIMEOUT"},
	} {
		t.Setenv("AGENTMESH_ANALYSIS", tt.mode)
		t.Setenv("AGENTMESH_ANALYSIS_TIMEOUT", tt.timeout)
		s := newSettings("registry")
		if err := s.parse(nil); err != nil {
			t.Fatal(err)
		}
		cfg, err := registryConfig(s)
		if tt.bad != "" {
			var ue usageError
			if !errors.As(err, &ue) || !strings.Contains(err.Error(), tt.bad) {
				t.Errorf("%+v: got %v, want a usage error naming %s", tt, err, tt.bad)
			}
			continue
		}
		if err != nil || cfg.Analysis.BaseURL != tt.base || cfg.Analysis.Off != tt.off || (tt.base != "" && cfg.Analysis.Model != "small") {
			t.Errorf("%+v: got %+v %v", tt, cfg.Analysis, err)
		}
	}
}

// registryConfig reads the registry's settings as `agentmesh registry` does.
func registryConfig(s *settings) (registry.Config, error) {
	cfg, _, err := s.stackConfig(context.Background(), "registry")
	return cfg.Registry, err
}
