package router

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// historyPage is the number of events asked of state per request.
const historyPage = 1000

// watcher follows one task for one WatchTask stream. last is the seq of the
// last event sent (or the client's cursor); every event goes out once, in
// order, with no gaps: live events that do not follow last are ignored (seq
// ≤ last) or trigger a catch-up from state (seq > last+1).
//
// Live events reach it through the router's hub (hub.go), which pushes
// them into the watcher's mailbox and wakes it; an idle watcher is a
// blocked stream handler, a small struct and a one-slot channel.
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
	org    string // the caller's: events of another org are never pushed
	stream agentmeshv1.TaskService_WatchTaskServer
	last   int64
	status agentmeshv1.TaskStatus
	done   bool // the terminal event has been sent

	// news is when the hub last had something for this watcher (unix ns).
	news atomic.Int64
	wake chan struct{} // one slot: "look at the mailbox"

	mu  sync.Mutex
	box []*agentmeshv1.TaskEvent // live events not yet looked at
	gap bool                     // events were lost: catch up from state
}

// push queues a live event (called by the hub).
func (w *watcher) push(ev *agentmeshv1.TaskEvent) {
	w.mu.Lock()
	if len(w.box) >= mailboxCap {
		w.box, w.gap = nil, true
	} else {
		w.box = append(w.box, ev)
	}
	w.mu.Unlock()
	w.news.Store(time.Now().UnixNano())
	w.signal()
}

// lost makes the watcher catch up from state (called by the hub).
func (w *watcher) lost() {
	w.mu.Lock()
	w.gap = true
	w.mu.Unlock()
	w.news.Store(time.Now().UnixNano())
	w.signal()
}

func (w *watcher) signal() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// take empties the mailbox.
func (w *watcher) take() ([]*agentmeshv1.TaskEvent, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	evs, gap := w.box, w.gap
	w.box, w.gap = nil, false
	return evs, gap
}

func (s *Service) watch(req *agentmeshv1.WatchTaskRequest, stream agentmeshv1.TaskService_WatchTaskServer) error {
	ctx := stream.Context()
	if err := checkID("id", req.GetId()); err != nil {
		return err
	}
	if err := checkAfterSeq(req.GetAfterSeq()); err != nil {
		return err
	}

	// Register with the hub first, so nothing committed after the history
	// read below can slip between the two. The history read is also the
	// one read of the task: it answers not_found for a task of another
	// org, and carries the task's status and last seq.
	release, err := s.watches.acquire(orgFrom(ctx))
	if err != nil {
		return err
	}
	defer release()
	w := &watcher{s: s, id: req.GetId(), org: orgFrom(ctx), stream: stream, last: req.GetAfterSeq(), wake: make(chan struct{}, 1)}
	w.news.Store(time.Now().UnixNano())
	if err := s.hub.add(w); err != nil {
		return err
	}
	defer s.hub.remove(w)

	lastSeq, err := w.catchUp(ctx)
	if err != nil {
		return err
	}
	if req.GetAfterSeq() > lastSeq {
		return bus.FieldError("after_seq", "%d is past the task's last event (%d)", req.GetAfterSeq(), lastSeq)
	}
	if !w.done && w.last == req.GetAfterSeq() {
		// Accepted, with nothing to send yet: the header says so now
		// (else it goes with the first event), so that a door in front
		// (SSE) can answer 200 before news comes.
		if err := stream.SendHeader(nil); err != nil {
			return err
		}
	}
	for !w.done {
		select {
		case <-ctx.Done():
			return nil // the client went away: nothing to report
		case <-s.stopping:
			return status.Errorf(codes.Unavailable, "agentmesh router is shutting down; reconnect with after_seq=%d", w.last)
		case <-w.wake:
		}
		evs, gap := w.take()
		if gap {
			if _, err := w.catchUp(ctx); err != nil {
				return err
			}
			continue
		}
		if err := w.live(ctx, evs); err != nil {
			return err
		}
	}
	return nil
}

// live sends what the mailbox held, catching up from state on a gap.
func (w *watcher) live(ctx context.Context, evs []*agentmeshv1.TaskEvent) error {
	for _, ev := range evs {
		if w.done {
			return nil
		}
		if ev.GetType() == agentmeshv1.EventType_EVENT_TYPE_TOKEN {
			if err := w.sendToken(ev); err != nil {
				return err
			}
			continue // live only: not the cursor, not news of the record
		}
		switch {
		case ev.GetSeq() <= w.last:
		case ev.GetSeq() == w.last+1:
			if err := w.send(ev); err != nil {
				return err
			}
		default: // a gap: the events between are in state
			_, err := w.catchUp(ctx)
			if err != nil {
				return err
			}
		}
	}
	return nil
}

// catchUp sends every recorded event after w.last, page by page, and
// returns the seq of the task's newest event. It marks w done when the task
// is terminal and everything has been sent.
func (w *watcher) catchUp(ctx context.Context) (int64, error) {
	for {
		hist, err := w.s.hub.history(ctx, w.id, w.last, historyPage)
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
			if w.status == agentmeshv1.TaskStatus_TASK_STATUS_UNSPECIFIED {
				w.status = st // the first read, at the client's cursor
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
