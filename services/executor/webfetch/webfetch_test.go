package webfetch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/pkg/tools"
)

// stubResolver answers from a fixed table and never asks DNS.
type stubResolver struct {
	names map[string][]string
}

func (r *stubResolver) LookupIPAddr(_ context.Context, host string) ([]net.IPAddr, error) {
	addrs, ok := r.names[strings.ToLower(host)]
	if !ok {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	var out []net.IPAddr
	for _, a := range addrs {
		out = append(out, net.IPAddr{IP: net.ParseIP(a)})
	}
	return out, nil
}

// dialRecorder is the Config.DialContext of the tests: it records every
// dial and fails the test for any address outside 127.0.0.0/8, which it
// never connects to.
type dialRecorder struct {
	t     testing.TB
	mu    sync.Mutex
	dials []string
}

var loopback8 = netip.MustParsePrefix("127.0.0.0/8")

func (d *dialRecorder) dial(ctx context.Context, network, address string) (net.Conn, error) {
	d.mu.Lock()
	d.dials = append(d.dials, address)
	d.mu.Unlock()
	ap, err := netip.ParseAddrPort(address)
	if err != nil || !loopback8.Contains(ap.Addr()) {
		d.t.Errorf("dialled %s (%s): only 127.0.0.0/8 may be dialled in tests", address, network)
		return nil, fmt.Errorf("test dialer: refusing %s", address)
	}
	var nd net.Dialer
	return nd.DialContext(ctx, network, address)
}

func (d *dialRecorder) take() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := d.dials
	d.dials = nil
	return out
}

// fixture is an allowlisted test server, an internal one that must never
// be reached, and a Fetcher wired to a stub resolver and dial recorder.
type fixture struct {
	allowed, internal *httptest.Server
	internalHits      atomic.Int64
	res               *stubResolver
	dials             *dialRecorder
	f                 *Fetcher
}

func newFixture(t *testing.T, mutate func(*Config)) *fixture {
	t.Helper()
	fx := &fixture{}
	fx.internal = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fx.internalHits.Add(1)
		fmt.Fprint(w, "internal secret")
	}))
	t.Cleanup(fx.internal.Close)
	mux := http.NewServeMux()
	mux.HandleFunc("/hello", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprint(w, "hello from the allowed server")
	})
	mux.HandleFunc("/redirect", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, r.URL.Query().Get("to"), http.StatusFound)
	})
	mux.HandleFunc("/loop", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/loop", http.StatusFound)
	})
	mux.HandleFunc("/big", func(w http.ResponseWriter, r *http.Request) {
		body := strings.Repeat("abcdefghij", 10<<10) // 100 KiB
		w.Header().Set("Content-Type", "text/plain")
		if r.URL.Query().Get("chunked") == "" {
			w.Header().Set("Content-Length", fmt.Sprint(len(body)))
		}
		fmt.Fprint(w, body)
	})
	mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-time.After(10 * time.Second):
		}
	})
	mux.HandleFunc("/png", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "image/png")
		w.Write([]byte("\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR"))
	})
	mux.HandleFunc("/echo", func(w http.ResponseWriter, r *http.Request) {
		var b strings.Builder
		fmt.Fprintf(&b, "%s %s x-test=%s body=", r.Method, r.URL.Path, r.Header.Get("X-Test"))
		buf := make([]byte, 1024)
		n, _ := r.Body.Read(buf)
		b.Write(buf[:n])
		fmt.Fprint(w, b.String())
	})
	fx.allowed = httptest.NewServer(mux)
	t.Cleanup(fx.allowed.Close)

	fx.res = &stubResolver{names: map[string][]string{
		"localhost":        {"127.0.0.1"}, // must not even be asked
		"internal.example": {"10.0.0.5"},
		"metadata.example": {"169.254.169.254"},
		"mixed.example":    {"93.184.216.34", "127.0.0.1"},
		"v6ula.example":    {"fd12:3456:789a::1"},
		"mapped.example":   {"::ffff:127.0.0.1"},
		"allowed.test":     {"127.0.0.1"},
		"2130706433":       {"127.0.0.1"}, // what glibc would answer
		"0177.0.0.1":       {"127.0.0.1"},
	}}
	fx.dials = &dialRecorder{t: t}
	cfg := Config{
		Allow:       []string{fx.allowed.Listener.Addr().String()},
		Resolver:    fx.res,
		DialContext: fx.dials.dial,
		Timeout:     5 * time.Second,
	}
	if mutate != nil {
		mutate(&cfg)
	}
	f, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	fx.f = f
	return fx
}

func (fx *fixture) internalPort() string {
	_, p, _ := net.SplitHostPort(fx.internal.Listener.Addr().String())
	return p
}

func TestSSRFRefusedBeforeConnecting(t *testing.T) {
	fx := newFixture(t, nil)
	ip := fx.internalPort()
	allowedAddr := fx.allowed.Listener.Addr().String()
	redirect := func(to string) string { return fx.allowed.URL + "/redirect?to=" + to }

	cases := []struct {
		name string
		url  string
		want error
		// dials is how many dials are expected: 0 for a URL refused
		// outright, 1 (the allowlisted server) for a refused redirect.
		dials int
	}{
		{"loopback 127.0.0.1", "http://127.0.0.1:" + ip + "/", ErrBlocked, 0},
		{"localhost", "http://localhost:" + ip + "/", ErrBlocked, 0},
		{"localhost trailing dot upper case", "http://LOCALHOST.:" + ip + "/", ErrBlocked, 0},
		{"sub.localhost", "http://api.localhost:" + ip + "/", ErrBlocked, 0},
		{"ipv6 loopback", "http://[::1]:" + ip + "/", ErrBlocked, 0},
		{"ipv4-mapped loopback", "http://[::ffff:127.0.0.1]:" + ip + "/", ErrBlocked, 0},
		{"ipv4-mapped loopback hex", "http://[::ffff:7f00:1]:" + ip + "/", ErrBlocked, 0},
		{"unspecified 0.0.0.0", "http://0.0.0.0:" + ip + "/", ErrBlocked, 0},
		{"unspecified 0", "http://0:" + ip + "/", ErrBlocked, 0},
		{"unspecified ipv6", "http://[::]:" + ip + "/", ErrBlocked, 0},
		{"decimal 2130706433", "http://2130706433:" + ip + "/", ErrBlocked, 0},
		{"octal 0177.0.0.1", "http://0177.0.0.1:" + ip + "/", ErrBlocked, 0},
		{"hex 0x7f.1", "http://0x7f.1:" + ip + "/", ErrBlocked, 0},
		{"short 127.1", "http://127.1:" + ip + "/", ErrBlocked, 0},
		{"hex 0x7f000001", "http://0x7f000001:" + ip + "/", ErrBlocked, 0},
		{"cloud metadata", "http://169.254.169.254/latest/meta-data/", ErrBlocked, 0},
		{"private 10/8", "http://10.1.2.3/", ErrBlocked, 0},
		{"private 172.16/12", "http://172.20.0.1/", ErrBlocked, 0},
		{"private 192.168/16", "https://192.168.1.1/", ErrBlocked, 0},
		{"cgnat", "http://100.64.0.1/", ErrBlocked, 0},
		{"broadcast", "http://255.255.255.255/", ErrBlocked, 0},
		{"multicast", "http://224.0.0.1/", ErrBlocked, 0},
		{"ipv6 ula", "http://[fd00::1]/", ErrBlocked, 0},
		{"ipv6 link-local with zone", "http://[fe80::1%25eth0]/", ErrBlocked, 0},
		{"nat64 of loopback", "http://[64:ff9b::7f00:1]/", ErrBlocked, 0},
		{"6to4 of private", "http://[2002:a00:1::]/", ErrBlocked, 0},
		{"name resolving to private", "http://internal.example/", ErrBlocked, 0},
		{"name resolving to metadata", "http://metadata.example/", ErrBlocked, 0},
		{"name resolving to public and loopback", "http://mixed.example:" + ip + "/", ErrBlocked, 0},
		{"name resolving to ipv6 ula", "http://v6ula.example/", ErrBlocked, 0},
		{"name resolving to mapped loopback", "http://mapped.example:" + ip + "/", ErrBlocked, 0},
		{"invalid numeric host", "http://999.0.0.1/", ErrBlocked, 0},
		{"file scheme", "file:///etc/passwd", ErrScheme, 0},
		{"gopher scheme", "gopher://127.0.0.1:" + ip + "/_GET%20/", ErrScheme, 0},
		{"ftp scheme", "ftp://example.com/", ErrScheme, 0},
		{"no scheme", "127.0.0.1:" + ip, ErrURL, 0},
		{"redirect to loopback", redirect("http://127.0.0.1:" + ip + "/"), ErrBlocked, 1},
		{"redirect to localhost", redirect("http://localhost:" + ip + "/"), ErrBlocked, 1},
		{"redirect to decimal loopback", redirect("http://2130706433:" + ip + "/"), ErrBlocked, 1},
		{"redirect to metadata", redirect("http://169.254.169.254/latest/meta-data/"), ErrBlocked, 1},
		{"redirect to name resolving to private", redirect("http://internal.example/"), ErrBlocked, 1},
		{"redirect to mapped ipv6", redirect("http://[::ffff:127.0.0.1]:" + ip + "/"), ErrBlocked, 1},
		{"redirect to file", redirect("file:///etc/passwd"), ErrScheme, 1},
		{"redirect to gopher", redirect("gopher://127.0.0.1:" + ip + "/"), ErrScheme, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			parent := fx.dials.t
			fx.dials.t = t
			defer func() { fx.dials.t = parent }()
			fx.dials.take()
			before := fx.internalHits.Load()
			out, err := fx.f.Run(context.Background(), tools.Env{}, mustJSON(t, Args{URL: tc.url}))
			if err == nil {
				t.Fatalf("fetch %s succeeded (%q), want refusal", tc.url, out)
			}
			if !errors.Is(err, tc.want) {
				t.Errorf("fetch %s: got error %v, want %v", tc.url, err, tc.want)
			}
			dials := fx.dials.take()
			if len(dials) != tc.dials {
				t.Errorf("dials = %v, want %d", dials, tc.dials)
			}
			for _, d := range dials {
				if d != allowedAddr {
					t.Errorf("dialled %s, want only the allowlisted %s", d, allowedAddr)
				}
			}
			if n := fx.internalHits.Load() - before; n != 0 {
				t.Errorf("internal server got %d requests, want 0", n)
			}
		})
	}
}

func TestAllowlist(t *testing.T) {
	cases := []struct {
		name  string
		allow func(fx *fixture) []string
		url   func(fx *fixture) string
		want  string
	}{
		{"host:port", func(fx *fixture) []string { return []string{fx.allowed.Listener.Addr().String()} },
			func(fx *fixture) string { return fx.allowed.URL + "/hello" }, "hello from the allowed server"},
		{"cidr", func(fx *fixture) []string { return []string{"127.0.0.0/8"} },
			func(fx *fixture) string { return fx.internal.URL + "/" }, "internal secret"},
		{"address any port", func(fx *fixture) []string { return []string{"127.0.0.1"} },
			func(fx *fixture) string { return fx.internal.URL + "/" }, "internal secret"},
		{"name:port", func(fx *fixture) []string { return []string{"allowed.test:" + fx.internalPort()} },
			func(fx *fixture) string { return "http://allowed.test:" + fx.internalPort() + "/" }, "internal secret"},
		{"localhost by name", func(fx *fixture) []string { return []string{"localhost"} },
			func(fx *fixture) string { return "http://localhost:" + fx.internalPort() + "/" }, "internal secret"},
		{"odd spelling of an allowed address", func(fx *fixture) []string { return []string{"127.0.0.1:" + fx.internalPort()} },
			func(fx *fixture) string { return "http://2130706433:" + fx.internalPort() + "/" }, "internal secret"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var allow []string
			fx := newFixture(t, func(c *Config) { c.Allow = nil })
			allow = tc.allow(fx)
			f, err := New(Config{Allow: allow, Resolver: fx.res, DialContext: fx.dials.dial})
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			res, err := f.Fetch(context.Background(), Args{URL: tc.url(fx)})
			if err != nil {
				t.Fatalf("fetch: %v", err)
			}
			if res.Status != 200 || string(res.Body) != tc.want {
				t.Errorf("got %d %q, want 200 %q", res.Status, res.Body, tc.want)
			}
		})
	}
	t.Run("port of another listener is not allowed", func(t *testing.T) {
		fx := newFixture(t, nil)
		_, err := fx.f.Fetch(context.Background(), Args{URL: fx.internal.URL})
		if !errors.Is(err, ErrBlocked) {
			t.Errorf("got %v, want %v", err, ErrBlocked)
		}
		if fx.internalHits.Load() != 0 {
			t.Errorf("internal server was reached")
		}
	})
	t.Run("default dialer", func(t *testing.T) {
		fx := newFixture(t, nil)
		f, err := New(Config{Allow: []string{fx.allowed.Listener.Addr().String(), "allowed.test"}, Resolver: fx.res})
		if err != nil {
			t.Fatalf("New: %v", err)
		}
		res, err := f.Fetch(context.Background(), Args{URL: fx.allowed.URL + "/hello"})
		if err != nil || string(res.Body) != "hello from the allowed server" {
			t.Errorf("allowed fetch: got %v, %v", res, err)
		}
		if _, err := f.Fetch(context.Background(), Args{URL: fx.internal.URL}); !errors.Is(err, ErrBlocked) {
			t.Errorf("internal fetch: got %v, want %v", err, ErrBlocked)
		}
		// (The connect-time hook's own refusals: pkg/netguard's
		// TestControlRefusesOnItsOwn.)
		if fx.internalHits.Load() != 0 {
			t.Errorf("internal server was reached")
		}
	})
	t.Run("bad entries", func(t *testing.T) {
		for _, e := range []string{"host:0", "host:99999", "[::1", "a b", "http://x/"} {
			if _, err := New(Config{Allow: []string{e}}); err == nil {
				t.Errorf("New with Allow %q: no error", e)
			}
		}
	})
}

func TestFetch(t *testing.T) {
	fx := newFixture(t, nil)
	t.Run("allowlisted server reachable", func(t *testing.T) {
		out, err := fx.f.Run(context.Background(), tools.Env{}, mustJSON(t, Args{URL: fx.allowed.URL + "/hello"}))
		if err != nil {
			t.Fatalf("fetch: %v", err)
		}
		for _, want := range []string{"status: 200 OK", "content-type: text/plain; charset=utf-8", "url: " + fx.allowed.URL + "/hello", "\n\nhello from the allowed server"} {
			if !strings.Contains(out, want) {
				t.Errorf("output %q lacks %q", out, want)
			}
		}
		if strings.Contains(out, "truncated") {
			t.Errorf("output %q flagged truncated", out)
		}
	})
	t.Run("redirect within the allowlist", func(t *testing.T) {
		res, err := fx.f.Fetch(context.Background(), Args{URL: fx.allowed.URL + "/redirect?to=/hello"})
		if err != nil {
			t.Fatalf("fetch: %v", err)
		}
		if res.URL != fx.allowed.URL+"/hello" || res.Redirects != 1 || string(res.Body) != "hello from the allowed server" {
			t.Errorf("got url %s redirects %d body %q", res.URL, res.Redirects, res.Body)
		}
	})
	t.Run("too many redirects", func(t *testing.T) {
		fx.dials.take()
		_, err := fx.f.Fetch(context.Background(), Args{URL: fx.allowed.URL + "/loop"})
		if !errors.Is(err, ErrTooManyRedirects) {
			t.Errorf("got %v, want %v", err, ErrTooManyRedirects)
		}
		if n := len(fx.dials.take()); n != DefaultMaxRedirects+1 {
			t.Errorf("dials = %d, want %d", n, DefaultMaxRedirects+1)
		}
	})
	t.Run("post with headers", func(t *testing.T) {
		res, err := fx.f.Fetch(context.Background(), Args{URL: fx.allowed.URL + "/echo", Method: "POST", Headers: map[string]string{"X-Test": "yes"}, Body: "payload"})
		if err != nil {
			t.Fatalf("fetch: %v", err)
		}
		if got, want := string(res.Body), "POST /echo x-test=yes body=payload"; got != want {
			t.Errorf("got %q, want %q", got, want)
		}
	})
	t.Run("binary summarised", func(t *testing.T) {
		out, err := fx.f.Run(context.Background(), tools.Env{}, mustJSON(t, Args{URL: fx.allowed.URL + "/png"}))
		if err != nil {
			t.Fatalf("fetch: %v", err)
		}
		if !strings.Contains(out, "[binary content (image/png), 16 bytes, not shown]") || strings.Contains(out, "PNG") {
			t.Errorf("output %q: want the binary summarised", out)
		}
	})
	t.Run("no environment proxy", func(t *testing.T) {
		if p := fx.f.client.Transport.(*http.Transport).Proxy; p != nil {
			t.Errorf("transport has a Proxy func; the environment's proxies must not be used")
		}
	})
}

func TestCaps(t *testing.T) {
	fx := newFixture(t, nil)
	cases := []struct {
		name      string
		url       string
		maxBytes  int64
		wantLen   int
		wantTrunc bool
		wantSize  int64
	}{
		{"default 50 KB cap with length", fx.allowed.URL + "/big", 0, 50 << 10, true, 100 << 10},
		{"default cap chunked", fx.allowed.URL + "/big?chunked=1", 0, 50 << 10, true, -1},
		{"max_bytes lowers the cap", fx.allowed.URL + "/big", 10, 10, true, 100 << 10},
		{"max_bytes cannot raise the cap", fx.allowed.URL + "/big", 1 << 20, 50 << 10, true, 100 << 10},
		{"small body not truncated", fx.allowed.URL + "/hello", 0, 29, false, 29},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res, err := fx.f.Fetch(context.Background(), Args{URL: tc.url, MaxBytes: tc.maxBytes})
			if err != nil {
				t.Fatalf("fetch: %v", err)
			}
			if len(res.Body) != tc.wantLen || res.Truncated != tc.wantTrunc || res.Size != tc.wantSize {
				t.Errorf("got len %d truncated %v size %d, want %d %v %d", len(res.Body), res.Truncated, res.Size, tc.wantLen, tc.wantTrunc, tc.wantSize)
			}
			out := res.Format()
			note := fmt.Sprintf("[truncated at %d bytes]", res.Cap)
			if got := strings.HasSuffix(out, note); got != tc.wantTrunc {
				t.Errorf("output ends with %q: %v, want %v", note, got, tc.wantTrunc)
			}
		})
	}
}

func TestTimeout(t *testing.T) {
	fx := newFixture(t, func(c *Config) { c.Timeout = 300 * time.Millisecond })
	start := time.Now()
	_, err := fx.f.Fetch(context.Background(), Args{URL: fx.allowed.URL + "/slow"})
	if !errors.Is(err, ErrTimeout) {
		t.Errorf("got %v, want %v", err, ErrTimeout)
	}
	// Not a speed check: only that the fetch ends instead of hanging on the
	// slow server (which never answers).
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("fetch took %s: the timeout did not end it", d)
	}
}

func mustJSON(t testing.TB, v any) json.RawMessage {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A redirect to another origin — here another port of the same host,
// which net/http alone treats as the same host — loses every credential
// header; a redirect within the origin keeps them. Both through web_fetch
// and through ServiceClient (MCP, model calls).
func TestRedirectDropsCredentialsAcrossOrigins(t *testing.T) {
	type seen struct{ auth, apiKey, cookie, other string }
	var mu sync.Mutex
	var got []seen
	record := func(r *http.Request) {
		mu.Lock()
		got = append(got, seen{r.Header.Get("Authorization"), r.Header.Get("X-Api-Key"), r.Header.Get("Cookie"), r.Header.Get("X-Test")})
		mu.Unlock()
	}
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		record(r)
		if to := r.URL.Query().Get("to"); to != "" {
			http.Redirect(w, r, to, http.StatusFound)
			return
		}
		fmt.Fprint(w, "other origin")
	}))
	t.Cleanup(other.Close)
	var first *httptest.Server
	first = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		record(r)
		switch r.URL.Path {
		case "/cross":
			http.Redirect(w, r, other.URL+"/landed", http.StatusTemporaryRedirect)
		case "/same":
			http.Redirect(w, r, "/landed", http.StatusFound)
		case "/bounce": // out and back: still stripped on return
			http.Redirect(w, r, other.URL+"/back?to="+first.URL+"/landed", http.StatusFound)
		default:
			fmt.Fprint(w, "first origin")
		}
	}))
	t.Cleanup(first.Close)
	f, err := New(Config{Allow: []string{first.Listener.Addr().String(), other.Listener.Addr().String()}, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	creds := map[string]string{"Authorization": "Bearer sk-secret", "X-Api-Key": "k-secret", "Cookie": "s=secret", "X-Test": "kept"}
	full := seen{"Bearer sk-secret", "k-secret", "s=secret", "kept"}
	bare := seen{other: "kept"}
	tests := []struct {
		path string
		want []seen
	}{
		{"/cross", []seen{full, bare}},
		{"/same", []seen{full, full}},
		{"/bounce", []seen{full, bare, bare}},
	}
	for _, via := range []string{"web_fetch", "ServiceClient"} {
		for _, tc := range tests {
			t.Run(via+tc.path, func(t *testing.T) {
				mu.Lock()
				got = nil
				mu.Unlock()
				if via == "web_fetch" {
					if _, err := f.Fetch(context.Background(), Args{URL: first.URL + tc.path, Headers: creds}); err != nil {
						t.Fatal(err)
					}
				} else {
					req, _ := http.NewRequest(http.MethodGet, first.URL+tc.path, nil)
					for k, v := range creds {
						req.Header.Set(k, v)
					}
					resp, err := f.ServiceClient().Do(req)
					if err != nil {
						t.Fatal(err)
					}
					resp.Body.Close()
				}
				mu.Lock()
				defer mu.Unlock()
				if fmt.Sprint(got) != fmt.Sprint(tc.want) {
					t.Errorf("headers seen per hop = %+v, want %+v", got, tc.want)
				}
			})
		}
	}
}

func TestIsCredentialHeader(t *testing.T) {
	for name, want := range map[string]bool{
		"Authorization": true, "Proxy-Authorization": true, "Cookie": true, "Api-Key": true, "X-Api-Key": true,
		"X-Auth-Token": true, "X-Goog-Api-Key": true, "Openai-Organization": false, "Content-Type": false, "Accept": false,
	} {
		if got := IsCredentialHeader(name); got != want {
			t.Errorf("IsCredentialHeader(%q) = %v, want %v", name, got, want)
		}
	}
}
