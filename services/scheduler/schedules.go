package scheduler

import (
	"container/heap"
	"context"
	"errors"
	"sync"
	"time"

	busv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/bus/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/cronspec"
	"github.com/agentmesh/agentmesh/pkg/schedule"
	"github.com/agentmesh/agentmesh/pkg/subjects"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Schedules (issue 31). The leader keeps every schedule in memory —
// listed from state when it becomes leader, then followed by the schedule
// events (bus.Follow) — in a heap by the time its next slot fires (slot and
// jitter). When slots come due it plans them (schedule.PlanDue: the catch-up
// policy decides which late ones fire), matches each template's agent once
// per (org, agent or skills) and asks state to fire them in batches
// (schedule.fire). State makes each slot's run with the slot as idempotency
// key and records the slot; the answer moves the schedule on. A leader
// that starts (a restart, a take-over) plans from what state recorded, so
// a slot is fired once whoever fires it. A schedule's slots go in order: a
// batch holds at most one slot per schedule, the next in the next batch.

// Clock is the scheduler's time for schedules; tests use a fake one.
type Clock interface {
	Now() time.Time
	// After is time.After on this clock.
	After(d time.Duration) <-chan time.Time
}

type realClock struct{}

func (realClock) Now() time.Time                         { return time.Now() }
func (realClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// Bounds of firing.
const (
	// firesPerRequest bounds the slots of one schedule.fire request (and
	// firesBytes its size: a run's task carries its agent's definition).
	firesPerRequest = 100
	firesBytes      = 512 << 10
	// fireRequests is how many schedule.fire requests are in flight at once.
	fireRequests = 16
	// refireAfter: a slot state could not handle (unavailable) is planned
	// again after this long.
	refireAfter = time.Second
)

// scheduled is one schedule the leader holds.
type scheduled struct {
	sc   *agentmeshv1.Schedule
	spec *cronspec.Spec
	due  time.Time // zero: nothing to fire (paused, ended)
	gen  int       // bumped by every change; older heap entries are stale
}

type dueEntry struct {
	at  time.Time
	id  string
	gen int
}

type dueHeap []dueEntry

func (h dueHeap) Len() int           { return len(h) }
func (h dueHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h dueHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *dueHeap) Push(x any)        { *h = append(*h, x.(dueEntry)) }
func (h *dueHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}

// firer is the leader's schedule model and the loop that fires it.
type firer struct {
	s     *Service
	clock Clock

	mu    sync.Mutex
	byID  map[string]*scheduled
	queue dueHeap
	kick  chan struct{}
}

func newFirer(s *Service, clock Clock) *firer {
	return &firer{s: s, clock: clock, byID: map[string]*scheduled{}, kick: make(chan struct{}, 1)}
}

func (f *firer) wake() {
	select {
	case f.kick <- struct{}{}:
	default:
	}
}

// put holds sc (a newer version than held, or the first) and plans its
// next fire.
func (f *firer) put(sc *agentmeshv1.Schedule) {
	spec, err := schedule.Parse(sc)
	if err != nil {
		f.s.log.Warn("schedule with a spec that does not parse left aside", "schedule", sc.Id, "err", err)
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	cur := f.byID[sc.Id]
	if cur != nil && cur.sc.Version > sc.Version {
		return
	}
	e := &scheduled{sc: sc, spec: spec}
	if cur != nil {
		e.gen = cur.gen + 1
	}
	if !sc.Paused {
		if next := schedule.Next(sc, spec, sc.GetHandledThrough().AsTime()); !next.IsZero() {
			e.due = schedule.FireAt(sc, next)
			heap.Push(&f.queue, dueEntry{at: e.due, id: sc.Id, gen: e.gen})
		}
	}
	f.byID[sc.Id] = e
	f.wake()
}

func (f *firer) drop(id string) {
	f.mu.Lock()
	delete(f.byID, id)
	f.mu.Unlock()
}

// retryLater plans the schedule id again at `at`.
func (f *firer) retryLater(id string, at time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if e := f.byID[id]; e != nil {
		e.gen++
		e.due = at
		heap.Push(&f.queue, dueEntry{at: at, id: id, gen: e.gen})
	}
}

// popDue takes the schedules whose fire time has come, and says when the
// next one comes (zero: none).
func (f *firer) popDue(now time.Time) ([]*scheduled, time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []*scheduled
	for f.queue.Len() > 0 {
		top := f.queue[0]
		e := f.byID[top.id]
		if e == nil || e.gen != top.gen {
			heap.Pop(&f.queue) // stale
			continue
		}
		if top.at.After(now) {
			return out, top.at
		}
		heap.Pop(&f.queue)
		e.due = time.Time{}
		out = append(out, e)
	}
	return out, time.Time{}
}

func (f *firer) reset() {
	f.mu.Lock()
	f.byID, f.queue = map[string]*scheduled{}, nil
	f.mu.Unlock()
}

// follow is the leader's view of the schedules.
func (f *firer) follow() bus.Follow {
	return bus.Follow{
		Stream: f.s.names.EventsStream(), Filters: []string{f.s.names.ScheduleEvents()},
		List: f.list, Handle: f.onEvent,
		Failed: func(err error) { f.s.log.Warn("scheduler: listing the schedules failed; retrying", "err", err) },
	}
}

func (f *firer) list(ctx context.Context, _ uint64) error {
	f.reset()
	n := 0
	for token := ""; ; {
		var resp busv1.ListSchedulesResponse
		if err := bus.Request(ctx, f.s.nc, f.s.names.State(subjects.StateListSchedules),
			&busv1.ListSchedulesRequest{AnyOrg: true, PageSize: 1000, PageToken: token}, &resp); err != nil {
			return err
		}
		for _, sc := range resp.Schedules {
			f.put(sc)
			n++
		}
		if token = resp.NextPageToken; token == "" {
			break
		}
	}
	if n > 0 {
		f.s.log.Info("leader: schedules loaded", "schedules", n)
	}
	return nil
}

func (f *firer) onEvent(m jetstream.Msg) {
	var ev agentmeshv1.ScheduleEvent
	if err := bus.DecodeEvent(m.Data(), &ev); err != nil || ev.GetSchedule().GetId() == "" {
		f.s.log.Warn("malformed schedule event skipped", "subject", m.Subject(), "err", err)
		return
	}
	if ev.Action == "deleted" {
		f.drop(ev.Schedule.Id)
		return
	}
	f.put(ev.Schedule)
}

// run fires slots as they come due until term ends.
func (f *firer) run(term context.Context) {
	f.follow().Run(term, f.s.js, func(term context.Context) {
		defer f.reset()
		for {
			due, next := f.popDue(f.clock.Now())
			if len(due) > 0 {
				f.fire(term, due)
				continue
			}
			var wait <-chan time.Time
			if !next.IsZero() {
				wait = f.clock.After(next.Sub(f.clock.Now()))
			}
			select {
			case <-term.Done():
				return
			case <-f.kick:
			case <-wait:
			}
		}
	})
}

// fire plans the due schedules and fires their slots, one slot per
// schedule per round.
func (f *firer) fire(ctx context.Context, due []*scheduled) {
	now := f.clock.Now()
	plans := map[string][]*busv1.FireScheduleRequest{}
	matches := newMatchCache(f.s)
	var order []string
	for _, e := range due {
		reqs, later := f.plan(ctx, e, now, matches)
		if later {
			continue // planned again later
		}
		if len(reqs) == 0 {
			f.put(e.sc) // nothing due after all: plan its next slot
			continue
		}
		plans[e.sc.Id] = reqs
		order = append(order, e.sc.Id)
	}
	for round := 0; len(order) > 0; round++ {
		var batch []*busv1.FireScheduleRequest
		var next []string
		for _, id := range order {
			if round < len(plans[id]) {
				batch = append(batch, plans[id][round])
			}
			if round+1 < len(plans[id]) {
				next = append(next, id)
			}
		}
		f.send(ctx, batch, now)
		order = next
	}
}

// plan turns a schedule's due slots into fire requests: the missed ones
// recorded first, then each slot to fire with its run's task. later says
// the registry could not be asked: the schedule is planned again soon.
func (f *firer) plan(ctx context.Context, e *scheduled, now time.Time, matches *matchCache) (reqs []*busv1.FireScheduleRequest, later bool) {
	p := schedule.PlanDue(e.sc, e.spec, now)
	nextAfter := func(i int) *timestamppb.Timestamp {
		if i+1 < len(p.Fire) {
			return timestamppb.New(p.Fire[i+1])
		}
		if p.Next.IsZero() {
			return nil
		}
		return timestamppb.New(p.Next)
	}
	if p.Missed > 0 {
		r := &busv1.FireScheduleRequest{ScheduleId: e.sc.Id, Org: e.sc.Org, Slot: timestamppb.New(p.MissedThrough), Missed: p.Missed}
		if len(p.Fire) > 0 {
			r.NextRunAt = timestamppb.New(p.Fire[0])
		} else {
			r.NextRunAt = nextAfter(len(p.Fire))
		}
		reqs = append(reqs, r)
	}
	if len(p.Fire) == 0 {
		return reqs, false
	}
	agent, routing, failure := matches.match(ctx, e.sc)
	if agent == nil && failure == "" {
		// The registry did not answer: fire later.
		f.retryLater(e.sc.Id, now.Add(refireAfter))
		return nil, true
	}
	for i, slot := range p.Fire {
		r := &busv1.FireScheduleRequest{ScheduleId: e.sc.Id, Org: e.sc.Org, Slot: timestamppb.New(slot), NextRunAt: nextAfter(i)}
		if agent != nil {
			r.Task = schedule.RunTask(e.sc, agent, routing)
		} else {
			r.Failure = failure
		}
		reqs = append(reqs, r)
	}
	return reqs, false
}

// send fires a round in requests of at most firesPerRequest slots,
// fireRequests at once, and applies the answers.
func (f *firer) send(ctx context.Context, batch []*busv1.FireScheduleRequest, now time.Time) {
	var chunks [][]*busv1.FireScheduleRequest
	size := 0
	for _, r := range batch {
		n := proto.Size(r)
		if len(chunks) == 0 || len(chunks[len(chunks)-1]) == firesPerRequest || size+n > firesBytes {
			chunks = append(chunks, nil)
			size = 0
		}
		chunks[len(chunks)-1] = append(chunks[len(chunks)-1], r)
		size += n
	}
	sem := make(chan struct{}, fireRequests)
	var wg sync.WaitGroup
	for _, c := range chunks {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			f.sendChunk(ctx, c, now)
		})
	}
	wg.Wait()
}

func (f *firer) sendChunk(ctx context.Context, c []*busv1.FireScheduleRequest, now time.Time) {
	var resp busv1.FireSchedulesResponse
	err := bus.Request(ctx, f.s.nc, f.s.names.State(subjects.StateFireSchedules), &busv1.FireSchedulesRequest{Fires: c}, &resp)
	if err != nil || len(resp.Results) != len(c) {
		f.s.log.Warn("scheduler: slots not fired; trying again", "slots", len(c), "err", err)
		for _, r := range c {
			f.retryLater(r.ScheduleId, now.Add(refireAfter))
		}
		return
	}
	for i, res := range resp.Results {
		f.apply(c[i], res, now)
	}
}

// apply moves a schedule on by state's answer to one of its slots.
func (f *firer) apply(req *busv1.FireScheduleRequest, res *busv1.FireScheduleResult, now time.Time) {
	if res.Error == nil {
		f.put(res.Response.Schedule)
		return
	}
	err := bus.FromProto(res.Error)
	switch {
	case errors.Is(err, bus.ErrNotFound):
		f.drop(req.ScheduleId) // deleted meanwhile
	case errors.Is(err, bus.ErrFailedPrecondition):
		// Paused meanwhile: its event brings the schedule as it is.
	default:
		f.s.log.Warn("scheduler: slot not fired; trying again", "schedule", req.ScheduleId, "slot", req.Slot.AsTime(), "err", err)
		f.retryLater(req.ScheduleId, now.Add(refireAfter))
	}
}

// matchCache matches each template's agent once per firing: many
// schedules of an org naming one agent cost one registry request.
type matchCache struct {
	s    *Service
	mu   sync.Mutex
	seen map[string]matched
}

type matched struct {
	agent   *agentmeshv1.Agent
	routing *agentmeshv1.Routing
	failure string
}

func newMatchCache(s *Service) *matchCache { return &matchCache{s: s, seen: map[string]matched{}} }

// match returns the agent of sc's runs, or why there is none (failure),
// or neither when the registry could not be asked.
func (mc *matchCache) match(ctx context.Context, sc *agentmeshv1.Schedule) (*agentmeshv1.Agent, *agentmeshv1.Routing, string) {
	tpl := sc.GetTemplate()
	key := sc.Org + "\x00" + tpl.GetAgent()
	for _, sk := range tpl.GetRequiredSkills() {
		key += "\x00" + sk
	}
	if tpl.GetAgent() == "" {
		key += "\x00" + tpl.GetInput() // analysis may pick by the input
	}
	mc.mu.Lock()
	m, ok := mc.seen[key]
	mc.mu.Unlock()
	if ok {
		return m.agent, m.routing, m.failure
	}
	var resp busv1.MatchResponse
	err := bus.Request(ctx, mc.s.nc, mc.s.names.Registry(subjects.RegistryMatch), &busv1.MatchRequest{
		Agent: tpl.GetAgent(), RequiredSkills: tpl.GetRequiredSkills(), Org: sc.Org, Limit: 10, Input: tpl.GetInput(),
	}, &resp)
	switch {
	case err == nil && resp.GetAgent().GetName() != "":
		m = matched{agent: resp.Agent, routing: resp.Routing}
	case err == nil, errors.Is(err, bus.ErrNotFound), errors.Is(err, bus.ErrFailedPrecondition), errors.Is(err, bus.ErrInvalidArgument):
		m = matched{failure: "no agent for the template: " + errText(err, tpl)}
	default:
		mc.s.log.Warn("scheduler: matching a schedule's agent failed", "schedule", sc.Id, "err", err)
		return nil, nil, ""
	}
	mc.mu.Lock()
	mc.seen[key] = m
	mc.mu.Unlock()
	return m.agent, m.routing, m.failure
}

func errText(err error, tpl *agentmeshv1.TaskTemplate) string {
	if err != nil {
		return err.Error()
	}
	if tpl.GetAgent() != "" {
		return "agent " + tpl.GetAgent() + " not found"
	}
	return "no agent offers the required skills"
}
