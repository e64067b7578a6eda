package e2e

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/poll"
	"github.com/agentmesh/agentmesh/pkg/subjects"
	"github.com/nats-io/nats.go/jetstream"
)

// busCounts is what one task cost the bus: the state and registry requests
// (by operation, from the audit stream: every request a state or registry
// service answered is recorded there) and the JetStream publishes (messages
// added to each stream).
type busCounts struct {
	requests   map[string]int // "state.task.step" → n
	publishes  map[string]int // stream → messages added
	completed  int
	totalReqs  int
	totalPubs  int
	stateWrite int // requests that change a task (create, intents, steps)
}

func snapshotBus(t *testing.T, js jetstream.JetStream, names subjects.Names, streams []string) busCounts {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := busCounts{requests: map[string]int{}, publishes: map[string]int{}}
	st, err := js.Stream(ctx, names.AuditStream())
	if err != nil {
		t.Fatalf("audit stream: %v", err)
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(names.AuditAll()))
	if err != nil {
		t.Fatalf("audit stream info: %v", err)
	}
	for subj, n := range info.State.Subjects {
		op := strings.TrimPrefix(subj, "am.audit.")
		c.requests[op] = int(n)
	}
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
	e := start(t, opts{})
	e.createAgent(t, "rt")
	names := subjects.Must("")
	js, err := jetstream.New(dialAs(t, e, subjects.ServiceState).nc)
	if err != nil {
		t.Fatal(err)
	}
	streams := []string{names.EventsStream(), names.WorkStream(), names.StoreHistoryStream(), "KV_" + names.StoreBucket("tasks")}

	runOne := func(input string) busCounts {
		before := snapshotBus(t, js, names, streams)
		if _, err := e.tasks.SubmitTask(ctxT(t), &agentmeshv1.SubmitTaskRequest{Agent: "rt", Input: input}); err != nil {
			t.Fatalf("submit: %v", err)
		}
		var last busCounts
		poll.Until(t, time.Minute, func() error {
			now := snapshotBus(t, js, names, streams)
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

	want := map[string]int{ // the state requests the invariants need
		"state." + subjects.StateCreateTask: 1,
		"state." + subjects.StateDispatch:   1,
		"state." + subjects.StateStart:      1,
		"state." + subjects.StateAppendStep: 4, // the script's two model turns and the tool call's two steps
		"state." + subjects.StateComplete:   1,
	}
	for op, n := range want {
		if d.requests[op] > n {
			t.Errorf("%s: %d requests for one task, want at most %d", op, d.requests[op], n)
		}
	}
	if n := d.requests["state."+subjects.StateGetTask]; n > 0 {
		t.Errorf("the task was read %d times on its hot path (nobody watched or polled it); want 0", n)
	}
	if n := d.requests["state."+subjects.StateHistory]; n > 0 {
		t.Errorf("the history of a first attempt was read %d times; want 0 (there is nothing before it)", n)
	}
}
