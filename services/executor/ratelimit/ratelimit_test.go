package ratelimit_test

import (
	"context"
	"math/rand/v2"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/pkg/embednats"
	"github.com/agentmesh/agentmesh/pkg/modeltable"
	"github.com/agentmesh/agentmesh/pkg/natstest"
	"github.com/agentmesh/agentmesh/pkg/subjects"
	"github.com/agentmesh/agentmesh/services/executor/llm"
	"github.com/agentmesh/agentmesh/services/executor/ratelimit"
	"github.com/nats-io/nats.go/jetstream"
)

// executors opens n limiters on one NATS server, each on its own
// connection with the executor's bus identity (as n executors).
func executors(t testing.TB, srv *embednats.Server, n int, window time.Duration) []*ratelimit.Limits {
	t.Helper()
	out := make([]*ratelimit.Limits, n)
	for i := range n {
		js, err := jetstream.New(natstest.ConnectAs(t, srv, subjects.ServiceExecutor))
		if err != nil {
			t.Fatal(err)
		}
		l, _, err := ratelimit.Open(context.Background(), js, subjects.Must("am"), ratelimit.Options{Window: window, Memory: true})
		if err != nil {
			t.Fatal(err)
		}
		out[i] = l
	}
	return out
}

// Three executors reserving at once from one budget of 10 a window get
// slots 1/10 of a window apart: no two share one, none is spent twice.
func TestReserveAcrossExecutors(t *testing.T) {
	srv := natstest.Start(t)
	const window = time.Second
	lims := executors(t, srv, 3, window)
	scope := llm.Scope{Key: "key.shared", Limits: modeltable.Limits{RequestsPerMinute: 10}}
	var mu sync.Mutex
	var slots []time.Time
	var wg sync.WaitGroup
	for i := range 30 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			g, err := lims[i%3].Reserve(context.Background(), llm.Ask{Scopes: []llm.Scope{scope}, Always: true})
			if err != nil || !g.Charged {
				t.Errorf("reserve: %v %+v", err, g)
				return
			}
			mu.Lock()
			slots = append(slots, g.At)
			mu.Unlock()
		}()
	}
	wg.Wait()
	sort.Slice(slots, func(i, j int) bool { return slots[i].Before(slots[j]) })
	for i := 1; i < len(slots); i++ {
		if gap := slots[i].Sub(slots[i-1]); gap < 99*time.Millisecond {
			t.Fatalf("slots %d and %d are %v apart, want 100ms (10 a second)", i-1, i, gap)
		}
	}
	if span := slots[len(slots)-1].Sub(slots[0]); span < 2900*time.Millisecond {
		t.Errorf("30 slots span %v, want 2.9s", span)
	}
}

// A conditional ask spends nothing when the slot is too far; every scope
// of an ask is spent together; tokens are corrected when settled.
func TestReserveScopes(t *testing.T) {
	srv := natstest.Start(t)
	l := executors(t, srv, 1, time.Minute)[0]
	ctx := context.Background()
	key := llm.Scope{Key: "key.k", Limits: modeltable.Limits{RequestsPerMinute: 60, TokensPerMinute: 6000}}
	org := llm.Scope{Key: "org.acme", Limits: modeltable.Limits{RequestsPerMinute: 1}}
	g, err := l.Reserve(ctx, llm.Ask{Scopes: []llm.Scope{key, org}, Tokens: 100})
	if err != nil || !g.Charged || time.Until(g.At) > 0 {
		t.Fatalf("first: %+v %v", g, err)
	}
	g2, err := l.Reserve(ctx, llm.Ask{Scopes: []llm.Scope{key, org}, Tokens: 100, Within: time.Second})
	if err != nil || g2.Charged || g2.Scope != "org.acme" || time.Until(g2.At) < 50*time.Second {
		t.Fatalf("second (conditional, over the org's limit): %+v %v", g2, err)
	}
	// The key alone still has budget: the conditional ask spent nothing.
	g3, err := l.Reserve(ctx, llm.Ask{Scopes: []llm.Scope{key}, Tokens: 100, Within: 5 * time.Second})
	if err != nil || !g3.Charged || time.Until(g3.At) > 2*time.Second {
		t.Fatalf("key alone: %+v %v", g3, err)
	}
	// 6000 tokens a minute: a call estimated at 5000 that used 100 gives
	// the rest back.
	big, _ := l.Reserve(ctx, llm.Ask{Scopes: []llm.Scope{key}, Tokens: 5000, Always: true})
	next, _ := l.Reserve(ctx, llm.Ask{Scopes: []llm.Scope{key}, Tokens: 3000, Within: time.Second})
	if next.Charged || next.At.Sub(big.At) < 10*time.Second {
		t.Fatalf("over the tokens: %+v after %+v", next, big)
	}
	if err := l.Settle(ctx, big, 100); err != nil {
		t.Fatal(err)
	}
	after, _ := l.Reserve(ctx, llm.Ask{Scopes: []llm.Scope{key}, Tokens: 3000, Within: 5 * time.Second})
	if !after.Charged {
		t.Fatalf("settled tokens not given back: %+v", after)
	}
}

// What a provider said pauses a key for every executor; a slot kept for a
// task is read back once.
func TestLearnAndKeep(t *testing.T) {
	srv := natstest.Start(t)
	lims := executors(t, srv, 2, time.Minute)
	ctx := context.Background()
	until := time.Now().Add(20 * time.Second)
	if err := lims[0].Learn(ctx, "key.k", llm.Learned{PausedUntil: until, RPM: 100}); err != nil {
		t.Fatal(err)
	}
	g, err := lims[1].Reserve(ctx, llm.Ask{Scopes: []llm.Scope{{Key: "key.k"}}, Within: time.Second})
	if err != nil || g.Charged || g.At.Before(until.Add(-time.Millisecond)) {
		t.Fatalf("paused key: %+v %v", g, err)
	}
	at := time.Now().Add(time.Minute).Truncate(time.Nanosecond)
	if err := lims[0].Keep(ctx, "01TASK", "key.k", at); err != nil {
		t.Fatal(err)
	}
	key, got, ok, err := lims[1].Kept(ctx, "01TASK")
	if err != nil || !ok || key != "key.k" || !got.Equal(at) {
		t.Fatalf("kept: %q %v %v %v", key, got, ok, err)
	}
	if _, _, ok, _ := lims[1].Kept(ctx, "01TASK"); ok {
		t.Fatal("a kept slot was read twice")
	}
}

// BenchmarkReserve measures one slot decision with three executors
// deciding on one budget (a provider key and an org) and reports its p50
// and p99. Saturated: each decides again as soon as it has its slot (the
// worst contention: every decision races two others). Paced: each decides
// about 200 times a second (600 model calls a second on one key, more
// than any provider's key allows).
func BenchmarkReserve(b *testing.B) {
	b.Run("saturated", func(b *testing.B) { benchReserve(b, 0) })
	b.Run("paced", func(b *testing.B) { benchReserve(b, 5*time.Millisecond) })
}

func benchReserve(b *testing.B, pace time.Duration) {
	srv := natstest.Start(b)
	lims := executors(b, srv, 3, time.Minute)
	scopes := []llm.Scope{
		{Key: "key.bench", Limits: modeltable.Limits{RequestsPerMinute: modeltable.MaxRequestsPerMinute, TokensPerMinute: modeltable.MaxTokensPerMinute}},
		{Key: "org.bench", Limits: modeltable.Limits{RequestsPerMinute: modeltable.MaxRequestsPerMinute}},
	}
	var mu sync.Mutex
	var lat []time.Duration
	b.ResetTimer()
	var wg sync.WaitGroup
	per := max(b.N/3, 1)
	for i, l := range lims {
		wg.Add(1)
		go func() {
			defer wg.Done()
			mine := make([]time.Duration, 0, per)
			for range per {
				if pace > 0 {
					time.Sleep(pace/2 + time.Duration(rand.Int64N(int64(pace))))
				}
				began := time.Now()
				if _, err := l.Reserve(context.Background(), llm.Ask{Scopes: scopes, Tokens: 500, Always: true}); err != nil {
					b.Error(i, err)
					return
				}
				mine = append(mine, time.Since(began))
			}
			mu.Lock()
			lat = append(lat, mine...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	b.StopTimer()
	slices.Sort(lat)
	if len(lat) > 0 {
		b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
		b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
	}
}

// BenchmarkReserveOne is BenchmarkReserve with one executor: no races.
func BenchmarkReserveOne(b *testing.B) {
	srv := natstest.Start(b)
	l := executors(b, srv, 1, time.Minute)[0]
	scopes := []llm.Scope{{Key: "key.bench", Limits: modeltable.Limits{RequestsPerMinute: modeltable.MaxRequestsPerMinute}}}
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		began := time.Now()
		if _, err := l.Reserve(context.Background(), llm.Ask{Scopes: scopes, Tokens: 500, Always: true}); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(began))
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
}

// A burst of calls in one executor on one limited budget: every call gets
// its own slot and none gives up on a compare-and-set it lost to a call of
// the same executor (issue 32: ten thousand tasks in flight made every
// model call race the others' writes until it was let go unlimited).
func TestOneExecutorsBurstNeverContends(t *testing.T) {
	srv := natstest.Start(t)
	l := executors(t, srv, 1, time.Minute)[0]
	scope := llm.Scope{Key: "key.burst", Limits: modeltable.Limits{RequestsPerMinute: modeltable.MaxRequestsPerMinute}}
	const calls = 300
	var wg sync.WaitGroup
	var mu sync.Mutex
	seen := map[time.Time]bool{}
	for range calls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			g, err := l.Reserve(context.Background(), llm.Ask{Scopes: []llm.Scope{scope}, Always: true})
			if err != nil || !g.Charged {
				t.Errorf("reserve: %v %+v", err, g)
				return
			}
			mu.Lock()
			seen[g.At] = true
			mu.Unlock()
		}()
	}
	wg.Wait()
	if len(seen) != calls {
		t.Errorf("%d calls got %d distinct slots", calls, len(seen))
	}
}

// Calls on a budget with no limit set or learned and no pause spend
// nothing, and so write nothing to the bucket (a call is not a KV write
// when there is nothing to count); a limit learned later applies to the
// next call.
func TestUnlimitedCallsWriteNothing(t *testing.T) {
	srv := natstest.Start(t)
	l := executors(t, srv, 1, time.Minute)[0]
	ctx := context.Background()
	scope := llm.Scope{Key: "key.free", Learn: true}
	for range 20 {
		g, err := l.Reserve(ctx, llm.Ask{Scopes: []llm.Scope{scope}, Tokens: 500, Always: true})
		if err != nil || !g.Charged {
			t.Fatalf("reserve: %v %+v", err, g)
		}
		if err := l.Settle(ctx, g, 20); err != nil {
			t.Fatal(err)
		}
	}
	js, err := jetstream.New(natstest.ConnectAs(t, srv, subjects.ServiceExecutor))
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, subjects.Must("am").ModelLimitsBucket())
	if err != nil {
		t.Fatal(err)
	}
	if e, err := kv.Get(ctx, "key.free"); err == nil {
		t.Fatalf("an unlimited budget was written: revision %d %s", e.Revision(), e.Value())
	}
	// Learned: one a minute; the next call is spent, the one after waits.
	if err := l.Learn(ctx, "key.free", llm.Learned{RPM: 1}); err != nil {
		t.Fatal(err)
	}
	if g, err := l.Reserve(ctx, llm.Ask{Scopes: []llm.Scope{scope}, Within: time.Second}); err != nil || !g.Charged {
		t.Fatalf("first call after the limit was learned: %v %+v", err, g)
	}
	if g, err := l.Reserve(ctx, llm.Ask{Scopes: []llm.Scope{scope}, Within: time.Second}); err != nil || g.Charged {
		t.Fatalf("second call within the learned minute was not held back: %v %+v", err, g)
	}
}
