package executor

// Reusing a child for the next task of the same org and agent (opt-in:
// Config.ChildReuse, AGENTMESH_CHILD_REUSE=agent; off by default).
//
// By default a child serves one task and is destroyed. With reuse on, a
// child whose task completed, that started no stdio MCP server and runs in
// the strict sandbox is asked to clear what the task left (it kills every
// other process of its PID namespace and empties /workspace, /tmp and
// /dev/shm: services/executor/child/reuse.go) and, once it says Ready, is
// parked under its task's key: the org, the agent's name and a digest of
// the agent's definition. Only a task with the same key gets it: a reused
// child never crosses orgs, agents or agent versions. A parked child that
// no task claims within ReuseIdle is destroyed; parked children count
// against the capacity like warm ones. What the tasks of one key share is
// the child's sandbox: its uid, cgroups, limits and memory (the runtime's,
// not a task's conversation, which is rebuilt from each Start) — see
// docs/security.md, "Reused children".

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	childv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/child/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"google.golang.org/protobuf/proto"
)

// ReuseIdle is how long a parked child waits for a task of its key.
const ReuseIdle = 30 * time.Second

// readyWait bounds the wait for a child's Ready after its task.
const readyWait = 2 * time.Second

// reuseKey names the tasks that may share a child.
type reuseKey string

func reuseKeyOf(task *agentmeshv1.Task) reuseKey {
	spec, _ := proto.MarshalOptions{Deterministic: true}.Marshal(task.GetAgentSpec())
	sum := sha256.Sum256(spec)
	return reuseKey(task.GetOrg() + "\x00" + task.GetAgent() + "\x00" + hex.EncodeToString(sum[:]))
}

// ReuseStats counts what child reuse did.
type ReuseStats struct {
	Parked, Hits, Expired, Refused int64
	Idle                           int
}

type parkedChild struct {
	p     *process
	since time.Time
}

type reusePool struct {
	s     *Service
	max   int
	idle  time.Duration
	mu    sync.Mutex
	byKey map[reuseKey][]parkedChild
	// n is how many are parked: read without mu (the warm pool's bound
	// reads it under its own lock; mu is never held while taking the
	// warm pool's or the service's).
	n atomic.Int64
	// closed: Run is ending; nothing is parked any more.
	closed bool
	stop   chan struct{}
	done   chan struct{}

	parked, hits, expired, refused atomic.Int64
}

func newReusePool(s *Service, max int, idle time.Duration) *reusePool {
	r := &reusePool{s: s, max: max, idle: idle, byKey: map[reuseKey][]parkedChild{}, stop: make(chan struct{}), done: make(chan struct{})}
	go r.janitor()
	return r
}

// size is how many children are parked now.
func (r *reusePool) size() int {
	if r == nil {
		return 0
	}
	return int(r.n.Load())
}

// park waits for p's Ready and parks it under key; false when it cannot
// be (the caller then ends it as usual). It is called after the task's
// completion is recorded, while the task still holds its slot.
func (r *reusePool) park(key reuseKey, p *process) bool {
	if p.own == nil || p.unlink == nil {
		return false // spawned under its task's context: it dies with it
	}
	ready := make(chan error, 1)
	go func() {
		r, _ := p.frames()
		f, err := readFrame(r)
		if err == nil && f.GetReady() == nil {
			err = fmt.Errorf("got %T, want ready", f.GetKind())
		}
		ready <- err
	}()
	select {
	case err := <-ready:
		if err != nil {
			r.refused.Add(1)
			r.s.log.Warn("agent process not reusable after its task", "pid", p.pid, "err", err, "stderr", strings.TrimSpace(p.stderr.String()))
			return false
		}
	case <-time.After(readyWait):
		r.refused.Add(1)
		return false // the caller's cleanup kills it, which ends the read
	}
	// Parked children, warm ones and running tasks (this one included,
	// its slot freed right after) stay within the capacity; a parked child
	// is worth more than a warm one (it is as ready, and its key's next
	// task needs no spawn), so a warm one makes room.
	over := func() bool { return r.s.running()+r.size()+r.s.warmIdle() >= r.s.cfg.Capacity+1 }
	if over() {
		r.s.evictWarm()
	}
	if r.size() >= r.max || over() {
		r.refused.Add(1)
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		r.refused.Add(1)
		return false
	}
	if !p.unlink() {
		r.refused.Add(1)
		return false // its task's context ended first: it is being killed
	}
	p.release, p.unlink = p.own, nil
	p.stderr.Reset()
	r.byKey[key] = append(r.byKey[key], parkedChild{p: p, since: time.Now()})
	r.n.Add(1)
	r.parked.Add(1)
	return true
}

// take hands out the most recently parked child of key (nil: none).
func (r *reusePool) take(key reuseKey) *process {
	for {
		r.mu.Lock()
		list := r.byKey[key]
		if len(list) == 0 || r.closed {
			r.mu.Unlock()
			return nil
		}
		c := list[len(list)-1]
		if len(list) == 1 {
			delete(r.byKey, key)
		} else {
			r.byKey[key] = list[:len(list)-1]
		}
		r.n.Add(-1)
		r.mu.Unlock()
		if c.p.h.exited() {
			go c.p.cleanup()
			continue
		}
		r.hits.Add(1)
		return c.p
	}
}

func (r *reusePool) janitor() {
	defer close(r.done)
	t := time.NewTicker(max(r.idle/4, 50*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-r.stop:
			return
		case <-t.C:
		}
		var old []*process
		cut := time.Now().Add(-r.idle)
		r.mu.Lock()
		for k, list := range r.byKey {
			keep := list[:0]
			for _, c := range list {
				if c.since.Before(cut) {
					old = append(old, c.p)
				} else {
					keep = append(keep, c)
				}
			}
			if len(keep) == 0 {
				delete(r.byKey, k)
			} else {
				r.byKey[k] = keep
			}
		}
		r.n.Add(-int64(len(old)))
		r.mu.Unlock()
		for _, p := range old {
			r.expired.Add(1)
			_ = p.wait(true) // stdin closed: it exits by itself
			p.cleanup()
		}
	}
}

// close ends every parked child.
func (r *reusePool) close() {
	r.mu.Lock()
	r.closed = true
	var all []*process
	for _, list := range r.byKey {
		for _, c := range list {
			all = append(all, c.p)
		}
	}
	r.byKey = map[reuseKey][]parkedChild{}
	r.n.Store(0)
	r.mu.Unlock()
	close(r.stop)
	<-r.done
	for _, p := range all {
		p.cleanup()
	}
}

func (r *reusePool) stats() ReuseStats {
	return ReuseStats{Parked: r.parked.Load(), Hits: r.hits.Load(), Expired: r.expired.Load(), Refused: r.refused.Load(), Idle: r.size()}
}

// ReuseStats reports what child reuse did (zero when it is off).
func (s *Service) ReuseStats() ReuseStats {
	s.mu.Lock()
	r := s.reuse
	s.mu.Unlock()
	if r == nil {
		return ReuseStats{}
	}
	return r.stats()
}

// reusable reports whether the child p serving start may be parked after
// its task.
func (s *Service) reusable(p *process, start *childv1.Start) bool {
	return s.cfg.ChildReuse && p.own != nil && p.sb != nil && !p.sb.Unsandboxed() && len(start.GetMcpServers()) == 0
}

// readyChild is a child for task that needs no spawn: with reuse on, a
// parked child of the task's key first, then an idle warm child; nil when
// there is none.
func (s *Service) readyChild(ctx context.Context, task *agentmeshv1.Task) *process {
	s.mu.Lock()
	r, w := s.reuse, s.warm
	s.mu.Unlock()
	if r != nil {
		if p := r.take(reuseKeyOf(task)); p != nil {
			p.claim(ctx)
			return p
		}
	}
	if w != nil {
		if p := w.take(); p != nil {
			p.claim(ctx)
			return p
		}
	}
	return nil
}

// startChildFor gives the task an agent child: a ready one (readyChild),
// else a fresh spawn. With reuse on, the fresh child gets a context of its
// own (linked to ctx), so that it can outlive its task when parked.
func (s *Service) startChildFor(ctx context.Context, task *agentmeshv1.Task) (p *process, err error) {
	ctx, span := startSpawn(ctx) // tracing.go
	ready := false
	defer func() { endSpawn(span, p, ready && !p.warm, err) }()
	if p := s.readyChild(ctx, task); p != nil {
		ready = true
		return p, nil
	}
	s.mu.Lock()
	r := s.reuse
	s.mu.Unlock()
	if r == nil {
		return s.spawn(ctx, task.GetId())
	}
	own, cancel := context.WithCancel(context.Background())
	p, err = s.spawn(own, task.GetId())
	if err != nil {
		cancel()
		return nil, err
	}
	p.release = cancel
	p.claim(ctx)
	return p, nil
}

// park offers p, whose task completed, to the reuse pool.
func (s *Service) park(task *agentmeshv1.Task, p *process) bool {
	s.mu.Lock()
	r := s.reuse
	s.mu.Unlock()
	return r != nil && r.park(reuseKeyOf(task), p)
}
