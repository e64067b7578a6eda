package bus_test

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"

	busv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/bus/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/subjects"
	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/proto"
)

func heartbeatMsg(t testing.TB, subject, node string) *nats.Msg {
	t.Helper()
	data, err := proto.Marshal(&busv1.ExecutorHeartbeat{Node: node, Capacity: 2})
	if err != nil {
		t.Fatal(err)
	}
	return &nats.Msg{Subject: subject, Data: data}
}

// A heartbeat names its node in its subject and in its payload: one whose
// two names differ is refused with a warning naming both, at most one
// warning a minute (the rest are counted into the next); a matching one is
// read; an undecodable one or one on another subject is refused quietly.
func TestHeartbeatReaderRefusesAnotherNodesName(t *testing.T) {
	names := subjects.Must("")
	var out bytes.Buffer // Read logs in the caller's goroutine
	r := bus.NewHeartbeatReader(names, slog.New(slog.NewTextHandler(&out, nil)))

	hb, err := r.Read(heartbeatMsg(t, names.Heartbeat("vm"), "vm"))
	if err != nil || hb.Node != "vm" || hb.Capacity != 2 {
		t.Fatalf("matching heartbeat: %v %v, want node vm read", hb, err)
	}
	for range 3 {
		if hb, err := r.Read(heartbeatMsg(t, names.Heartbeat("vm"), "a")); !errors.Is(err, bus.ErrHeartbeatNode) || hb != nil {
			t.Fatalf("heartbeat on vm's subject naming a: %v %v, want ErrHeartbeatNode", hb, err)
		}
	}
	logged := out.String()
	if strings.Count(logged, "level=WARN") != 1 || !strings.Contains(logged, "subject_node=vm") || !strings.Contains(logged, "payload_node=a") {
		t.Errorf("log %q, want one warning naming subject node vm and payload node a", logged)
	}
	for _, m := range []*nats.Msg{
		{Subject: names.Heartbeat("vm"), Data: []byte{0xff}},
		heartbeatMsg(t, names.Heartbeat("vm"), ""),
		heartbeatMsg(t, "am.exec.other.vm", "vm"),
	} {
		if _, err := r.Read(m); !errors.Is(err, bus.ErrHeartbeatMalformed) {
			t.Errorf("Read(%s, %x) = %v, want ErrHeartbeatMalformed", m.Subject, m.Data, err)
		}
	}
	if n := strings.Count(out.String(), "level=WARN"); n != 1 {
		t.Errorf("%d warnings after malformed heartbeats, want still 1", n)
	}
}

// FuzzHeartbeatReader: whatever arrives, a heartbeat read names the node
// of the subject it came on.
func FuzzHeartbeatReader(f *testing.F) {
	names := subjects.Must("")
	good := heartbeatMsg(f, names.Heartbeat("vm"), "vm")
	f.Add(good.Subject, good.Data)
	f.Add(names.Heartbeat("a"), good.Data)
	f.Add("am.exec.heartbeat.", []byte{})
	r := bus.NewHeartbeatReader(names, slog.New(slog.DiscardHandler))
	f.Fuzz(func(t *testing.T, subject string, data []byte) {
		hb, err := r.Read(&nats.Msg{Subject: subject, Data: data})
		if err != nil {
			if hb != nil {
				t.Fatalf("refused with %v but returned %v", err, hb)
			}
			return
		}
		if subject != names.Heartbeat(hb.Node) {
			t.Fatalf("heartbeat of node %q read from subject %q", hb.Node, subject)
		}
	})
}
