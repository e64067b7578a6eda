package router

import (
	"context"
	"net/url"
	"strings"
	"testing"

	"github.com/agentmesh/agentmesh/pkg/netguard"
)

// FuzzCheckWebhookURL: no URL makes the check panic, and every URL it lets
// through is http(s), names a host, carries no credentials, and names no
// refused address in any spelling (a name is checked when connecting).
func FuzzCheckWebhookURL(f *testing.F) {
	for _, s := range []string{"https://example.com/h", "http://127.0.0.1:9/h", "http://localhost/", "http://[::1]/", "http://0x7f.1/",
		"http://169.254.169.254/", "ftp://x/", "http://u:p@example.com/", "http://[fe80::1%25eth0]/", "https://2130706433/", "http://10.0.0.1./"} {
		f.Add(s)
	}
	guard, err := netguard.New(nil, netguard.Options{})
	if err != nil {
		f.Fatal(err)
	}
	s := &Service{guard: guard}
	f.Fuzz(func(t *testing.T, raw string) {
		if s.checkWebhookURL(context.Background(), raw) != nil {
			return
		}
		u, err := url.Parse(strings.TrimSpace(raw))
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" || u.User != nil {
			t.Fatalf("accepted %q", raw)
		}
		if ip, ok, numeric := netguard.HostIP(u.Hostname()); numeric && (!ok || netguard.Check(ip) != nil) {
			t.Fatalf("accepted %q, naming a refused address", raw)
		}
		if h := strings.ToLower(strings.TrimSuffix(u.Hostname(), ".")); h == "localhost" || strings.HasSuffix(h, ".localhost") {
			t.Fatalf("accepted %q, naming localhost", raw)
		}
	})
}
