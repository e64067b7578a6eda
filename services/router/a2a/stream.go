package a2a

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/services/router/door"
)

// serveStream answers message/stream and tasks/resubscribe with an SSE
// stream: the task first, then a status-update for every change of its
// A2A state (and a working one for every model turn with text), the
// answer as an artifact-update, and a final status-update when the task
// ends or asks for input. An error before the stream starts is a plain
// JSON-RPC error response.
func (s *Server) serveStream(ctx context.Context, w http.ResponseWriter, req *request) {
	var t *agentmeshv1.Task
	var rerr *door.RPCError
	history := -1
	if req.Method == MethodStream {
		var p *sendParams
		if p, rerr = readSend(req); rerr == nil {
			t, rerr = s.deliver(ctx, p)
			history = p.history()
		}
	} else {
		var p idParams
		if rerr = readID(req, &p); rerr == nil {
			var err error
			if t, err = s.api.Get(ctx, p.ID); err != nil {
				rerr = s.apiError(err, CodeTaskNotFound)
			}
		}
	}
	if rerr != nil {
		reply(w, req.ID, nil, rerr)
		return
	}
	out := startSSE(w, req.ID)
	if err := out.send(taskOf(t, history), nil); err != nil {
		return
	}
	if final(stateOf(t)) {
		_ = out.send(s.statusUpdate(t, true), nil)
		return
	}
	if err := s.follow(ctx, out, t); err != nil && ctx.Err() == nil {
		rerr := *s.apiError(err, CodeTaskNotFound) // a copy: it may be shared
		rerr.Message = fmt.Sprintf("task %s goes on, but this stream cannot follow it: %s; follow it with tasks/resubscribe or tasks/get",
			t.GetId(), rerr.Message)
		_ = out.send(nil, &rerr)
	}
}

// follow streams the task's changes until it ends or asks for input.
func (s *Server) follow(ctx context.Context, out *sse, t *agentmeshv1.Task) error {
	stream, err := s.api.Watch(ctx, t.GetId(), t.GetLastEventSeq())
	if err != nil {
		return err
	}
	events := make(chan *agentmeshv1.WatchTaskResponse)
	failed := make(chan error, 1)
	go func() {
		for {
			resp, err := stream.Recv()
			if err != nil {
				failed <- err
				return
			}
			select {
			case events <- resp:
			case <-ctx.Done():
				return
			}
		}
	}()
	tick := time.NewTicker(s.cfg.KeepAlive)
	defer tick.Stop()
	last := stateOf(t)
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
			if err := out.keepAlive(); err != nil {
				return nil // the client left
			}
		case err := <-failed:
			if errors.Is(err, io.EOF) {
				err = fmt.Errorf("the watch of task %s ended before the task did", t.GetId())
			}
			return err
		case resp := <-events:
			done, err := s.relay(ctx, out, t, resp, &last)
			if done || err != nil {
				return err
			}
		}
	}
}

// relay sends what one event of the task means to the client; done when
// the stream is over.
func (s *Server) relay(ctx context.Context, out *sse, t *agentmeshv1.Task, resp *agentmeshv1.WatchTaskResponse, last *string) (bool, error) {
	ev := resp.GetEvent()
	if ev.GetSeq() == 0 {
		return false, nil // streamed tokens: the model turn's step carries the text
	}
	if step := ev.GetStep(); step.GetKind() == agentmeshv1.StepKind_STEP_KIND_MODEL_TURN && step.GetContent() != "" {
		msg := agentMessage(t, fmt.Sprintf("%s-step-%d", t.GetId(), ev.GetSeq()), step.GetContent())
		upd := StatusUpdate{Kind: "status-update", TaskID: t.GetId(), ContextID: contextOf(t),
			Status: TaskStatus{State: StateWorking, Message: msg, Timestamp: stamp(ev.GetTime())}}
		if err := out.send(upd, nil); err != nil {
			return true, nil
		}
	}
	state := stateName(resp.GetStatus(), ev)
	if state == *last {
		return false, nil
	}
	*last = state
	if !final(state) {
		if err := out.send(StatusUpdate{Kind: "status-update", TaskID: t.GetId(), ContextID: contextOf(t),
			Status: TaskStatus{State: state, Timestamp: stamp(ev.GetTime())}}, nil); err != nil {
			return true, nil
		}
		return false, nil
	}
	now, err := s.api.Get(ctx, t.GetId()) // the answer, the error or the approval
	if err != nil {
		return true, err
	}
	if stateOf(now) == StateCompleted {
		if err := out.send(ArtifactUpdate{Kind: "artifact-update", TaskID: now.GetId(), ContextID: contextOf(now),
			Artifact: resultArtifact(now), LastChunk: true}, nil); err != nil {
			return true, nil
		}
	}
	_ = out.send(s.statusUpdate(now, true), nil)
	return true, nil
}

// stateName is the A2A state after an event (the event tells a block on
// an approval from others).
func stateName(st agentmeshv1.TaskStatus, ev *agentmeshv1.TaskEvent) string {
	t := &agentmeshv1.Task{Status: st}
	if st == agentmeshv1.TaskStatus_TASK_STATUS_BLOCKED && ev.GetApproval() != nil {
		t.PendingApproval = ev.GetApproval()
	}
	return stateOf(t)
}

func (s *Server) statusUpdate(t *agentmeshv1.Task, last bool) StatusUpdate {
	return StatusUpdate{Kind: "status-update", TaskID: t.GetId(), ContextID: contextOf(t), Status: statusOf(t), Final: last}
}
