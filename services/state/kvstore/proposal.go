package kvstore

import (
	"context"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/services/state/store"
)

// RecordProposal (see store.Proposals).
func (s *Store) RecordProposal(ctx context.Context, taskID string) (*agentmeshv1.Task, *agentmeshv1.TaskEvent, error) {
	return store.RecordProposalWith(ctx, s.write, s.now, taskID)
}
