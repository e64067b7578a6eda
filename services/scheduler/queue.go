package scheduler

import (
	"container/heap"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"go.opentelemetry.io/otel/trace"
)

// The queue model is the leader's in-memory picture of the work that holds
// or waits for capacity: one small entry per queued, assigned or running
// task (ids and keys, never whole tasks), rebuilt from the record when the
// leader starts and kept current by the task events. It decides what runs
// next:
//
//   - Capacity: a task is dispatched only while its agent runs fewer than
//     its max_concurrency, its org fewer than its org limit, and the live
//     executors have a free slot (capacity − running per node, minus work
//     dispatched but not yet started).
//   - Fairness between orgs: among the orgs with dispatchable work, the one
//     running the fewest tasks goes first; ties go to the org served least
//     recently (round robin). A flood from one org therefore takes at most
//     its share of the free slots.
//   - Priority within an org: the highest effective priority goes first,
//     FIFO within a level. Effective priority = level + wait / Aging (one
//     level per Aging of waiting, 1 minute by default), so a backlog task
//     overtakes fresh critical work after 4 minutes of waiting: nothing
//     starves under a steady stream of higher work.
//
// The model is not safe for concurrent use; the Service guards it.

type entryState uint8

const (
	stWaiting     entryState = iota + 1 // queued, eligible, in a FIFO
	stDelayed                           // queued for a retry, before its not-before time
	stExpiring                          // queued past its queue timeout, being failed
	stDispatching                       // picked, queued → assigned under way
	stAssigned
	stRunning
)

// holdsSlot reports whether a task in state s counts against capacity.
func (s entryState) holdsSlot() bool {
	return s == stDispatching || s == stAssigned || s == stRunning
}

type entry struct {
	id        string
	org       string
	agent     string
	prio      agentmeshv1.Priority
	state     entryState
	node      string // running: the executor node
	attempt   int32
	seq       int64     // last event applied
	since     time.Time // queued: when it became eligible
	notBefore time.Time
	timeout   time.Duration // queue timeout (0 = none)
	gen       uint64        // grows on every (re)queue; stale FIFO and timer items carry an older one
	// queued: when it last entered queued; trace: the task's trace, which
	// its queue wait and dispatch continue (tracing.go).
	queued time.Time
	trace  trace.SpanContext
}

type qitem struct {
	e   *entry
	gen uint64
}

func (q qitem) live() bool { return q.e.gen == q.gen && q.e.state == stWaiting }

// fifo is a queue of entries; removed entries are skipped lazily.
type fifo struct {
	items []qitem
	head  int
}

func (f *fifo) push(e *entry) { f.items = append(f.items, qitem{e, e.gen}) }

func (f *fifo) peek() *entry {
	for f.head < len(f.items) {
		if it := f.items[f.head]; it.live() {
			return it.e
		}
		f.items[f.head] = qitem{}
		f.head++
	}
	f.items, f.head = f.items[:0], 0
	return nil
}

func (f *fifo) compact() {
	if f.head > 1024 && f.head*2 > len(f.items) {
		n := copy(f.items, f.items[f.head:])
		clear(f.items[n:])
		f.items, f.head = f.items[:n], 0
	}
}

const levels = int(agentmeshv1.Priority_PRIORITY_CRITICAL) + 1

// agentQ holds one org's waiting tasks of one agent, a FIFO per priority.
type agentQ struct {
	agent   *agentInfo
	org     *orgInfo
	levels  [levels]fifo
	waiting int
}

type agentInfo struct {
	name    string
	running int
	limit   int // 0 = no limit; -1 = not known yet (its tasks wait)
}

func (a *agentInfo) full() bool { return a.limit > 0 && a.running >= a.limit }

type orgInfo struct {
	name       string
	running    int
	waiting    int
	queues     map[string]*agentQ
	lastServed uint64
}

type nodeInfo struct {
	name     string
	capacity int
	running  int // tasks of the model running there
	draining bool
	labels   map[string]string
	lastSeen time.Time
	ttl      time.Duration
	lost     bool
}

func (n *nodeInfo) placeable() bool { return !n.lost && !n.draining }

// timer kinds.
const (
	timerRetry   = 1 // a delayed entry becomes eligible
	timerTimeout = 2 // a waiting entry passes its queue timeout
)

type timerItem struct {
	at   time.Time
	e    *entry
	gen  uint64
	kind int
}

type timerHeap []timerItem

func (h timerHeap) Len() int           { return len(h) }
func (h timerHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h timerHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *timerHeap) Push(x any)        { *h = append(*h, x.(timerItem)) }
func (h *timerHeap) Pop() any {
	old := *h
	it := old[len(old)-1]
	old[len(old)-1] = timerItem{}
	*h = old[:len(old)-1]
	return it
}

type model struct {
	tasks  map[string]*entry
	orgs   map[string]*orgInfo
	agents map[string]*agentInfo
	nodes  map[string]*nodeInfo
	// unplaced counts tasks dispatching or assigned (no node yet).
	unplaced int
	timers   timerHeap
	served   uint64

	aging    time.Duration
	orgLimit func(org string) int
	// agentLimit is asked for an agent the model has not seen yet.
	agentLimit func(agent string) int
}

func newModel(aging time.Duration, orgLimit, agentLimit func(string) int) *model {
	return &model{
		tasks: map[string]*entry{}, orgs: map[string]*orgInfo{}, agents: map[string]*agentInfo{}, nodes: map[string]*nodeInfo{},
		aging: aging, orgLimit: orgLimit, agentLimit: agentLimit,
	}
}

// reset forgets the tasks (nodes stay: they are learned from heartbeats).
func (m *model) reset() {
	m.tasks = map[string]*entry{}
	m.orgs = map[string]*orgInfo{}
	for _, a := range m.agents {
		a.running = 0
	}
	for _, n := range m.nodes {
		n.running = 0
	}
	m.unplaced = 0
	m.timers = nil
}

func (m *model) agent(name string) *agentInfo {
	a := m.agents[name]
	if a == nil {
		a = &agentInfo{name: name, limit: m.agentLimit(name)}
		m.agents[name] = a
	}
	return a
}

func (m *model) org(name string) *orgInfo {
	o := m.orgs[name]
	if o == nil {
		o = &orgInfo{name: name, queues: map[string]*agentQ{}}
		m.orgs[name] = o
	}
	return o
}

func (m *model) queue(e *entry) *agentQ {
	o := m.org(e.org)
	q := o.queues[e.agent]
	if q == nil {
		q = &agentQ{agent: m.agent(e.agent), org: o}
		o.queues[e.agent] = q
	}
	return q
}

// setState moves e to state s, keeping every counter right. It is the only
// place counters change.
func (m *model) setState(e *entry, s entryState, node string) {
	old := e.state
	if old == stWaiting {
		q := m.queue(e)
		q.waiting--
		q.org.waiting--
		e.gen++ // its FIFO item goes stale
	}
	if old.holdsSlot() {
		m.agent(e.agent).running--
		m.org(e.org).running--
		if old == stRunning && e.node != "" {
			if n := m.nodes[e.node]; n != nil {
				n.running--
			}
		} else {
			m.unplaced--
		}
	}
	e.state, e.node = s, node
	if s.holdsSlot() {
		m.agent(e.agent).running++
		m.org(e.org).running++
		if s == stRunning && node != "" {
			m.node(node).running++
		} else {
			m.unplaced++
		}
	}
	if s == stWaiting {
		e.gen++
		q := m.queue(e)
		q.levels[level(e.prio)].push(e)
		q.waiting++
		q.org.waiting++
		if e.timeout > 0 {
			heap.Push(&m.timers, timerItem{at: e.since.Add(e.timeout), e: e, gen: e.gen, kind: timerTimeout})
		}
	}
	if s == stDelayed {
		e.gen++
		heap.Push(&m.timers, timerItem{at: e.notBefore, e: e, gen: e.gen, kind: timerRetry})
	}
}

func (m *model) node(name string) *nodeInfo {
	n := m.nodes[name]
	if n == nil {
		n = &nodeInfo{name: name, lost: true} // not heard from yet
		m.nodes[name] = n
	}
	return n
}

func level(p agentmeshv1.Priority) int {
	if p <= agentmeshv1.Priority_PRIORITY_UNSPECIFIED || int(p) >= levels {
		return int(agentmeshv1.Priority_PRIORITY_NORMAL)
	}
	return int(p)
}

// remove forgets e (it finished, or is blocked).
func (m *model) remove(e *entry) {
	if e == nil {
		return
	}
	m.setState(e, 0, "")
	e.gen++
	delete(m.tasks, e.id)
}

// update is what an event (or a task read from the record) says about a
// task.
type update struct {
	id, org, agent string
	prio           agentmeshv1.Priority
	status         agentmeshv1.TaskStatus
	seq            int64
	attempt        int32
	node           string
	at             time.Time // when the task entered this status
	notBefore      time.Time
	timeout        time.Duration
	trace          trace.SpanContext // the task's trace (zero: none known)
}

func updateFromEvent(ev *agentmeshv1.TaskEvent) update {
	return update{
		id: ev.TaskId, org: ev.Org, agent: taskstate.AgentKey(ev.AgentOrg, ev.Agent), prio: ev.Priority, status: ev.Status, seq: ev.Seq,
		attempt: ev.Attempt, node: ev.Node, at: ev.Time.AsTime(), notBefore: asTime(ev.NotBefore),
		timeout: ev.QueueTimeout.AsDuration(),
	}
}

func updateFromTask(t *agentmeshv1.Task) update {
	return update{
		id: t.Id, org: t.Org, agent: taskstate.AgentKey(t.GetAgentSpec().GetOrg(), t.Agent), prio: t.Priority, status: t.Status, seq: t.LastEventSeq,
		attempt: t.Attempt, node: t.Node, at: t.UpdatedAt.AsTime(), notBefore: asTime(t.NextRetryAt),
		timeout: taskstate.EffectiveQueueTimeout(t), trace: taskTrace(t),
	}
}

// apply folds u into the model. It reports whether capacity was freed or
// work became eligible (the dispatcher should look again).
func (m *model) apply(u update, now time.Time) (changed bool) {
	e := m.tasks[u.id]
	if e != nil && u.seq <= e.seq {
		return false // already applied (a replay, or our own dispatch's reply)
	}
	switch u.status {
	case taskstate.Queued:
		if e == nil {
			if u.agent == "" {
				return false // an event from before agents were stamped; reconcile finds the task
			}
			e = &entry{id: u.id, org: u.org, agent: u.agent, prio: u.prio}
			m.tasks[u.id] = e
		}
		e.seq, e.attempt, e.prio, e.timeout = u.seq, u.attempt, u.prio, u.timeout
		e.since, e.notBefore, e.queued = u.at, u.notBefore, u.at
		if u.trace.IsValid() {
			e.trace = u.trace
		}
		if e.notBefore.After(e.since) {
			e.since = e.notBefore // the queue timeout runs from eligibility
		}
		if e.notBefore.After(now) {
			m.setState(e, stDelayed, "")
		} else {
			m.setState(e, stWaiting, "")
		}
		return true
	case taskstate.Assigned, taskstate.Running:
		if e == nil {
			if u.agent == "" {
				return false
			}
			e = &entry{id: u.id, org: u.org, agent: u.agent, prio: u.prio}
			m.tasks[u.id] = e
		}
		e.seq, e.attempt = u.seq, u.attempt
		if u.status == taskstate.Running && u.node != "" {
			m.setState(e, stRunning, u.node)
		} else {
			m.setState(e, stAssigned, "")
		}
		return false
	case taskstate.Blocked, taskstate.Completed, taskstate.Failed, taskstate.Cancelled:
		if e == nil {
			return false
		}
		m.remove(e)
		return true
	}
	return false
}

// freeSlots is how many more tasks the live executors can take.
func (m *model) freeSlots() int {
	free := 0
	for _, n := range m.nodes {
		if n.placeable() && n.capacity > n.running {
			free += n.capacity - n.running
		}
	}
	return free - m.unplaced
}

// effective is e's priority with aging, in units of levels.
func (m *model) effective(e *entry, now time.Time) float64 {
	p := float64(level(e.prio))
	if m.aging > 0 {
		p += float64(now.Sub(e.since)) / float64(m.aging)
	}
	return p
}

// next picks the task to dispatch now and marks it dispatching, or returns
// nil when nothing can run.
func (m *model) next(now time.Time) *entry {
	if m.freeSlots() <= 0 {
		return nil
	}
	var best *orgInfo
	var bestE *entry
	for _, o := range m.orgs {
		if o.waiting == 0 {
			continue
		}
		if l := m.orgLimit(o.name); l > 0 && o.running >= l {
			continue
		}
		if best != nil && (o.running > best.running || (o.running == best.running && o.lastServed >= best.lastServed)) {
			continue
		}
		if e := m.bestOf(o, now); e != nil {
			best, bestE = o, e
		}
	}
	if bestE == nil {
		return nil
	}
	m.served++
	best.lastServed = m.served
	m.setState(bestE, stDispatching, "")
	return bestE
}

// bestOf returns the org's highest effective-priority waiting task whose
// agent has room.
func (m *model) bestOf(o *orgInfo, now time.Time) *entry {
	var bq *agentQ
	var be *entry
	var bp float64
	for _, q := range o.queues {
		if q.waiting == 0 || q.agent.full() || q.agent.limit < 0 {
			continue
		}
		for l := range q.levels {
			e := q.levels[l].peek()
			if e == nil {
				continue
			}
			p := m.effective(e, now)
			if be == nil || p > bp || (p == bp && e.since.Before(be.since)) {
				bq, be, bp = q, e, p
			}
		}
	}
	if bq != nil {
		bq.levels[level(be.prio)].compact()
	}
	return be
}

// requeue puts a picked task back (its dispatch failed for a passing
// reason).
func (m *model) requeue(e *entry) {
	if e.state == stDispatching || e.state == stExpiring {
		m.setState(e, stWaiting, "")
	}
}

// due pops the timers that are due and returns the entries whose queue
// timeout passed (now expiring). Delayed entries that became eligible are
// queued.
func (m *model) due(now time.Time) (expired []*entry) {
	for len(m.timers) > 0 && !m.timers[0].at.After(now) {
		it := heap.Pop(&m.timers).(timerItem)
		if it.e.gen != it.gen {
			continue
		}
		switch {
		case it.kind == timerRetry && it.e.state == stDelayed:
			m.setState(it.e, stWaiting, "")
		case it.kind == timerTimeout && it.e.state == stWaiting:
			m.setState(it.e, stExpiring, "")
			expired = append(expired, it.e)
		}
	}
	return expired
}

// nextTimer is when the earliest timer is due (zero: none).
func (m *model) nextTimer() time.Time {
	for len(m.timers) > 0 {
		if it := m.timers[0]; it.e.gen == it.gen {
			return it.at
		}
		heap.Pop(&m.timers)
	}
	return time.Time{}
}

// heartbeat records an executor's heartbeat. It reports whether placement
// capacity changed.
// Six parameters: the heartbeat's fields as the model keeps them, from its one caller.
func (m *model) heartbeat(name string, capacity int, draining bool, labels map[string]string, ttl time.Duration, now time.Time) bool {
	n := m.node(name)
	changed := n.lost || n.capacity != capacity || n.draining != draining
	n.capacity, n.draining, n.labels, n.ttl, n.lastSeen, n.lost = capacity, draining, labels, ttl, now, false
	return changed
}

// lostNodes marks the nodes silent past their ttl as lost and returns the
// tasks that run there. A node never heard from counts as lost once the
// leader has waited grace. No node's silence counts from before heard,
// when the scheduler could hear again (its connection came back).
func (m *model) lostNodes(now, silentSince, heard time.Time, defaultTTL time.Duration) (lost []string, orphans []*entry) {
	for _, n := range m.nodes {
		ttl := n.ttl
		if ttl <= 0 {
			ttl = defaultTTL
		}
		last := n.lastSeen
		if last.IsZero() {
			last = silentSince
		}
		if last.Before(heard) {
			last = heard
		}
		if !n.lost && now.Sub(last) > ttl {
			n.lost = true
			lost = append(lost, n.name)
		}
	}
	for _, e := range m.tasks {
		if e.state != stRunning || e.node == "" {
			continue
		}
		n := m.nodes[e.node]
		if n != nil && n.lost {
			last := n.lastSeen
			if last.IsZero() {
				last = silentSince
			}
			if last.Before(heard) {
				last = heard
			}
			ttl := n.ttl
			if ttl <= 0 {
				ttl = defaultTTL
			}
			if now.Sub(last) > ttl {
				orphans = append(orphans, e)
			}
		}
	}
	return lost, orphans
}

func asTime(ts interface{ AsTime() time.Time }) time.Time {
	if ts == nil {
		return time.Time{}
	}
	t := ts.AsTime()
	if t.Unix() == 0 {
		return time.Time{}
	}
	return t
}

// reprioritize moves a task to another priority level; a waiting task is
// queued again at the tail of its new level (its wait, and so its aging,
// is kept). For UpdateTask's priority change.
func (m *model) reprioritize(id string, p agentmeshv1.Priority) bool {
	e := m.tasks[id]
	if e == nil {
		return false
	}
	e.prio = p
	if e.state == stWaiting {
		m.setState(e, stWaiting, "")
	}
	return true
}
