package router

import (
	"context"
	"strings"
	"sync"
	"time"

	busv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/bus/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/subjects"
	"github.com/nats-io/nats.go"
)

// The hub feeds every WatchTask stream of the router from two NATS
// subscriptions — every task event (<p>.evt.task.>) and every live token
// (<p>.live.task.*.token) — fanned out in-process to the watchers of each
// task, instead of two NATS subscriptions per stream. A watcher that waits
// holds a small mailbox and a wake-up channel, no timer and no goroutine of
// its own besides the stream's handler. The history reads of all streams
// go through one batcher: concurrent reads travel together in one
// task.history.batch request, identical ones are asked once.
//
// Events can be missed only when the router's own subscription loses them:
// a slow consumer (NATS drops messages for it) or a reconnect (nothing is
// delivered while disconnected). The hub watches for both with one ticker
// for all streams and then has every watcher catch up from state; a gap in
// the sequence does the same for one watcher. As a last safety net (a
// message lost inside a NATS cluster), a watcher that heard nothing for
// Config.WatchRefetch catches up too, in the same batches.

// mailboxCap bounds the live events a watcher holds between two wake-ups;
// beyond it they are dropped and the watcher catches up from state.
const mailboxCap = 256

// hubTick is how often the hub checks its subscriptions for dropped
// messages and its connection for reconnects.
const hubTick = time.Second

// maxHistoryBatch bounds the reads of one batch (state's own limit is
// larger).
const maxHistoryBatch = 256

// historyBatchesInFlight bounds the batches waiting for state at once;
// while they wait, further reads gather into the next batch.
const historyBatchesInFlight = 4

// subPendingMsgs bounds what NATS buffers for the hub's subscriptions
// before it drops (and the hub has everyone catch up).
const subPendingMsgs = 1 << 16

type hub struct {
	s *Service

	mu       sync.Mutex
	started  bool
	subs     []*nats.Subscription
	watchers map[string]map[*watcher]struct{} // task id → its watchers
	feeds    map[string]*orgFeed              // org token → its WatchTasks feed (feed.go)

	flushOnce sync.Once

	calls     chan *historyCall
	startOnce sync.Once
}

func newHub(s *Service) *hub {
	return &hub{s: s, watchers: map[string]map[*watcher]struct{}{}, feeds: map[string]*orgFeed{}, calls: make(chan *historyCall, maxHistoryBatch)}
}

// add registers w for its task's live events. When it returns, the hub's
// subscriptions are in place at the server, so an event committed after
// the history read that follows cannot be missed.
func (h *hub) add(w *watcher) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.ensureStarted(); err != nil {
		return err
	}
	ws := h.watchers[w.id]
	if ws == nil {
		ws = map[*watcher]struct{}{}
		h.watchers[w.id] = ws
	}
	ws[w] = struct{}{}
	return nil
}

func (h *hub) remove(w *watcher) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if ws := h.watchers[w.id]; ws != nil {
		delete(ws, w)
		if len(ws) == 0 {
			delete(h.watchers, w.id)
		}
	}
}

// ensureStarted subscribes the first time (h.mu held).
func (h *hub) ensureStarted() error {
	if h.started {
		return nil
	}
	if err := h.start(); err != nil {
		return err
	}
	h.started = true
	return nil
}

// start subscribes (h.mu held).
func (h *hub) start() error {
	nc := h.s.nc
	for _, subj := range []string{h.s.names.TaskEventsAll(), h.s.names.TokensAll()} {
		sub, err := nc.Subscribe(subj, h.deliver)
		if err != nil {
			h.unsubscribe()
			return &bus.Error{Code: bus.CodeUnavailable, Message: "subscribe to " + subj + ": " + err.Error()}
		}
		_ = sub.SetPendingLimits(subPendingMsgs, 64<<20)
		h.subs = append(h.subs, sub)
	}
	if err := nc.Flush(); err != nil {
		h.unsubscribe()
		return &bus.Error{Code: bus.CodeUnavailable, Message: "subscribe to task events: " + err.Error()}
	}
	go h.watch()
	return nil
}

func (h *hub) unsubscribe() {
	for _, sub := range h.subs {
		_ = sub.Unsubscribe()
	}
	h.subs = nil
}

// deliver hands one message to the watchers of its task, and to its
// org's feed (WatchTasks) when the org has one.
func (h *hub) deliver(m *nats.Msg) {
	// Most events are of tasks nobody here watches, of orgs nobody here
	// follows: pass them over undecoded (the router sees every event of
	// every task). A watcher that registers just after this reads the
	// history after registering.
	org, id, ok := subjects.OrgTaskOf(m.Subject)
	live := strings.HasPrefix(m.Subject, h.s.names.Prefix()+".live.") // a token: not an event of the record
	if ok {
		h.mu.Lock()
		watched := len(h.watchers[id]) > 0
		fed := !live && h.feeds[org] != nil
		h.mu.Unlock()
		if !watched && !fed {
			return
		}
	}
	ev := new(agentmeshv1.TaskEvent)
	if err := bus.DecodeEvent(m.Data, ev); err != nil {
		h.s.log.Warn("malformed task event set aside", "subject", m.Subject, "err", err)
		return
	}
	h.mu.Lock()
	if f := h.feeds[org]; ok && !live && f != nil && subjects.OrgToken(ev.GetOrg()) == org {
		f.fold(ev)
	}
	for w := range h.watchers[ev.TaskId] {
		if ev.GetOrg() != "" && ev.GetOrg() != w.org {
			continue // another org's task of the same id: never shown
		}
		w.push(ev)
	}
	h.mu.Unlock()
}

// watch is the hub's one ticker: after a reconnect or dropped messages
// every watcher catches up; a watcher without news for WatchRefetch too.
func (h *hub) watch() {
	t := time.NewTicker(min(hubTick, h.s.cfg.WatchRefetch))
	defer t.Stop()
	reconnects := h.s.nc.Stats().Reconnects
	var dropped int
	lastSweep := time.Now()
	for {
		select {
		case <-h.s.stopping:
			h.mu.Lock()
			h.unsubscribe()
			h.mu.Unlock()
			return
		case now := <-t.C:
			lost := false
			if r := h.s.nc.Stats().Reconnects; r != reconnects {
				reconnects, lost = r, true
			}
			h.mu.Lock()
			d := 0
			for _, sub := range h.subs {
				n, _ := sub.Dropped()
				d += n
			}
			if d != dropped {
				dropped, lost = d, true
			}
			sweep := now.Sub(lastSweep) >= h.s.cfg.WatchRefetch
			if sweep {
				lastSweep = now
			}
			if lost || sweep {
				idle := now.Add(-h.s.cfg.WatchRefetch).UnixNano()
				for _, ws := range h.watchers {
					for w := range ws {
						if lost || w.news.Load() <= idle {
							w.lost()
						}
					}
				}
			}
			if lost {
				h.feedsLost()
			}
			h.mu.Unlock()
			if lost {
				h.s.log.Warn("watch: task events may have been missed (reconnect or slow consumer); every watcher catches up from state")
			}
		}
	}
}

// ---- batched history reads ----

// historyCall is one history read waiting for its batch.
type historyCall struct {
	req  *busv1.HistoryRequest
	resp *busv1.HistoryResponse
	err  error
	done chan struct{}
}

// history reads a task's history through the batcher.
func (h *hub) history(ctx context.Context, id string, after int64, limit int32) (*busv1.HistoryResponse, error) {
	h.startOnce.Do(func() { go h.batch() })
	c := &historyCall{req: &busv1.HistoryRequest{TaskId: id, AfterSeq: after, Limit: limit, Org: orgFrom(ctx)}, done: make(chan struct{})}
	select {
	case h.calls <- c:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-h.s.stopping:
		return nil, bus.Errorf(bus.CodeUnavailable, "agentmesh router is shutting down")
	}
	select {
	case <-c.done:
		return c.resp, c.err
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-h.s.stopping: // the batcher may have stopped before taking it
		return nil, bus.Errorf(bus.CodeUnavailable, "agentmesh router is shutting down")
	}
}

// batch gathers the waiting reads into batches, at most
// historyBatchesInFlight at once: a read never waits for a timer, and
// under load the reads that queue while state answers go together.
func (h *hub) batch() {
	slots := make(chan struct{}, historyBatchesInFlight)
	for {
		select {
		case slots <- struct{}{}:
		case <-h.s.stopping:
			return
		}
		var first *historyCall
		select {
		case first = <-h.calls:
		case <-h.s.stopping:
			return
		}
		calls := []*historyCall{first}
	gather:
		for len(calls) < maxHistoryBatch {
			select {
			case c := <-h.calls:
				calls = append(calls, c)
			default:
				break gather
			}
		}
		go func() {
			defer func() { <-slots }()
			h.send(calls)
		}()
	}
}

type historyKey struct {
	id, org string
	after   int64
	limit   int32
}

// send asks state for the calls' histories in one request (identical
// reads once) and hands each call its answer.
func (h *hub) send(calls []*historyCall) {
	ctx, cancel := context.WithTimeout(context.Background(), bus.DefaultTimeout)
	defer cancel()
	idx := map[historyKey]int{}
	var reqs []*busv1.HistoryRequest
	of := make([]int, len(calls))
	for i, c := range calls {
		k := historyKey{c.req.TaskId, c.req.Org, c.req.AfterSeq, c.req.Limit}
		j, ok := idx[k]
		if !ok {
			j = len(reqs)
			idx[k] = j
			reqs = append(reqs, c.req)
		}
		of[i] = j
	}
	resps := make([]*busv1.HistoryResponse, len(reqs))
	errs := make([]error, len(reqs))
	if len(reqs) == 1 {
		var resp busv1.HistoryResponse
		errs[0] = bus.Request(ctx, h.s.nc, h.s.names.State(subjects.StateHistory), reqs[0], &resp)
		resps[0] = &resp
	} else {
		var resp busv1.HistoryBatchResponse
		err := bus.Request(ctx, h.s.nc, h.s.names.State(subjects.StateHistoryBatch), &busv1.HistoryBatchRequest{Requests: reqs}, &resp)
		if err == nil && len(resp.Items) != len(reqs) {
			err = bus.Errorf(bus.CodeInternal, "history batch: %d answers to %d requests", len(resp.Items), len(reqs))
		}
		for j := range reqs {
			switch {
			case err != nil:
				errs[j] = err
			case resp.Items[j].GetError() != nil:
				errs[j] = bus.FromProto(resp.Items[j].GetError())
			default:
				resps[j] = resp.Items[j].GetResponse()
				if resps[j] == nil {
					resps[j] = &busv1.HistoryResponse{}
				}
			}
		}
	}
	for i, c := range calls {
		c.resp, c.err = resps[of[i]], errs[of[i]]
		close(c.done)
	}
}
