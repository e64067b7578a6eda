package state_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	busv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/bus/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/natstest"
	"github.com/agentmesh/agentmesh/pkg/poll"
	"github.com/agentmesh/agentmesh/pkg/subjects"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"github.com/nats-io/nats.go"
)

// A stolen executor credential cannot publish into an org's live
// subjects: the server refuses its publish on <p>.live.>, and state's relay
// carries what executors publish on <p>.token.> only for a task that runs
// in the org named, under the attempt named.
func TestLiveTokensOnlyThroughTheRelay(t *testing.T) {
	srv := natstest.Start(t)
	stateNC := natstest.ConnectAs(t, srv, subjects.ServiceState)
	r := startService(t, stateNC, natstest.Connect(t, srv), openKV(t, stateNC))
	var violations []string
	var mu sync.Mutex
	creds, err := srv.Auth().Creds(subjects.ServiceExecutor)
	if err != nil {
		t.Fatal(err)
	}
	exec := natstest.ConnectCreds(t, srv, creds, subjects.ServiceExecutor,
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			mu.Lock()
			violations = append(violations, err.Error())
			mu.Unlock()
		}))

	// acme's task runs (attempt 1); another of its tasks only waits.
	running := mustCall(t, r.nc, subjects.StateCreateTask, newTask("acme"), &busv1.CreateTaskResponse{}).Task
	mustCall(t, r.nc, subjects.StateDispatch, &busv1.TransitionRequest{TaskId: running.Id, From: taskstate.Queued, To: taskstate.Assigned, NextAttempt: true}, &busv1.TransitionResponse{})
	mustCall(t, r.nc, subjects.StateStart, &busv1.TransitionRequest{TaskId: running.Id, From: taskstate.Assigned, To: taskstate.Running, Attempt: 1, Node: "n1"}, &busv1.TransitionResponse{})
	queued := mustCall(t, r.nc, subjects.StateCreateTask, newTask("acme"), &busv1.CreateTaskResponse{}).Task

	var seen []string
	sub, err := r.nc.Subscribe(names.LiveAll(), func(m *nats.Msg) {
		var ev agentmeshv1.TaskEvent
		_ = bus.DecodeEvent(m.Data, &ev)
		mu.Lock()
		seen = append(seen, m.Subject+" "+ev.Token)
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := r.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	publish := func(subject, org, task string, attempt int32, text string) {
		t.Helper()
		msg, err := bus.NewEventMsg(t.Context(), subject, &agentmeshv1.TaskEvent{
			TaskId: task, Org: org, Type: agentmeshv1.EventType_EVENT_TYPE_TOKEN, Attempt: attempt, Token: text,
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := exec.PublishMsg(msg); err != nil {
			t.Fatal(err)
		}
	}
	publish(names.TaskTokens("acme", running.Id), "acme", running.Id, 1, "relayed")
	// Straight into another org's live subject: refused by the server.
	publish(names.LiveTokens("globex", running.Id), "globex", running.Id, 1, "forged-direct")
	publish(names.LiveTokens("acme", running.Id), "acme", running.Id, 1, "forged-own")
	// Through the relay with the wrong org, attempt or a task not running.
	publish(names.TaskTokens("globex", running.Id), "globex", running.Id, 1, "forged-org")
	publish(names.TaskTokens("acme", running.Id), "acme", running.Id, 2, "forged-attempt")
	publish(names.TaskTokens("acme", queued.Id), "acme", queued.Id, 1, "forged-queued")
	publish(names.TaskTokens("acme", "01NOSUCHTASK0000000000000"), "acme", "01NOSUCHTASK0000000000000", 1, "forged-unknown")
	publish(names.TaskTokens("acme", running.Id), "acme", running.Id, 1, "end")
	if err := exec.Flush(); err != nil {
		t.Fatal(err)
	}
	want := []string{
		names.LiveTokens("acme", running.Id) + " relayed",
		names.LiveTokens("acme", running.Id) + " end",
	}
	poll.Until(t, 10*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		if len(seen) < len(want) || !strings.HasSuffix(seen[len(seen)-1], " end") {
			return fmt.Errorf("live subjects carried %q so far", seen)
		}
		return nil
	})
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(seen) != fmt.Sprint(want) {
		t.Errorf("live subjects carried %q, want only %q", seen, want)
	}
	refused := false
	for _, v := range violations {
		refused = refused || strings.Contains(strings.ToLower(v), "permissions violation")
	}
	if !refused {
		t.Errorf("the executor's publish on a live subject was not refused by the server (errors: %q)", violations)
	}
}
