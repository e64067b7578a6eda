// Package ratelimit keeps the model rate limits every executor shares:
// the llm.Limiter of the cluster, on a JetStream KV bucket
// (<P>_MODEL_LIMITS, subjects.Names.ModelLimitsBucket) that the executors
// create and only they may touch.
//
// Each budget ("key.<limit key>", "org.<org>", "agent.<org>.<agent>") is
// one KV entry holding its llm.BucketState (a GCRA: the theoretical
// arrival times of its next request and of its token debt, a pause, the
// limits learned from the provider). A slot is decided by reading the
// entries of the call's scopes, computing the first time all have budget,
// and spending it in each with a compare-and-set on the revision read;
// an executor that lost a race reads that entry again and decides again,
// so no two executors spend the same budget. Each executor remembers the
// last revision it saw of an entry — its own writes, and every other
// executor's, which a KV watcher brings it as they happen — and tries its
// update on that without reading first: a decision costs one round trip
// per scope unless another executor wrote the same budget in the last
// moment. One executor's calls decide a budget one at a time (a lock per
// budget, striped), so they never race one another's compare-and-set: a
// burst of ten thousand calls in one executor costs one write each, not
// rounds that grow with the burst until the decision gives up. A call
// that changes nothing in a budget — one with no limit set or learned,
// no pause — writes nothing: the decision is the same read (issue 32).
//
// A slot reserved for a task that waits in the queue is the entry
// "slot.<task>". Entries idle for an hour expire (the bucket's MaxAge):
// an idle budget is full again anyway; a learned limit is learned again.
//
// Why a KV entry per budget and not a leader holding the budgets: no
// election, no hand-over when a leader dies, and a decision that costs
// one or two round trips to the JetStream leader of the bucket (see
// docs/benchmarks.md for the figures across three executors).
package ratelimit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/subjects"
	"github.com/agentmesh/agentmesh/services/executor/llm"
	"github.com/nats-io/nats.go/jetstream"
)

// Bucket settings.
const (
	// MaxAge is how long an idle entry lives.
	MaxAge = time.Hour
	// maxRounds bounds the compare-and-set rounds of one decision.
	maxRounds = 64
	// maxCache bounds the revisions remembered.
	maxCache = 1 << 14
)

// ErrContended: the budget's entry kept changing under the decision.
var ErrContended = errors.New("rate limit: the budget kept changing under the decision")

// Limits is the cluster's llm.Limiter.
type Limits struct {
	kv     jetstream.KeyValue
	window time.Duration
	now    func() time.Time
	watch  jetstream.KeyWatcher
	done   chan struct{}

	mu    sync.Mutex
	cache map[string]entry

	// keyMu serialises this executor's decisions on a budget (the stripe
	// of its key): they would only race one another's compare-and-set.
	keyMu [64]sync.Mutex
}

// lock takes key's stripe and returns its unlock.
func (l *Limits) lock(key string) func() {
	h := uint32(2166136261) // FNV-1a
	for i := 0; i < len(key); i++ {
		h = (h ^ uint32(key[i])) * 16777619
	}
	m := &l.keyMu[h%uint32(len(l.keyMu))]
	m.Lock()
	return m.Unlock
}

var _ llm.Limiter = (*Limits)(nil)

// entry is a budget's state at a revision (0: no entry).
type entry struct {
	rev uint64
	st  llm.BucketState
}

// Options of Open.
type Options struct {
	// Window is the limits' minute (time.Minute; tests shorten it).
	Window time.Duration
	// Replicas of the bucket; Memory keeps it in memory (tests).
	Replicas int
	Memory   bool
}

// Open ensures the bucket and returns the limits on it.
func Open(ctx context.Context, js jetstream.JetStream, names subjects.Names, opts Options) (*Limits, []bus.Replication, error) {
	storage := jetstream.FileStorage
	if opts.Memory {
		storage = jetstream.MemoryStorage
	}
	kv, reps, err := bus.EnsureKeyValue(ctx, js, jetstream.KeyValueConfig{
		Bucket:      names.ModelLimitsBucket(),
		Description: "agentmesh model rate limits the executors share",
		History:     1,
		TTL:         MaxAge,
		Storage:     storage,
		Replicas:    opts.Replicas,
	})
	if err != nil {
		return nil, reps, fmt.Errorf("model limits bucket: %w", err)
	}
	window := opts.Window
	if window <= 0 {
		window = time.Minute
	}
	l := &Limits{kv: kv, window: window + llm.LimitMargin(window), now: time.Now, cache: map[string]entry{}, done: make(chan struct{})}
	if l.watch, err = kv.WatchFiltered(ctx, []string{"key.>", "org.>", "agent.>"}, jetstream.UpdatesOnly()); err != nil {
		return nil, reps, fmt.Errorf("model limits bucket: watch: %w", err)
	}
	go l.follow()
	return l, reps, nil
}

// follow keeps the remembered revisions fresh with every executor's
// writes, until the watch stops (Close, or the connection's end).
func (l *Limits) follow() {
	defer close(l.done)
	for kve := range l.watch.Updates() {
		if kve == nil || kve.Operation() != jetstream.KeyValuePut {
			continue
		}
		var st llm.BucketState
		if json.Unmarshal(kve.Value(), &st) != nil {
			continue
		}
		l.remember(kve.Key(), entry{rev: kve.Revision(), st: st})
	}
}

// Close stops following the other executors' writes.
func (l *Limits) Close() {
	_ = l.watch.Stop()
	<-l.done
}

// Reserve gives ask's call its slot (llm.Limiter).
func (l *Limits) Reserve(ctx context.Context, ask llm.Ask) (llm.Grant, error) {
	now := l.now()
	g := llm.Grant{At: now, Tokens: ask.Tokens, Scopes: ask.Scopes}
	entries := make([]entry, len(ask.Scopes))
	for i, sc := range ask.Scopes {
		e, err := l.read(ctx, sc.Key, false)
		if err != nil {
			return g, err
		}
		entries[i] = e
		if at := e.st.Slot(now, sc.Limits, l.window, ask.Tokens); at.After(g.At) {
			g.At, g.Scope = at, sc.Key
		}
	}
	if !ask.Always && g.At.Sub(now) > ask.Within {
		return g, nil
	}
	// Each budget is spent at the slot, all at once (one round trip, not
	// one per budget).
	spent := make([]time.Time, len(ask.Scopes))
	errs := make([]error, len(ask.Scopes))
	var wg sync.WaitGroup
	for i, sc := range ask.Scopes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			spent[i], errs[i] = l.spend(ctx, sc, g.At, now, ask.Tokens)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return g, err
	}
	at := g.At
	for i, s := range spent {
		if s.After(at) {
			at, g.Scope = s, ask.Scopes[i].Key
		}
	}
	if at.After(g.At) {
		// Another executor spent a budget meanwhile: the slot is later; the
		// budgets spent at the earlier one are raised to it.
		for i, sc := range ask.Scopes {
			if spent[i].Before(at) {
				if err := l.update(ctx, sc.Key, func(st *llm.BucketState) { st.Raise(at, sc.Limits, l.window, ask.Tokens) }); err != nil {
					return g, err
				}
			}
		}
		g.At = at
	}
	g.Charged = true
	return g, nil
}

// spend spends one call in scope sc at slot at (or at the scope's own
// first slot, when an earlier decision made it later), starting from the
// latest state this executor knows; it returns the slot spent. A spend
// that changes nothing (no limit, no pause) is not written: another
// executor's write not yet seen here (a limit learned that instant) is
// then ordered after this call, as if it came a moment later.
func (l *Limits) spend(ctx context.Context, sc llm.Scope, at, now time.Time, tokens int64) (time.Time, error) {
	defer l.lock(sc.Key)()
	// The latest state this executor knows (its own last write included).
	e, err := l.read(ctx, sc.Key, false)
	if err != nil {
		return at, err
	}
	for range maxRounds {
		if s := e.st.Slot(now, sc.Limits, l.window, tokens); s.After(at) {
			at = s
		}
		st := e.st
		st.Spend(at, sc.Limits, l.window, tokens)
		if st == e.st {
			return at, nil // nothing to spend: no limit, no pause
		}
		ok, err := l.write(ctx, sc.Key, e.rev, st)
		if err != nil || ok {
			return at, err
		}
		if e, err = l.read(ctx, sc.Key, true); err != nil {
			return at, err
		}
	}
	return at, ErrContended
}

// update applies f to key's state with compare-and-set.
func (l *Limits) update(ctx context.Context, key string, f func(*llm.BucketState)) error {
	defer l.lock(key)()
	e, err := l.read(ctx, key, false)
	for range maxRounds {
		if err != nil {
			return err
		}
		st := e.st
		f(&st)
		if st == e.st {
			return nil // a change of nothing is not written
		}
		ok, werr := l.write(ctx, key, e.rev, st)
		if werr != nil || ok {
			return werr
		}
		e, err = l.read(ctx, key, true)
	}
	return ErrContended
}

// read returns key's entry: the revision last seen here unless fresh,
// else the bucket's.
func (l *Limits) read(ctx context.Context, key string, fresh bool) (entry, error) {
	if !fresh {
		l.mu.Lock()
		e, ok := l.cache[key]
		l.mu.Unlock()
		if ok {
			return e, nil
		}
	}
	kve, err := l.kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return entry{}, nil
	}
	if err != nil {
		return entry{}, fmt.Errorf("rate limit %s: %w", key, err)
	}
	e := entry{rev: kve.Revision()}
	if err := json.Unmarshal(kve.Value(), &e.st); err != nil {
		// A value that does not parse is replaced on the next write.
		e.st = llm.BucketState{}
	}
	l.remember(key, e)
	return e, nil
}

// write stores st at key if its revision is still rev (0: no entry yet);
// ok is false when it is not (another writer came first).
func (l *Limits) write(ctx context.Context, key string, rev uint64, st llm.BucketState) (bool, error) {
	data, err := json.Marshal(st)
	if err != nil {
		return false, err
	}
	// Update with revision 0 creates the entry, and fails when it exists.
	nrev, err := l.kv.Update(ctx, key, data, rev)
	if errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyExists) {
		l.forget(key)
		return false, nil
	}
	if err != nil {
		l.forget(key)
		return false, fmt.Errorf("rate limit %s: %w", key, err)
	}
	l.remember(key, entry{rev: nrev, st: st})
	return true, nil
}

// remember keeps e as key's latest state, unless a later one is known.
func (l *Limits) remember(key string, e entry) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.cache) >= maxCache {
		clear(l.cache)
	}
	if cur, ok := l.cache[key]; ok && cur.rev > e.rev {
		return
	}
	l.cache[key] = e
}

func (l *Limits) forget(key string) {
	l.mu.Lock()
	delete(l.cache, key)
	l.mu.Unlock()
}

// Settle corrects the tokens g spent (llm.Limiter).
func (l *Limits) Settle(ctx context.Context, g llm.Grant, used int64) error {
	delta := used - g.Tokens
	if delta == 0 {
		return nil
	}
	for _, sc := range g.Scopes {
		if sc.Limits.TokensPerMinute == 0 && !sc.Learn {
			continue
		}
		if err := l.update(ctx, sc.Key, func(st *llm.BucketState) { st.Correct(sc.Limits, l.window, delta) }); err != nil {
			return err
		}
	}
	return nil
}

// Learn folds what a provider said of a key in (llm.Limiter).
func (l *Limits) Learn(ctx context.Context, scope string, learned llm.Learned) error {
	return l.update(ctx, scope, func(st *llm.BucketState) { st.Learn(learned) })
}

// slotKey is the entry of the slot reserved for task.
func slotKey(task string) string { return "slot." + task }

// Keep remembers the slot at, reserved in key, for task's next call
// (llm.Limiter).
func (l *Limits) Keep(ctx context.Context, task, key string, at time.Time) error {
	_, err := l.kv.PutString(ctx, slotKey(task), key+" "+strconv.FormatInt(at.UnixNano(), 10))
	return err
}

// Kept returns and forgets the slot kept for task (llm.Limiter).
func (l *Limits) Kept(ctx context.Context, task string) (string, time.Time, bool, error) {
	e, err := l.kv.Get(ctx, slotKey(task))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return "", time.Time{}, false, nil
	}
	if err != nil {
		return "", time.Time{}, false, err
	}
	_ = l.kv.Delete(ctx, slotKey(task))
	key, ns, ok := strings.Cut(string(e.Value()), " ")
	n, perr := strconv.ParseInt(ns, 10, 64)
	if !ok || perr != nil {
		return "", time.Time{}, false, nil
	}
	return key, time.Unix(0, n), true, nil
}
