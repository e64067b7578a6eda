package mcpserver

import (
	"context"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// sessionLimit keeps the HTTP sessions each API key holds open, from their
// initialize to their end (DELETE, timeout, eviction):
//
//   - it bounds them: the session that would be one too many closes the
//     key's least recently used one (an abandoned session otherwise lives
//     SessionTimeout, and a key opening sessions in a loop would hold the
//     router's memory);
//   - it ends their calls in flight when they end (ended): the SDK's close
//     of a session waits for them, so a DELETE waited for a delegate's
//     wait_seconds (up to MaxWait).
type sessionLimit struct {
	max int
	mu  sync.Mutex
	// byKey: a key's fingerprint → its sessions.
	byKey map[string]map[*mcp.ServerSession]*sessionEntry
	of    map[*mcp.ServerSession]*sessionEntry
}

// sessionEntry is one counted session.
type sessionEntry struct {
	key  string
	last time.Time // last request
	// ctx ends when the session does: its calls in flight end with it.
	ctx    context.Context
	cancel context.CancelFunc
}

func newSessionLimit(max int) *sessionLimit {
	return &sessionLimit{max: max, byKey: map[string]map[*mcp.ServerSession]*sessionEntry{}, of: map[*mcp.ServerSession]*sessionEntry{}}
}

// opened counts a session that key initialized, closing the key's least
// recently used one when it holds more than max; it forgets ss when ss
// ends.
func (l *sessionLimit) opened(key string, ss *mcp.ServerSession) {
	l.mu.Lock()
	if _, known := l.of[ss]; known {
		l.mu.Unlock()
		return // a second initialize in one session
	}
	mine := l.byKey[key]
	if mine == nil {
		mine = map[*mcp.ServerSession]*sessionEntry{}
		l.byKey[key] = mine
	}
	ctx, cancel := context.WithCancel(context.Background())
	e := &sessionEntry{key: key, last: time.Now(), ctx: ctx, cancel: cancel}
	mine[ss], l.of[ss] = e, e
	var victim *mcp.ServerSession
	if len(mine) > l.max {
		victim = l.oldestLocked(mine, ss)
		l.forgetLocked(victim)
	}
	l.mu.Unlock()
	if victim != nil {
		// Close waits for the victim's calls in flight (ended first): not
		// on this request.
		go func() { _ = victim.Close() }()
	}
	go func() {
		_ = ss.Wait()
		l.mu.Lock()
		l.forgetLocked(ss)
		l.mu.Unlock()
	}()
}

// used marks a request in ss and returns the context that ends with ss
// (nil for a session not counted: stdio's, the stateless handler's).
func (l *sessionLimit) used(ss *mcp.ServerSession) context.Context {
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.of[ss]
	if !ok {
		return nil
	}
	e.last = time.Now()
	return e.ctx
}

// ended ends the calls in flight of key's session id (one the client
// DELETEs); another key's session is left alone.
func (l *sessionLimit) ended(key, id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for ss, e := range l.byKey[key] {
		if ss.ID() == id {
			e.cancel()
		}
	}
}

// oldestLocked is the least recently used session of mine other than keep.
func (l *sessionLimit) oldestLocked(mine map[*mcp.ServerSession]*sessionEntry, keep *mcp.ServerSession) *mcp.ServerSession {
	var oldest *mcp.ServerSession
	var at time.Time
	for ss, e := range mine {
		if ss != keep && (oldest == nil || e.last.Before(at)) {
			oldest, at = ss, e.last
		}
	}
	return oldest
}

// forgetLocked drops ss, ending its calls in flight.
func (l *sessionLimit) forgetLocked(ss *mcp.ServerSession) {
	e, ok := l.of[ss]
	if !ok {
		return
	}
	e.cancel()
	delete(l.of, ss)
	delete(l.byKey[e.key], ss)
	if len(l.byKey[e.key]) == 0 {
		delete(l.byKey, e.key)
	}
}
