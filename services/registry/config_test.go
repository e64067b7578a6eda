package registry

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
		{EnvModels, `{"models": {"m": {"base_url": "http://h/v1"}}}`},
		{EnvModelProvider, "cohere"},
	})
}

// The analysis's model: AGENTMESH_ANALYSIS_MODEL, a model of the table or
// at the default endpoint; none configured, the analysis is skipped and
// says why; an Anthropic model of the table is refused naming the variable.
func TestAnalysisModelFromEnv(t *testing.T) {
	t.Setenv("TEST_SMALL_KEY", "sk-small")
	table := `{"models": {"small": {"base_url": "http://small.example/v1", "api_key_env": "TEST_SMALL_KEY", "model": "gpt-4o-mini"},
	  "claude": {"provider": "anthropic", "base_url": "https://api.anthropic.com", "api_key_env": "TEST_SMALL_KEY"}}}`
	tests := []struct {
		name    string
		env     map[string]string
		want    AnalysisConfig
		skipped string
	}{
		{"table entry", map[string]string{EnvModels: table, EnvAnalysisModel: "small", EnvModel: "big", EnvModelBaseURL: "http://big.example/v1"},
			AnalysisConfig{BaseURL: "http://small.example/v1", Model: "gpt-4o-mini", APIKey: "sk-small", Timeout: DefaultAnalysisTimeout}, ""},
		{"at the default endpoint", map[string]string{EnvAnalysisModel: "mini", EnvModel: "big", EnvModelBaseURL: "http://big.example/v1", EnvModelAPIKey: "k"},
			AnalysisConfig{BaseURL: "http://big.example/v1", Model: "mini", APIKey: "k", Timeout: DefaultAnalysisTimeout}, ""},
		{"the default model", map[string]string{EnvModel: "big", EnvModelBaseURL: "http://big.example/v1"},
			AnalysisConfig{BaseURL: "http://big.example/v1", Model: "big", Timeout: DefaultAnalysisTimeout}, ""},
		{"no model", map[string]string{EnvModelBaseURL: "http://big.example/v1"}, AnalysisConfig{}, "no model is configured"},
		{"no endpoint", map[string]string{}, AnalysisConfig{}, "no model endpoint"},
		{"anthropic default", map[string]string{EnvModel: "c", EnvModelBaseURL: "https://api.anthropic.com", EnvModelProvider: "anthropic"}, AnalysisConfig{}, "Anthropic"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := ConfigFromEnv(envconf.Map(tt.env))
			if err != nil {
				t.Fatal(err)
			}
			got := cfg.Analysis
			if tt.skipped != "" {
				if got.BaseURL != "" || !strings.Contains(got.Skipped, tt.skipped) {
					t.Errorf("got %+v, want skipped saying %q", got, tt.skipped)
				}
				return
			}
			if got != tt.want {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
	_, err := ConfigFromEnv(envconf.Map(map[string]string{EnvModels: table, EnvAnalysisModel: "claude"}))
	if err == nil || !strings.Contains(err.Error(), EnvAnalysisModel) || !strings.Contains(err.Error(), "OpenAI-compatible") {
		t.Errorf("an anthropic analysis model: %v", err)
	}
}
