package webfetch

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"
)

// FuzzFetchDialsOnlyChecked fetches arbitrary URLs through a stub resolver
// and a dialer that never connects, and checks that every address the
// fetcher tried to dial passes Check: no URL spelling, scheme or resolver
// answer gets a dial to a refused address.
func FuzzFetchDialsOnlyChecked(f *testing.F) {
	for _, s := range []string{
		"http://127.0.0.1/", "http://localhost/", "http://[::1]/", "http://[::ffff:127.0.0.1]/",
		"http://0.0.0.0/", "http://2130706433/", "http://0177.0.0.1/", "http://0x7f.1/",
		"http://169.254.169.254/latest/meta-data/", "http://internal.example/", "http://public.example/",
		"http://mixed.example/", "file:///etc/passwd", "gopher://127.0.0.1:70/", "https://93.184.216.34/",
		"http://[fe80::1%25eth0]/", "http://[64:ff9b::7f00:1]/", "http://127.0.0.1%2e/", "HTTP://PUBLIC.EXAMPLE:8080/x",
		"http://user:pass@public.example/", "http://[::ffff:7f00:1]:80/", "http://0x7f.0x0.0x0.0x1/",
	} {
		f.Add(s)
	}
	res := &stubResolver{names: map[string][]string{
		"public.example":   {"93.184.216.34", "2606:2800:220:1:248:1893:25c8:1946"},
		"internal.example": {"10.0.0.5"},
		"mixed.example":    {"93.184.216.34", "127.0.0.1"},
		"2130706433":       {"127.0.0.1"},
	}}
	var mu sync.Mutex
	var dialled []string
	fe, err := New(Config{
		Resolver: res,
		Timeout:  2 * time.Second,
		DialContext: func(_ context.Context, _, address string) (net.Conn, error) {
			mu.Lock()
			dialled = append(dialled, address)
			mu.Unlock()
			return nil, errors.New("fuzz dialer connects nowhere")
		},
	})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		mu.Lock()
		dialled = nil
		mu.Unlock()
		_, _ = fe.Fetch(context.Background(), Args{URL: raw})
		mu.Lock()
		defer mu.Unlock()
		for _, d := range dialled {
			ap, err := netip.ParseAddrPort(d)
			if err != nil {
				t.Fatalf("URL %q: dialled %q, not an ip:port", raw, d)
			}
			if err := Check(ap.Addr()); err != nil {
				t.Fatalf("URL %q: dialled refused address %s: %v", raw, d, err)
			}
		}
		if !strings.HasPrefix(strings.ToLower(strings.TrimSpace(raw)), "http") && len(dialled) > 0 {
			t.Fatalf("URL %q: dialled %v for a scheme other than http(s)", raw, dialled)
		}
	})
}
