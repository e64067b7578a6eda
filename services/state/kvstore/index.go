package kvstore

import (
	"slices"
	"sort"
	"sync"

	"github.com/agentmesh/agentmesh/services/state/store"
	"google.golang.org/protobuf/proto"
)

// index is an in-memory copy of one bucket, kept in key order. Each value
// carries the KV revision it was read at, so a late update (from the
// watcher, or from this process's own write) never overwrites a newer one.
// Deleted keys keep a tombstone revision for the same reason.
type index[T any] struct {
	mu   sync.RWMutex
	m    map[string]indexed[T]
	keys []string // live keys, ascending
	// onChange, when set, sees every change of a key's live value under
	// the lock (old or new is the zero T when not live).
	onChange func(key string, old, new T, oldLive, newLive bool)
}

type indexed[T any] struct {
	v    T
	rev  uint64
	live bool
}

func newIndex[T any]() *index[T] {
	return &index[T]{m: map[string]indexed[T]{}}
}

func (ix *index[T]) put(key string, v T, rev uint64) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	cur, ok := ix.m[key]
	if ok && cur.rev >= rev {
		return
	}
	ix.m[key] = indexed[T]{v: v, rev: rev, live: true}
	if ix.onChange != nil {
		ix.onChange(key, cur.v, v, ok && cur.live, true)
	}
	if ok && cur.live {
		return
	}
	// New keys mostly sort last (ULIDs grow with time): append fast path.
	if n := len(ix.keys); n == 0 || ix.keys[n-1] < key {
		ix.keys = append(ix.keys, key)
		return
	}
	i := sort.SearchStrings(ix.keys, key)
	ix.keys = slices.Insert(ix.keys, i, key)
}

func (ix *index[T]) del(key string, rev uint64) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	cur, ok := ix.m[key]
	if ok && cur.rev >= rev {
		return
	}
	ix.m[key] = indexed[T]{rev: rev}
	if ix.onChange != nil && ok && cur.live {
		var zero T
		ix.onChange(key, cur.v, zero, true, false)
	}
	if ok && cur.live {
		if i := sort.SearchStrings(ix.keys, key); i < len(ix.keys) && ix.keys[i] == key {
			ix.keys = slices.Delete(ix.keys, i, i+1)
		}
	}
}

// descend calls fn for live keys below `before` ("" = from the top),
// greatest first, while fn returns true.
func (ix *index[T]) descend(before string, fn func(string, T) bool) {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	i := len(ix.keys)
	if before != "" {
		i = sort.SearchStrings(ix.keys, before)
	}
	for i--; i >= 0; i-- {
		k := ix.keys[i]
		if !fn(k, ix.m[k].v) {
			return
		}
	}
}

// get returns the live value of key.
func (ix *index[T]) get(key string) (T, bool) {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	e, ok := ix.m[key]
	return e.v, ok && e.live
}

// getRev returns the live value of key and the KV revision it was read at.
func (ix *index[T]) getRev(key string) (T, uint64, bool) {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	e, ok := ix.m[key]
	return e.v, e.rev, ok && e.live
}

// ascend calls fn for live keys above `after` ("" = from the bottom),
// least first, while fn returns true.
func (ix *index[T]) ascend(after string, fn func(string, T) bool) {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	i := 0
	if after != "" {
		i = sort.Search(len(ix.keys), func(j int) bool { return ix.keys[j] > after })
	}
	for ; i < len(ix.keys); i++ {
		k := ix.keys[i]
		if !fn(k, ix.m[k].v) {
			return
		}
	}
}

// orgScoped is what listOrgPage reads of an entry: the agents and skills
// of one org, or shared ("" org).
type orgScoped interface {
	proto.Message
	GetOrg() string
	GetName() string
}

// listOrgPage is one page, from the index, of the entries that org sees
// (its own and the shared ones) and keep accepts (nil: all), cloned, and
// the token of the next page ("" at the end).
func listOrgPage[T orgScoped](ix *index[T], org, pageToken string, pageSize int, keep func(T) bool) ([]T, string, error) {
	after, err := store.DecodeToken(pageToken)
	if err != nil {
		return nil, "", err
	}
	if after != "" {
		after = store.AgentPos(store.SplitAgentPos(after)) // a bare name is a shared entry's
	}
	n := store.PageSize(pageSize)
	var out []T
	more := false
	ix.ascend(after, func(_ string, v T) bool {
		if v.GetOrg() != "" && v.GetOrg() != org {
			return true
		}
		if keep != nil && !keep(v) {
			return true
		}
		if len(out) == n {
			more = true
			return false
		}
		out = append(out, proto.Clone(v).(T))
		return true
	})
	next := ""
	if more {
		last := out[len(out)-1]
		next = store.EncodeToken(store.AgentPos(last.GetOrg(), last.GetName()))
	}
	return out, next, nil
}
