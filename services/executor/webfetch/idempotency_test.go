package webfetch

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/agentmesh/agentmesh/pkg/tools"
)

// web_fetch sends the call's idempotency key as the Idempotency-Key header,
// on every method, overriding one the model put in the arguments; without a
// key it sends none.
func TestIdempotencyKeySent(t *testing.T) {
	var (
		mu  sync.Mutex
		got []string
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Method+" "+r.Header.Get("Idempotency-Key"))
		mu.Unlock()
	}))
	t.Cleanup(srv.Close)
	f, err := New(Config{Allow: []string{srv.Listener.Addr().String()}})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		env  tools.Env
		args Args
		want string
	}{
		{"post", tools.Env{IdempotencyKey: "01TASK:call_1"}, Args{URL: srv.URL, Method: "POST", Body: "x"}, "POST 01TASK:call_1"},
		{"get", tools.Env{IdempotencyKey: "01TASK:call_2"}, Args{URL: srv.URL}, "GET 01TASK:call_2"},
		{"the model cannot choose the key", tools.Env{IdempotencyKey: "01TASK:call_3"},
			Args{URL: srv.URL, Method: "POST", Headers: map[string]string{"Idempotency-Key": "forged"}}, "POST 01TASK:call_3"},
		{"no key", tools.Env{}, Args{URL: srv.URL}, "GET "},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := f.Run(context.Background(), tc.env, mustJSON(t, tc.args)); err != nil {
				t.Fatalf("fetch: %v", err)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(got) != i+1 || got[i] != tc.want {
				t.Fatalf("server saw %q, want last %q", got, tc.want)
			}
		})
	}
}
