package router

import (
	"context"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"sync"
	"testing"
	"time"

	busv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/bus/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/subjects"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

func TestGetUsageIsPerOrg(t *testing.T) {
	e := start(t, Config{APIKeys: map[string]string{"k-acme": "acme", "k-globex": "globex"}})
	var mu sync.Mutex
	var asked []*busv1.UsageRequest
	respond(t, e.fake.nc, names.State(subjects.StateUsage), func() *busv1.UsageRequest { return new(busv1.UsageRequest) },
		func(req *busv1.UsageRequest) (*busv1.UsageResponse, error) {
			mu.Lock()
			asked = append(asked, req)
			mu.Unlock()
			if req.Org == "acme" {
				return &busv1.UsageResponse{Usage: &agentmeshv1.Usage{PromptTokens: 10, CompletionTokens: 5, TotalTokens: 15, CostUsd: 0.25}, Tasks: 3}, nil
			}
			return &busv1.UsageResponse{}, nil
		})
	if err := e.fake.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	after := timestamppb.New(time.Now().Add(-time.Hour))
	ctx := withKey(testCtx(t), "authorization", "Bearer k-acme")
	got, err := e.tasks.GetUsage(ctx, &agentmeshv1.GetUsageRequest{CreatedAfter: after, Agent: "helper"})
	if err != nil {
		t.Fatal(err)
	}
	if got.Tasks != 3 || got.Usage.GetTotalTokens() != 15 || got.Usage.GetCostUsd() != 0.25 {
		t.Errorf("acme usage = %v", got)
	}
	other, err := e.tasks.GetUsage(withKey(testCtx(t), "authorization", "Bearer k-globex"), &agentmeshv1.GetUsageRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if other.Tasks != 0 || other.Usage == nil || other.Usage.TotalTokens != 0 {
		t.Errorf("globex usage = %v", other)
	}
	mu.Lock()
	if len(asked) != 2 || asked[0].Org != "acme" || asked[0].Agent != "helper" || !proto.Equal(asked[0].CreatedAfter, after) || asked[1].Org != "globex" {
		t.Errorf("state was asked %v", asked)
	}
	mu.Unlock()

	for name, req := range map[string]*agentmeshv1.GetUsageRequest{
		"bad agent":      {Agent: "Bad Name!"},
		"inverted range": {CreatedAfter: timestamppb.Now(), CreatedBefore: after},
		"invalid time":   {CreatedBefore: &timestamppb.Timestamp{Nanos: -1}},
	} {
		if _, err := e.tasks.GetUsage(ctx, req); status.Code(err) != codes.InvalidArgument {
			t.Errorf("%s: err = %v, want InvalidArgument", name, err)
		}
	}
	if _, err := e.tasks.GetUsage(testCtx(t), &agentmeshv1.GetUsageRequest{}); status.Code(err) != codes.Unauthenticated {
		t.Errorf("no key: err = %v, want Unauthenticated", err)
	}
}

func tokenEv(id, text string) *agentmeshv1.TaskEvent {
	return &agentmeshv1.TaskEvent{TaskId: id, Type: agentmeshv1.EventType_EVENT_TYPE_TOKEN, Token: text, Attempt: 1}
}

func (f *fakeBus) publishToken(ev *agentmeshv1.TaskEvent) {
	f.mu.Lock()
	org := f.tasks[ev.TaskId].GetOrg()
	f.mu.Unlock()
	msg, err := bus.NewEventMsg(context.Background(), names.LiveTokens(org, ev.TaskId), ev)
	if err != nil {
		f.t.Fatal(err)
	}
	if err := f.nc.PublishMsg(msg); err != nil {
		f.t.Errorf("publish: %v", err)
	}
	if err := f.nc.Flush(); err != nil {
		f.t.Errorf("flush: %v", err)
	}
}

// TOKEN events (seq 0) are forwarded live between the recorded events and
// never move the cursor or trigger a refetch.
func TestWatchForwardsTokens(t *testing.T) {
	e := start(t, Config{WatchRefetch: time.Hour})
	task := e.fake.AddTask(&agentmeshv1.Task{Agent: "helper", Input: "x"}) // seq 1, 2
	got, end := follow(t, e, task.Id, 0)
	for range 2 {
		watchRecv(t, got)
	}
	e.fake.Record(task.Id, statusEv(taskstate.Running), true) // 3
	if r := watchRecv(t, got); r.Event.Seq != 3 {
		t.Fatalf("got %v, want seq 3", r.Event)
	}
	historyBefore := e.fake.count("history")
	e.fake.publishToken(tokenEv(task.Id, "Hel"))
	e.fake.publishToken(tokenEv(task.Id, "lo"))
	for _, want := range []string{"Hel", "lo"} {
		r := watchRecv(t, got)
		if r.Event.Type != agentmeshv1.EventType_EVENT_TYPE_TOKEN || r.Event.Seq != 0 || r.Event.Token != want || r.Status != taskstate.Running {
			t.Fatalf("got %v (status %v), want token %q", r.Event, r.Status, want)
		}
	}
	e.fake.Record(task.Id, stepEv("Hello"), true) // 4: follows 3, tokens did not move the cursor
	if r := watchRecv(t, got); r.Event.Seq != 4 {
		t.Fatalf("got %v, want seq 4", r.Event)
	}
	if e.fake.count("history") != historyBefore {
		t.Error("tokens made the router read history")
	}
	e.fake.Record(task.Id, statusEv(taskstate.Completed), true) // 5
	if r := watchRecv(t, got); r.Event.Seq != 5 {
		t.Fatalf("got %v, want seq 5", r.Event)
	}
	select {
	case err := <-end:
		if err != nil {
			t.Fatalf("watch ended with %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("watch did not end")
	}
}
