package bus_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	busv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/bus/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/natstest"
	"github.com/agentmesh/agentmesh/pkg/poll"
	"github.com/agentmesh/agentmesh/pkg/subjects"
	"github.com/agentmesh/agentmesh/pkg/testlog"
	"github.com/nats-io/nats.go"
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

// auditEnv is a service with one audited endpoint (a GetTask that answers
// not_found for id "missing") and the audit stream.
type auditEnv struct {
	nc     *nats.Conn
	js     jetstream.JetStream
	names  subjects.Names
	subj   string
	stream jetstream.Stream
}

func newAuditEnv(t *testing.T, a func(nc *nats.Conn, subject string) *bus.Auditor) (*auditEnv, *bus.Auditor) {
	t.Helper()
	srv := natstest.Start(t)
	e := &auditEnv{nc: natstest.Connect(t, srv), names: subjects.Must("am")}
	var err error
	if e.js, err = jetstream.New(e.nc); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := bus.EnsureStreams(ctx, e.js, e.names, bus.StreamOptions{Memory: true}); err != nil {
		t.Fatal(err)
	}
	if e.stream, err = e.js.Stream(ctx, e.names.AuditStream()); err != nil {
		t.Fatal(err)
	}
	e.subj = e.names.State(subjects.StateGetTask)
	svc, err := micro.AddService(e.nc, micro.Config{Name: "test", Version: "0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Stop() })
	h := bus.Handler(testlog.New(t), func() *busv1.GetTaskRequest { return &busv1.GetTaskRequest{} },
		func(ctx context.Context, req *busv1.GetTaskRequest) (*busv1.GetTaskResponse, error) {
			if req.Id == "missing" {
				return nil, bus.Errorf(bus.CodeNotFound, "no such task")
			}
			return &busv1.GetTaskResponse{}, nil
		})
	auditor := a(e.nc, e.names.AuditService(subjects.ServiceState))
	t.Cleanup(auditor.Close)
	if err := svc.AddEndpoint("get", bus.Async(e.nc, make(chan struct{}, 4), auditor.Wrap(h)), micro.WithEndpointSubject(e.subj)); err != nil {
		t.Fatal(err)
	}
	return e, auditor
}

// get asks for task id, one request after the other's record: a record is
// made just after the reply, so each waits for the one before it.
func (e *auditEnv) get(t *testing.T, a *bus.Auditor, ids ...string) {
	t.Helper()
	for _, id := range ids {
		made := a.MadeForTest()
		err := bus.Request(context.Background(), e.nc, e.subj, &busv1.GetTaskRequest{Id: id}, &busv1.GetTaskResponse{})
		if id == "missing" && !errors.Is(err, bus.ErrNotFound) || id != "missing" && err != nil {
			t.Fatalf("get %q: %v", id, err)
		}
		poll.Until(t, 10*time.Second, func() error {
			if a.MadeForTest() == made {
				return fmt.Errorf("no record of %q yet", id)
			}
			return nil
		})
	}
}

// stored waits until the audit stream holds n messages, then checks it
// holds no more, and returns their records, each batch apart.
func (e *auditEnv) stored(t *testing.T, n int) [][]*busv1.AuditRecord {
	t.Helper()
	ctx := context.Background()
	poll.Until(t, 10*time.Second, func() error {
		info, err := e.stream.Info(ctx)
		if err != nil {
			return err
		}
		if info.State.Msgs < uint64(n) {
			return fmt.Errorf("%d messages stored, want %d", info.State.Msgs, n)
		}
		return nil
	})
	time.Sleep(20 * time.Millisecond) // anything more would have come by now
	var batches [][]*busv1.AuditRecord
	last := uint64(0)
	if _, err := bus.ReadAudit(ctx, e.js, e.names.AuditStream(), 0, func(seq uint64, rec *busv1.AuditRecord) error {
		if seq != last {
			batches, last = append(batches, nil), seq
		}
		batches[len(batches)-1] = append(batches[len(batches)-1], rec)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(batches) != n {
		t.Fatalf("%d audit batches stored, want %d", len(batches), n)
	}
	return batches
}

// ids returns the task ids the records asked for.
func ids(t *testing.T, recs []*busv1.AuditRecord) []string {
	t.Helper()
	var out []string
	for _, r := range recs {
		var req busv1.GetTaskRequest
		if err := proto.Unmarshal(r.Data, &req); err != nil {
			t.Fatal(err)
		}
		out = append(out, req.Id)
	}
	return out
}

// A request a service handled is recorded in the audit stream, with its
// subject, headers, payload and outcome; the records of requests answered
// close together are one stored message, in the order they were answered.
func TestAuditedRequestsAreRecorded(t *testing.T) {
	e, a := newAuditEnv(t, func(nc *nats.Conn, subj string) *bus.Auditor {
		return bus.NewAuditorForTest(nc, subj, time.Hour, 1000, 1<<20)
	})
	e.get(t, a, "found", "missing", "x", "y")
	a.Flush()
	batch := e.stored(t, 1)[0]
	got := ids(t, batch)
	if want := []string{"found", "missing", "x", "y"}; !slices.Equal(got, want) {
		t.Fatalf("records of %v, want %v", got, want)
	}
	for i, r := range batch {
		want := "ok"
		if got[i] == "missing" {
			want = bus.CodeNotFound
		}
		typ := ""
		for _, h := range r.Headers {
			if h.Key == bus.HeaderType {
				typ = strings.Join(h.Values, ",")
			}
		}
		if r.Subject != e.subj || r.Outcome != want || typ != "agentmesh.bus.v1.GetTaskRequest" ||
			r.DataSize != int64(len(r.Data)) || r.Answered == nil {
			t.Errorf("record %d: subject %s outcome %s type %q size %d answered %v; want %s, %s",
				i, r.Subject, r.Outcome, typ, r.DataSize, r.Answered, e.subj, want)
		}
	}
	m, err := e.stream.GetLastMsgForSubject(context.Background(), e.names.AuditService(subjects.ServiceState))
	if err != nil {
		t.Fatalf("no batch on %s: %v", e.names.AuditService(subjects.ServiceState), err)
	}
	if m.Header.Get(bus.HeaderType) != "agentmesh.bus.v1.AuditBatch" {
		t.Errorf("batch's type %q", m.Header.Get(bus.HeaderType))
	}
}

// With the default bounds, a record is published by the batch's timer, no
// flush asked.
func TestAuditBatchGoesOutAfterItsDelay(t *testing.T) {
	e, a := newAuditEnv(t, bus.NewAuditor)
	e.get(t, a, "one")
	if got := ids(t, e.stored(t, 1)[0]); !slices.Equal(got, []string{"one"}) {
		t.Fatalf("records of %v", got)
	}
}

// A batch that reaches its count is published at once; Close publishes
// what waits.
func TestAuditBatchBounds(t *testing.T) {
	e, a := newAuditEnv(t, func(nc *nats.Conn, subj string) *bus.Auditor {
		return bus.NewAuditorForTest(nc, subj, time.Hour, 3, 1<<20)
	})
	e.get(t, a, "a", "b", "c", "d")
	if got := ids(t, e.stored(t, 1)[0]); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Fatalf("first batch: records of %v, want a b c", got)
	}
	a.Close()
	if got := ids(t, e.stored(t, 2)[1]); !slices.Equal(got, []string{"d"}) {
		t.Fatalf("after Close: records of %v, want d", got)
	}
	e.get(t, a, "e") // after Close: published at once, alone
	if got := ids(t, e.stored(t, 3)[2]); !slices.Equal(got, []string{"e"}) {
		t.Fatalf("after Close: records of %v, want e", got)
	}
}

// A batch is published before a record would take it past its bytes; a
// record whose payload alone does not fit keeps its size, not its payload.
func TestAuditBatchBytes(t *testing.T) {
	e, a := newAuditEnv(t, func(nc *nats.Conn, subj string) *bus.Auditor {
		return bus.NewAuditorForTest(nc, subj, time.Hour, 1000, 1000)
	})
	// a and b (~300 bytes each with their headers) fit together; c's payload
	// alone does not fit: its record, without it, joins them; d's would
	// take the batch past 1000 bytes, so it starts the next.
	e.get(t, a, strings.Repeat("a", 200), strings.Repeat("b", 200), strings.Repeat("c", 2000), strings.Repeat("d", 500))
	a.Flush()
	batches := e.stored(t, 2)
	first := batches[0]
	if got := ids(t, first); len(got) != 3 || got[0][0] != 'a' || got[1][0] != 'b' || got[2] != "" {
		t.Fatalf("first batch: %d records, want a, b and c's", len(first))
	}
	if c := first[2]; len(c.Data) != 0 || c.DataSize < 2000 || c.Outcome != "ok" || c.Subject != e.subj {
		t.Errorf("c's record: data %d bytes of %d, outcome %s, subject %s", len(c.Data), c.DataSize, c.Outcome, c.Subject)
	}
	if second := batches[1]; len(second) != 1 || len(second[0].Data) < 500 {
		t.Errorf("second batch: %d records, want d's with its payload", len(second))
	}
}

// A stored message of the audit stream that is not a batch (am.exec.>)
// is told apart, as is a batch that does not decode.
func TestDecodeAuditBatch(t *testing.T) {
	typed := nats.Header{bus.HeaderType: []string{"agentmesh.bus.v1.AuditBatch"}}
	if _, err := bus.DecodeAuditBatch(&jetstream.RawStreamMsg{Subject: "am.exec.x", Data: []byte("{}")}); !errors.Is(err, bus.ErrNotAuditBatch) {
		t.Errorf("exec message: %v, want ErrNotAuditBatch", err)
	}
	if _, err := bus.DecodeAuditBatch(&jetstream.RawStreamMsg{Subject: "am.audit.state", Header: typed, Data: []byte{0x0a, 0xff}}); !errors.Is(err, bus.ErrBadAuditBatch) {
		t.Errorf("truncated batch: %v, want ErrBadAuditBatch", err)
	}
}

// FuzzDecodeAuditBatch: any bytes decode or fail with ErrBadAuditBatch,
// and what decodes encodes back to a batch that decodes the same.
func FuzzDecodeAuditBatch(f *testing.F) {
	good, _ := proto.Marshal(&busv1.AuditBatch{Records: []*busv1.AuditRecord{{Subject: "am.state.task.get", Outcome: "ok", Data: []byte{1, 2}}}})
	f.Add(good)
	f.Add([]byte{0x0a, 0xff})
	typed := nats.Header{bus.HeaderType: []string{"agentmesh.bus.v1.AuditBatch"}}
	f.Fuzz(func(t *testing.T, data []byte) {
		b, err := bus.DecodeAuditBatch(&jetstream.RawStreamMsg{Subject: "am.audit.state", Header: typed, Data: data})
		if err != nil {
			if !errors.Is(err, bus.ErrBadAuditBatch) {
				t.Fatalf("error %v is not ErrBadAuditBatch", err)
			}
			return
		}
		again, err := proto.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		b2, err := bus.DecodeAuditBatch(&jetstream.RawStreamMsg{Subject: "am.audit.state", Header: typed, Data: again})
		if err != nil || !proto.Equal(b, b2) {
			t.Fatalf("re-encoded batch: %v, equal %v", err, proto.Equal(b, b2))
		}
	})
}
