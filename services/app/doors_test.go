package app

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

// agentmesh dev's HTTP listener serves every door: REST under /v1/, the
// MCP server at /mcp, A2A at /a2a with its agent card — each refusing a
// request without a key when keys are configured.
func TestDevServesTheDoors(t *testing.T) {
	banner, stop := runDevOnce(t, t.TempDir(), freePort(t), "--api-keys", "k-acme=acme")
	defer stop()
	m := restLine.FindStringSubmatch(banner)
	if m == nil {
		t.Fatalf("the banner does not say where the REST API is:\n%s", banner)
	}
	for _, door := range []string{"/mcp", "/a2a", "/.well-known/agent-card.json"} {
		if !strings.Contains(banner, door) {
			t.Errorf("the banner does not name %s:\n%s", door, banner)
		}
	}
	base := "http://" + m[1]
	c := &http.Client{Timeout: 10 * time.Second}
	initialize := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`
	for _, tc := range []struct {
		name, method, path, key, body string
		want                          int
	}{
		{"rest without a key", "GET", "/v1/tasks", "", "", http.StatusUnauthorized},
		{"rest", "GET", "/v1/tasks", "k-acme", "", http.StatusOK},
		{"mcp without a key", "POST", "/mcp", "", initialize, http.StatusUnauthorized},
		{"mcp", "POST", "/mcp", "k-acme", initialize, http.StatusOK},
		{"a2a without a key", "POST", "/a2a", "", `{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"id":"x"}}`, http.StatusUnauthorized},
		{"agent card", "GET", "/.well-known/agent-card.json", "", "", http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequest(tc.method, base+tc.path, strings.NewReader(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			if tc.key != "" {
				req.Header.Set("Authorization", "Bearer "+tc.key)
			}
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tc.want {
				t.Errorf("%s %s: got %d, want %d", tc.method, tc.path, resp.StatusCode, tc.want)
			}
		})
	}
}
