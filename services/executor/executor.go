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
	"net/http"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	busv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/bus/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/subjects"
	"github.com/agentmesh/agentmesh/services/executor/llm"
	"github.com/agentmesh/agentmesh/services/executor/sandbox"
	"github.com/agentmesh/agentmesh/services/executor/spawner"
	"github.com/agentmesh/agentmesh/services/executor/webfetch"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Config configures an executor. Zero values take the defaults named.
type Config struct {
	// Prefix of every subject ("am").
	Prefix string
	// Node names this executor in heartbeats and task records; the host
	// name by default (dots become dashes: it is a subject token).
	Node string
	// Capacity is how many tasks run at once (32).
	Capacity int
	// ChildCommand runs an agent child. Default: the agentmesh-agent binary
	// next to this executable when there is one (it starts about twice as
	// fast: it links only the agent loop), else [this executable, "child"].
	ChildCommand []string
	// Model is the default model; an agent's own settings override it.
	Model llm.Config
	// WallTime bounds one attempt of a task (10m).
	WallTime time.Duration
	// MaxSteps bounds the model turns of a task whose agent sets none (16).
	MaxSteps int
	// AckWait is how long work stays ours without a sign of life (30s);
	// running tasks send in-progress every AckWait/3.
	AckWait time.Duration
	// HeartbeatInterval between executor heartbeats (5s). The scheduler
	// counts the node lost after 3 intervals without one.
	HeartbeatInterval time.Duration
	// Labels describe the node in its heartbeats (AGENTMESH_NODE_LABELS).
	Labels map[string]string
	// DrainGrace is how long a stopping executor (SIGTERM) lets its running
	// tasks finish before it hands the rest back to the queue (10s). It
	// takes no new work meanwhile and says so in its heartbeats.
	DrainGrace time.Duration
	// Streams tunes the bus streams this service ensures.
	Streams bus.StreamOptions
	// Sandbox isolates the agent children (the strict level by default; see
	// package sandbox). New probes the host and fails, naming what is
	// missing, when the level cannot be had.
	Sandbox sandbox.Config
	// Spawner says who starts the agent children: SpawnerForkServer (the
	// default: a small long-lived spawner process, see package spawner)
	// or SpawnerDirect (the executor forks them itself).
	Spawner string
	// AgentNice lowers the CPU priority of the spawner and so of every
	// agent child by this many nice steps below the executor's (0 to 19;
	// 0 = the executor's priority): when the CPU is short the agents
	// yield it to the executor and the services beside it. It applies to
	// SpawnerForkServer; with SpawnerDirect only the agents' cgroup
	// weight (Sandbox.CPUShares) applies.
	AgentNice int
	// WarmPool is how many idle warm agent children (started and
	// sandboxed ahead of time, each to serve exactly one task; see
	// warm.go) the executor keeps (AGENTMESH_WARM_POOL): 0 takes the
	// default, Capacity but at most DefaultWarmPoolMax; negative turns the
	// pool off. Idle warm children and running tasks together never
	// exceed Capacity.
	WarmPool int
	// ReleaseAfter is how long a model call runs before the child waiting
	// for it is ended, to be replaced by a fresh one when the answer comes
	// (release.go; AGENTMESH_RELEASE_AFTER): 0 takes DefaultReleaseAfter,
	// negative never releases.
	ReleaseAfter time.Duration
	// ReleaseAbove is how many children may wait for a model answer
	// before any is released (release.go; AGENTMESH_RELEASE_ABOVE): a
	// child whose call outlives ReleaseAfter is released only while more
	// than this many wait. 0 takes DefaultReleaseAbove, negative releases
	// every one.
	ReleaseAbove int
	// KeepAnswersAfter is how long a model call must have taken for the
	// executor to checkpoint its answer itself as soon as it has it —
	// handed to the child waiting for it, or while a child starts for it
	// (first.go; AGENTMESH_KEEP_ANSWERS_AFTER) — rather than with the step
	// that follows it: 0 takes DefaultKeepAnswersAfter, KeepEveryAnswer
	// keeps every answer, negative none.
	KeepAnswersAfter time.Duration
	// ChildReuse lets a child serve the next task of the same org and
	// agent (reuse.go; AGENTMESH_CHILD_REUSE=agent). Off: one child per
	// task.
	ChildReuse bool
	// Tools are the implementations of the tools this executor runs on the
	// children's behalf (tools.InExecutor), by name; a tool without one is
	// refused at the gate as not configured here.
	Tools map[string]ExecFunc
	// MCPClient connects to agents' HTTP MCP servers. Their URLs come from
	// agent definitions (API callers), so the default applies web_fetch's
	// address policy: private, loopback and link-local addresses refused
	// (webfetch.Fetcher.ServiceClient; allowlist with its Allow).
	MCPClient *http.Client
}

// Deps are the executor's dependencies.
type Deps struct {
	NC  *nats.Conn
	Log *slog.Logger
}

// Defaults.
const (
	DefaultCapacity          = 32
	DefaultWallTime          = 10 * time.Minute
	DefaultMaxSteps          = 16
	DefaultAckWait           = 30 * time.Second
	DefaultHeartbeatInterval = 5 * time.Second
	DefaultDrainGrace        = 10 * time.Second
	// MaxAckPending of the shared executors consumer: work handed out and
	// not yet acked, across all executors.
	MaxAckPending = 1 << 16
)

// AgentBinary is the name of the dedicated child binary.
const AgentBinary = "agentmesh-agent"

// DefaultChildCommand returns the child command for an executor running
// as exe: AgentBinary beside it if present, else exe re-executed as
// "child".
func DefaultChildCommand(exe string) []string {
	if exe, err := filepath.EvalSymlinks(exe); err == nil {
		agent := filepath.Join(filepath.Dir(exe), AgentBinary)
		if fi, err := os.Stat(agent); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return []string{agent}
		}
	}
	return []string{exe, "child"}
}

// Service is one executor.
type Service struct {
	cfg   Config
	nc    *nats.Conn
	log   *slog.Logger
	names subjects.Names
	cons  jetstream.Consumer
	model *llm.Models
	sb    *sandbox.Sandbox // the agent children's sandbox
	// spawner starts the children (nil: the executor does, SpawnerDirect).
	spawner *spawner.Client
	// warm is the warm pool while Run runs (nil: off, or not running).
	warm *warmPool
	// reuse parks children for the next task of their key while Run runs
	// (nil: Config.ChildReuse off, or not running).
	reuse *reusePool
	// execTools run tools on the children's behalf (Config.Tools).
	execTools map[string]ExecFunc
	// released and resumed count the children released while their model
	// call ran and the children that took over (release.go).
	released, resumed atomic.Int64
	// waitingChildren: children waiting for a model answer now, not
	// released (release.go, awaitModel).
	waitingChildren atomic.Int64
	// childAfterAnswer counts the children started when the first model
	// turn asked ahead had answered (first.go).
	childAfterAnswer atomic.Int64
	// spawnGate bounds the spawns in progress (spawn.go's spawnConcurrency).
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

// New validates cfg, ensures the bus streams and the executors consumer.
func New(ctx context.Context, cfg Config, deps Deps) (*Service, error) {
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
	if cfg.Node == "" {
		h, err := os.Hostname()
		if err != nil {
			return nil, fmt.Errorf("executor: node name: %w", err)
		}
		cfg.Node = strings.NewReplacer(".", "-", "*", "-", ">", "-", " ", "-").Replace(h)
	}
	if !subjects.ValidToken(cfg.Node) {
		return nil, fmt.Errorf("executor: node %q is not a valid subject token", cfg.Node)
	}
	if cfg.Capacity <= 0 {
		cfg.Capacity = DefaultCapacity
	}
	if cfg.MCPClient == nil {
		f, err := webfetch.New(webfetch.Config{})
		if err != nil {
			return nil, fmt.Errorf("executor: %w", err)
		}
		cfg.MCPClient = f.ServiceClient()
	}
	cfg.MCPClient = limitMCPClient(cfg.MCPClient)
	if len(cfg.ChildCommand) == 0 {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("executor: child command: %w", err)
		}
		cfg.ChildCommand = DefaultChildCommand(exe)
	}
	if cfg.WallTime <= 0 {
		cfg.WallTime = DefaultWallTime
	}
	if cfg.MaxSteps <= 0 {
		cfg.MaxSteps = DefaultMaxSteps
	}
	if cfg.AckWait <= 0 {
		cfg.AckWait = DefaultAckWait
	}
	if cfg.HeartbeatInterval <= 0 {
		cfg.HeartbeatInterval = DefaultHeartbeatInterval
	}
	if cfg.DrainGrace <= 0 {
		cfg.DrainGrace = DefaultDrainGrace
	}

	sb, err := sandbox.New(cfg.Sandbox)
	if err != nil {
		return nil, fmt.Errorf("executor: %w", err)
	}
	switch sb.Isolation() {
	case sandbox.IsolationNone:
		deps.Log.Warn("executor: agent processes are UNSANDBOXED", "node", cfg.Node, "isolation", sb.Isolation(), "sandbox", sb.String())
	case sandbox.IsolationReduced:
		deps.Log.Warn("executor: agent sandbox with walls MISSING (isolation reduced, recorded on every task)", "node", cfg.Node, "isolation", sb.Label(), "missing", strings.Join(sb.Missing(), "; "), "sandbox", sb.String())
	default:
		deps.Log.Info("executor: agent sandbox", "node", cfg.Node, "isolation", sb.Isolation(), "sandbox", sb.String())
	}

	mode, err := ParseSpawner(cfg.Spawner)
	if err != nil {
		return nil, fmt.Errorf("executor: %w", err)
	}
	cfg.Spawner = mode
	var sp *spawner.Client
	if mode == SpawnerForkServer {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("executor: spawner: %w", err)
		}
		if sp, err = spawner.StartWith(exe, deps.Log.With("service", "executor", "node", cfg.Node), spawner.Options{Nice: cfg.AgentNice}); err != nil {
			return nil, fmt.Errorf("executor: %w", err)
		}
	}
	// From here on an error must stop the spawner.
	fail := func(err error) (*Service, error) {
		if sp != nil {
			sp.Close()
		}
		return nil, err
	}

	js, err := jetstream.New(deps.NC)
	if err != nil {
		return fail(fmt.Errorf("executor: jetstream: %w", err))
	}
	// The state service owns the stream; the executors own their consumer.
	if err := bus.WaitStream(ctx, js, names.WorkStream()); err != nil {
		return fail(fmt.Errorf("executor: %w", err))
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, names.WorkStream(), jetstream.ConsumerConfig{
		Durable:       subjects.ConsumerExecutors,
		Description:   "agentmesh executors pull dispatched work",
		FilterSubject: names.WorkAll(),
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       cfg.AckWait,
		MaxDeliver:    -1,
		MaxAckPending: MaxAckPending,
		DeliverPolicy: jetstream.DeliverAllPolicy,
	})
	if err != nil {
		return fail(fmt.Errorf("executor: consumer %s: %w", subjects.ConsumerExecutors, err))
	}
	log := deps.Log.With("service", "executor", "node", cfg.Node)
	model, err := llm.New(cfg.Model, log)
	if err != nil {
		return fail(fmt.Errorf("executor: %w", err))
	}
	return &Service{
		cfg:   cfg,
		nc:    deps.NC,
		log:   log,
		names: names,
		cons:  cons,
		sb:    sb, spawner: sp,
		model: model, execTools: cfg.Tools,
		runs:      map[runKey]*run{},
		spawnGate: make(chan struct{}, spawnConcurrency()),
	}, nil
}

// Node returns the executor's node name.
func (s *Service) Node() string { return s.cfg.Node }

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

	var wg sync.WaitGroup
	hbCtx, stopHB := context.WithCancel(context.WithoutCancel(ctx))
	hbDone := make(chan struct{})
	go func() { defer close(hbDone); s.heartbeats(hbCtx) }()
	defer func() { stopHB(); <-hbDone }()

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
	slots := make(chan struct{}, s.cfg.Capacity)
	s.log.Info("executor started", "capacity", s.cfg.Capacity, "child", s.cfg.ChildCommand[0], "warm_pool", warmSize(s.cfg))
	for ctx.Err() == nil {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			continue
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
		batch, err := s.cons.Fetch(free, jetstream.FetchContext(fctx))
		if err != nil {
			cancel()
			for range free {
				<-slots
			}
			s.log.Warn("fetch work failed", "err", err)
			sleep(ctx, time.Second)
			continue
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
		cancel()
		for range free - got {
			<-slots
		}
		if err := batch.Error(); err != nil && ctx.Err() == nil && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, nats.ErrTimeout) {
			s.log.Warn("fetch work failed", "err", err)
			sleep(ctx, time.Second)
		}
	}

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
		s.log.Info("drain grace over; handing the task back to the queue", "task", r.key.task, "attempt", r.key.attempt)
		r.cancel(errShutdown)
	}
	s.mu.Unlock()
	<-drained
	if reuse != nil {
		reuse.close()
		st := reuse.stats()
		s.log.Info("child reuse closed", "parked", st.Parked, "hits", st.Hits, "expired", st.Expired, "refused", st.Refused)
	}
	if warm != nil {
		// Idle warm children are killed and their cgroups and staging
		// directories removed before the spawner goes.
		warm.close()
		st := warm.stats()
		s.log.Info("warm pool closed", "hits", st.Hits, "misses", st.Misses, "spawned", st.Spawned, "failed", st.Failed, "discarded", st.Discarded)
	}
	if s.spawner != nil {
		s.spawner.Close()
	}
	s.log.Info("executor stopped")
	return nil
}

// register records a run of the task's attempt. It returns nil when the
// executor is closing; existing when this attempt already runs here.
func (s *Service) register(ctx context.Context, key runKey, msg jetstream.Msg) (r *run, rctx context.Context, existing *run) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return nil, nil, nil
	}
	if e, ok := s.runs[key]; ok {
		return nil, nil, e
	}
	rctx, cancel := context.WithCancelCause(ctx)
	r = &run{key: key, cancel: cancel, msg: msg}
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
	id := taskIDFromSubject(m.Subject)
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, r := range s.runs {
		if k.task == id {
			s.log.Info("task cancelled; killing its agent process", "task", id, "attempt", k.attempt)
			r.cancel(errCancelled)
		}
	}
}

// taskIDFromSubject returns <id> of <p>.evt.<org>.task.<id>.<type>.
func taskIDFromSubject(subj string) string {
	toks := strings.Split(subj, ".")
	if len(toks) < 2 {
		return ""
	}
	return toks[len(toks)-2]
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

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
