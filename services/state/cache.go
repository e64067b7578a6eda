package state

// The result cache (seed 000's "result caching and reuse"). An agent opts
// in with cache {ttl}. At create, the state service computes the task's
// cache key — its org, its agent (org, name, version, system prompt,
// tools, tool policies, model settings, MCP servers, skills applied) and
// its input — and, unless the submit said no_cache, looks the key up in
// its result-cache bucket: a completed task of the same org and key,
// finished within the TTL, answers the new one, which is recorded created
// → completed in one commit with cached_from and that task's result
// (store.planCachedCreate). When a task of such an agent completes, its id
// is written under its key for the TTL. A task that continues a
// conversation, waits on dependencies, is a sub-task or waits on a
// proposal has no key: its outcome depends on more than its input.
//
// Rights only narrow: a hit needs the same agent version (tools,
// policies, model) in the same org, so the answer is one the new task
// could have produced itself.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"strconv"
	"sync"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"github.com/agentmesh/agentmesh/services/state/kvstore"
	"google.golang.org/protobuf/proto"
)

// cacheKey is the task's cache key, "" when it may not be cached.
func cacheKey(t *agentmeshv1.Task) string {
	a := t.GetAgentSpec()
	if a.GetCache().GetTtl().AsDuration() <= 0 || t.GetContinueFrom() != "" || t.GetThreadId() != "" ||
		len(t.GetDependsOn()) > 0 || t.GetParentTaskId() != "" || t.GetPendingProposal() != nil {
		return ""
	}
	h := sha256.New()
	field := func(s string) {
		h.Write([]byte(strconv.Itoa(len(s))))
		h.Write([]byte{':'})
		h.Write([]byte(s))
	}
	det := proto.MarshalOptions{Deterministic: true}
	msg := func(m proto.Message) {
		b, _ := det.Marshal(m)
		field(string(b))
	}
	field("agentmesh-cache-v1")
	field(t.GetOrg())
	field(a.GetOrg())
	field(a.GetName())
	field(strconv.FormatInt(a.GetVersion(), 10))
	field(a.GetSystemPrompt())
	tools := slices.Clone(a.GetTools())
	slices.Sort(tools)
	for _, tool := range tools {
		field(tool)
	}
	field("|")
	policies := make([]string, 0, len(a.GetToolPolicies()))
	for tool, p := range a.GetToolPolicies() {
		policies = append(policies, tool+"="+p.String())
	}
	slices.Sort(policies)
	for _, p := range policies {
		field(p)
	}
	field("|")
	msg(a.GetModel())
	for _, m := range a.GetMcpServers() {
		msg(m)
	}
	field("|")
	for _, sk := range a.GetAppliedSkills() {
		msg(sk)
	}
	field("|")
	msg(a.GetMemory())
	field(t.GetInput())
	return hex.EncodeToString(h.Sum(nil))
}

func cacheEntryKey(org, key string) string { return kvstore.KeyPart(org) + "." + key }

// lookUpCache sets the task's cache key and, on a hit, cached_from and
// the result that answers it. Nothing the caller sent for these is kept.
func (s *Service) lookUpCache(ctx context.Context, t *agentmeshv1.Task) {
	t.CachedFrom, t.Result, t.CacheKey = "", "", cacheKey(t)
	if t.CacheKey == "" || t.NoCache {
		return
	}
	data, _, found, err := s.keep.cache.get(ctx, cacheEntryKey(t.Org, t.CacheKey))
	if err != nil || !found {
		return
	}
	src, err := s.store.GetTask(ctx, string(data))
	if err != nil || src.GetOrg() != t.GetOrg() || src.GetStatus() != taskstate.Completed || src.GetCacheKey() != t.CacheKey {
		return
	}
	// The TTL of the agent now (it may have been shortened since).
	ttl := t.GetAgentSpec().GetCache().GetTtl().AsDuration()
	if src.GetFinishedAt() == nil || s.keep.now().Sub(src.GetFinishedAt().AsTime()) > ttl {
		return
	}
	t.CachedFrom, t.Result = src.GetId(), src.GetResult()
}

// cacheResult records a completed task's result under its cache key for
// its agent's TTL (a task answered from the cache does not renew it),
// unless it was recorded before the completion's commit (cacheAhead).
func (s *Service) cacheResult(ctx context.Context, t *agentmeshv1.Task, ahead bool) {
	ttl := t.GetAgentSpec().GetCache().GetTtl().AsDuration()
	if ahead || t.GetCacheKey() == "" || t.GetCachedFrom() != "" || ttl <= 0 || t.GetStatus() != taskstate.Completed {
		return
	}
	s.putCacheEntry(ctx, cacheable{org: t.GetOrg(), key: t.GetCacheKey(), ttl: ttl}, t.GetId())
}

// putCacheEntry points c's key at the task id.
func (s *Service) putCacheEntry(ctx context.Context, c cacheable, id string) bool {
	key := cacheEntryKey(c.org, c.key)
	for range 4 {
		_, seq, _, err := s.keep.cache.get(ctx, key)
		if err == nil {
			_, err = s.keep.cache.put(ctx, key, []byte(id), seq, max(c.ttl, time.Second))
		}
		if err != errHotConflict {
			if err != nil {
				s.log.Warn("result not cached", "task", id, "err", err)
			}
			return err == nil
		}
	}
	return false
}

// cacheable is what a task this process created needs for its cache
// entry: its org, cache key and agent's TTL.
type cacheable struct {
	org, key string
	ttl      time.Duration
}

// maxCacheables bounds the cacheable tasks remembered; past it the map
// starts over (tasks ended by a path that does not forget them, such as a
// cancel, stay until then; a forgotten task's entry is written after its
// completion's commit).
const maxCacheables = 65536

// cacheables remembers the cacheable tasks this process created, until
// they end, so that a completion's cache entry can be written before the
// completion is committed: a client that sees the task completed (GetTask,
// its event) and submits it again finds the entry. A task this process
// did not create (another replica's, or from before a restart) gets its
// entry right after the commit (cacheResult). An entry that points at a
// task whose completion then failed to commit is ignored by lookUpCache
// (the task is not completed) until a later completion rewrites it.
type cacheables struct {
	mu sync.Mutex
	m  map[string]cacheable
}

func (c *cacheables) note(t *agentmeshv1.Task) {
	ttl := t.GetAgentSpec().GetCache().GetTtl().AsDuration()
	if t.GetCacheKey() == "" || t.GetCachedFrom() != "" || ttl <= 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= maxCacheables {
		c.m = map[string]cacheable{}
	}
	c.m[t.GetId()] = cacheable{org: t.GetOrg(), key: t.GetCacheKey(), ttl: ttl}
}

// take forgets the task and returns what was noted of it.
func (c *cacheables) take(id string) (cacheable, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.m[id]
	delete(c.m, id)
	return v, ok
}

// cacheAhead writes the cache entry of a task about to be completed, when
// this process noted it; it reports whether it did.
func (s *Service) cacheAhead(ctx context.Context, id string) bool {
	c, ok := s.cacheables.take(id)
	return ok && s.putCacheEntry(ctx, c, id)
}
