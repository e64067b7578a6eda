package webfetch

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
)

// The service client (model calls, HTTP MCP) keeps its connections to a
// host for the next calls: a second round of concurrent calls dials none.
func TestServiceClientKeepsConcurrentConnections(t *testing.T) {
	const n = 16
	var conns atomic.Int64
	release := make(chan struct{})
	var inside sync.WaitGroup
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hold" {
			inside.Done()
			<-release // all n calls are open at once
		}
		_, _ = io.WriteString(w, "ok")
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	f, err := New(Config{Allow: []string{srv.Listener.Addr().String()}})
	if err != nil {
		t.Fatal(err)
	}
	c := f.ServiceClient()
	round := func(path string) {
		var wg sync.WaitGroup
		for range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				resp, err := c.Get(srv.URL + path)
				if err != nil {
					t.Error(err)
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}()
		}
		if path == "/hold" {
			inside.Wait()
			close(release)
		}
		wg.Wait()
	}
	inside.Add(n)
	round("/hold")
	if got := conns.Load(); got != n {
		t.Fatalf("first round: %d connections, want %d (one per concurrent call)", got, n)
	}
	for range 3 {
		round("/")
	}
	if got := conns.Load(); got != n {
		t.Errorf("after three more rounds of %d calls: %d connections in all, want still %d (none dialled again)", n, got, n)
	}
}
