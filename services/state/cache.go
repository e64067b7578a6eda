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
// its agent's TTL (a task answered from the cache does not renew it).
func (s *Service) cacheResult(ctx context.Context, t *agentmeshv1.Task) {
	ttl := t.GetAgentSpec().GetCache().GetTtl().AsDuration()
	if t.GetCacheKey() == "" || t.GetCachedFrom() != "" || ttl <= 0 || t.GetStatus() != taskstate.Completed {
		return
	}
	key := cacheEntryKey(t.GetOrg(), t.GetCacheKey())
	for range 4 {
		_, seq, _, err := s.keep.cache.get(ctx, key)
		if err == nil {
			_, err = s.keep.cache.put(ctx, key, []byte(t.GetId()), seq, max(ttl, time.Second))
		}
		if err != errHotConflict {
			if err != nil {
				s.log.Warn("result not cached", "task", t.GetId(), "err", err)
			}
			return
		}
	}
}
