// Package executor runs tasks: one executor per node takes dispatched work,
// runs each task's agent in an isolated child process (a re-execution of
// its own binary, see package child), brokers the child's model calls,
// checkpoints every step with the state service and records the outcome.
//
// Subjects (see pkg/subjects):
//
//	consumes  <p>.work.>                    WorkItems, through the durable pull
//	                                        consumer "executors" on <P>_WORK
//	                                        (explicit acks, AckWait with
//	                                        in-progress heartbeats, unlimited
//	                                        redelivery)
//	          <p>.evt.*.task.*.cancelled    core subscription: kill the child
//	                                        of a cancelled task
//	requests  <p>.state.task.start|complete|fail|block|requeue
//	                                        its attempt-fenced intents:
//	                                        assigned → running, running →
//	                                        completed | failed | blocked |
//	                                        queued
//	          <p>.state.task.step           one checkpoint per agent step
//	          <p>.state.task.get            on redelivered work
//	          <p>.state.task.history        the steps of earlier attempts
//	publishes <p>.exec.heartbeat.<node>     ExecutorHeartbeat (core NATS)
//
// Every write to state presents the WorkItem's attempt, the fencing token:
// an executor that lost its task (it was re-dispatched, or cancelled) has
// its writes refused and kills the child.
//
// The child gets a clean environment (AGENTMESH_CHILD=1, PATH, LANG and
// HOME set to a per-task workspace directory removed afterwards), no API
// keys and no bus credentials; its only channel is its stdio. It runs in
// its own process group, which is killed on cancel, on wall-time overrun,
// on a broken protocol and at executor shutdown. With the strict isolation
// level (the default) it runs in the sandbox of package sandbox:
// namespaces, Landlock, cgroup memory and pids limits; it is the init of
// its PID namespace, so killing it kills the task's whole process tree.
package executor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	busv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/bus/v1"
	"github.com/agentmesh/agentmesh/pkg/backoff"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/subjects"
	"github.com/agentmesh/agentmesh/services/executor/llm"
	"github.com/agentmesh/agentmesh/services/executor/ratelimit"
	"github.com/agentmesh/agentmesh/services/executor/sandbox"
	"github.com/agentmesh/agentmesh/services/executor/spawner"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Deps are the executor's dependencies.
type Deps struct {
	NC  *nats.Conn
	Log *slog.Logger
}

// Service is one executor.
type Service struct {
	cfg   Config
	nc    *nats.Conn
	log   *slog.Logger
	names subjects.Names
	cons  jetstream.Consumer
	model *llm.Models
	// limits are the model rate limits the executors share, when this
	// executor opened them (nil: Config.Model.Limiter was given).
	limits *ratelimit.Limits
	sb     *sandbox.Sandbox // the agent children's sandbox
	// spawner starts the children (nil: the executor does, SpawnerDirect).
	spawner *spawner.Client
	// warm is the warm pool while Run runs (nil: off, or not running).
	warm *warmPool
	// reuse parks children for the next task of their key while Run runs
	// (nil: Config.ChildReuse off, or not running).
	reuse *reusePool
	// execTools run tools on the children's behalf (Config.Tools).
	execTools map[string]ExecFunc
	// embedder embeds what the memory tools remember and recall (nil:
	// no embedding model; memory.go).
	embedder *llm.Embedder
	// released and resumed count the children released while their model
	// call ran and the children that took over (release.go).
	released, resumed atomic.Int64
	// waitingChildren: children waiting for a model answer now, not
	// released (answer.go, awaitModel).
	waitingChildren atomic.Int64
	// childAfterAnswer counts the children started when the first model
	// turn asked ahead had answered (first.go).
	childAfterAnswer atomic.Int64
	// spawnGate bounds the spawns in progress (process.go's spawnConcurrency).
	spawnGate chan struct{}

	mu       sync.Mutex
	runs     map[runKey]*run
	closing  bool
	draining bool
}

type runKey struct {
	task    string
	attempt int32
}

// run is one attempt of a task running here.
type run struct {
	key    runKey
	cancel context.CancelCauseFunc
	log    *slog.Logger // the attempt's (task_id, trace_id, attempt)

	mu  sync.Mutex
	msg jetstream.Msg // the latest delivery of its work item
}

func (r *run) current() jetstream.Msg {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.msg
}

// Reasons a run is stopped from outside.
var (
	errCancelled = errors.New("task cancelled")
	errShutdown  = errors.New("executor draining: its grace period ended before the task did")
)

// New validates cfg, ensures the bus streams, the executors consumer and
// the model rate limits' bucket.
func New(ctx context.Context, cfg Config, deps Deps) (_ *Service, err error) {
	if deps.NC == nil {
		return nil, errors.New("executor: Deps.NC is required")
	}
	if deps.Log == nil {
		return nil, errors.New("executor: Deps.Log is required")
	}
	names, err := subjects.New(cfg.Prefix)
	if err != nil {
		return nil, fmt.Errorf("executor: %w", err)
	}
	if cfg, err = cfg.withDefaults(); err != nil {
		return nil, fmt.Errorf("executor: %w", err)
	}
	sb, err := sandbox.New(cfg.Sandbox)
	if err != nil {
		return nil, fmt.Errorf("executor: %w", err)
	}
	logSandbox(deps.Log, cfg.Node, sb)
	log := deps.Log.With("service", "executor", "node", cfg.Node)
	cfg.Model.LimitWindow = cfg.LimitWindow
	var limits *ratelimit.Limits
	if cfg.Model.Limiter == nil {
		if limits, err = openLimits(ctx, deps.NC, names, cfg, log); err != nil {
			sb.Close()
			return nil, fmt.Errorf("executor: %w", err)
		}
		cfg.Model.Limiter = limits
	}
	defer func() {
		if err != nil && limits != nil {
			limits.Close()
		}
	}()
	model, err := llm.New(cfg.Model, log)
	if err != nil {
		sb.Close()
		return nil, fmt.Errorf("executor: %w", err)
	}
	embedder, err := llm.NewEmbedder(cfg.Embedding, cfg.Model)
	if err != nil {
		sb.Close()
		return nil, fmt.Errorf("executor: %w", err)
	}
	s := &Service{
		cfg: cfg, nc: deps.NC, log: log, names: names,
		sb: sb, model: model, execTools: cfg.Tools, limits: limits, embedder: embedder,
		runs:      map[runKey]*run{},
		spawnGate: make(chan struct{}, spawnConcurrency()),
	}
	if cfg.Spawner == SpawnerForkServer {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("executor: spawner: %w", err)
		}
		if s.spawner, err = spawner.StartWith(exe, log, spawner.Options{Nice: cfg.AgentNice}); err != nil {
			sb.Close()
			return nil, fmt.Errorf("executor: %w", err)
		}
	}
	if s.cons, err = s.consumer(ctx); err != nil {
		if s.spawner != nil {
			s.spawner.Close()
		}
		sb.Close()
		return nil, fmt.Errorf("executor: %w", err)
	}
	return s, nil
}

// openLimits opens the model rate limits every executor shares (package
// ratelimit).
func openLimits(ctx context.Context, nc *nats.Conn, names subjects.Names, cfg Config, log *slog.Logger) (*ratelimit.Limits, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	lim, reps, err := ratelimit.Open(ctx, js, names, ratelimit.Options{
		Window: cfg.LimitWindow, Replicas: bus.Replicas(nc, cfg.Streams.Replicas), Memory: cfg.Streams.Memory,
	})
	bus.LogReplication(log, reps)
	if err != nil {
		return nil, err
	}
	return lim, nil
}

// logSandbox says at start how the agent children are isolated.
func logSandbox(log *slog.Logger, node string, sb *sandbox.Sandbox) {
	switch sb.Isolation() {
	case sandbox.IsolationNone:
		log.Warn("executor: agent processes are UNSANDBOXED", "node", node, "isolation", sb.Isolation(), "sandbox", sb.String())
	case sandbox.IsolationReduced:
		log.Warn("executor: agent sandbox with walls MISSING (isolation reduced, recorded on every task)", "node", node, "isolation", sb.Label(), "missing", strings.Join(sb.Missing(), "; "), "sandbox", sb.String())
	default:
		log.Info("executor: agent sandbox", "node", node, "isolation", sb.Isolation(), "sandbox", sb.String())
	}
}

// consumer ensures the executors' durable pull consumer of the work
// stream. The state service owns the stream; the executors own their
// consumer.
func (s *Service) consumer(ctx context.Context) (jetstream.Consumer, error) {
	js, err := jetstream.New(s.nc)
	if err != nil {
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	if err := bus.WaitStream(ctx, js, s.names.WorkStream()); err != nil {
		return nil, err
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, s.names.WorkStream(), jetstream.ConsumerConfig{
		Durable:       subjects.ConsumerExecutors,
		Description:   "agentmesh executors pull dispatched work",
		FilterSubject: s.names.WorkAll(),
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       s.cfg.AckWait,
		MaxDeliver:    -1,
		MaxAckPending: MaxAckPending,
		DeliverPolicy: jetstream.DeliverAllPolicy,
	})
	if err != nil {
		return nil, fmt.Errorf("consumer %s: %w", subjects.ConsumerExecutors, err)
	}
	return cons, nil
}

// Run takes work until ctx ends. Then it drains: it stops pulling, says
// so in its heartbeats, lets the running tasks finish for DrainGrace, then
// kills the children still running (their tasks go back to the queue for
// another executor, "executor draining"), waits for every task goroutine
// and returns nil.
func (s *Service) Run(ctx context.Context) error {
	sub, err := s.nc.Subscribe(s.names.TaskEventsOfType(subjects.StatusToken(statusCancelled)), s.onCancelled)
	if err != nil {
		return fmt.Errorf("executor: subscribe to cancellations: %w", err)
	}
	defer func() { _ = sub.Unsubscribe() }()

	hbCtx, stopHB := context.WithCancel(context.WithoutCancel(ctx))
	hbDone := make(chan struct{})
	go func() { defer close(hbDone); s.heartbeats(hbCtx) }()
	defer func() { stopHB(); <-hbDone }()
	// What executors of this node that no longer exist left (their task
	// cgroups and staging directories) is removed while this one runs.
	sweepDone := make(chan struct{})
	go func() { defer close(sweepDone); s.sb.SweepEvery(ctx, s.cfg.SweepInterval, s.log) }()

	reuse, warm := s.startPools()
	s.log.Info("executor started", "capacity", s.cfg.Capacity, "child", s.cfg.ChildCommand[0], "warm_pool", warmSize(s.cfg))
	var wg sync.WaitGroup
	slots := make(chan struct{}, s.cfg.Capacity)
	for ctx.Err() == nil {
		s.pull(ctx, slots, &wg)
	}
	s.drain(hbCtx, &wg)
	s.closePools(reuse, warm)
	if s.spawner != nil {
		s.spawner.Close()
	}
	<-sweepDone
	s.sb.Close() // a clean stop leaves no instance directories
	if s.limits != nil {
		s.limits.Close()
	}
	s.log.Info("executor stopped")
	return nil
}

// startPools starts the reuse pool (Config.ChildReuse) and the warm pool
// (Config.WarmPool); nil for one that is off.
func (s *Service) startPools() (*reusePool, *warmPool) {
	var reuse *reusePool
	if s.cfg.ChildReuse {
		reuse = newReusePool(s, min(s.cfg.Capacity, DefaultWarmPoolMax), ReuseIdle)
		s.mu.Lock()
		s.reuse = reuse
		s.mu.Unlock()
	}
	var warm *warmPool
	if n := warmSize(s.cfg); n > 0 {
		// Parked children count as running for the pool's bound.
		warm = newWarmPool(s, n, func() int { return s.running() + reuse.size() })
		s.mu.Lock()
		s.warm = warm
		s.mu.Unlock()
	}
	return reuse, warm
}

// pull waits for a free slot (of Capacity), fetches as many work items as
// slots are free and handles each in its own goroutine (wg), which frees
// its slot when done.
func (s *Service) pull(ctx context.Context, slots chan struct{}, wg *sync.WaitGroup) {
	select {
	case slots <- struct{}{}:
	case <-ctx.Done():
		return
	}
	free := 1
more:
	for free < s.cfg.Capacity {
		select {
		case slots <- struct{}{}:
			free++
		default:
			break more
		}
	}
	fctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	batch, err := s.cons.Fetch(free, jetstream.FetchContext(fctx))
	if err != nil {
		for range free {
			<-slots
		}
		s.log.Warn("fetch work failed", "err", err)
		backoff.Sleep(ctx, time.Second)
		return
	}
	got := 0
	for msg := range batch.Messages() {
		if ctx.Err() != nil {
			_ = msg.Nak() // arrived as we stop: another executor takes it
			continue
		}
		got++
		wg.Go(func() {
			defer func() { <-slots }()
			defer func() {
				// A bug in one task must not take the node's other tasks down.
				if p := recover(); p != nil {
					s.log.Error("task handler panicked; the work will be redelivered", "panic", p, "stack", string(debug.Stack()))
					_ = msg.Nak()
				}
			}()
			s.handle(msg)
		})
	}
	for range free - got {
		<-slots
	}
	if err := batch.Error(); err != nil && ctx.Err() == nil && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, nats.ErrTimeout) {
		s.log.Warn("fetch work failed", "err", err)
		backoff.Sleep(ctx, time.Second)
	}
}

// drain stops taking work: it says so in a heartbeat, lets the running
// tasks (wg) finish for DrainGrace, then hands the rest back to the queue
// (their children killed) and waits for every task goroutine.
func (s *Service) drain(hbCtx context.Context, wg *sync.WaitGroup) {
	s.mu.Lock()
	s.draining = true
	n := len(s.runs)
	s.mu.Unlock()
	s.heartbeat(hbCtx)
	if n > 0 {
		s.log.Info("executor draining: no new work; running tasks may finish", "running", n, "grace", s.cfg.DrainGrace)
	}
	drained := make(chan struct{})
	go func() { wg.Wait(); close(drained) }()
	grace := time.NewTimer(s.cfg.DrainGrace)
	defer grace.Stop()
	select {
	case <-drained:
	case <-grace.C:
	}
	s.mu.Lock()
	s.closing = true
	for _, r := range s.runs {
		r.log.Info("drain grace over; handing the task back to the queue")
		r.cancel(errShutdown)
	}
	s.mu.Unlock()
	<-drained
}

// closePools ends the parked and the idle warm children (their cgroups
// and staging directories removed before the spawner goes).
func (s *Service) closePools(reuse *reusePool, warm *warmPool) {
	if reuse != nil {
		reuse.close()
		st := reuse.stats()
		s.log.Info("child reuse closed", "parked", st.Parked, "hits", st.Hits, "expired", st.Expired, "refused", st.Refused)
	}
	if warm != nil {
		warm.close()
		st := warm.stats()
		s.log.Info("warm pool closed", "hits", st.Hits, "misses", st.Misses, "spawned", st.Spawned, "failed", st.Failed, "discarded", st.Discarded)
	}
}

// register records a run of the task's attempt. It returns nil when the
// executor is closing; existing when this attempt already runs here.
func (s *Service) register(ctx context.Context, key runKey, msg jetstream.Msg, log *slog.Logger) (r *run, rctx context.Context, existing *run) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return nil, nil, nil
	}
	if e, ok := s.runs[key]; ok {
		return nil, nil, e
	}
	rctx, cancel := context.WithCancelCause(ctx)
	r = &run{key: key, cancel: cancel, msg: msg, log: log}
	s.runs[key] = r
	return r, rctx, nil
}

func (s *Service) unregister(r *run) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.runs[r.key] == r {
		delete(s.runs, r.key)
	}
	r.cancel(nil)
	if s.warm != nil {
		s.warm.wake() // a slot is free: the pool may grow back
	}
}

// running is how many task attempts run here now.
func (s *Service) running() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.runs)
}

// onCancelled kills the child of a task cancelled while it runs here. The
// state already says cancelled; nothing is written.
func (s *Service) onCancelled(m *nats.Msg) {
	ev, ok := s.names.ParseEvent(m.Subject)
	if !ok || ev.Kind != subjects.KindTask {
		return
	}
	id := ev.ID
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, r := range s.runs {
		if k.task == id {
			r.log.Info("task cancelled; killing its agent process")
			r.cancel(errCancelled)
		}
	}
}

func (s *Service) heartbeats(ctx context.Context) {
	t := time.NewTicker(s.cfg.HeartbeatInterval)
	defer t.Stop()
	for {
		s.heartbeat(ctx)
		select {
		case <-t.C:
		case <-ctx.Done():
			return
		}
	}
}

func (s *Service) heartbeat(ctx context.Context) {
	s.mu.Lock()
	hb := &busv1.ExecutorHeartbeat{
		Node:     s.cfg.Node,
		Capacity: int32(s.cfg.Capacity),
		Time:     timestamppb.Now(),
		Labels:   s.cfg.Labels,
		Draining: s.draining,
		Ttl:      durationpb.New(3 * s.cfg.HeartbeatInterval),
	}
	for k := range s.runs {
		hb.RunningTasks = append(hb.RunningTasks, k.task)
	}
	s.mu.Unlock()
	hb.Running = int32(len(hb.RunningTasks))
	msg, err := bus.NewMsg(ctx, s.names.Heartbeat(s.cfg.Node), hb)
	if err == nil {
		err = s.nc.PublishMsg(msg)
	}
	if err != nil && ctx.Err() == nil {
		s.log.Warn("heartbeat not sent", "err", err)
	}
}
