package llm

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/agentmesh/agentmesh/pkg/scriptedmodel"
)

func TestEmbedder(t *testing.T) {
	srv := scriptedmodel.New(nil)
	url, err := srv.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	if e, err := NewEmbedder(EmbedConfig{}, Config{BaseURL: url}); e != nil || err != nil {
		t.Fatalf("no model: got %v, %v; want no embedder", e, err)
	}
	var none *Embedder
	if _, err := none.Embed(context.Background(), []string{"x"}); !errors.Is(err, ErrNoEmbeddingModel) {
		t.Errorf("Embed without a model: %v", err)
	}
	// The chat model's endpoint by default; dimensions asked and checked.
	e, err := NewEmbedder(EmbedConfig{Model: "scripted-embedding", Dimensions: 48}, Config{BaseURL: url})
	if err != nil {
		t.Fatal(err)
	}
	vs, err := e.Embed(context.Background(), []string{"green is a colour", "the cat"})
	if err != nil || len(vs) != 2 || len(vs[0]) != 48 || len(vs[1]) != 48 {
		t.Fatalf("Embed: %d vectors, %v", len(vs), err)
	}
}

// A model whose vectors have another length than configured, or are not
// one per text, is refused; a 503 is tried again.
func TestEmbedderRefusesBadVectors(t *testing.T) {
	var calls atomic.Int32
	answer := `{"object":"list","model":"m","data":[{"object":"embedding","index":0,"embedding":[0.1,0.2,0.3]}]}`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			http.Error(w, `{"error":{"message":"busy"}}`, http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(answer))
	}))
	t.Cleanup(srv.Close)
	base := srv.URL + "/v1"
	e, err := NewEmbedder(EmbedConfig{Model: "m", Dimensions: 4}, Config{BaseURL: base})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Embed(context.Background(), []string{"x"}); !errors.Is(err, ErrEmbedding) || !strings.Contains(err.Error(), "3 dimensions, want 4") {
		t.Errorf("3 dimensions for 4: got %v", err)
	}
	if calls.Load() != 2 {
		t.Errorf("calls: %d, want 2 (the 503 tried again)", calls.Load())
	}
	e2, _ := NewEmbedder(EmbedConfig{Model: "m"}, Config{BaseURL: base})
	if _, err := e2.Embed(context.Background(), []string{"x", "y"}); !errors.Is(err, ErrEmbedding) {
		t.Errorf("one vector for two texts: got %v", err)
	}
}
