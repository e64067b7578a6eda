package registry

import (
	"context"
	"fmt"
	"sync"
	"time"

	busv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/bus/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/subjects"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// The workload figure of scored matching is maintained, not scanned: the
// registry reads the live and recently finished tasks once (at start, and
// again whenever it loses the event stream), then follows the task status
// events with an ordered consumer from the point the stream had reached
// before the reads (events older than a task's read record are skipped by
// their seq), as the scheduler's model does. A match then costs a map
// lookup per candidate instead of two scans of the store. Until the first
// read succeeds, matching asks state (<p>.state.agent.stats), as before.

type agentKey struct{ org, name string }

type orgAgent struct {
	org   string // the org whose task it was
	agent agentKey
}

type finish struct {
	at        time.Time
	completed bool
}

type taskMark struct {
	seq   int64
	agent agentKey
	live  bool
	at    time.Time
}

// workload is the registry's model of the agents' live load and recent
// record, kept from the task events.
type workload struct {
	window time.Duration

	mu       sync.Mutex
	ready    bool
	tasks    map[string]*taskMark
	running  map[agentKey]int32
	finished map[orgAgent][]finish
	applied  int
}

func newWorkload(window time.Duration) *workload {
	w := &workload{window: window}
	w.reset()
	return w
}

func (w *workload) reset() {
	w.tasks = map[string]*taskMark{}
	w.running = map[agentKey]int32{}
	w.finished = map[orgAgent][]finish{}
	w.ready = false
}

// apply folds one status of a task into the model (an older or repeated
// seq is ignored).
func (w *workload) apply(id, org string, agent agentKey, status agentmeshv1.TaskStatus, seq int64, at time.Time) {
	m := w.tasks[id]
	if m != nil && seq <= m.seq {
		return
	}
	if m == nil {
		m = &taskMark{}
		w.tasks[id] = m
	}
	if m.live {
		if w.running[m.agent]--; w.running[m.agent] <= 0 {
			delete(w.running, m.agent)
		}
		m.live = false
	}
	m.seq, m.at = seq, at
	if agent.name != "" {
		m.agent = agent
	}
	switch status {
	case taskstate.Assigned, taskstate.Running:
		if m.agent.name != "" {
			m.live = true
			w.running[m.agent]++
		}
	case taskstate.Completed, taskstate.Failed:
		if m.agent.name != "" && time.Since(at) < w.window {
			k := orgAgent{org, m.agent}
			w.finished[k] = append(w.finished[k], finish{at: at, completed: status == taskstate.Completed})
		}
	}
	w.applied++
	if w.applied%4096 == 0 {
		w.prune(time.Now())
	}
}

// prune forgets finishes older than the window and the marks of tasks not
// live that changed longer ago than the window (an event of theirs older
// than that is not replayed: the consumer starts at the last read).
func (w *workload) prune(now time.Time) {
	cut := now.Add(-w.window)
	for k, fs := range w.finished {
		i := 0
		for i < len(fs) && fs[i].at.Before(cut) {
			i++
		}
		if i == len(fs) {
			delete(w.finished, k)
		} else if i > 0 {
			w.finished[k] = append(fs[:0:0], fs[i:]...)
		}
	}
	for id, m := range w.tasks {
		if !m.live && m.at.Before(cut) {
			delete(w.tasks, id)
		}
	}
}

// stats answers, for org's matching, each agent's live load (every org's
// tasks: max_concurrency is cluster-wide) and org's finishes of it within
// the window; ok is false while the model is not built.
func (w *workload) stats(org string, agents []*agentmeshv1.Agent) (out []*busv1.AgentStats, ok bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.ready {
		return nil, false
	}
	cut := time.Now().Add(-w.window)
	out = make([]*busv1.AgentStats, len(agents))
	for i, a := range agents {
		k := agentKey{a.Org, a.Name}
		st := &busv1.AgentStats{Agent: &busv1.AgentRef{Org: a.Org, Name: a.Name}, Running: w.running[k]}
		for _, f := range w.finished[orgAgent{org, k}] {
			if f.at.Before(cut) {
				continue
			}
			if f.completed {
				st.Completed++
			} else {
				st.Failed++
			}
		}
		out[i] = st
	}
	return out, true
}

// follow builds the model from the record and follows the events until ctx
// ends, rebuilding after a failure; it retries every second while state or
// the stream is not there yet. While it follows, it prunes the model every
// minute.
func (s *Service) follow(ctx context.Context, js jetstream.JetStream) {
	filters := make([]string, 0, len(workloadStatuses))
	for _, st := range workloadStatuses {
		filters = append(filters, s.names.TaskEventsOfType(subjects.StatusToken(st)))
	}
	bus.Follow{
		Stream: s.names.EventsStream(), Filters: filters, List: s.rebuildWorkload, Handle: s.onTaskEvent,
		Failed: func(err error) { s.log.Debug("workload model: rebuild failed; retrying", "err", err) },
	}.Run(ctx, js, func(ctx context.Context) {
		s.work.mu.Lock()
		s.work.ready = true
		s.work.mu.Unlock()
		tick := time.NewTicker(time.Minute)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				s.work.mu.Lock()
				s.work.prune(time.Now())
				s.work.mu.Unlock()
			}
		}
	})
}

// workloadStatuses are the event types that move a task into or out of an
// agent's load or record.
var workloadStatuses = []agentmeshv1.TaskStatus{
	taskstate.Queued, taskstate.Assigned, taskstate.Running, taskstate.Blocked,
	taskstate.Completed, taskstate.Failed, taskstate.Cancelled,
}

// rebuildWorkload reads the live tasks and those that finished within the
// affinity window into a fresh model (follow then follows the events from
// the stream's position before the reads, from).
func (s *Service) rebuildWorkload(ctx context.Context, from uint64) error {
	var tasks []*agentmeshv1.Task
	read := func(req *busv1.ListTasksRequest) error {
		for token := ""; ; {
			req.PageSize, req.PageToken = 1000, token
			var resp busv1.ListTasksResponse
			if err := s.stateReq(ctx, subjects.StateListTasks, req, &resp); err != nil {
				return fmt.Errorf("list tasks: %w", err)
			}
			tasks = append(tasks, resp.Tasks...)
			if token = resp.NextPageToken; token == "" {
				return nil
			}
		}
	}
	if err := read(&busv1.ListTasksRequest{Statuses: []agentmeshv1.TaskStatus{taskstate.Assigned, taskstate.Running}}); err != nil {
		return err
	}
	if err := read(&busv1.ListTasksRequest{Statuses: []agentmeshv1.TaskStatus{taskstate.Completed, taskstate.Failed},
		UpdatedAfter: timestamppb.New(time.Now().Add(-s.work.window))}); err != nil {
		return err
	}
	s.work.mu.Lock()
	s.work.reset()
	for _, t := range tasks {
		s.work.apply(t.Id, t.Org, agentKey{t.GetAgentSpec().GetOrg(), t.Agent}, t.Status, t.LastEventSeq, t.UpdatedAt.AsTime())
	}
	s.work.mu.Unlock()

	s.log.Info("workload model built from the record", "tasks", len(tasks), "events_from", from)
	return nil
}

func (s *Service) onTaskEvent(m jetstream.Msg) {
	var ev agentmeshv1.TaskEvent
	if err := bus.DecodeEvent(m.Data(), &ev); err != nil || ev.TaskId == "" || ev.Type != agentmeshv1.EventType_EVENT_TYPE_STATUS {
		if err != nil {
			s.log.Warn("malformed event skipped", "subject", m.Subject(), "err", err)
		}
		return
	}
	at := time.Now()
	if ev.Time != nil {
		at = ev.Time.AsTime()
	}
	s.work.mu.Lock()
	s.work.apply(ev.TaskId, ev.Org, agentKey{ev.AgentOrg, ev.Agent}, ev.Status, ev.Seq, at)
	s.work.mu.Unlock()
}

// statsOf returns the candidates' stats from the model, or from state
// while the model is not built.
func (s *Service) statsOf(ctx context.Context, org string, agents []*agentmeshv1.Agent) ([]*busv1.AgentStats, error) {
	if st, ok := s.work.stats(org, agents); ok {
		return st, nil
	}
	var stats []*busv1.AgentStats
	for start := 0; start < len(agents); start += statsBatch {
		req := &busv1.AgentStatsRequest{Org: org, WindowSeconds: int64(s.affinityWindow / time.Second)}
		for _, a := range agents[start:min(start+statsBatch, len(agents))] {
			req.Agents = append(req.Agents, &busv1.AgentRef{Org: a.Org, Name: a.Name})
		}
		var resp busv1.AgentStatsResponse
		if err := s.stateReq(ctx, subjects.StateAgentStats, req, &resp); err != nil {
			return nil, fmt.Errorf("agent stats: %w", err)
		}
		stats = append(stats, resp.Stats...)
	}
	return stats, nil
}
