package registry

import (
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/pkg/envconf"
	"github.com/agentmesh/agentmesh/pkg/envconf/envconftest"
)

// Every bad value refuses the start naming its variable; good ones reach
// the config, unset ones take the defaults.
func TestConfigFromEnv(t *testing.T) {
	cfg, err := ConfigFromEnv(envconf.Map(map[string]string{
		EnvMatchWeights: "capability=1,affinity=1", EnvAffinityWindow: "2h", EnvAnalysis: "auto", EnvAnalysisTimeout: "5s",
		EnvModelBaseURL: "http://model.example/v1", EnvModel: "small", EnvModelAPIKey: "k",
		EnvProposals: "off", EnvProposalThreshold: "0.25",
	}))
	if err != nil {
		t.Fatal(err)
	}
	if *cfg.Weights != (Weights{Capability: 1, Affinity: 1}) || cfg.AffinityWindow != 2*time.Hour ||
		cfg.Analysis != (AnalysisConfig{BaseURL: "http://model.example/v1", Model: "small", APIKey: "k", Timeout: 5 * time.Second}) ||
		!cfg.Proposals.Off || *cfg.Proposals.Threshold != 0.25 {
		t.Errorf("got %+v (analysis %+v)", cfg, cfg.Analysis)
	}
	def, err := ConfigFromEnv(envconf.Map(map[string]string{EnvModelBaseURL: "http://ignored", EnvAnalysis: "fallback"}))
	if err != nil || *def.Weights != DefaultWeights || def.AffinityWindow != DefaultAffinityWindow || def.Analysis.BaseURL != "" ||
		!def.Analysis.FallbackOnly || def.Analysis.Timeout != DefaultAnalysisTimeout || def.Proposals.Off || *def.Proposals.Threshold != DefaultProposalThreshold ||
		def.Concurrency != 256 || def.DefaultAgent != DefaultAgent {
		t.Errorf("defaults: got %+v, %v", def, err)
	}
	envconftest.Refused(t, ConfigFromEnv, []envconftest.Bad{
		{EnvMatchWeights, "capability=0.5,workload=-0.1"},
		{EnvMatchWeights, "speed=1"},
		{EnvMatchWeights, "capability=0"},
		{EnvAffinityWindow, "169h"},
		{EnvAffinityWindow, "-1h"},
		{EnvAffinityWindow, "an hour"},
		{EnvAnalysis, "sometimes"},
		{EnvAnalysisTimeout, "2h"},
		{EnvAnalysisTimeout, "-1s"},
		{EnvProposals, "maybe"},
		{EnvProposalThreshold, "1"},
		{EnvProposalThreshold, "half"},
		{"AGENTMESH_PREFIX", "a*"},
	})
}
