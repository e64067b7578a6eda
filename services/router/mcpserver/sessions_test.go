package mcpserver

import (
	"net/http"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/services/doortest"
)

// initialize opens a session of revision 2025-06-18 as key over raw HTTP
// and returns its id.
func (e *env) initialize(t testing.TB, key string) string {
	t.Helper()
	h := http.Header{}
	h.Set("Authorization", "Bearer "+key)
	r := e.post(t, h, []byte(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`))
	id := r.header.Get("Mcp-Session-Id")
	if r.status != http.StatusOK || id == "" {
		t.Fatalf("initialize as %s: %d %+v", key, r.status, r.Error)
	}
	return id
}

// ping sends ping in session id as key and returns the HTTP status.
func (e *env) ping(t testing.TB, key, id string) int {
	t.Helper()
	h := http.Header{}
	h.Set("Authorization", "Bearer "+key)
	h.Set("Mcp-Session-Id", id)
	h.Set("MCP-Protocol-Version", "2025-06-18")
	return e.post(t, h, []byte(`{"jsonrpc":"2.0","id":2,"method":"ping"}`)).status
}

// A key holds at most MaxSessionsPerKey sessions: one more closes the
// key's least recently used (its id is then 404), and no other key's.
// Without the bound every initialize kept a session (~35 KB and a
// goroutine) for SessionTimeout, so one key could exhaust the router's
// memory.
func TestSessionsPerKeyAreBounded(t *testing.T) {
	e := startWith(t, Config{MaxSessionsPerKey: 2})
	a, b := doortest.Secret(t, "a-op"), doortest.Secret(t, "b-op")
	other := e.initialize(t, b)
	s1 := e.initialize(t, a)
	s2 := e.initialize(t, a)
	if got := e.ping(t, a, s1); got != http.StatusOK { // s1 is now the newest used
		t.Fatalf("ping in s1: %d", got)
	}
	s3 := e.initialize(t, a)
	deadline := time.Now().Add(30 * time.Second)
	for e.ping(t, a, s2) != http.StatusNotFound { // the close is not synchronous
		if time.Now().After(deadline) {
			t.Fatal("the least recently used session (s2) was not closed")
		}
		time.Sleep(20 * time.Millisecond)
	}
	for name, id := range map[string]string{"s1": s1, "s3": s3} {
		if got := e.ping(t, a, id); got != http.StatusOK {
			t.Errorf("ping in %s: %d, want 200", name, got)
		}
	}
	if got := e.ping(t, b, other); got != http.StatusOK {
		t.Errorf("another key's session: %d, want 200", got)
	}
	// A session that ends (DELETE) frees its place.
	req, _ := http.NewRequest(http.MethodDelete, e.srv.URL, nil)
	req.Header.Set("Authorization", "Bearer "+a)
	req.Header.Set("Mcp-Session-Id", s3)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusNoContent {
		t.Fatalf("DELETE: %v %v", resp, err)
	}
	s4 := e.initialize(t, a)
	for name, id := range map[string]string{"s1": s1, "s4": s4} {
		if got := e.ping(t, a, id); got != http.StatusOK {
			t.Errorf("after a DELETE, ping in %s: %d, want 200", name, got)
		}
	}
}
