package executor

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	childv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/child/v1"
	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
	"github.com/agentmesh/agentmesh/pkg/mcp"
	"github.com/agentmesh/agentmesh/pkg/mcp/mcphttp"
	"github.com/agentmesh/agentmesh/pkg/testlog"
	"github.com/agentmesh/agentmesh/pkg/tools"
	"github.com/agentmesh/agentmesh/services/executor/llm"
	"github.com/agentmesh/agentmesh/services/executor/webfetch"
)

// sseAnswer writes a one-chunk streamed answer.
func sseAnswer(w http.ResponseWriter, content string) {
	w.Header().Set("Content-Type", "text/event-stream")
	fmt.Fprintf(w, "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":%q},\"finish_reason\":\"stop\"}]}\n\n", content)
	fmt.Fprint(w, "data: [DONE]\n\n")
}

// listener is a real TCP listener on loopback that counts the connections
// it accepts.
type listener struct {
	ln       net.Listener
	accepted atomic.Int64
}

func newListener(t *testing.T) *listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := &listener{ln: ln}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			l.accepted.Add(1)
			c.Close()
		}
	}()
	t.Cleanup(func() { ln.Close() })
	return l
}

func (l *listener) port() string { _, p, _ := net.SplitHostPort(l.ln.Addr().String()); return p }

// dialLog records every connect the model client attempts (after the
// address policy), then connects for real.
type dialLog struct {
	mu    sync.Mutex
	dials []string
}

func (d *dialLog) dial(ctx context.Context, network, address string) (net.Conn, error) {
	d.mu.Lock()
	d.dials = append(d.dials, address)
	d.mu.Unlock()
	var nd net.Dialer
	return nd.DialContext(ctx, network, address)
}

func (d *dialLog) take() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := d.dials
	d.dials = nil
	return out
}

type fakeResolver map[string][]string

func (r fakeResolver) LookupIPAddr(_ context.Context, host string) ([]net.IPAddr, error) {
	var out []net.IPAddr
	for _, a := range r[host] {
		out = append(out, net.IPAddr{IP: net.ParseIP(a)})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no such host %s", host)
	}
	return out, nil
}

func ask(t *testing.T, m *llm.Models, baseURL string) *childv1.ModelResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	return complete(ctx, m, llm.Request{Settings: &agentmeshv1.ModelSettings{BaseUrl: baseURL, Model: "m"},
		Turn: &childv1.ModelRequest{Id: 1, Messages: []*childv1.Message{{Role: "user", Content: "hi"}}}})
}

// complete is m.Complete's answer, or its error as the child gets it.
func complete(ctx context.Context, m *llm.Models, req llm.Request) *childv1.ModelResponse {
	resp, err := m.Complete(ctx, req)
	if err != nil {
		return &childv1.ModelResponse{Id: req.Turn.GetId(), Error: err.Error()}
	}
	return resp
}

// An agent's base_url on loopback, private, link-local, CGNAT,
// unique-local … is refused before any packet: the loopback listener
// accepts nothing and no connect is attempted for the others. The
// operator's own base URL and the Allow entries are reached (the
// positive controls, which show the listener and the dial log see
// traffic when there is any).
func TestModelBaseURLAddressPolicy(t *testing.T) {
	operator := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { sseAnswer(w, "operator") }))
	t.Cleanup(operator.Close)
	allowed := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { sseAnswer(w, "allowed") }))
	t.Cleanup(allowed.Close)
	victim := newListener(t)
	dials := &dialLog{}
	m, err := llm.New(llm.Config{
		BaseURL: operator.URL + "/v1", Model: "m", Timeout: 10 * time.Second, Retries: 2,
		Allow:       []string{allowed.Listener.Addr().String()},
		Resolver:    fakeResolver{"evil.example": {"127.0.0.1"}, "meta.example": {"169.254.169.254"}, "mixed.example": {"93.184.216.34", "10.0.0.1"}},
		DialContext: dials.dial,
	}, testlog.New(t))
	if err != nil {
		t.Fatal(err)
	}
	refused := []string{
		"http://127.0.0.1:" + victim.port() + "/v1",
		"http://localhost:" + victim.port() + "/v1",
		"http://127.1:" + victim.port() + "/v1",
		"http://2130706433:" + victim.port() + "/v1",
		"http://[::ffff:127.0.0.1]:" + victim.port() + "/v1",
		"http://evil.example:" + victim.port() + "/v1",
		"http://10.1.2.3/v1",
		"http://172.16.0.1:8080/v1",
		"http://192.168.1.10:11434/v1",
		"http://169.254.169.254/latest/v1",
		"http://meta.example/v1",
		"http://mixed.example/v1",
		"http://100.64.0.1/v1",
		"http://[fd00::1]/v1",
		"http://[fe80::1]/v1",
		"http://0.0.0.0:" + victim.port() + "/v1",
		// the operator's host on another port is not the operator's endpoint
		"http://127.0.0.1:" + victim.port() + "/other",
	}
	for _, u := range refused {
		t.Run(u, func(t *testing.T) {
			resp := ask(t, m, u)
			if !strings.Contains(resp.GetError(), "address not allowed") {
				t.Errorf("error = %q, want the address refused", resp.GetError())
			}
			if !strings.Contains(resp.GetError(), "(1 attempts)") {
				t.Errorf("error = %q, want no retry of a refused address", resp.GetError())
			}
			if d := dials.take(); len(d) != 0 {
				t.Errorf("connects attempted: %v", d)
			}
		})
	}
	if n := victim.accepted.Load(); n != 0 {
		t.Errorf("the loopback listener accepted %d connections", n)
	}
	connects := 0
	for _, c := range []struct{ url, want string }{
		{"", "operator"}, // the operator's default, on loopback
		{operator.URL + "/v1", "operator"},
		{allowed.URL + "/v1", "allowed"},
	} {
		resp := ask(t, m, c.url)
		if resp.GetError() != "" || resp.GetMessage().GetContent() != c.want {
			t.Errorf("base_url %q: error %q content %q, want %q", c.url, resp.GetError(), resp.GetMessage().GetContent(), c.want)
		}
		connects += len(dials.take())
	}
	if connects < 2 { // two servers; connections may be reused
		t.Errorf("%d connects recorded for the allowed calls, want at least 2 (the log does not see connects?)", connects)
	}
}

// A model server that redirects a call to another origin gets no key
// there: neither the executor's key nor an agent's secret.
func TestModelRedirectDropsKey(t *testing.T) {
	var mu sync.Mutex
	var auths []string
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		auths = append(auths, "other:"+r.Header.Get("Authorization"))
		mu.Unlock()
		sseAnswer(w, "from the other origin")
	}))
	t.Cleanup(other.Close)
	first := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		auths = append(auths, "first:"+r.Header.Get("Authorization"))
		mu.Unlock()
		http.Redirect(w, r, other.URL+r.URL.Path, http.StatusTemporaryRedirect) // 307 keeps the POST body
	}))
	t.Cleanup(first.Close)
	m, err := llm.New(llm.Config{
		BaseURL: first.URL + "/v1", APIKey: "sk-executor", Model: "m", Timeout: 10 * time.Second, Retries: -1,
		Allow: []string{other.Listener.Addr().String()},
	}, testlog.New(t))
	if err != nil {
		t.Fatal(err)
	}
	resp := ask(t, m, "")
	if resp.GetError() != "" || resp.GetMessage().GetContent() != "from the other origin" {
		t.Fatalf("error %q content %q", resp.GetError(), resp.GetMessage().GetContent())
	}
	ctx := context.Background()
	resp = complete(ctx, m, llm.Request{Settings: &agentmeshv1.ModelSettings{BaseUrl: first.URL + "/v1", Model: "m"}, Key: "sk-agent", HasKey: true,
		Turn: &childv1.ModelRequest{Id: 2, Messages: []*childv1.Message{{Role: "user", Content: "hi"}}}})
	if resp.GetError() != "" {
		t.Fatal(resp.GetError())
	}
	mu.Lock()
	defer mu.Unlock()
	want := []string{"first:Bearer sk-executor", "other:", "first:Bearer sk-agent", "other:"}
	if fmt.Sprint(auths) != fmt.Sprint(want) {
		t.Errorf("Authorization per hop = %q, want %q", auths, want)
	}
}

// allocDuring returns how many bytes the process allocated while fn ran
// (TotalAlloc: every allocation counts, freed or not) and the highest
// HeapInuse seen by a sampler, less the HeapInuse before.
func allocDuring(fn func()) (allocated, peakGrowth uint64) {
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	var peak atomic.Uint64
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tk := time.NewTicker(10 * time.Millisecond)
		defer tk.Stop()
		for {
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			if ms.HeapInuse > peak.Load() {
				peak.Store(ms.HeapInuse)
			}
			select {
			case <-done:
				return
			case <-tk.C:
			}
		}
	}()
	fn()
	close(done)
	wg.Wait()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	if after.HeapInuse > peak.Load() {
		peak.Store(after.HeapInuse)
	}
	growth := uint64(0)
	if p := peak.Load(); p > before.HeapInuse {
		growth = p - before.HeapInuse
	}
	return after.TotalAlloc - before.TotalAlloc, growth
}

// A hostile model's 50 MiB error body is cut at 4 KiB before it is read
// into memory, and the task's error holds at most llm.ErrorTextMax of it.
func TestModelErrorBodyCut(t *testing.T) {
	const body = 50 << 20
	var served atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusInternalServerError)
		chunk := []byte(strings.Repeat("E", 64<<10))
		for n := 0; n < body; n += len(chunk) {
			k, err := w.Write(chunk)
			served.Add(int64(k))
			if err != nil {
				return
			}
		}
	}))
	t.Cleanup(srv.Close)
	m, err := llm.New(llm.Config{BaseURL: srv.URL + "/v1", Model: "m", Timeout: 30 * time.Second, Retries: 1, Backoff: time.Millisecond}, testlog.New(t))
	if err != nil {
		t.Fatal(err)
	}
	var resp *childv1.ModelResponse
	allocated, peak := allocDuring(func() { resp = ask(t, m, "") })
	t.Logf("error body offered: 2 × %d MiB; allocated %d KiB; peak heap growth %d KiB; error %d bytes", body>>20, allocated>>10, peak>>10, len(resp.GetError()))
	if !strings.Contains(resp.GetError(), "500") || !strings.Contains(resp.GetError(), "(2 attempts)") {
		t.Errorf("error = %.300q, want the status and the attempts", resp.GetError())
	}
	if len(resp.GetError()) > llm.ErrorTextMax+64 {
		t.Errorf("error is %d bytes, want at most %d", len(resp.GetError()), llm.ErrorTextMax+64)
	}
	if allocated > 16<<20 {
		t.Errorf("the executor allocated %d MiB for a 50 MiB error body: it was read, not cut", allocated>>20)
	}
}

// A hostile model's 500 MiB stream is cut at MaxResponseBytes: the call
// fails with llm.ErrResponseTooLarge (not retried), the server stops
// being read, and the executor's allocations stay near the cap.
func TestModelStreamCut(t *testing.T) {
	const offered = 500 << 20
	const limit = 4 << 20
	var served atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		chunk := []byte(fmt.Sprintf("data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":%q}}]}\n\n", strings.Repeat("x", 4000)))
		for served.Load() < offered {
			k, err := w.Write(chunk)
			served.Add(int64(k))
			if err != nil {
				return
			}
		}
		fmt.Fprint(w, "data: [DONE]\n\n")
	}))
	t.Cleanup(srv.Close)
	m, err := llm.New(llm.Config{BaseURL: srv.URL + "/v1", Model: "m", Timeout: 60 * time.Second, Retries: 2, MaxResponseBytes: limit}, testlog.New(t))
	if err != nil {
		t.Fatal(err)
	}
	var resp *childv1.ModelResponse
	allocated, peak := allocDuring(func() { resp = ask(t, m, "") })
	t.Logf("stream offered %d MiB, served %d MiB; allocated %d MiB; peak heap growth %d MiB", offered>>20, served.Load()>>20, allocated>>20, peak>>20)
	if !strings.Contains(resp.GetError(), "model response too large") || !strings.Contains(resp.GetError(), "(1 attempts)") {
		t.Errorf("error = %.300q, want the cap named and no retry", resp.GetError())
	}
	if allocated > 128<<20 {
		t.Errorf("the executor allocated %d MiB for a stream capped at %d MiB", allocated>>20, limit>>20)
	}
	if peak > 96<<20 {
		t.Errorf("heap grew by %d MiB for a stream capped at %d MiB", peak>>20, limit>>20)
	}
}

// A model that trickles forever is cut at the per-call Timeout.
func TestModelStreamDuration(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fl := w.(http.Flusher)
		for {
			if _, err := fmt.Fprint(w, "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"}}]}\n\n"); err != nil {
				return
			}
			fl.Flush()
			select {
			case <-r.Context().Done():
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}))
	t.Cleanup(srv.Close)
	m, err := llm.New(llm.Config{BaseURL: srv.URL + "/v1", Model: "m", Timeout: 500 * time.Millisecond, Retries: -1}, testlog.New(t))
	if err != nil {
		t.Fatal(err)
	}
	resp := ask(t, m, "")
	if !strings.Contains(resp.GetError(), "deadline exceeded") {
		t.Errorf("error = %q, want the call's deadline", resp.GetError())
	}
}

// A hostile HTTP MCP server's 300 MiB answer is cut at
// MCPMaxResponseBytes while it is read.
func TestMCPResponseCut(t *testing.T) {
	const offered = 300 << 20
	var served atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		chunk := []byte(`{"jsonrpc":"2.0","id":1,"result":{"padding":"` + strings.Repeat("p", 64<<10))
		for served.Load() < offered {
			k, err := w.Write(chunk)
			served.Add(int64(k))
			if err != nil {
				return
			}
			chunk = chunk[len(chunk)-64<<10:]
		}
	}))
	t.Cleanup(srv.Close)
	f, err := webfetch.New(webfetch.Config{Allow: []string{srv.Listener.Addr().String()}})
	if err != nil {
		t.Fatal(err)
	}
	hc := limitMCPClient(f.ServiceClient())
	var cerr error
	allocated, peak := allocDuring(func() {
		var s *mcp.Server
		s, cerr = mcphttp.Connect(context.Background(), &agentmeshv1.McpServer{Name: "huge", Url: srv.URL + "/mcp"}, mcphttp.Options{Options: mcp.Options{Runs: tools.InExecutor, Timeout: 30 * time.Second}, HTTPClient: hc})
		if s != nil {
			s.Close()
		}
	})
	t.Logf("offered %d MiB, served %d MiB; allocated %d MiB; peak heap growth %d MiB; err %v", offered>>20, served.Load()>>20, allocated>>20, peak>>20, cerr)
	if cerr == nil {
		t.Fatal("connected to a server whose answer never ends")
	}
	if !strings.Contains(cerr.Error(), "MCP server response too large") {
		t.Errorf("error = %v, want the cap named", cerr)
	}
	if allocated > 160<<20 {
		t.Errorf("the executor allocated %d MiB reading an MCP answer capped at %d MiB", allocated>>20, MCPMaxResponseBytes>>20)
	}
}
