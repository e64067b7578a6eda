package pgstore

import (
	"context"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/services/state/store"
)

// RecordSubtask (see store.Tree).
func (s *Store) RecordSubtask(ctx context.Context, holderID string, sub *agentmeshv1.SubtaskEvent) (*agentmeshv1.Task, *agentmeshv1.TaskEvent, error) {
	return store.RecordSubtaskWith(ctx, s.write, s.History, s.now, holderID, sub)
}
