package router

import (
	"context"
	"fmt"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"github.com/nats-io/nats.go"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// watchBuffer is how many live events a watch holds before NATS drops
// them; a drop is a gap, which a refetch from state repairs.
const watchBuffer = 256

// historyPage is the number of events asked of state per request.
const historyPage = 1000

// watcher follows one task for one WatchTask stream. last is the seq of the
// last event sent (or the client's cursor); every event goes out once, in
// order, with no gaps: live events that do not follow last are ignored (seq
// ≤ last) or trigger a refetch from state (seq > last+1).
//
// TOKEN events (streamed model output, published live by the executor with
// seq 0) are the exception: they are forwarded as they arrive, between the
// recorded events, and are never the cursor, never counted, never
// refetched — they are not in the history, so a client that reconnects
// misses the tokens streamed while it was away (the model turn's step holds
// the whole text).
type watcher struct {
	s      *Service
	id     string
	stream agentmeshv1.TaskService_WatchTaskServer
	last   int64
	status agentmeshv1.TaskStatus
	done   bool // the terminal event has been sent
}

func (s *Service) watch(req *agentmeshv1.WatchTaskRequest, stream agentmeshv1.TaskService_WatchTaskServer) error {
	ctx := stream.Context()
	if err := checkID("id", req.GetId()); err != nil {
		return err
	}
	if err := checkAfterSeq(req.GetAfterSeq()); err != nil {
		return err
	}
	task, err := s.getTask(ctx, req.GetId())
	if err != nil {
		return err
	}
	release, err := s.watches.acquire(orgFrom(ctx))
	if err != nil {
		return err
	}
	defer release()

	// Subscribe first, so nothing committed after the history read below
	// can slip between the two.
	ch := make(chan *nats.Msg, watchBuffer)
	sub, err := s.nc.ChanSubscribe(s.names.TaskEvents(task.GetOrg(), req.GetId()), ch)
	if err != nil {
		return fmt.Errorf("subscribe to events of task %s: %w", req.GetId(), err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	tokSub, err := s.nc.ChanSubscribe(s.names.TaskTokens(task.GetOrg(), req.GetId()), ch)
	if err != nil {
		return fmt.Errorf("subscribe to tokens of task %s: %w", req.GetId(), err)
	}
	defer func() { _ = tokSub.Unsubscribe() }()

	w := &watcher{s: s, id: req.GetId(), stream: stream, last: req.GetAfterSeq(), status: task.GetStatus()}
	lastSeq, err := w.catchUp(ctx)
	if err != nil {
		return err
	}
	if req.GetAfterSeq() > lastSeq {
		return bus.FieldError("after_seq", "%d is past the task's last event (%d)", req.GetAfterSeq(), lastSeq)
	}
	if w.done {
		return nil
	}

	idle := time.NewTimer(s.cfg.WatchRefetch)
	defer idle.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil // the client went away: nothing to report
		case <-s.stopping:
			return status.Errorf(codes.Unavailable, "agentmesh router is shutting down; reconnect with after_seq=%d", w.last)
		case msg := <-ch:
			ev := new(agentmeshv1.TaskEvent)
			if err := bus.DecodeEvent(msg.Data, ev); err != nil {
				s.log.Warn("malformed task event set aside", "subject", msg.Subject, "err", err)
				continue
			}
			if ev.GetType() == agentmeshv1.EventType_EVENT_TYPE_TOKEN {
				if err := w.sendToken(ev); err != nil {
					return err
				}
				continue // live only: not the cursor, not news of the record
			}
			switch {
			case ev.GetSeq() <= w.last:
				continue
			case ev.GetSeq() == w.last+1:
				if err := w.send(ev); err != nil {
					return err
				}
			default: // a gap: the events between are in state
				if _, err := w.catchUp(ctx); err != nil {
					return err
				}
			}
		case <-idle.C:
			if _, err := w.catchUp(ctx); err != nil {
				return err
			}
		}
		if w.done {
			return nil
		}
		idle.Reset(s.cfg.WatchRefetch)
	}
}

// catchUp sends every recorded event after w.last, page by page, and
// returns the seq of the task's newest event. It marks w done when the task
// is terminal and everything has been sent.
func (w *watcher) catchUp(ctx context.Context) (int64, error) {
	for {
		hist, err := w.s.history(ctx, w.id, w.last, historyPage)
		if err != nil {
			return 0, err
		}
		before := w.last
		for _, ev := range hist.GetEvents() {
			if ev.GetSeq() <= w.last {
				continue
			}
			if err := w.send(ev); err != nil {
				return 0, err
			}
			if w.done {
				return hist.GetLastSeq(), nil
			}
		}
		if w.last == before || w.last >= hist.GetLastSeq() {
			// Nothing more recorded. A task that is already terminal with
			// the cursor at its end has nothing more to say.
			st := hist.GetStatus()
			if len(hist.GetEvents()) == 0 && st == agentmeshv1.TaskStatus_TASK_STATUS_UNSPECIFIED {
				st = w.status
			}
			if taskstate.Terminal(st) && w.last >= hist.GetLastSeq() {
				w.done = true
			}
			return hist.GetLastSeq(), nil
		}
	}
}

// sendToken forwards a live TOKEN event; the cursor does not move.
func (w *watcher) sendToken(ev *agentmeshv1.TaskEvent) error {
	if ev.GetTaskId() != w.id || ev.GetSeq() != 0 {
		return nil
	}
	return w.stream.Send(&agentmeshv1.WatchTaskResponse{Event: ev, Status: w.status})
}

// send streams one event with the task's status after it.
func (w *watcher) send(ev *agentmeshv1.TaskEvent) error {
	if st := ev.GetStatus(); st != agentmeshv1.TaskStatus_TASK_STATUS_UNSPECIFIED {
		w.status = st
	}
	if err := w.stream.Send(&agentmeshv1.WatchTaskResponse{Event: ev, Status: w.status}); err != nil {
		return err
	}
	w.last = ev.GetSeq()
	if ev.GetType() != agentmeshv1.EventType_EVENT_TYPE_STEP && taskstate.Terminal(w.status) {
		w.done = true
	}
	return nil
}
