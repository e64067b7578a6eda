package app

import (
	"github.com/agentmesh/agentmesh/services/registry"
)

// proposalConfig reads AGENTMESH_PROPOSALS and AGENTMESH_PROPOSAL_THRESHOLD;
// a value that does not parse refuses to start, naming the variable.
func (s *settings) proposalConfig() (registry.ProposalConfig, error) {
	off, err := registry.ParseProposals(s.str("AGENTMESH_PROPOSALS"))
	if err != nil {
		return registry.ProposalConfig{}, usageError{err}
	}
	th, err := registry.ParseProposalThreshold(s.str("AGENTMESH_PROPOSAL_THRESHOLD"))
	if err != nil {
		return registry.ProposalConfig{}, usageError{err}
	}
	return registry.ProposalConfig{Off: off, Threshold: &th}, nil
}
