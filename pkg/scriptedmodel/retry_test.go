package scriptedmodel

import (
	"bufio"
	"context"
	"net/http"
	"strings"
	"testing"
	"time"
)

func post(t *testing.T, url, body string) *http.Response {
	t.Helper()
	resp, err := http.Post(url+"/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

func TestRetryAfterHeader(t *testing.T) {
	srv, _ := startServer(t, `[{"turns": [{"content": "ok", "status": 429, "times": 1, "retry_after": "7"}]}]`)
	req := `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
	first := post(t, srv.URL(), req)
	if first.StatusCode != 429 || first.Header.Get("Retry-After") != "7" {
		t.Errorf("first answer: %d, Retry-After %q", first.StatusCode, first.Header.Get("Retry-After"))
	}
	second := post(t, srv.URL(), req)
	if second.StatusCode != 200 || second.Header.Get("Retry-After") != "" {
		t.Errorf("second answer: %d, Retry-After %q", second.StatusCode, second.Header.Get("Retry-After"))
	}
	if _, err := ParseScript([]byte(`[{"turns": [{"content": "x", "retry_after": "1"}]}]`)); err == nil {
		t.Error("retry_after without status accepted")
	}
	if _, err := ParseScript([]byte(`[{"turns": [{"content": "x", "chunk_delay_ms": -1}]}]`)); err == nil {
		t.Error("negative chunk_delay_ms accepted")
	}
}

func TestChunkDelay(t *testing.T) {
	srv, _ := startServer(t, `[{"turns": [{"content": "0123456789abcdef0123456789abcdef0123456789abcdef", "chunk_delay_ms": 100}]}]`)
	began := time.Now()
	resp := post(t, srv.URL(), `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	sc := bufio.NewScanner(resp.Body)
	var firstContent time.Duration
	for sc.Scan() {
		if firstContent == 0 && strings.Contains(sc.Text(), `"content":"0123`) {
			firstContent = time.Since(began)
		}
	}
	total := time.Since(began)
	if firstContent == 0 || total < 300*time.Millisecond || total-firstContent < 150*time.Millisecond {
		t.Errorf("first content at %v, stream done at %v: want 3 chunks 100 ms apart", firstContent, total)
	}
}

// A client that gives up while the model thinks (delay_ms) is counted as
// abandoned; one that waits for the answer is not.
func TestAbandoned(t *testing.T) {
	srv, _ := startServer(t, `[{"turns": [{"content": "slow", "delay_ms": 2000}]}]`)
	req := `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL()+"/chat/completions", strings.NewReader(req))
	if err != nil {
		t.Fatal(err)
	}
	if resp, err := http.DefaultClient.Do(hr); err == nil {
		resp.Body.Close()
		t.Fatal("a request that gave up after 100 ms got the 2 s answer")
	}
	deadline := time.Now().Add(10 * time.Second)
	for srv.Abandoned() != 1 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if got := srv.Abandoned(); got != 1 {
		t.Fatalf("abandoned = %d after a client gave up, want 1", got)
	}
	if resp := post(t, srv.URL(), req); resp.StatusCode != 200 {
		t.Fatalf("a patient request: %d", resp.StatusCode)
	}
	if got, n := srv.Abandoned(), srv.Requests(); got != 1 || n != 2 {
		t.Errorf("abandoned %d of %d requests, want 1 of 2", got, n)
	}
}
