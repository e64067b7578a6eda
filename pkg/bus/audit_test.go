package bus_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	busv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/bus/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/natstest"
	"github.com/agentmesh/agentmesh/pkg/poll"
	"github.com/agentmesh/agentmesh/pkg/subjects"
	"github.com/agentmesh/agentmesh/pkg/testlog"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
	"google.golang.org/protobuf/proto"
)

// With the bus streams in place (the audit stream among them), a request to
// a service that is down is answered "no responders" at once: no stream
// captures request subjects, so nothing counts as interest.
func TestServiceDownFailsFastWithStreams(t *testing.T) {
	srv := natstest.Start(t)
	nc := natstest.Connect(t, srv)
	names := subjects.Must("am")
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := bus.EnsureStreams(ctx, js, names, bus.StreamOptions{Memory: true}); err != nil {
		t.Fatal(err)
	}
	for _, subj := range []string{names.State(subjects.StateGetTask), names.Registry(subjects.RegistryMatch)} {
		start := time.Now()
		err := bus.Request(ctx, nc, subj, &busv1.GetTaskRequest{Id: "x"}, &busv1.GetTaskResponse{})
		if !errors.Is(err, bus.ErrUnavailable) || !strings.Contains(err.Error(), "no service answers") {
			t.Fatalf("%s: got %v, want unavailable: no service answers", subj, err)
		}
		// A hang detector only: a timeout would take bus.DefaultTimeout.
		if d := time.Since(start); d >= bus.DefaultTimeout {
			t.Fatalf("%s: took %v: waited for a timeout", subj, d)
		}
	}
}

// A request a service handled is recorded in the audit stream, with its
// subject and outcome.
func TestAuditedRequestsAreRecorded(t *testing.T) {
	srv := natstest.Start(t)
	nc := natstest.Connect(t, srv)
	names := subjects.Must("am")
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := bus.EnsureStreams(ctx, js, names, bus.StreamOptions{Memory: true}); err != nil {
		t.Fatal(err)
	}
	subj := names.State(subjects.StateGetTask)
	log := testlog.New(t)
	svc, err := micro.AddService(nc, micro.Config{Name: "test", Version: "0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Stop() })
	h := bus.Handler(log, func() *busv1.GetTaskRequest { return &busv1.GetTaskRequest{} },
		func(ctx context.Context, req *busv1.GetTaskRequest) (*busv1.GetTaskResponse, error) {
			if req.Id == "missing" {
				return nil, bus.Errorf(bus.CodeNotFound, "no such task")
			}
			return &busv1.GetTaskResponse{}, nil
		})
	if err := svc.AddEndpoint("get", bus.Async(nc, make(chan struct{}, 4), bus.Audited(nc, names.Audit(subj), h)), micro.WithEndpointSubject(subj)); err != nil {
		t.Fatal(err)
	}
	if err := bus.Request(ctx, nc, subj, &busv1.GetTaskRequest{Id: "found"}, &busv1.GetTaskResponse{}); err != nil {
		t.Fatal(err)
	}
	if err := bus.Request(ctx, nc, subj, &busv1.GetTaskRequest{Id: "missing"}, &busv1.GetTaskResponse{}); !errors.Is(err, bus.ErrNotFound) {
		t.Fatalf("got %v, want not_found", err)
	}
	stream, err := js.Stream(ctx, names.AuditStream())
	if err != nil {
		t.Fatal(err)
	}
	// Records are published after each reply, by concurrent handlers: two
	// records, in either order, one per request with its outcome.
	want := map[string]string{"found": "ok", "missing": bus.CodeNotFound}
	got := map[string]string{}
	for seq := uint64(1); seq <= uint64(len(want)); seq++ {
		var m *jetstream.RawStreamMsg
		poll.Until(t, 10*time.Second, func() error {
			m, err = stream.GetMsg(ctx, seq)
			return err
		})
		var req busv1.GetTaskRequest
		if err := proto.Unmarshal(m.Data, &req); err != nil {
			t.Fatal(err)
		}
		if m.Subject != names.Audit(subj) || m.Header.Get(bus.HeaderAuditSubject) != subj ||
			m.Header.Get(bus.HeaderType) != "agentmesh.bus.v1.GetTaskRequest" {
			t.Errorf("record %d: subject %s headers %v; want %s", seq, m.Subject, m.Header, names.Audit(subj))
		}
		got[req.Id] = m.Header.Get(bus.HeaderAuditOutcome)
	}
	for id, outcome := range want {
		if got[id] != outcome {
			t.Errorf("record of %q: outcome %q, want %q (records: %v)", id, got[id], outcome, got)
		}
	}
}
