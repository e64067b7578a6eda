package executor

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentmesh/agentmesh/pkg/backoff"
)

// The warm pool (Config.WarmPool, AGENTMESH_WARM_POOL): agent children
// started ahead of time, so that dispatch → first model call does not wait
// for a spawn.
//
// A warm child is an ordinary sandboxed child (Service.spawn: its own
// staging directory, cgroups with the executor's limits, a host uid of its
// own, every wall entered by sandbox.Enter) that has not been sent its
// Start frame yet: it is blocked reading its stdin. Nothing in it depends on
// a task — the sandbox's walls are the executor's, the same for every task —
// and nothing of a task reaches it before it is claimed. Claiming one hands
// it exactly one task (its Start frame, written by the executor); after that
// task it exits and is cleaned up like any child. It is never returned to
// the pool, so it never serves a second task, another agent or another org.
//
// The pool is refilled by its own goroutines, off the critical path: a
// claim only wakes them. Idle warm children and running tasks together
// never exceed Capacity, so the pool adds no process beyond what a full
// executor holds anyway.

// warmRefillers is how many spawns the pool runs at once when refilling.
const warmRefillers = 2

// WarmStats counts what the warm pool did.
type WarmStats struct {
	// Hits: tasks that got a warm child; Misses: looks that found the pool
	// empty (a task whose first model turn is asked before its child looks
	// at its start and again when the answer comes, first.go).
	Hits, Misses int64
	// Spawned warm children, and spawns that failed.
	Spawned, Failed int64
	// Discarded: warm children found dead when claimed, or killed idle at
	// shutdown.
	Discarded int64
	// Idle now.
	Idle int
}

// warmPool keeps up to size idle warm children.
type warmPool struct {
	s    *Service
	size int
	// running is how many tasks run now (idle + running ≤ Capacity).
	running func() int

	ctx    context.Context
	cancel context.CancelFunc
	kick   chan struct{}
	wg     sync.WaitGroup

	mu       sync.Mutex
	idle     []*process
	starting int
	closed   bool

	hits, misses, spawned, failed, discarded atomic.Int64
}

// newWarmPool starts the pool's refillers; close stops them and kills the
// idle children.
func newWarmPool(s *Service, size int, running func() int) *warmPool {
	ctx, cancel := context.WithCancel(context.Background())
	w := &warmPool{s: s, size: size, running: running, ctx: ctx, cancel: cancel, kick: make(chan struct{}, 1)}
	for range warmRefillers {
		w.wg.Go(w.refill)
	}
	w.wake()
	return w
}

// wake asks the refillers to top the pool up (never blocks).
func (w *warmPool) wake() {
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// reserve books one spawn if the pool needs one.
func (w *warmPool) reserve() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return false
	}
	have := len(w.idle) + w.starting
	if have >= w.size || have+w.running() >= w.s.cfg.Capacity {
		return false
	}
	w.starting++
	return true
}

func (w *warmPool) refill() {
	for {
		select {
		case <-w.kick:
		case <-w.ctx.Done():
			return
		}
		for w.reserve() {
			p, err := w.spawnOne()
			w.mu.Lock()
			w.starting--
			if err == nil && !w.closed {
				w.idle = append(w.idle, p)
				p = nil
			}
			w.mu.Unlock()
			if p != nil { // closed meanwhile
				w.discarded.Add(1)
				p.cleanup()
			}
			if err != nil {
				w.failed.Add(1)
				if w.ctx.Err() == nil {
					w.s.log.Warn("warm pool: could not start a warm agent process; tasks spawn their own meanwhile", "err", err)
					backoff.Sleep(w.ctx, time.Second)
					w.wake() // try again
				}
				break
			}
			w.spawned.Add(1)
		}
	}
}

var warmSeq atomic.Int64

// spawnOne starts one warm child. Its context is its own: the pool's end
// does not kill a claimed child, and a claim links it to its task's.
func (w *warmPool) spawnOne() (*process, error) {
	ctx, cancel := context.WithCancel(context.Background())
	p, err := w.s.spawnIn(ctx, fmt.Sprintf("warm-%d-%d", os.Getpid(), warmSeq.Add(1)), true)
	if err != nil {
		cancel()
		return nil, err
	}
	p.release = cancel
	return p, nil
}

// take hands out the oldest idle warm child (nil when there is none),
// brought from the background CPU weight it started with to the default
// one, and wakes the refillers. A child found dead is discarded.
func (w *warmPool) take() *process {
	defer w.wake()
	for {
		w.mu.Lock()
		n := len(w.idle)
		if n == 0 || w.closed {
			w.mu.Unlock()
			w.misses.Add(1)
			return nil
		}
		// The oldest first: it has long finished starting (its runtime's
		// start and its sandbox's walls), while the newest may still be
		// starting — the refill of the previous claim — and would make its
		// task wait for that.
		p := w.idle[0]
		copy(w.idle, w.idle[1:])
		w.idle[n-1] = nil
		w.idle = w.idle[:n-1]
		w.mu.Unlock()
		if p.h.exited() {
			w.discarded.Add(1)
			w.s.log.Warn("warm pool: a warm agent process ended while idle; discarded", "pid", p.pid, "stderr", strings.TrimSpace(p.stderr.String()))
			go p.cleanup()
			continue
		}
		if p.sb != nil {
			if err := p.sb.SetBackground(false); err != nil {
				w.s.log.Warn("warm pool: the claimed agent process keeps the background CPU weight", "pid", p.pid, "err", err)
			}
		}
		w.hits.Add(1)
		return p
	}
}

// close stops the refillers and kills and cleans up every idle child
// (their cgroups and staging directories go with them).
func (w *warmPool) close() {
	w.mu.Lock()
	w.closed = true
	idle := w.idle
	w.idle = nil
	w.mu.Unlock()
	w.cancel()
	w.wg.Wait()
	for _, p := range idle {
		w.discarded.Add(1)
		p.cleanup()
	}
}

func (w *warmPool) stats() WarmStats {
	w.mu.Lock()
	idle := len(w.idle)
	w.mu.Unlock()
	return WarmStats{
		Hits: w.hits.Load(), Misses: w.misses.Load(),
		Spawned: w.spawned.Load(), Failed: w.failed.Load(), Discarded: w.discarded.Load(),
		Idle: idle,
	}
}

// WarmStats reports the warm pool's counts (zero when it is off).
func (s *Service) WarmStats() WarmStats {
	s.mu.Lock()
	w := s.warm
	s.mu.Unlock()
	if w == nil {
		return WarmStats{}
	}
	return w.stats()
}

// claim makes ctx's end kill the warm child p, as a spawn under ctx would.
func (p *process) claim(ctx context.Context) {
	if p.own == nil {
		p.own = p.release
	}
	own := p.own
	stop := context.AfterFunc(ctx, own)
	p.unlink = stop
	p.release = func() { stop(); own() }
	p.warm = true
}

// evictWarm ends one idle warm child, if there is one (to make room for a
// parked one, reuse.go).
func (s *Service) evictWarm() {
	s.mu.Lock()
	w := s.warm
	s.mu.Unlock()
	if w == nil {
		return
	}
	w.mu.Lock()
	n := len(w.idle)
	if n == 0 {
		w.mu.Unlock()
		return
	}
	p := w.idle[n-1]
	w.idle[n-1] = nil
	w.idle = w.idle[:n-1]
	w.mu.Unlock()
	w.discarded.Add(1)
	go p.cleanup()
}

// warmIdle is how many warm children are idle now.
func (s *Service) warmIdle() int {
	s.mu.Lock()
	w := s.warm
	s.mu.Unlock()
	if w == nil {
		return 0
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.idle)
}
