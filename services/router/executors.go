package router

import (
	"context"
	"sort"
	"sync"
	"time"

	busv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/bus/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// ExecutorService.ListExecutors: the router hears the executors'
// heartbeats (<p>.exec.heartbeat.<node>, core NATS, a few a second for a
// whole cluster) and keeps the last one of each node in memory. Nothing
// is stored: a router that just started knows the nodes after one
// heartbeat interval (5 s by default), and each replica answers from what
// it heard itself. A node silent for longer than its ttl shows as lost; one
// silent for forgetAfter is dropped.

// forgetAfter is how long a silent node stays listed (as lost).
const forgetAfter = 10 * time.Minute

// defaultNodeTTL is a node's ttl when its heartbeat gives none.
const defaultNodeTTL = 15 * time.Second

type executorTable struct {
	mu     sync.Mutex
	nodes  map[string]*executorEntry
	sub    *nats.Subscription
	reader *bus.HeartbeatReader
}

type executorEntry struct {
	hb         *busv1.ExecutorHeartbeat
	last       time.Time
	first      time.Time
	heartbeats int64
}

// start subscribes to the heartbeats.
func (t *executorTable) start(s *Service) error {
	t.nodes = map[string]*executorEntry{}
	t.reader = bus.NewHeartbeatReader(s.names, s.log)
	sub, err := s.nc.Subscribe(s.names.Heartbeats(), t.heard)
	if err != nil {
		return &bus.Error{Code: bus.CodeUnavailable, Message: "subscribe to executor heartbeats: " + err.Error()}
	}
	t.sub = sub
	return nil
}

func (t *executorTable) stop() {
	if t.sub != nil {
		_ = t.sub.Unsubscribe()
	}
}

// heard records one heartbeat; one whose payload names another node than
// its subject is refused (bus.HeartbeatReader).
func (t *executorTable) heard(m *nats.Msg) {
	hb, err := t.reader.Read(m)
	if err != nil {
		return
	}
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.nodes[hb.Node]
	if e == nil {
		e = &executorEntry{first: now}
		t.nodes[hb.Node] = e
	}
	e.hb, e.last = hb, now
	e.heartbeats++
	for n, x := range t.nodes {
		if now.Sub(x.last) > forgetAfter {
			delete(t.nodes, n)
		}
	}
}

// list answers the nodes by name; running task ids only when withTasks.
func (t *executorTable) list(now time.Time, withTasks bool) []*agentmeshv1.Executor {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]*agentmeshv1.Executor, 0, len(t.nodes))
	for _, e := range t.nodes {
		if now.Sub(e.last) > forgetAfter {
			continue
		}
		out = append(out, e.executor(now, withTasks))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Node < out[j].Node })
	return out
}

func (e *executorEntry) executor(now time.Time, withTasks bool) *agentmeshv1.Executor {
	hb := e.hb
	ttl := hb.GetTtl().AsDuration()
	if ttl <= 0 {
		ttl = defaultNodeTTL
	}
	x := &agentmeshv1.Executor{
		Node: hb.Node, Capacity: hb.Capacity, Running: hb.Running, Draining: hb.Draining,
		Labels: hb.Labels, LastHeartbeat: timestamppb.New(e.last), Ttl: durationpb.New(ttl),
		Lost: now.Sub(e.last) > ttl, FirstSeen: timestamppb.New(e.first), Heartbeats: e.heartbeats,
		WarmPool: &agentmeshv1.WarmPool{},
	}
	if !x.Draining && !x.Lost {
		x.Free = max(0, x.Capacity-x.Running)
	}
	if hb.WarmIdle != nil || hb.WarmTarget != nil {
		x.WarmPool = &agentmeshv1.WarmPool{Reported: true, Idle: hb.GetWarmIdle(), Target: hb.GetWarmTarget()}
	}
	if withTasks {
		x.RunningTasks = append([]string(nil), hb.RunningTasks...)
	}
	return x
}

// executorServer implements agentmeshv1.ExecutorService.
type executorServer struct {
	agentmeshv1.UnimplementedExecutorServiceServer
	s *Service
}

// ListExecutors answers the nodes this router heard from. The method table
// lets admins and platform keys in; task ids only go to a platform key
// (they name tasks of every org).
func (x *executorServer) ListExecutors(ctx context.Context, _ *agentmeshv1.ListExecutorsRequest) (*agentmeshv1.ListExecutorsResponse, error) {
	c, _ := CallerFrom(ctx)
	return &agentmeshv1.ListExecutorsResponse{Executors: x.s.executors.list(time.Now(), c.Role == RolePlatform)}, nil
}
