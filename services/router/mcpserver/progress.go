package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// follow waits up to secs (capped by MaxWait) for t to end, following it
// with WatchTask; when the call carries a progress token, every recorded
// event of the task is a progress notification (progress = the event's
// seq, so it only grows). It returns the task as it stands at the end of
// the wait, finished or not; a watch the API refuses or ends (the org's
// watches all taken) ends the wait too: the task runs, and the answer
// names it.
func (s *server) follow(ctx context.Context, req *mcp.CallToolRequest, t *agentmeshv1.Task, secs int) (*agentmeshv1.Task, error) {
	if taskstate.Terminal(t.GetStatus()) {
		return t, nil
	}
	wait := time.Duration(secs) * time.Second
	if wait > s.cfg.MaxWait {
		wait = s.cfg.MaxWait
	}
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	stream, err := s.api.Watch(wctx, t.GetId(), t.GetLastEventSeq())
	token := req.Params.GetProgressToken()
	for err == nil {
		var resp *agentmeshv1.WatchTaskResponse
		if resp, err = stream.Recv(); err != nil {
			break // io.EOF: the task ended; or the wait is over
		}
		ev := resp.GetEvent()
		if ev.GetSeq() == 0 || token == nil {
			continue // streamed tokens are not progress; no one asked
		}
		if err := req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{
			ProgressToken: token, Progress: float64(ev.GetSeq()), Message: describe(ev, resp.GetStatus()),
		}); err != nil {
			s.log.Debug("mcp: progress notification", "task_id", t.GetId(), "err", err)
		}
	}
	if ctx.Err() != nil {
		return nil, ctx.Err() // the call was cancelled
	}
	if !errors.Is(err, io.EOF) && wctx.Err() == nil {
		s.log.Debug("mcp: the wait for a task ended", "task_id", t.GetId(), "err", err)
	}
	return s.api.Get(ctx, t.GetId())
}

// describe is an event in a few words ("running: step 3, tool echo").
func describe(ev *agentmeshv1.TaskEvent, st agentmeshv1.TaskStatus) string {
	name := taskstate.Name(st)
	switch ev.GetType() {
	case agentmeshv1.EventType_EVENT_TYPE_STEP:
		step := ev.GetStep()
		switch step.GetKind() {
		case agentmeshv1.StepKind_STEP_KIND_TOOL_CALL:
			return fmt.Sprintf("%s: step %d, calling %s", name, step.GetIndex(), step.GetToolName())
		case agentmeshv1.StepKind_STEP_KIND_TOOL_RESULT:
			return fmt.Sprintf("%s: step %d, %s answered", name, step.GetIndex(), step.GetToolName())
		}
		return fmt.Sprintf("%s: step %d, model turn", name, step.GetIndex())
	case agentmeshv1.EventType_EVENT_TYPE_SUBTASK:
		sub := ev.GetSubtask()
		return fmt.Sprintf("%s: sub-task %s %s", name, sub.GetTaskId(), taskstate.Name(sub.GetStatus()))
	}
	if r := ev.GetReason(); r != "" {
		return name + ": " + r
	}
	return name
}
