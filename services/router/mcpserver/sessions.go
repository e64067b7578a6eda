package mcpserver

import (
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// sessionLimit bounds the HTTP sessions one API key holds open: the
// session that would be one too many closes the key's least recently used
// one (an abandoned session otherwise lives SessionTimeout, and a key
// opening sessions in a loop would hold the router's memory). Sessions are
// counted from their initialize to their end (DELETE, timeout, eviction).
type sessionLimit struct {
	max int
	mu  sync.Mutex
	// byKey: a key's fingerprint → its sessions → when each was last used.
	byKey map[string]map[*mcp.ServerSession]time.Time
	keyOf map[*mcp.ServerSession]string
}

func newSessionLimit(max int) *sessionLimit {
	return &sessionLimit{max: max, byKey: map[string]map[*mcp.ServerSession]time.Time{}, keyOf: map[*mcp.ServerSession]string{}}
}

// opened counts a session that key initialized, closing the key's least
// recently used one when it holds more than max; it forgets ss when ss
// ends.
func (l *sessionLimit) opened(key string, ss *mcp.ServerSession) {
	l.mu.Lock()
	if _, known := l.keyOf[ss]; known {
		l.mu.Unlock()
		return // a second initialize in one session
	}
	mine := l.byKey[key]
	if mine == nil {
		mine = map[*mcp.ServerSession]time.Time{}
		l.byKey[key] = mine
	}
	mine[ss] = time.Now()
	l.keyOf[ss] = key
	var victim *mcp.ServerSession
	if len(mine) > l.max {
		victim = l.oldestLocked(mine, ss)
		l.forgetLocked(victim)
	}
	l.mu.Unlock()
	if victim != nil {
		// Close waits for the victim's calls in flight: not on this request.
		go func() { _ = victim.Close() }()
	}
	go func() {
		_ = ss.Wait()
		l.mu.Lock()
		l.forgetLocked(ss)
		l.mu.Unlock()
	}()
}

// used marks a request in ss (a session not counted is ignored: stdio's,
// the stateless handler's).
func (l *sessionLimit) used(ss *mcp.ServerSession) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if key, ok := l.keyOf[ss]; ok {
		l.byKey[key][ss] = time.Now()
	}
}

// oldestLocked is the least recently used session of mine other than keep.
func (l *sessionLimit) oldestLocked(mine map[*mcp.ServerSession]time.Time, keep *mcp.ServerSession) *mcp.ServerSession {
	var oldest *mcp.ServerSession
	var at time.Time
	for ss, last := range mine {
		if ss != keep && (oldest == nil || last.Before(at)) {
			oldest, at = ss, last
		}
	}
	return oldest
}

func (l *sessionLimit) forgetLocked(ss *mcp.ServerSession) {
	key, ok := l.keyOf[ss]
	if !ok {
		return
	}
	delete(l.keyOf, ss)
	delete(l.byKey[key], ss)
	if len(l.byKey[key]) == 0 {
		delete(l.byKey, key)
	}
}
