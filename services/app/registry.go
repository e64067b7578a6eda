package app

import (
	"fmt"
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
	props, err := s.proposalConfig()
	if err != nil {
		return registry.Config{}, err
	}
	return registry.Config{Weights: &w, AffinityWindow: win, Proposals: props}, nil
}
