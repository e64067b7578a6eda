package pgstore

import (
	"context"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/services/state/store"
)

// RecordSubtask (see store.Tree).
func (s *Store) RecordSubtask(ctx context.Context, holderID string, sub *agentmeshv1.SubtaskEvent) (*agentmeshv1.Task, *agentmeshv1.TaskEvent, error) {
	return store.RecordSubtaskWith(ctx, s.write, s.History, s.now, store.SubtaskArgs{HolderID: holderID, Subtask: sub})
}

// Unfollowed (see store.Tree) is exact for an end this process committed:
// the answer was asked in the same round trip as the end's commit, after it
// (ends.go), and is taken here once. For any other task (ended by another
// state process, or asked a second time) it does not claim to know.
func (s *Store) Unfollowed(_ context.Context, id string) (unfollowed, exact bool, err error) {
	none, ok := s.answers.take(id)
	if !ok {
		return false, false, nil
	}
	return none, true, nil
}
