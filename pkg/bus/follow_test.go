package bus_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/natstest"
	"github.com/agentmesh/agentmesh/pkg/poll"
	"github.com/agentmesh/agentmesh/pkg/subjects"
	"github.com/nats-io/nats.go/jetstream"
)

// Follow lists after noting the stream's position and follows from there:
// an event published before the list is not delivered, one published while
// the list is read is, and so is one published after; hold runs once
// started and following stops when ctx ends.
func TestFollowListsThenFollows(t *testing.T) {
	srv := natstest.Start(t)
	names := subjects.Must("am")
	// State owns the stream and publishes; the scheduler follows.
	pub, err := jetstream.New(natstest.ConnectAs(t, srv, subjects.ServiceState))
	if err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(natstest.ConnectAs(t, srv, subjects.ServiceScheduler))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := bus.EnsureStreams(ctx, pub, names, bus.StreamOptions{Memory: true}); err != nil {
		t.Fatal(err)
	}
	publish := func(org string) {
		if _, err := pub.Publish(ctx, names.AgentEvent(org, "a"), []byte("{}")); err != nil {
			t.Error(err)
		}
	}
	publish("before")

	var mu sync.Mutex
	var got []string
	var from uint64
	held := make(chan struct{})
	f := bus.Follow{
		Stream: names.EventsStream(), Filters: []string{names.AgentEvents()},
		List: func(ctx context.Context, at uint64) error {
			publish("during") // committed after the position was noted
			mu.Lock()
			from = at
			mu.Unlock()
			return nil
		},
		Handle: func(m jetstream.Msg) {
			ev, _ := names.ParseEvent(m.Subject())
			mu.Lock()
			got = append(got, ev.Org)
			mu.Unlock()
		},
		Failed: func(err error) { t.Errorf("Failed(%v) with the stream there", err) },
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		f.Run(runCtx, js, func(ctx context.Context) { close(held); <-ctx.Done() })
	}()
	<-held
	publish("after")
	poll.Until(t, 10*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		if len(got) < 2 {
			return errors.New("events not delivered yet")
		}
		return nil
	})
	stop()
	<-done
	mu.Lock()
	defer mu.Unlock()
	if from != 2 {
		t.Errorf("List got from=%d, want 2 (the event before it is stream seq 1)", from)
	}
	if len(got) != 2 || got[0] != "during" || got[1] != "after" {
		t.Errorf("delivered %v, want [during after] (not the event before the list)", got)
	}
}

// While the stream is missing, Run reports each failed start and tries
// again after Retry, without running hold; it returns when ctx ends.
func TestFollowRetriesUntilTheStreamIsThere(t *testing.T) {
	srv := natstest.Start(t)
	js, err := jetstream.New(natstest.ConnectAs(t, srv, subjects.ServiceScheduler))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	failures := make(chan error, 100)
	f := bus.Follow{
		Stream: subjects.Must("am").EventsStream(), Retry: 10 * time.Millisecond,
		Handle: func(jetstream.Msg) {},
		Failed: func(err error) {
			select {
			case failures <- err:
			default:
			}
		},
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		f.Run(runCtx, js, func(context.Context) { t.Error("hold ran without a stream") })
	}()
	for range 3 {
		if err := <-failures; !errors.Is(err, jetstream.ErrStreamNotFound) {
			t.Errorf("failure %v, want stream not found", err)
		}
	}
	stop()
	<-done
}
