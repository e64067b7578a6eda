package bus

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	busv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/bus/v1"
	"github.com/agentmesh/agentmesh/pkg/subjects"
	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/proto"
)

// Errors of HeartbeatReader.Read.
var (
	// ErrHeartbeatMalformed: not a heartbeat subject, an undecodable
	// payload, or a payload without a node.
	ErrHeartbeatMalformed = errors.New("malformed executor heartbeat")
	// ErrHeartbeatNode: the payload names another node than the subject.
	ErrHeartbeatNode = errors.New("executor heartbeat names another node than its subject")
)

// heartbeatWarnEvery is the least time between two warnings of refused
// heartbeats: a misconfigured executor heartbeats every few seconds.
const heartbeatWarnEvery = time.Minute

// HeartbeatReader reads executor heartbeats (<p>.exec.heartbeat.<node>,
// busv1.ExecutorHeartbeat) for every service that hears them — the
// scheduler's placement and the router's ListExecutors — so they all
// judge a heartbeat alike. A heartbeat names its node twice, in its subject
// and in its payload; one whose two names differ is refused, never
// recorded under either, with a warning naming both (at most one a
// minute, carrying how many were refused since the last). The subject is
// the name the audit stream and the bus permissions see, so what is
// recorded never differs from it. This is a consistency check, not
// authentication: every executor shares one bus identity that may publish
// on every node's heartbeat subject (README, Limitations).
type HeartbeatReader struct {
	names subjects.Names
	log   *slog.Logger

	mu      sync.Mutex
	warned  time.Time // when the last warning was logged
	refused int       // refused since then, not yet reported
}

// NewHeartbeatReader returns a reader of the heartbeats under names that
// warns on log.
func NewHeartbeatReader(names subjects.Names, log *slog.Logger) *HeartbeatReader {
	return &HeartbeatReader{names: names, log: log}
}

// Read decodes m as a heartbeat of the node its subject names.
func (r *HeartbeatReader) Read(m *nats.Msg) (*busv1.ExecutorHeartbeat, error) {
	node, ok := r.names.ParseHeartbeat(m.Subject)
	if !ok {
		return nil, fmt.Errorf("%w: subject %q", ErrHeartbeatMalformed, m.Subject)
	}
	hb := new(busv1.ExecutorHeartbeat)
	if err := proto.Unmarshal(m.Data, hb); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrHeartbeatMalformed, err)
	}
	if hb.Node == "" {
		return nil, fmt.Errorf("%w: no node", ErrHeartbeatMalformed)
	}
	if hb.Node != node {
		r.warn(node, hb.Node)
		return nil, fmt.Errorf("%w: subject %q, payload %q", ErrHeartbeatNode, node, hb.Node)
	}
	return hb, nil
}

// warn logs a refused heartbeat, at most once per heartbeatWarnEvery.
func (r *HeartbeatReader) warn(subjectNode, payloadNode string) {
	now := time.Now()
	r.mu.Lock()
	r.refused++
	if !r.warned.IsZero() && now.Sub(r.warned) < heartbeatWarnEvery {
		r.mu.Unlock()
		return
	}
	refused := r.refused
	r.warned, r.refused = now, 0
	r.mu.Unlock()
	r.log.Warn("executor heartbeat refused: its payload names another node than its subject; not recorded",
		"subject_node", subjectNode, "payload_node", payloadNode, "refused_since_last_warning", refused)
}
