package router

import (
	"context"
	"errors"
	"fmt"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
)

// continueFrom checks a submit's continue_from (a task id or subtask://id):
// the earlier task must be the caller's org's (else NotFound, as for any
// other org's id) and finished (else FailedPrecondition naming it). The
// new task runs the earlier one's agent unless the request names an agent
// or required skills. It rewrites req.ContinueFrom to the bare id.
func (s *Service) continueFrom(ctx context.Context, req *agentmeshv1.SubmitTaskRequest) error {
	if req.GetContinueFrom() == "" {
		return nil
	}
	id := taskstate.NormalizeTaskID(req.GetContinueFrom())
	if err := checkID("continue_from", id); err != nil {
		return err
	}
	earlier, err := s.getTask(ctx, id)
	if errors.Is(err, bus.ErrNotFound) {
		return &bus.Error{Code: bus.CodeNotFound, Field: "continue_from", Message: fmt.Sprintf("task %q not found", id)}
	}
	if err != nil {
		return fmt.Errorf("continue_from %s: %w", id, err)
	}
	if !taskstate.Terminal(earlier.GetStatus()) {
		return &bus.Error{Code: bus.CodeFailedPrecondition, Field: "continue_from",
			Message: fmt.Sprintf("task %s is %s: a conversation continues only from a finished task", id, taskstate.Name(earlier.GetStatus()))}
	}
	req.ContinueFrom = id
	if req.GetAgent() == "" && len(req.GetRequiredSkills()) == 0 {
		req.Agent = earlier.GetAgent()
	}
	return nil
}
