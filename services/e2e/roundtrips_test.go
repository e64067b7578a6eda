package e2e

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	busv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/bus/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/poll"
	"github.com/agentmesh/agentmesh/pkg/subjects"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// busCounts is what one task cost the bus: the state and registry requests
// (by operation, from the audit stream: every request a state or registry
// service answered is recorded there, several records to a stored batch)
// and the JetStream publishes (messages added to each stream; for the audit
// stream, the batches).
type busCounts struct {
	requests   map[string]int // "state.task.step" → n
	publishes  map[string]int // stream → messages added
	completed  int
	totalReqs  int
	totalPubs  int
	stateWrite int // requests that change a task (create, intents, steps)
}

// auditTally reads the audit stream as it grows: the records by operation
// and the batches they came in, since the start.
type auditTally struct {
	names   subjects.Names
	seq     uint64
	records map[string]int
	batches int
}

func (a *auditTally) read(t testing.TB, ctx context.Context, js jetstream.JetStream) {
	t.Helper()
	if a.records == nil {
		a.records = map[string]int{}
	}
	var last uint64
	seq, err := bus.ReadAudit(ctx, js, a.names.AuditStream(), a.seq, func(seq uint64, rec *busv1.AuditRecord) error {
		if seq != last {
			a.batches, last = a.batches+1, seq
		}
		a.records[strings.TrimPrefix(rec.Subject, "am.")]++
		return nil
	})
	if err != nil {
		t.Fatalf("audit stream: %v", err)
	}
	a.seq = seq
}

func snapshotBus(t testing.TB, js jetstream.JetStream, audit *auditTally, streams []string) busCounts {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := busCounts{requests: map[string]int{}, publishes: map[string]int{}}
	audit.read(t, ctx, js)
	maps.Copy(c.requests, audit.records)
	c.publishes[audit.names.AuditStream()] = audit.batches
	c.completed = c.requests["state."+subjects.StateComplete]
	for _, name := range streams {
		s, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatalf("stream %s: %v", name, err)
		}
		info, err := s.Info(ctx)
		if err != nil {
			t.Fatalf("stream %s info: %v", name, err)
		}
		c.publishes[name] = int(info.State.LastSeq)
	}
	return c
}

func (c busCounts) minus(b busCounts) busCounts {
	d := busCounts{requests: map[string]int{}, publishes: map[string]int{}}
	for k, v := range c.requests {
		if n := v - b.requests[k]; n != 0 {
			d.requests[k] = n
			d.totalReqs += n
			if isStateWrite(k) {
				d.stateWrite += n
			}
		}
	}
	for k, v := range c.publishes {
		if n := v - b.publishes[k]; n != 0 {
			d.publishes[k] = n
			d.totalPubs += n
		}
	}
	d.completed = c.completed - b.completed
	return d
}

func isStateWrite(op string) bool {
	switch strings.TrimPrefix(op, "state.") {
	case subjects.StateCreateTask, subjects.StateAppendStep, subjects.StateDispatch, subjects.StateStart,
		subjects.StateComplete, subjects.StateFail, subjects.StateRequeue:
		return true
	}
	return false
}

func (c busCounts) String() string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(c.requests)) {
		fmt.Fprintf(&b, "  request %-28s %d\n", k, c.requests[k])
	}
	for _, k := range slices.Sorted(maps.Keys(c.publishes)) {
		fmt.Fprintf(&b, "  publish %-28s %d\n", k, c.publishes[k])
	}
	fmt.Fprintf(&b, "  total: %d requests, %d JetStream publishes", c.totalReqs, c.totalPubs)
	return b.String()
}

// TestE2ERoundTripsPerTask counts the bus round trips of one task at
// concurrency 1 (the scripted model: a tool call, then a final answer),
// submitted without watching or polling it, so only the hot path is
// counted. It fails when a round trip comes back that the hot path does not
// need: a read of the task or of its history by the executor or the
// scheduler, or more than one state request per transition and per step.
func TestE2ERoundTripsPerTask(t *testing.T) {
	stores(t, roundTripsPerTask)
}

func roundTripsPerTask(t *testing.T, o opts) {
	o.quickAnswers = true
	e := start(t, o)
	e.createAgent(t, "rt")
	names := subjects.Must("")
	js, err := jetstream.New(dialAdmin(t, e))
	if err != nil {
		t.Fatal(err)
	}
	embedded := o.postgres == ""
	streams := []string{names.EventsStream(), names.WorkStream()}
	if embedded {
		streams = append(streams, names.StoreHistoryStream(), "KV_"+names.StoreBucket("tasks"))
	}

	var (
		last  busCounts
		id    string
		audit = &auditTally{names: names}
	)
	runOne := func(input string) busCounts {
		before := snapshotBus(t, js, audit, streams)
		resp, err := e.tasks.SubmitTask(ctxT(t), &agentmeshv1.SubmitTaskRequest{Agent: "rt", Input: input})
		if err != nil {
			t.Fatalf("submit: %v", err)
		}
		id = resp.Task.Id
		last = busCounts{}
		poll.Until(t, time.Minute, func() error {
			now := snapshotBus(t, js, audit, streams)
			d := now.minus(before)
			if d.completed < 1 {
				return fmt.Errorf("not completed yet")
			}
			// Settled: nothing more moved since the last look.
			if last.requests == nil || d.totalReqs != last.totalReqs || d.totalPubs != last.totalPubs {
				last = d
				return fmt.Errorf("still moving")
			}
			return nil
		})
		return last
	}
	runOne("warm up") // the first task of a fresh stack reads caches in
	d := runOne("count me")
	t.Logf("bus round trips of one task at concurrency 1:\n%s", d)
	t.Logf("where its time went (from its events' times):\n%s", phases(t, e, id))

	want := map[string]int{ // the state requests the invariants need
		"state." + subjects.StateCreateTask: 1,
		"state." + subjects.StateDispatch:   1,
		"state." + subjects.StateStart:      1,
		// The script's first model turn with its tool call, and the call's
		// result; the answer's turn goes with the completion.
		"state." + subjects.StateAppendStep: 2,
		"state." + subjects.StateComplete:   1,
	}
	for op, n := range want {
		if d.requests[op] > n {
			t.Errorf("%s: %d requests for one task, want at most %d", op, d.requests[op], n)
		}
	}
	// The embedded store's history: created with queued, assigned,
	// running, the two checkpoints, the answer with the completion.
	if n := d.publishes[names.StoreHistoryStream()]; embedded && n > 6 {
		t.Errorf("%d history records for one task, want at most 6 (events of one write in one record)", n)
	}
	if n := d.requests["state."+subjects.StateGetAgent]; n > 0 {
		t.Errorf("the named agent was read %d times for the second task; want 0 (the registry caches it)", n)
	}
	if n := d.requests["state."+subjects.StateGetTask]; n > 0 {
		t.Errorf("the task was read %d times on its hot path (nobody watched or polled it); want 0", n)
	}
	// Nothing follows this task (no parent, sub-tasks or dependents): the
	// scheduler neither settles its end nor lists its dependents. (The
	// embedded store knows as the bus's sole writer; Postgres asks in the
	// end's own round trip.)
	for _, op := range []string{subjects.StateListTasks, subjects.StateSettleTask} {
		if n := d.requests["state."+op]; n > 0 {
			t.Errorf("state.%s: %d requests after the end of a task nothing follows; want 0", op, n)
		}
	}
	if n := d.requests["state."+subjects.StateHistory]; n > 0 {
		t.Errorf("the history of a first attempt was read %d times; want 0 (there is nothing before it)", n)
	}
}

// dialAdmin connects as the operator does to read the audit stream
// (busauth.AdminCredsFile: allowed everything); no service identity may
// read it.
func dialAdmin(t testing.TB, e *env) *nats.Conn {
	t.Helper()
	creds, err := e.stack.Auth().UserCreds("agentmesh-admin", subjects.Permission{Pub: []string{">"}, Sub: []string{">"}, Responses: true}, 0)
	if err != nil {
		t.Fatal(err)
	}
	c, err := dial(t, e.stack.NATSURL(), creds, "")
	if err != nil {
		t.Fatalf("connect as the operator: %v", err)
	}
	return c.nc
}

// phases lists the time between a task's consecutive events.
func phases(t *testing.T, e *env, id string) string {
	t.Helper()
	h, err := e.tasks.GetTaskHistory(ctxT(t), &agentmeshv1.GetTaskHistoryRequest{Id: id})
	if err != nil {
		t.Fatalf("history: %v", err)
	}
	var b strings.Builder
	evs := h.GetEvents()
	for i, ev := range evs {
		what := ev.Type.String()
		if ev.Step != nil {
			what += " " + ev.Step.Kind.String()
		} else if ev.Type == agentmeshv1.EventType_EVENT_TYPE_STATUS {
			what += " " + ev.Status.String()
		}
		gap := time.Duration(0)
		if i > 0 {
			gap = ev.Time.AsTime().Sub(evs[i-1].Time.AsTime())
		}
		fmt.Fprintf(&b, "  +%-10v %s\n", gap.Round(10*time.Microsecond), what)
	}
	if n := len(evs); n > 1 {
		fmt.Fprintf(&b, "  total %v from created to the last event", evs[n-1].Time.AsTime().Sub(evs[0].Time.AsTime()).Round(10*time.Microsecond))
	}
	return b.String()
}
