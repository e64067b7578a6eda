package scriptedmodel

import (
	"context"
	"net/http"
	"strings"
	"testing"

	openai "github.com/sashabaranov/go-openai"
)

func cosine(a, b []float32) float32 {
	var s float32
	for i := range a {
		s += a[i] * b[i]
	}
	return s
}

// The embeddings endpoint answers an OpenAI client, deterministically,
// with vectors as similar as the texts share words.
func TestEmbeddings(t *testing.T) {
	srv, c := startServer(t, `{"embedding_dimensions": 64, "scenarios": [{"turns": [{"content": "hi"}]}]}`)
	ctx := context.Background()
	texts := []string{
		"The user's favourite colour is green.",
		"What is my favourite colour?",
		"The deployment runs on three NATS servers.",
	}
	resp, err := c.CreateEmbeddings(ctx, openai.EmbeddingRequestStrings{Input: texts, Model: "scripted-embed"})
	if err != nil {
		t.Fatalf("CreateEmbeddings: %v", err)
	}
	if len(resp.Data) != 3 || resp.Model != "scripted-embed" || resp.Usage.PromptTokens == 0 {
		t.Fatalf("response: %d vectors, model %q, usage %+v", len(resp.Data), resp.Model, resp.Usage)
	}
	for i, d := range resp.Data {
		if d.Index != i || len(d.Embedding) != 64 {
			t.Fatalf("vector %d: index %d, %d dimensions; want %d, 64", i, d.Index, len(d.Embedding), i)
		}
		if n := cosine(d.Embedding, d.Embedding); n < 0.999 || n > 1.001 {
			t.Errorf("vector %d: length² %f, want 1", i, n)
		}
	}
	fact, question, other := resp.Data[0].Embedding, resp.Data[1].Embedding, resp.Data[2].Embedding
	if near, far := cosine(question, fact), cosine(question, other); near <= far || near < 0.5 {
		t.Errorf("similarity to the question: fact %.3f, unrelated %.3f; want the fact closer, over 0.5", near, far)
	}
	again, err := c.CreateEmbeddings(ctx, openai.EmbeddingRequest{Input: texts[0], Model: "scripted-embed"})
	if err != nil {
		t.Fatalf("CreateEmbeddings again: %v", err)
	}
	if cosine(again.Data[0].Embedding, fact) < 0.9999 {
		t.Error("the same text embedded twice differs")
	}
	if got := srv.EmbeddingRequests(); got != 2 {
		t.Errorf("EmbeddingRequests = %d, want 2", got)
	}
	d32, err := c.CreateEmbeddings(ctx, openai.EmbeddingRequest{Input: texts[0], Model: "x", Dimensions: 32})
	if err != nil || len(d32.Data[0].Embedding) != 32 {
		t.Errorf("dimensions 32: got %v, %v", d32, err)
	}
}

func TestEmbeddingsBadRequests(t *testing.T) {
	srv, _ := startServer(t, "")
	for _, body := range []string{`{`, `{"input": 3}`, `{"input": []}`, `{"input": ""}`, `{"input": "x", "dimensions": 9000}`, `{"input": "x", "encoding_format": "base64"}`} {
		resp, err := http.Post(srv.URL()+"/embeddings", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("%s: status %d, want 400", body, resp.StatusCode)
		}
	}
	if _, err := ParseScript([]byte(`{"embedding_dimensions": -1, "scenarios": [{"turns": [{"content": "x"}]}]}`)); err == nil {
		t.Error("a negative embedding_dimensions was accepted")
	}
}

func FuzzEmbedInputs(f *testing.F) {
	for _, s := range []string{`"a b c"`, `["a", "b"]`, `[]`, `3`, `null`, `[1]`, `{"x":1}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		in, ok := embedInputs([]byte(raw))
		if ok && len(in) == 0 {
			t.Fatalf("%q: ok with no input", raw)
		}
		for _, s := range in {
			v := HashEmbed(s, 16)
			if len(v) != 16 {
				t.Fatalf("HashEmbed: %d dimensions", len(v))
			}
		}
	})
}
