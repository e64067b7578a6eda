package bus_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	busv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/bus/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/natstest"
	"github.com/agentmesh/agentmesh/pkg/poll"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// A reply the responder's connection refuses because it is reconnecting
// (its reconnect buffer off, as a full one refuses) is sent again once the
// connection is back: the requester gets its answer instead of a timeout.
func TestReplySentAgainAfterAReconnect(t *testing.T) {
	srv := natstest.Start(t)
	responder := natstest.Connect(t, srv, nats.ReconnectBufSize(-1), nats.ReconnectWait(20*time.Millisecond))
	requester := natstest.Connect(t, srv)
	forced := make(chan error, 1)
	serve(t, responder, func(ctx context.Context, req *busv1.GetTaskRequest) (*busv1.GetTaskResponse, error) {
		// The connection drops while the request is being handled: the
		// reply is written while it reconnects.
		forced <- responder.ForceReconnect()
		return &busv1.GetTaskResponse{}, nil
	})
	if err := responder.Flush(); err != nil { // the endpoint is subscribed before the request
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
	defer cancel()
	start := time.Now()
	err := bus.Request(ctx, requester, "t.get", &busv1.GetTaskRequest{Id: "x"}, &busv1.GetTaskResponse{})
	select {
	case ferr := <-forced:
		if ferr != nil {
			t.Fatalf("ForceReconnect: %v", ferr)
		}
	default:
		t.Fatalf("the request never reached the handler: %v", err)
	}
	if err != nil {
		t.Fatalf("request across the responder's reconnect: %v after %s, want the reply", err, time.Since(start).Round(time.Millisecond))
	}
}

func TestPublishRetryable(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"no stream leader (no responders)", jetstream.ErrNoStreamResponse, true},
		{"timeout", context.DeadlineExceeded, true},
		{"disconnected", nats.ErrDisconnected, true},
		{"reconnect buffer full", nats.ErrReconnectBufExceeded, true},
		{"unavailable (503)", &jetstream.APIError{Code: 503, ErrorCode: 10008, Description: "JetStream system temporarily unavailable"}, true},
		{"wrong last sequence (400)", &jetstream.APIError{Code: 400, ErrorCode: jetstream.JSErrCodeStreamWrongLastSequence, Description: "wrong last sequence"}, false},
		{"closed connection", nats.ErrConnectionClosed, false},
		{"too large", fmt.Errorf("publish: %w", nats.ErrMaxPayload), false},
		{"no message id", bus.ErrNoMsgID, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := bus.PublishRetryable(tc.err); got != tc.want {
				t.Errorf("PublishRetryable(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}

// Messages handed to the outbox while their stream has no leader (its
// leader's server cut off the others) are stored once each when a new
// leader is elected; one whose Wanted says no is never stored.
func TestOutboxStoresOnceAcrossALeaderLoss(t *testing.T) {
	c := natstest.StartCluster(t, 3)
	admin := c.Connect(t)
	ajs, err := jetstream.New(admin)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if _, err := ajs.CreateStream(ctx, jetstream.StreamConfig{Name: "OUT", Subjects: []string{"out.>"}, Replicas: 3, Duplicates: bus.DuplicateWindow}); err != nil {
		t.Fatal(err)
	}
	leader := -1
	poll.Until(t, 30*time.Second, func() error {
		if leader = c.StreamLeader("OUT"); leader < 0 {
			return errors.New("no stream leader yet")
		}
		return nil
	})
	member := (leader + 1) % c.Size()
	js, err := jetstream.New(c.ConnectTo(t, member, ""))
	if err != nil {
		t.Fatal(err)
	}
	c.Isolate(leader)
	msg := func(id string) *nats.Msg {
		m := nats.NewMsg("out." + id)
		m.Data = []byte(id)
		m.Header.Set(jetstream.MsgIDHeader, id)
		return m
	}
	// Publishing now fails: no member of the majority leads the stream.
	tctx, tcancel := context.WithTimeout(ctx, time.Second)
	_, perr := js.PublishMsg(tctx, msg("probe"))
	tcancel()
	if perr == nil {
		t.Log("a publish right after the cut was stored: the election was quick")
	}
	out := bus.NewOutbox(js, slog.New(slog.NewTextHandler(io.Discard, nil)), "test")
	octx, ocancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { out.Run(octx); close(done) }()
	defer func() { ocancel(); <-done }()
	for i := range 5 {
		if err := out.Add(msg(fmt.Sprintf("m%d", i)), nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := out.Add(msg("fenced"), func() bool { return false }); err != nil {
		t.Fatal(err)
	}
	if err := out.Add(nats.NewMsg("out.noid"), nil); !errors.Is(err, bus.ErrNoMsgID) {
		t.Errorf("Add without a Nats-Msg-Id: %v, want ErrNoMsgID", err)
	}
	poll.Until(t, 60*time.Second, func() error {
		if n := out.Len(); n > 0 {
			return fmt.Errorf("%d messages not stored yet", n)
		}
		return nil
	})
	c.Heal(leader)
	// A second try of each, as after a lost ack, is a duplicate.
	for i := range 5 {
		if _, err := bus.PublishStored(ctx, js, msg(fmt.Sprintf("m%d", i))); err != nil {
			t.Fatalf("PublishStored m%d: %v", i, err)
		}
	}
	// Read the counts through the majority's member: the healed server
	// may still answer from the stale view it had while cut off. A
	// stored message never goes away, so waiting for exactly one each
	// cannot hide a second copy.
	s, err := js.Stream(ctx, "OUT")
	if err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 30*time.Second, func() error {
		for i := range 5 {
			subj := fmt.Sprintf("out.m%d", i)
			info, err := s.Info(ctx, jetstream.WithSubjectFilter(subj))
			if err != nil {
				return err
			}
			if n := info.State.Subjects[subj]; n != 1 {
				return fmt.Errorf("%s stored %d times, want once", subj, n)
			}
		}
		return nil
	})
	info, err := s.Info(ctx, jetstream.WithSubjectFilter("out.fenced"))
	if err != nil {
		t.Fatal(err)
	}
	if n := info.State.Subjects["out.fenced"]; n != 0 {
		t.Errorf("a message no longer wanted was stored %d times, want never", n)
	}
}
