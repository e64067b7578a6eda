package app

import (
	"encoding/json"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/services/router"
)

// AGENTMESH_HTTP_LISTEN: dev serves 127.0.0.1:7480 unless told, router
// nothing unless told; "off" is none; a bad address refuses the start
// naming the variable. AGENTMESH_HTTP_CORS_ORIGINS likewise.
func TestHTTPSettings(t *testing.T) {
	for _, tc := range []struct {
		name, cmd   string
		args        []string
		want        string
		wantOrigins []string
		err         string
	}{
		{"dev default", "dev", nil, DefaultDevHTTPListen, nil, ""},
		{"router default", "router", nil, "", nil, ""},
		{"dev off", "dev", []string{"--http-listen", "off"}, "", nil, ""},
		{"router set", "router", []string{"--http-listen", "0.0.0.0:7480"}, "0.0.0.0:7480", nil, ""},
		{"bad address", "router", []string{"--http-listen", "7480"}, "", nil, "AGENTMESH_HTTP_LISTEN"},
		{"origins", "dev", []string{"--http-cors-origins", "https://app.example.com, http://localhost:3000"}, DefaultDevHTTPListen,
			[]string{"https://app.example.com", "http://localhost:3000"}, ""},
		{"bad origin", "dev", []string{"--http-cors-origins", "app.example.com/x"}, "", nil, "AGENTMESH_HTTP_CORS_ORIGINS"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSettings(tc.cmd)
			if err := s.parse(tc.args); err != nil {
				t.Fatal(err)
			}
			cfg, err := router.ConfigFromEnv(s.get)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("got %v, want an error naming %s", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if cfg.HTTPListen != tc.want || strings.Join(cfg.HTTPCORSOrigins, ",") != strings.Join(tc.wantOrigins, ",") {
				t.Fatalf("got %q %q, want %q %q", cfg.HTTPListen, cfg.HTTPCORSOrigins, tc.want, tc.wantOrigins)
			}
		})
	}
}

var restLine = regexp.MustCompile(`REST API and SSE on http://(\S+)/v1/`)

// agentmesh dev prints where its HTTP API is, and it answers there.
func TestDevPrintsHTTP(t *testing.T) {
	banner, stop := runDevOnce(t, t.TempDir(), freePort(t))
	defer stop()
	m := restLine.FindStringSubmatch(banner)
	if m == nil {
		t.Fatalf("the banner does not say where the REST API is:\n%s", banner)
	}
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get("http://" + m[1] + "/v1/version")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var v struct{ Version string }
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil || resp.StatusCode != http.StatusOK || v.Version != Version {
		t.Fatalf("GET /v1/version: %d %+v %v, want 200 and version %q", resp.StatusCode, v, err, Version)
	}
}
