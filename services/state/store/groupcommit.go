package store

import (
	"context"
	"slices"
	"sync"
	"time"
)

// Group commit: the writes of many tasks that wait at the same moment are
// committed together — one Postgres transaction (pgstore), one pipelined
// batch of JetStream publishes (kvstore) — instead of one commit each.
// Each caller is still answered only after its own write is durable, with
// its own outcome: a write that lost its compare-and-set or was refused
// does not fail the others of its group.
//
// There is no timer: a write that finds no commit under way is committed at
// once (at concurrency 1 nothing waits), and the writes that arrive while a
// commit is under way form the next group.

// MaxGroup bounds the writes committed together.
const MaxGroup = 256

// commitTimeout bounds one group's commit.
const commitTimeout = 10 * time.Second

// CommitStats counts a store's group commits.
type CommitStats struct {
	// Groups committed and the writes in them.
	Groups, Writes int64
	// Largest group so far.
	Largest int
}

// GroupCommitter is a store whose writes commit in groups. The conformance
// suite (storetest) uses it to hold the commits back while it queues a
// known set of writes, and to check they went out as one group.
type GroupCommitter interface {
	// CommitStats returns the counts so far.
	CommitStats() CommitStats
	// PauseCommits holds back every group not yet under way until resume
	// is called (for tests: writes queue up meanwhile).
	PauseCommits() (resume func())
	// WaitingCommits is the number of writes queued and not yet under way.
	WaitingCommits() int
}

// GroupCommit gathers writes of type W and commits them in groups through
// flush, which returns one error (or nil) per write, in order. Its zero
// value is not usable: see NewGroupCommit.
type GroupCommit[W any] struct {
	flush func(ctx context.Context, ws []W) []error

	mu      sync.Mutex
	queue   []*pendingWrite[W]
	running bool
	paused  bool
	stats   CommitStats
}

type pendingWrite[W any] struct {
	w    W
	err  error
	done chan struct{}
}

// NewGroupCommit returns a group committer over flush.
func NewGroupCommit[W any](flush func(ctx context.Context, ws []W) []error) *GroupCommit[W] {
	return &GroupCommit[W]{flush: flush}
}

// Do queues w and returns its outcome once its group is committed. If ctx
// ends before the group is under way, w is withdrawn and ctx's error is
// returned; once under way, Do waits for the commit's outcome (bounded by
// the commit's own timeout), so an error never hides a committed write.
func (g *GroupCommit[W]) Do(ctx context.Context, w W) error {
	p := &pendingWrite[W]{w: w, done: make(chan struct{})}
	g.mu.Lock()
	g.queue = append(g.queue, p)
	g.startLocked()
	g.mu.Unlock()
	select {
	case <-p.done:
		return p.err
	case <-ctx.Done():
	}
	g.mu.Lock()
	if i := slices.Index(g.queue, p); i >= 0 {
		g.queue = slices.Delete(g.queue, i, i+1)
		g.mu.Unlock()
		return ctx.Err()
	}
	g.mu.Unlock()
	<-p.done
	return p.err
}

// startLocked starts the committing goroutine unless one runs (or commits
// are paused). It exits when the queue is empty. g.mu is held.
func (g *GroupCommit[W]) startLocked() {
	if g.running || g.paused || len(g.queue) == 0 {
		return
	}
	g.running = true
	go g.run()
}

func (g *GroupCommit[W]) run() {
	for {
		g.mu.Lock()
		if len(g.queue) == 0 || g.paused {
			g.running = false
			g.mu.Unlock()
			return
		}
		n := min(len(g.queue), MaxGroup)
		group := slices.Clone(g.queue[:n])
		g.queue = slices.Delete(g.queue, 0, n)
		g.stats.Groups++
		g.stats.Writes += int64(n)
		g.stats.Largest = max(g.stats.Largest, n)
		g.mu.Unlock()

		ws := make([]W, n)
		for i, p := range group {
			ws[i] = p.w
		}
		ctx, cancel := context.WithTimeout(context.Background(), commitTimeout)
		errs := g.flush(ctx, ws)
		cancel()
		for i, p := range group {
			p.err = errs[i]
			close(p.done)
		}
	}
}

// Stats returns the counts so far.
func (g *GroupCommit[W]) Stats() CommitStats {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.stats
}

// Pause holds back every group not yet under way until resume is called.
func (g *GroupCommit[W]) Pause() (resume func()) {
	g.mu.Lock()
	g.paused = true
	g.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			g.mu.Lock()
			g.paused = false
			g.startLocked()
			g.mu.Unlock()
		})
	}
}

// Waiting is the number of writes queued and not yet under way.
func (g *GroupCommit[W]) Waiting() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.queue)
}
