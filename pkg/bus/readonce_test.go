package bus_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/natstest"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// ReadOnce reads what its filter selects, in order, at most limit, makes
// one consumer per read and leaves none behind when it returns: a burst of
// reads made per request used to pile up ordered consumers until the
// server's consumer limit refused every later read, and the ordered
// consumer that replaced them made two per read and deleted the first in a
// goroutine, after the read had returned (a CI run saw one still there).
func TestReadOnceLeavesNoConsumer(t *testing.T) {
	srv := natstest.Start(t)
	nc := natstest.Connect(t, srv)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	// The consumers the reads make, counted from their create requests.
	creates := make(chan *nats.Msg, 1024)
	for _, subj := range []string{"$JS.API.CONSUMER.CREATE.READS", "$JS.API.CONSUMER.CREATE.READS.>"} {
		if _, err := nc.ChanSubscribe(subj, creates); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	stream, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "READS", Subjects: []string{"reads.>"}, Storage: jetstream.MemoryStorage, MaxConsumers: 8})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 600 {
		org := "a"
		if i%3 == 0 {
			org = "b"
		}
		if _, err := js.Publish(ctx, fmt.Sprintf("reads.%s.%d", org, i), []byte(fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
	}
	read := func(limit int) (int, []string) {
		t.Helper()
		var got []string
		pending, err := bus.ReadOnce(ctx, stream, jetstream.OrderedConsumerConfig{FilterSubjects: []string{"reads.b.>"}}, limit, func(m jetstream.Msg) error {
			got = append(got, string(m.Data()))
			return nil
		})
		if err != nil {
			t.Fatalf("read %d: %v", limit, err)
		}
		return pending, got
	}
	pending, all := read(0)
	if pending != 200 || len(all) != 200 || all[0] != "0" || all[1] != "3" || all[199] != "597" {
		t.Fatalf("read all: pending %d, %d read (%v…)", pending, len(all), all[:min(3, len(all))])
	}
	if pending, some := read(10); pending != 200 || len(some) != 10 || some[9] != "27" {
		t.Fatalf("read 10: pending %d, got %v", pending, some)
	}
	// Far more reads than the stream allows consumers: each is gone when
	// its read returns, not some time later.
	for i := range 40 {
		before := len(creates)
		read(5)
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
		if made := len(creates) - before; made != 1 {
			t.Fatalf("read %d made %d consumers, want 1", i, made)
		}
		info, err := stream.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.State.Consumers != 0 {
			t.Fatalf("after read %d: %d consumers left behind, want 0", i, info.State.Consumers)
		}
	}
}
