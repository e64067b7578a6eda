package app

import (
	"fmt"
	"os"
	"time"

	"github.com/agentmesh/agentmesh/services/registry"
)

// registryConfig reads the registry's matching settings; a bad weight or
// window refuses to start, naming it.
func (s *settings) registryConfig() (registry.Config, error) {
	w, err := registry.ParseWeights(s.str("AGENTMESH_MATCH_WEIGHTS"))
	if err != nil {
		return registry.Config{}, usageError{fmt.Errorf("AGENTMESH_MATCH_WEIGHTS: %w", err)}
	}
	win, err := s.duration("AGENTMESH_MATCH_AFFINITY_WINDOW")
	if err != nil {
		return registry.Config{}, err
	}
	if win < 0 || win > 7*24*time.Hour {
		return registry.Config{}, usageError{fmt.Errorf("AGENTMESH_MATCH_AFFINITY_WINDOW: want a duration up to 168h, got %s", win)}
	}
	an, err := s.analysisConfig()
	if err != nil {
		return registry.Config{}, err
	}
	props, err := s.proposalConfig()
	if err != nil {
		return registry.Config{}, err
	}
	return registry.Config{Weights: &w, AffinityWindow: win, Analysis: an, Proposals: props}, nil
}

// analysisConfig reads the task analysis settings: the model is the
// operator's (AGENTMESH_MODEL_BASE_URL, its key and AGENTMESH_MODEL).
func (s *settings) analysisConfig() (registry.AnalysisConfig, error) {
	timeout, err := s.duration("AGENTMESH_ANALYSIS_TIMEOUT")
	if err != nil {
		return registry.AnalysisConfig{}, err
	}
	if timeout < 0 || timeout > time.Minute {
		return registry.AnalysisConfig{}, usageError{fmt.Errorf("AGENTMESH_ANALYSIS_TIMEOUT: want a duration up to 1m, got %s", timeout)}
	}
	cfg := registry.AnalysisConfig{Timeout: timeout}
	switch mode := s.str("AGENTMESH_ANALYSIS"); mode {
	case "", "auto":
		cfg.BaseURL, cfg.Model = s.str("AGENTMESH_MODEL_BASE_URL"), s.str("AGENTMESH_MODEL")
		cfg.APIKey = s.str("AGENTMESH_MODEL_API_KEY")
		if cfg.APIKey == "" {
			cfg.APIKey = os.Getenv("OPENAI_API_KEY")
		}
	case "fallback":
		cfg.FallbackOnly = true
	case "off":
		cfg.Off = true
	default:
		return registry.AnalysisConfig{}, usageError{fmt.Errorf("AGENTMESH_ANALYSIS: want auto, fallback or off, got %q", mode)}
	}
	return cfg, nil
}
