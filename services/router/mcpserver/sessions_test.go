package mcpserver

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
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

// DELETE of a session ends the calls it has in flight: a delegate waiting
// for its task (wait_seconds) held the DELETE until the wait was over (up
// to MaxWait, 5 min), the SDK's close waiting for it. Another key cannot
// end them (its DELETE is 403).
func TestDeleteEndsCallsInFlight(t *testing.T) {
	e := start(t)
	key := doortest.Secret(t, "a-op")
	id := e.initialize(t, key)
	h := http.Header{}
	h.Set("Authorization", "Bearer "+key)
	h.Set("Mcp-Session-Id", id)
	h.Set("MCP-Protocol-Version", "2025-06-18")
	e.post(t, h, []byte(`{"jsonrpc":"2.0","method":"notifications/initialized"}`))
	done := make(chan error, 1)
	go func() { // not e.post: it fails the test, which only the test's goroutine may
		req, _ := http.NewRequest(http.MethodPost, e.srv.URL, strings.NewReader(`{"jsonrpc":"2.0","id":5,"method":"tools/call",`+
			`"params":{"name":"delegate","arguments":{"task":"slow one","agent":"plain","tags":["in-flight"],"wait_seconds":120}}}`))
		req.Header = h.Clone()
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			_, err = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		done <- err
	}()
	for { // the call is in flight once its task is submitted
		resp, err := e.stack.Tasks.ListTasks(doortest.As(t, "a-reader"), &agentmeshv1.ListTasksRequest{Tag: "in-flight"})
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.GetTasks()) > 0 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	del := func(who string) int {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // the slow task takes 60 s, the call waits 120 s
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodDelete, e.srv.URL, nil)
		req.Header.Set("Authorization", "Bearer "+doortest.Secret(t, who))
		req.Header.Set("Mcp-Session-Id", id)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("DELETE as %s: %v", who, err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := del("b-op"); got != http.StatusForbidden {
		t.Fatalf("another key's DELETE: %d, want 403", got)
	}
	select {
	case err := <-done:
		t.Fatalf("another key's DELETE ended the call (%v)", err)
	case <-time.After(200 * time.Millisecond):
	}
	if got := del("a-op"); got != http.StatusNoContent {
		t.Fatalf("DELETE: %d, want 204", got)
	}
	<-done // the call ended with its session
}
