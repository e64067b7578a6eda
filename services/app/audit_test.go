package app

import (
	"bytes"
	"context"
	"encoding/json"
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
)

// agentmesh audit prints each audited request from the batches, with its
// subject and outcome, and keeps to the subject asked for.
func TestAuditPrintsTheRecords(t *testing.T) {
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
	svc, err := micro.AddService(nc, micro.Config{Name: "test", Version: "0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Stop() })
	auditor := bus.NewAuditor(nc, names.AuditService(subjects.ServiceState))
	t.Cleanup(auditor.Close)
	get, list := names.State(subjects.StateGetTask), names.State(subjects.StateListTasks)
	for _, subj := range []string{get, list} {
		h := bus.Handler(testlog.New(t), func() *busv1.GetTaskRequest { return &busv1.GetTaskRequest{} },
			func(context.Context, *busv1.GetTaskRequest) (*busv1.GetTaskResponse, error) {
				return nil, bus.Errorf(bus.CodeNotFound, "no such task")
			})
		if err := svc.AddEndpoint(strings.ReplaceAll(subj, ".", "-"), bus.Async(nc, make(chan struct{}, 4), auditor.Wrap(h)), micro.WithEndpointSubject(subj)); err != nil {
			t.Fatal(err)
		}
	}
	for _, subj := range []string{get, list, get} {
		if err := bus.Request(ctx, nc, subj, &busv1.GetTaskRequest{Id: "t1"}, &busv1.GetTaskResponse{}); !errors.Is(err, bus.ErrNotFound) {
			t.Fatalf("%s: %v", subj, err)
		}
	}
	var out bytes.Buffer
	poll.Until(t, 10*time.Second, func() error {
		out.Reset()
		if err := printAudit(ctx, nc, names, auditFilter{subject: get}, &out); err != nil {
			t.Fatal(err)
		}
		if n := strings.Count(out.String(), "\n"); n != 2 {
			return errors.New("not both records of " + get + " yet: " + out.String())
		}
		return nil
	})
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var got struct {
			Seq    uint64 `json:"seq"`
			Record struct {
				Subject, Outcome, Data string
			} `json:"record"`
		}
		if err := json.Unmarshal([]byte(line), &got); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		if got.Seq == 0 || got.Record.Subject != get || got.Record.Outcome != bus.CodeNotFound || got.Record.Data == "" {
			t.Errorf("line %q: want seq, subject %s, outcome %s, the payload", line, get, bus.CodeNotFound)
		}
	}
}

// A bad flag is a usage error.
func TestAuditRefusesABadFlag(t *testing.T) {
	var ue usageError
	if err := runAudit(context.Background(), []string{"--after", "x"}, &bytes.Buffer{}); !errors.As(err, &ue) {
		t.Fatalf("got %v, want a usage error", err)
	}
	if err := runAudit(context.Background(), []string{"--prefix", "a b"}, &bytes.Buffer{}); !errors.As(err, &ue) {
		t.Fatalf("bad prefix: got %v, want a usage error", err)
	}
}
