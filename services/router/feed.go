package router

import (
	"slices"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/subjects"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// WatchTasks: the org's task changes, live (a dashboard's task list, any
// client that follows many tasks at once). It rides the hub's one
// subscription to every task event (hub.go): an org that has WatchTasks
// streams has a feed, and the hub folds each event of that org into the
// feed's pending change of its task (decoding each event once, whoever
// watches). Every Config.WatchTasksInterval the hub hands the pending
// changes, as one WatchTasksResponse, to every stream of the org — so a
// stream gets at most a few messages a second however many tasks run, and
// 200 dashboards cost 200 small writes per interval, not 200 per event.
//
// A stream has no cursor: it sends an empty response once it is
// registered, the client lists the tasks, then applies each change whose
// seq is newer than the task it holds. When the hub may have lost events
// (a reconnect, a slow consumer) or a stream falls behind (its mailbox
// full), the stream sends reset: the client lists again.

// DefaultWatchTasksInterval is how often the org feeds hand out their
// changes.
const DefaultWatchTasksInterval = 250 * time.Millisecond

// listMailboxCap bounds the responses a WatchTasks stream holds unsent;
// beyond it they are dropped and the stream sends reset.
const listMailboxCap = 64

// orgFeed gathers one org's task changes between two flushes (hub.mu).
type orgFeed struct {
	watchers map[*listWatcher]struct{}
	pending  map[string]*pendingChange
	order    []string // task ids in the order of their first change
}

type pendingChange struct {
	c         *agentmeshv1.TaskChange
	statusSeq int64 // seq of the status event c.status came from
}

// fold adds one event of the feed's org to its task's pending change.
func (f *orgFeed) fold(ev *agentmeshv1.TaskEvent) {
	p := f.pending[ev.GetTaskId()]
	if p == nil {
		p = &pendingChange{c: &agentmeshv1.TaskChange{TaskId: ev.GetTaskId()}}
		f.pending[ev.GetTaskId()] = p
		f.order = append(f.order, ev.GetTaskId())
	}
	c := p.c
	if ev.GetSeq() > c.Seq {
		c.Seq, c.Time = ev.GetSeq(), ev.GetTime()
	}
	switch ev.GetType() {
	case agentmeshv1.EventType_EVENT_TYPE_CREATED:
		c.Created, c.CreatedAt = ev.GetCreated(), ev.GetTime()
		if c.Created == nil {
			c.Created = &agentmeshv1.TaskCreated{}
		}
		if p.statusSeq < ev.GetSeq() {
			c.Status, p.statusSeq = ev.GetStatus(), ev.GetSeq()
		}
	case agentmeshv1.EventType_EVENT_TYPE_STATUS:
		if p.statusSeq == 0 && c.Created == nil {
			c.FromStatus = ev.GetFromStatus()
		}
		if ev.GetSeq() > p.statusSeq {
			p.statusSeq = ev.GetSeq()
			c.Status, c.Reason, c.FailureKind, c.Attempt, c.Node = ev.GetStatus(), ev.GetReason(), ev.GetFailureKind(), ev.GetAttempt(), ev.GetNode()
			c.NeedsDecision = ev.GetStatus() == taskstate.Blocked && (ev.GetApproval() != nil || ev.GetProposal() != nil)
		}
		if ev.GetAgent() != "" {
			c.Agent, c.Priority = ev.GetAgent(), ev.GetPriority()
		}
	case agentmeshv1.EventType_EVENT_TYPE_STEP:
		c.Steps++
		if u := ev.GetStep().GetUsage(); u != nil {
			if c.Usage == nil {
				c.Usage = &agentmeshv1.Usage{}
			}
			taskstate.AddUsage(c.Usage, u)
		}
	case agentmeshv1.EventType_EVENT_TYPE_UPDATED:
		c.Updated = true
	}
}

// take returns the pending changes as one response (nil when none) and
// empties the feed.
func (f *orgFeed) take() *agentmeshv1.WatchTasksResponse {
	if len(f.order) == 0 {
		return nil
	}
	resp := &agentmeshv1.WatchTasksResponse{Changes: make([]*agentmeshv1.TaskChange, len(f.order))}
	for i, id := range f.order {
		resp.Changes[i] = f.pending[id].c
	}
	clear(f.pending)
	f.order = f.order[:0]
	return resp
}

// listWatcher is one WatchTasks stream: its filter, and the responses the
// hub handed it that it has not sent yet.
type listWatcher struct {
	org    string // the org token of the caller's org
	filter *agentmeshv1.WatchTasksRequest
	wake   chan struct{}

	box   []*agentmeshv1.WatchTasksResponse
	reset bool
}

// offer queues resp, filtered (h.mu held: the hub calls it under its lock).
func (w *listWatcher) offer(resp *agentmeshv1.WatchTasksResponse) {
	if resp = w.filtered(resp); resp == nil {
		return
	}
	if len(w.box) >= listMailboxCap {
		w.box, w.reset = nil, true
	} else {
		w.box = append(w.box, resp)
	}
	w.signal()
}

// lost makes the stream send reset (h.mu held).
func (w *listWatcher) lost() {
	w.box, w.reset = nil, true
	w.signal()
}

func (w *listWatcher) signal() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// filtered returns the changes of resp that pass the stream's filter: resp
// itself when there is no filter or every change passes, nil when none
// does. A field a change does not carry (a change of steps only has no
// status, agent or priority) does not filter it out.
func (w *listWatcher) filtered(resp *agentmeshv1.WatchTasksResponse) *agentmeshv1.WatchTasksResponse {
	f := w.filter
	if len(f.GetStatuses()) == 0 && f.GetAgent() == "" && len(f.GetPriorities()) == 0 {
		return resp
	}
	var keep []*agentmeshv1.TaskChange
	for _, c := range resp.Changes {
		if passes(f, c) {
			keep = append(keep, c)
		}
	}
	switch len(keep) {
	case 0:
		return nil
	case len(resp.Changes):
		return resp
	}
	return &agentmeshv1.WatchTasksResponse{Changes: keep}
}

func passes(f *agentmeshv1.WatchTasksRequest, c *agentmeshv1.TaskChange) bool {
	if st := f.GetStatuses(); len(st) > 0 && c.Status != agentmeshv1.TaskStatus_TASK_STATUS_UNSPECIFIED &&
		!slices.Contains(st, c.Status) && !slices.Contains(st, c.FromStatus) {
		return false
	}
	if f.GetAgent() != "" && c.Agent != "" && c.Agent != f.GetAgent() {
		return false
	}
	if p := f.GetPriorities(); len(p) > 0 && c.Agent != "" && !slices.Contains(p, c.Priority) {
		return false
	}
	return true
}

// take empties the mailbox (h.mu held).
func (w *listWatcher) take() ([]*agentmeshv1.WatchTasksResponse, bool) {
	box, reset := w.box, w.reset
	w.box, w.reset = nil, false
	return box, reset
}

// addFeed registers w with its org's feed, starting the hub's
// subscriptions and flusher when needed.
func (h *hub) addFeed(w *listWatcher) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.ensureStarted(); err != nil {
		return err
	}
	f := h.feeds[w.org]
	if f == nil {
		f = &orgFeed{watchers: map[*listWatcher]struct{}{}, pending: map[string]*pendingChange{}}
		h.feeds[w.org] = f
	}
	f.watchers[w] = struct{}{}
	h.flushOnce.Do(func() { go h.flushFeeds() })
	return nil
}

func (h *hub) removeFeed(w *listWatcher) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if f := h.feeds[w.org]; f != nil {
		delete(f.watchers, w)
		if len(f.watchers) == 0 {
			delete(h.feeds, w.org)
		}
	}
}

// flushFeeds hands each feed's pending changes to its streams every
// WatchTasksInterval.
func (h *hub) flushFeeds() {
	t := time.NewTicker(h.s.cfg.WatchTasksInterval)
	defer t.Stop()
	for {
		select {
		case <-h.s.stopping:
			return
		case <-t.C:
		}
		h.mu.Lock()
		for _, f := range h.feeds {
			resp := f.take()
			if resp == nil {
				continue
			}
			for w := range f.watchers {
				w.offer(resp)
			}
		}
		h.mu.Unlock()
	}
}

// feedsLost has every WatchTasks stream send reset (h.mu held).
func (h *hub) feedsLost() {
	for _, f := range h.feeds {
		for w := range f.watchers {
			w.lost()
		}
	}
}

// watchTasks serves one WatchTasks stream.
func (s *Service) watchTasks(req *agentmeshv1.WatchTasksRequest, stream agentmeshv1.TaskService_WatchTasksServer) error {
	ctx := stream.Context()
	if err := checkWatchTasks(req); err != nil {
		return err
	}
	org := orgFrom(ctx)
	release, err := s.watches.acquire(org)
	if err != nil {
		return err
	}
	defer release()
	w := &listWatcher{org: subjects.OrgToken(org), filter: req, wake: make(chan struct{}, 1)}
	if err := s.hub.addFeed(w); err != nil {
		return err
	}
	defer s.hub.removeFeed(w)
	// Registered: every change from now on reaches w. The empty first
	// response tells the client to list the tasks now.
	if err := stream.Send(&agentmeshv1.WatchTasksResponse{}); err != nil {
		return err
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-s.stopping:
			return status.Error(codes.Unavailable, "agentmesh router is shutting down; open the stream again and list the tasks")
		case <-w.wake:
		}
		s.hub.mu.Lock()
		box, reset := w.take()
		s.hub.mu.Unlock()
		if reset {
			if err := stream.Send(&agentmeshv1.WatchTasksResponse{Reset_: true}); err != nil {
				return err
			}
			continue
		}
		for _, resp := range box {
			if err := stream.Send(resp); err != nil {
				return err
			}
		}
	}
}

// checkWatchTasks validates a WatchTasks filter.
func checkWatchTasks(req *agentmeshv1.WatchTasksRequest) error {
	return validateList(&agentmeshv1.ListTasksRequest{Statuses: req.GetStatuses(), Agent: req.GetAgent(), Priorities: req.GetPriorities()})
}
