package llm_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	childv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/child/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/modeltable"
	"github.com/agentmesh/agentmesh/pkg/testlog"
	"github.com/agentmesh/agentmesh/services/executor/llm"
)

// stub is a model server that answers every request with status (200: a
// streamed "ok from <name>") and counts them, with their times.
type stub struct {
	name   string
	status atomic.Int32
	header http.Header
	srv    *httptest.Server

	mu    sync.Mutex
	times []time.Time
	paths []string
	keys  []string
}

func newStub(t *testing.T, name string, status int) *stub {
	s := &stub{name: name, header: http.Header{}}
	s.status.Store(int32(status))
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.times = append(s.times, time.Now())
		s.paths = append(s.paths, r.URL.Path)
		s.keys = append(s.keys, r.Header.Get("Authorization")+r.Header.Get("x-api-key"))
		s.mu.Unlock()
		for k, v := range s.header {
			w.Header()[k] = v
		}
		if st := int(s.status.Load()); st != 200 {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(st)
			fmt.Fprintf(w, `{"error":{"message":"stub %s says %d","type":"x"}}`, name, st)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		if strings.HasSuffix(r.URL.Path, "/messages") {
			fmt.Fprintf(w, "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"model\":\"%s\",\"usage\":{\"input_tokens\":10}}}\n\n", name)
			fmt.Fprintf(w, "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"ok from %s\"}}\n\n", name)
			fmt.Fprint(w, "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":3}}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n")
			return
		}
		fmt.Fprintf(w, "data: {\"model\":\"%s\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"ok from %s\"},\"finish_reason\":\"stop\"}]}\n\n", name, name)
		fmt.Fprint(w, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":10,\"completion_tokens\":3}}\n\ndata: [DONE]\n\n")
	}))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *stub) url() string { return s.srv.URL + "/v1" }

func (s *stub) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.times)
}

func (s *stub) requestTimes() []time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Time(nil), s.times...)
}

func ask(ctx context.Context, m *llm.Models, req llm.Request) (*childv1.ModelResponse, error) {
	if req.Turn == nil {
		req.Turn = &childv1.ModelRequest{Id: 1, Messages: []*childv1.Message{{Role: "user", Content: "hi"}}}
	}
	return m.Complete(ctx, req)
}

func newModels(t *testing.T, cfg llm.Config) *llm.Models {
	t.Helper()
	if cfg.Timeout == 0 {
		cfg.Timeout = 10 * time.Second
	}
	if cfg.Backoff == 0 {
		cfg.Backoff = time.Millisecond
	}
	if cfg.LookupEnv == nil {
		cfg.LookupEnv = func(k string) (string, bool) { return "key-of-" + k, true }
	}
	m, err := llm.New(cfg, testlog.New(t))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func table(t *testing.T, yaml string) *modeltable.Table {
	t.Helper()
	tab, err := modeltable.Parse([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	return tab
}

// A model of the table is called at its endpoint, in its provider's
// format, with its key; the agent's own base_url in its provider's.
func TestRouteByTable(t *testing.T) {
	oa, an := newStub(t, "oa", 200), newStub(t, "an", 200)
	m := newModels(t, llm.Config{Table: table(t, fmt.Sprintf(`
models:
  fast: {base_url: %q, api_key_env: FAST_KEY, model: gpt-4o-mini}
  claude: {provider: anthropic, base_url: %q, api_key_env: CLAUDE_KEY, model: claude-x}
`, oa.url(), an.srv.URL))})
	ctx := context.Background()
	resp, err := ask(ctx, m, llm.Request{Settings: &agentmeshv1.ModelSettings{Model: "claude"}})
	if err != nil || resp.Provider != "anthropic" || resp.GetMessage().GetContent() != "ok from an" {
		t.Fatalf("claude: %v %v", resp, err)
	}
	if an.paths[0] != "/v1/messages" || an.keys[0] != "key-of-CLAUDE_KEY" {
		t.Errorf("anthropic request at %s with key %q", an.paths[0], an.keys[0])
	}
	resp, err = ask(ctx, m, llm.Request{Settings: &agentmeshv1.ModelSettings{Model: "fast"}})
	if err != nil || resp.Provider != "openai" || resp.Model != "oa" || oa.keys[0] != "Bearer key-of-FAST_KEY" {
		t.Fatalf("fast: %v %v (key %q)", resp, err, oa.keys)
	}
	// The agent's own endpoint in the anthropic format, with its own key.
	own := newStub(t, "own", 200)
	m = newModels(t, llm.Config{Allow: []string{strings.TrimPrefix(own.srv.URL, "http://")}})
	resp, err = ask(ctx, m, llm.Request{Settings: &agentmeshv1.ModelSettings{Model: "c", BaseUrl: own.srv.URL, Provider: "anthropic"}, Key: "agent-key", HasKey: true})
	if err != nil || resp.Provider != "anthropic" || own.keys[0] != "agent-key" {
		t.Fatalf("own: %v %v %v", resp, err, own.keys)
	}
	// A provider that contradicts the table is refused, naming both.
	m = newModels(t, llm.Config{Table: table(t, fmt.Sprintf("models:\n  fast: {base_url: %q, no_key: true}\n", oa.url()))})
	_, err = ask(ctx, m, llm.Request{Settings: &agentmeshv1.ModelSettings{Model: "fast", Provider: "anthropic"}})
	if err == nil || llm.KindOf(err) != llm.KindRejected || !strings.Contains(err.Error(), `"anthropic"`) || !strings.Contains(err.Error(), `"openai"`) {
		t.Fatalf("provider mismatch: %v", err)
	}
}

// New refuses a table entry whose key variable is unset, naming it.
func TestTableKeyUnset(t *testing.T) {
	_, err := llm.New(llm.Config{
		Table:     table(t, "models:\n  m: {base_url: \"https://x.example/v1\", api_key_env: NOPE_KEY}\n"),
		LookupEnv: func(string) (string, bool) { return "", false },
	}, testlog.New(t))
	if err == nil || !strings.Contains(err.Error(), "models.m.api_key_env") || !strings.Contains(err.Error(), "NOPE_KEY") {
		t.Fatalf("err = %v", err)
	}
	if _, err := llm.New(llm.Config{Provider: "cohere"}, testlog.New(t)); err == nil {
		t.Fatal("an unknown default provider was accepted")
	}
}

// A fallback takes over when the first model returns 503s (its retries
// spent); the answer records which model did not answer, and why.
func TestFallbackOnOutage(t *testing.T) {
	down, up := newStub(t, "down", 503), newStub(t, "up", 200)
	m := newModels(t, llm.Config{Retries: 2, Table: table(t, fmt.Sprintf(`
models:
  primary: {base_url: %q, no_key: true, fallbacks: [spare]}
  spare: {base_url: %q, no_key: true}
`, down.url(), up.url()))})
	resp, err := ask(context.Background(), m, llm.Request{Settings: &agentmeshv1.ModelSettings{Model: "primary"}})
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetMessage().GetContent() != "ok from up" || !strings.Contains(resp.Fallback, "primary") || !strings.Contains(resp.Fallback, "503") {
		t.Errorf("answer %q fallback %q", resp.GetMessage().GetContent(), resp.Fallback)
	}
	if down.count() != 3 || up.count() != 1 {
		t.Errorf("requests: down %d (want 3: a try, two retries), up %d", down.count(), up.count())
	}
	// The agent's own list wins over the table's.
	other := newStub(t, "other", 200)
	m2 := newModels(t, llm.Config{Retries: -1, BaseURL: other.url(), Table: m2Table(t, down, up)})
	resp, err = ask(context.Background(), m2, llm.Request{Settings: &agentmeshv1.ModelSettings{Model: "primary", Fallbacks: []string{"other-model"}}})
	if err != nil || resp.GetMessage().GetContent() != "ok from other" {
		t.Fatalf("agent's fallbacks: %v %v", resp, err)
	}
}

func m2Table(t *testing.T, down, up *stub) *modeltable.Table {
	return table(t, fmt.Sprintf("models:\n  primary: {base_url: %q, no_key: true, fallbacks: [spare]}\n  spare: {base_url: %q, no_key: true}\n", down.url(), up.url()))
}

// A request the provider refuses is not handed to a fallback: that would
// hide a bad key or a bad request.
func TestNoFallbackOnRejected(t *testing.T) {
	bad, up := newStub(t, "bad", 401), newStub(t, "up", 200)
	m := newModels(t, llm.Config{Table: m2Table(t, bad, up)})
	_, err := ask(context.Background(), m, llm.Request{Settings: &agentmeshv1.ModelSettings{Model: "primary"}})
	if llm.KindOf(err) != llm.KindRejected || up.count() != 0 || bad.count() != 1 {
		t.Fatalf("err %v (kind %s), fallback asked %d times, primary %d", err, llm.KindOf(err), up.count(), bad.count())
	}
}

// Calls over a key's limit are spaced: with 5 requests a window (of
// 400ms here), ten calls at once reach the server no more than 5 in any
// window.
func TestRateLimitSpacesCalls(t *testing.T) {
	s := newStub(t, "s", 200)
	const window = 400 * time.Millisecond
	m := newModels(t, llm.Config{Limiter: llm.NewLocalLimiter(window), WaitInPlace: 10 * time.Second,
		Table: table(t, fmt.Sprintf("models:\n  m: {base_url: %q, no_key: true, limits: {requests_per_minute: 5}}\n", s.url()))})
	var wg sync.WaitGroup
	for range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := ask(context.Background(), m, llm.Request{Settings: &agentmeshv1.ModelSettings{Model: "m"}}); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	// Slots are spaced exactly; requests leave a few milliseconds after
	// their slot, more or less: the count allows for that jitter.
	if most := mostInWindow(s.requestTimes(), window-50*time.Millisecond); most > 5 {
		t.Errorf("%d requests in one window, limit 5", most)
	}
	if s.count() != 10 {
		t.Errorf("%d requests, want 10", s.count())
	}
}

// mostInWindow is the most requests in any window [t, t+w).
func mostInWindow(times []time.Time, w time.Duration) int {
	most := 0
	for i, a := range times {
		n := 0
		for _, b := range times[i:] {
			if !b.Before(a) && b.Sub(a) < w {
				n++
			}
		}
		for _, b := range times[:i] {
			if !b.Before(a) && b.Sub(a) < w {
				n++
			}
		}
		most = max(most, n)
	}
	return most
}

// A call whose slot is further than WaitInPlace ends as a rate-limit
// wait with its slot reserved for the task; the task's next attempt takes
// the slot without asking again, and the slot's budget was spent (another
// task's call comes after it).
func TestRateLimitReservesSlot(t *testing.T) {
	s := newStub(t, "s", 200)
	lim := llm.NewLocalLimiter(time.Second)
	m := newModels(t, llm.Config{Limiter: lim, WaitInPlace: 20 * time.Millisecond,
		Table: table(t, fmt.Sprintf("models:\n  m: {base_url: %q, no_key: true, limits: {requests_per_minute: 2}}\n", s.url()))})
	ctx := context.Background()
	settings := &agentmeshv1.ModelSettings{Model: "m"}
	if _, err := ask(ctx, m, llm.Request{Settings: settings, Task: "t0", Attempt: 1}); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	_, err := ask(ctx, m, llm.Request{Settings: settings, Task: "t1", Attempt: 1})
	var e *llm.Error
	if !errors.As(err, &e) || e.Kind != llm.KindRateLimited || !e.Reserved || e.ScopeKind() != "key" {
		t.Fatalf("second call: %v", err)
	}
	if d := e.Until.Sub(began); d < 400*time.Millisecond || d > 600*time.Millisecond {
		t.Errorf("slot in %v, want about 500ms (2 a second)", d)
	}
	if s.count() != 1 {
		t.Fatalf("%d requests reached the server, want 1", s.count())
	}
	time.Sleep(time.Until(e.Until))
	// Another task asks first: its slot is after the reserved one.
	_, err3 := ask(ctx, m, llm.Request{Settings: settings, Task: "t2", Attempt: 1})
	var e3 *llm.Error
	if !errors.As(err3, &e3) || e3.Kind != llm.KindRateLimited || e3.Until.Before(e.Until.Add(400*time.Millisecond)) {
		t.Fatalf("third task: %v (its slot must follow the reserved one)", err3)
	}
	// The waiting task's next attempt takes its slot at once.
	if _, err := ask(ctx, m, llm.Request{Settings: settings, Task: "t1", Attempt: 2}); err != nil {
		t.Fatalf("the reserved slot was not taken: %v", err)
	}
	if s.count() != 2 {
		t.Errorf("%d requests, want 2", s.count())
	}
}

// With a fallback on the route, a model over its limit hands the call on
// at once (its budget not spent).
func TestFallbackOnLimit(t *testing.T) {
	busy, spare := newStub(t, "busy", 200), newStub(t, "spare", 200)
	m := newModels(t, llm.Config{Limiter: llm.NewLocalLimiter(time.Minute), WaitInPlace: 10 * time.Millisecond, Table: table(t, fmt.Sprintf(`
models:
  primary: {base_url: %q, no_key: true, fallbacks: [spare], limits: {requests_per_minute: 1}}
  spare: {base_url: %q, no_key: true}
`, busy.url(), spare.url()))})
	settings := &agentmeshv1.ModelSettings{Model: "primary"}
	for i, want := range []string{"ok from busy", "ok from spare", "ok from spare"} {
		resp, err := ask(context.Background(), m, llm.Request{Settings: settings})
		if err != nil || resp.GetMessage().GetContent() != want {
			t.Fatalf("call %d: %v %v, want %q", i, resp, err, want)
		}
		if i > 0 && !strings.Contains(resp.Fallback, "rate limit") {
			t.Errorf("call %d fallback note %q", i, resp.Fallback)
		}
	}
	if busy.count() != 1 {
		t.Errorf("the busy model got %d requests, want 1", busy.count())
	}
}

// A provider's 429 asking for longer than WaitInPlace ends the call as a
// rate-limit wait until then (the task waits in the queue), and pauses
// the key for every later call.
func TestProvider429LongWait(t *testing.T) {
	s := newStub(t, "s", 429)
	s.header.Set("Retry-After", "30")
	lim := llm.NewLocalLimiter(time.Minute)
	m := newModels(t, llm.Config{Limiter: lim, WaitInPlace: 100 * time.Millisecond, BaseURL: s.url(), Model: "m"})
	began := time.Now()
	_, err := ask(context.Background(), m, llm.Request{})
	var e *llm.Error
	if !errors.As(err, &e) || e.Kind != llm.KindRateLimited || e.ScopeKind() != "provider" {
		t.Fatalf("err = %v", err)
	}
	if d := e.Until.Sub(began); d < 29*time.Second || d > 31*time.Second {
		t.Errorf("wait until +%v, want +30s (Retry-After)", d)
	}
	if s.count() != 1 {
		t.Errorf("%d requests, want 1", s.count())
	}
	// The key is paused: the next call does not reach the server.
	s.status.Store(200)
	_, err = ask(context.Background(), m, llm.Request{})
	if !errors.As(err, &e) || e.Kind != llm.KindRateLimited || s.count() != 1 {
		t.Fatalf("call during the pause: %v, %d requests", err, s.count())
	}
}

// 429 with a short Retry-After is waited out once, in place, and the call
// succeeds.
func TestRetryAfterWaitedOnce(t *testing.T) {
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 1 {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"waited\"},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n")
	}))
	defer srv.Close()
	m := newModels(t, llm.Config{BaseURL: srv.URL + "/v1", Model: "m", Retries: 3})
	began := time.Now()
	resp, err := ask(context.Background(), m, llm.Request{})
	if err != nil || resp.GetMessage().GetContent() != "waited" {
		t.Fatalf("%v %v", resp, err)
	}
	if d := time.Since(began); d < 900*time.Millisecond || n.Load() != 2 {
		t.Errorf("answered after %v and %d requests, want ~1s and 2", d, n.Load())
	}
}

// The provider's headers teach the limiter its limits: a key that said
// "2 a minute" (a second, here) gets its calls spaced although the
// operator set none — from the call after the one that taught it.
func TestLimitsLearnedFromHeaders(t *testing.T) {
	s := newStub(t, "s", 200)
	s.header.Set("x-ratelimit-limit-requests", "2")
	s.header.Set("x-ratelimit-remaining-requests", "1")
	m := newModels(t, llm.Config{Limiter: llm.NewLocalLimiter(time.Second), WaitInPlace: 10 * time.Millisecond, BaseURL: s.url(), Model: "m"})
	for range 2 {
		if _, err := ask(context.Background(), m, llm.Request{}); err != nil {
			t.Fatal(err)
		}
	}
	_, err := ask(context.Background(), m, llm.Request{})
	if llm.KindOf(err) != llm.KindRateLimited {
		t.Fatalf("third call right after: %v, want a rate-limit wait (2 a second learned)", err)
	}
}

// An org's limit holds across its agents and models; another org is not
// held back by it.
func TestOrgLimit(t *testing.T) {
	s := newStub(t, "s", 200)
	m := newModels(t, llm.Config{Limiter: llm.NewLocalLimiter(time.Minute), WaitInPlace: 10 * time.Millisecond, BaseURL: s.url(), Model: "m",
		Table: table(t, "orgs:\n  acme: {requests_per_minute: 1}\n")})
	ctx := context.Background()
	if _, err := ask(ctx, m, llm.Request{Org: "acme"}); err != nil {
		t.Fatal(err)
	}
	_, err := ask(ctx, m, llm.Request{Org: "acme", Settings: &agentmeshv1.ModelSettings{Model: "other"}})
	var e *llm.Error
	if !errors.As(err, &e) || e.ScopeKind() != "org" {
		t.Fatalf("acme's second call: %v", err)
	}
	if _, err := ask(ctx, m, llm.Request{Org: "globex"}); err != nil {
		t.Fatalf("globex held back by acme's limit: %v", err)
	}
	// An agent's own limit.
	agentLimited := &agentmeshv1.ModelSettings{RequestsPerMinute: 1}
	if _, err := ask(ctx, m, llm.Request{Org: "globex", Agent: "a", Settings: agentLimited}); err != nil {
		t.Fatal(err)
	}
	_, err = ask(ctx, m, llm.Request{Org: "globex", Agent: "a", Settings: agentLimited})
	if !errors.As(err, &e) || e.ScopeKind() != "agent" {
		t.Fatalf("agent's second call: %v", err)
	}
}
