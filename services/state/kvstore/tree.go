package kvstore

import (
	"context"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"github.com/agentmesh/agentmesh/services/state/store"
)

// RecordSubtask (see store.Tree).
func (s *Store) RecordSubtask(ctx context.Context, holderID string, sub *agentmeshv1.SubtaskEvent) (*agentmeshv1.Task, *agentmeshv1.TaskEvent, error) {
	return store.RecordSubtaskWith(ctx, s.write, s.History, s.now, store.SubtaskArgs{HolderID: holderID, Subtask: sub})
}

// Unfollowed (see store.Tree) is exact only for the store's sole writer
// (Options.SoleWriter): its index holds every write the moment it is
// acked, so the look-ups below see every sub-task and dependent committed
// before this call. A store shared with other writers learns of their
// writes through its watch, later: it does not claim to know.
func (s *Store) Unfollowed(_ context.Context, id string) (unfollowed, exact bool, err error) {
	if !s.soleWriter {
		return false, false, nil
	}
	t, ok := s.taskIndex.get(id)
	if !ok || t.ParentTaskId != "" || len(s.waiting.of(id)) > 0 {
		return false, true, nil
	}
	for _, kid := range s.children.of(id) {
		if k, ok := s.taskIndex.get(kid); !ok || !taskstate.Terminal(k.Status) {
			return false, true, nil
		}
	}
	return true, true, nil
}
