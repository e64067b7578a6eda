package state

// What agents keep (issue 30, docs/memory.md): the state service serves
// working state (wstate.go), long-term memories and their search
// (memories.go), threads (threads.go) and the result cache (cache.go). The
// keeper holds what they share: the store's Remembering part, the two hot
// buckets, the search indexes, the origins of tool calls and the limits.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	busv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/bus/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/envconf"
	"github.com/agentmesh/agentmesh/pkg/memory"
	"github.com/agentmesh/agentmesh/pkg/subjects"
	"github.com/agentmesh/agentmesh/services/state/kvstore"
	"github.com/agentmesh/agentmesh/services/state/store"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
)

// MemoryConfig bounds what agents keep.
type MemoryConfig struct {
	// MaxAge: memories older than this are deleted by the retention
	// sweep (AGENTMESH_MEMORY_MAX_AGE; 0 keeps them).
	MaxAge time.Duration
	// MaxPerScope: a scope keeps at most this many memories, the newest;
	// a remember beyond it deletes the oldest (AGENTMESH_MEMORY_MAX_PER_SCOPE;
	// 0 means DefaultMaxPerScope, negative no limit).
	MaxPerScope int
	// HotBytes bounds the hot working-state bucket (DefaultHotBytes).
	HotBytes int64
}

// Defaults of MemoryConfig and the keeper's own bounds.
const (
	DefaultMaxPerScope = 10000
	DefaultHotBytes    = 256 << 20
	// cacheBytes bounds the result-cache bucket (an entry is a task id).
	cacheBytes = 32 << 20
	// forgetDeletionsAfter: how long a memory's deletion is kept as a
	// change for the search indexes of other state processes.
	forgetDeletionsAfter = 24 * time.Hour
	// rebuildAfter: an index not synced for this long is read again
	// from the start (well within forgetDeletionsAfter).
	rebuildAfter = time.Hour
	// memorySweepEvery: the retention sweep of working state and memories.
	memorySweepEvery = 10 * time.Minute
)

// The state service's variables for what agents keep.
const (
	EnvMemoryMaxAge      = "AGENTMESH_MEMORY_MAX_AGE"
	EnvMemoryMaxPerScope = "AGENTMESH_MEMORY_MAX_PER_SCOPE"
)

// readMemoryConfig reads the memory limits (ConfigFromEnv).
func readMemoryConfig(r *envconf.Reader) MemoryConfig {
	var c MemoryConfig
	if r.String(EnvMemoryMaxAge) != "" {
		if c.MaxAge = r.Duration(EnvMemoryMaxAge); c.MaxAge < 0 {
			r.Fail(EnvMemoryMaxAge, "want a duration such as 2160h, or 0 to keep memories for ever")
		}
	}
	if r.String(EnvMemoryMaxPerScope) != "" {
		c.MaxPerScope = r.IntRange(EnvMemoryMaxPerScope, -1, 10_000_000)
	}
	return c
}

func (c MemoryConfig) withDefaults() MemoryConfig {
	if c.MaxPerScope == 0 {
		c.MaxPerScope = DefaultMaxPerScope
	}
	if c.HotBytes == 0 {
		c.HotBytes = DefaultHotBytes
	}
	return c
}

// keeper is the state service's part for what agents keep.
type keeper struct {
	store store.Remembering
	hot   *hotKV // working state
	cache *hotKV // the result cache
	cfg   MemoryConfig
	log   *slog.Logger
	now   func() time.Time

	originsMu sync.Mutex
	origins   map[string]*originTask // by task id

	indexesMu sync.Mutex
	indexes   map[string]*orgIndex // by org
}

// openKeeper creates the hot buckets.
// Six parameters: a constructor given each of the keeper's dependencies.
func openKeeper(ctx context.Context, js jetstream.JetStream, names subjects.Names, cfg Config, st store.Store, log *slog.Logger) (*keeper, error) {
	mc := cfg.Memory.withDefaults()
	k := &keeper{store: store.Instrument(st), cfg: mc, log: log, now: time.Now, origins: map[string]*originTask{}, indexes: map[string]*orgIndex{}}
	var reps []bus.Replication
	var err error
	if k.hot, reps, err = openHot(ctx, js, names.WorkingStateBucket(), "agentmesh working state, hot (issue 30)", cfg.Streams, mc.HotBytes); err != nil {
		return nil, fmt.Errorf("working state bucket: %w", err)
	}
	bus.LogReplication(log, reps)
	if k.cache, reps, err = openHot(ctx, js, names.ResultCacheBucket(), "agentmesh result cache (issue 30)", cfg.Streams, cacheBytes); err != nil {
		return nil, fmt.Errorf("result cache bucket: %w", err)
	}
	bus.LogReplication(log, reps)
	return k, nil
}

// memoryEndpoints serve working state, memories and threads.
func (s *Service) memoryEndpoints() []struct {
	op string
	h  micro.Handler
} {
	stateOp := func() *busv1.StateOp { return &busv1.StateOp{} }
	memOp := func() *busv1.MemoryOp { return &busv1.MemoryOp{} }
	threadOp := func() *busv1.ThreadOp { return &busv1.ThreadOp{} }
	return []struct {
		op string
		h  micro.Handler
	}{
		{subjects.StateGetState, bus.Handler(s.log, stateOp, s.getState)},
		{subjects.StateSetState, bus.Handler(s.log, stateOp, s.setState)},
		{subjects.StateDeleteState, bus.Handler(s.log, stateOp, s.deleteState)},
		{subjects.StateListState, bus.Handler(s.log, stateOp, s.listState)},
		{subjects.StateRemember, bus.Handler(s.log, memOp, s.remember)},
		{subjects.StateSearchMemories, bus.Handler(s.log, memOp, s.searchMemories)},
		{subjects.StateGetMemory, bus.Handler(s.log, memOp, s.getMemory)},
		{subjects.StateListMemories, bus.Handler(s.log, memOp, s.listMemories)},
		{subjects.StateDeleteMemory, bus.Handler(s.log, memOp, s.deleteMemory)},
		{subjects.StatePruneMemories, bus.Handler(s.log, memOp, s.pruneMemories)},
		{subjects.StateListThreads, bus.Handler(s.log, threadOp, s.listThreads)},
		{subjects.StateGetThread, bus.Handler(s.log, threadOp, s.getThread)},
		{subjects.StateDeleteThread, bus.Handler(s.log, threadOp, s.deleteThread)},
	}
}

// memoryLoop sweeps expired working state and applies the memories'
// retention until ctx ends.
func (s *Service) memoryLoop(ctx context.Context) {
	t := time.NewTicker(memorySweepEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.sweepMemory(ctx)
		}
	}
}

func (s *Service) sweepMemory(ctx context.Context) {
	now := s.keep.now()
	if n, err := s.keep.store.DeleteExpiredState(ctx, now); err != nil {
		s.log.Warn("working state sweep", "err", err)
	} else if n > 0 {
		s.log.Info("expired working state deleted", "entries", n)
	}
	var before time.Time
	if s.keep.cfg.MaxAge > 0 {
		before = now.Add(-s.keep.cfg.MaxAge)
	}
	if n, err := s.keep.store.ExpireMemories(ctx, before, now.Add(-forgetDeletionsAfter)); err != nil {
		s.log.Warn("memory retention", "err", err)
	} else if n > 0 {
		s.log.Info("memories past their retention deleted", "memories", n, "max_age", s.keep.cfg.MaxAge)
	}
}

// ---- who asks ----

// originTask is what the keeper remembers of a task whose tools call it:
// nothing of it changes after the task is created.
type originTask struct {
	task   *agentmeshv1.Task
	policy memory.Policy // its own narrowed by its ancestors'
}

// origin is who asks, resolved.
type origin struct {
	// task is the calling tool's task (nil for an API caller).
	task   *agentmeshv1.Task
	policy memory.Policy
	prov   *agentmeshv1.Provenance
	idem   string
}

// maxOrigins bounds the remembered origins (the map is emptied when full).
const maxOrigins = 10000

// originOf resolves who asks for org: a task (read once, then
// remembered; another org's task is not found) or an API key.
func (s *Service) originOf(ctx context.Context, org string, o *busv1.MemoryOrigin) (origin, error) {
	if err := checkOrg(org); err != nil {
		return origin{}, err
	}
	if o.GetTaskId() == "" {
		return origin{prov: &agentmeshv1.Provenance{KeyName: o.GetKeyName()}}, nil
	}
	ot, err := s.originTask(ctx, o.GetTaskId(), 0)
	if err != nil {
		return origin{}, err
	}
	if ot.task.GetOrg() != org {
		return origin{}, bus.Errorf(bus.CodeNotFound, "task %q not found", o.GetTaskId())
	}
	t := ot.task
	return origin{task: t, policy: ot.policy, idem: o.GetIdempotencyKey(), prov: &agentmeshv1.Provenance{
		TaskId: t.GetId(), Agent: t.GetAgent(), AgentVersion: t.GetAgentSpec().GetVersion(),
	}}, nil
}

// originTask returns the task id and its effective memory policy: its
// agent's, narrowed by every ancestor's (a sub-task never gains a scope
// its parent lacks).
func (s *Service) originTask(ctx context.Context, id string, depth int) (*originTask, error) {
	s.keep.originsMu.Lock()
	ot := s.keep.origins[id]
	s.keep.originsMu.Unlock()
	if ot != nil {
		return ot, nil
	}
	t, err := s.store.GetTask(ctx, id)
	if err != nil {
		return nil, err
	}
	pol := memory.PolicyOf(t.GetAgentSpec())
	if p := t.GetParentTaskId(); p != "" && p != id && depth < 64 {
		parent, err := s.originTask(ctx, p, depth+1)
		if err != nil && !errors.Is(err, bus.ErrNotFound) {
			return nil, err
		}
		if parent != nil {
			pol = memory.Narrow(pol, parent.policy)
		}
	}
	ot = &originTask{task: &agentmeshv1.Task{
		Id: t.GetId(), Org: t.GetOrg(), Agent: t.GetAgent(), RootTaskId: t.GetRootTaskId(),
		ParentTaskId: t.GetParentTaskId(), AgentSpec: &agentmeshv1.Agent{Version: t.GetAgentSpec().GetVersion()},
	}, policy: pol}
	s.keep.originsMu.Lock()
	if len(s.keep.origins) >= maxOrigins {
		clear(s.keep.origins)
	}
	s.keep.origins[id] = ot
	s.keep.originsMu.Unlock()
	return ot, nil
}

// target is the scope and scope id a request reaches: a tool's scope ids
// are its task's (whatever the request says) and its agent's policy must
// allow the access; an API caller names the scope id within its org.
func (o origin) target(tool, scopeName, scopeID string, write bool) (memory.Scope, string, error) {
	sc, err := memory.ParseScope(scopeName)
	if err != nil {
		return "", "", bus.FieldError("scope", "%v", err)
	}
	if o.task == nil {
		if err := memory.CheckScopeID(sc, scopeID); err != nil {
			return "", "", bus.FieldError("scope_id", "%v", err)
		}
		return sc, scopeID, nil
	}
	if why := o.policy.Denied(tool, memory.Access{Scope: sc, Write: write}); why != "" {
		return "", "", &bus.Error{Code: bus.CodePermissionDenied, Field: "scope", Message: why}
	}
	return sc, memory.ScopeID(sc, o.task), nil
}

// hotKey is an entry's key in the hot bucket (each part as the embedded
// store keys its own; the entry's key's dots make more tokens).
func hotKey(k store.StateKey) string {
	return hotScope(k.Org, k.Scope, k.ScopeID) + "." + k.Key
}

func hotScope(org, scope, scopeID string) string {
	sc, _ := memory.ParseScope(scope)
	return kvstore.KeyPart(org) + "." + sc.Token() + "." + kvstore.KeyPart(scopeID)
}
