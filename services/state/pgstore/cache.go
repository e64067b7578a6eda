package pgstore

import (
	"sync"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/taskstate"
	"google.golang.org/protobuf/proto"
)

// writeCache remembers the task row this process last wrote, per task, so
// the next write of that task can plan against it instead of reading the
// row first: one round trip per write instead of two. It is only a guess:
// the write's compare-and-set (last_event_seq) still decides, a write that
// loses (another state process wrote meanwhile) re-reads the row, and a
// plan that fails against a cached row is planned again against a fresh
// read before its error is returned. Reads (GetTask, lists) never use it.
type writeCache struct {
	mu sync.Mutex
	m  map[string]*agentmeshv1.Task
}

// writeCacheMax bounds the tasks remembered; past it the cache starts over
// (unfinished tasks come back with their next write).
const writeCacheMax = 16384

// get returns the remembered row, shared: the caller must not change it
// (the plans do not: taskstate.Apply clones).
func (c *writeCache) get(id string) *agentmeshv1.Task {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[id]
}

// put remembers t unless a newer version is known; a finished task is
// forgotten (terminal tasks are not written again).
func (c *writeCache) put(t *agentmeshv1.Task) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if taskstate.Terminal(t.Status) {
		delete(c.m, t.Id)
		return
	}
	if old := c.m[t.Id]; old != nil && old.LastEventSeq >= t.LastEventSeq {
		return
	}
	if c.m == nil || len(c.m) >= writeCacheMax {
		c.m = make(map[string]*agentmeshv1.Task)
	}
	c.m[t.Id] = proto.Clone(t).(*agentmeshv1.Task)
}

func (c *writeCache) forget(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, id)
}
