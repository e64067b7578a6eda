package llm

// Embeddings for long-term memory (issue 30): the executor embeds what
// remember stores and what recall searches with the OpenAI-compatible
// /v1/embeddings endpoint of one operator-configured embedding model
// (AGENTMESH_EMBEDDING_*). This is kept apart from the chat providers
// (Provider, Models): one small client, the operator's endpoint only (an
// agent cannot name another), the same outbound policy and response cap
// as the model calls (httpClient), a few quick tries.

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"time"

	"github.com/agentmesh/agentmesh/pkg/backoff"
	openai "github.com/sashabaranov/go-openai"
)

// EmbedConfig configures the embedding model.
type EmbedConfig struct {
	// Model names the embedding model; empty: no embeddings (remember and
	// recall answer that none is configured).
	Model string
	// BaseURL of its OpenAI-compatible API; empty: the chat model's
	// (Config.BaseURL).
	BaseURL string
	// APIKey for BaseURL; empty: the chat model's key when BaseURL is the
	// chat model's.
	APIKey string
	// Dimensions, when set, is asked of the model ("dimensions") and
	// checked: a vector of another length is refused.
	Dimensions int
	// Timeout of one call (30s).
	Timeout time.Duration
}

// ErrNoEmbeddingModel: no embedding model is configured.
var ErrNoEmbeddingModel = errors.New("no embedding model is configured on this executor (AGENTMESH_EMBEDDING_MODEL)")

// ErrEmbedding: the embedding model's answer cannot be used (wrong
// dimension, wrong count, not finite).
var ErrEmbedding = errors.New("bad embedding")

// Embedder asks the embedding model for vectors.
type Embedder struct {
	cfg    EmbedConfig
	client *openai.Client
}

// NewEmbedder returns the embedder of cfg (nil when cfg names no model);
// chat gives the defaults and the outbound policy.
func NewEmbedder(cfg EmbedConfig, chat Config) (*Embedder, error) {
	if cfg.Model == "" {
		return nil, nil
	}
	if cfg.BaseURL == "" {
		cfg.BaseURL = chat.BaseURL
		if cfg.APIKey == "" {
			cfg.APIKey = chat.APIKey
		}
	}
	if cfg.BaseURL == "" {
		return nil, fmt.Errorf("embedding model %q: no base URL (AGENTMESH_EMBEDDING_BASE_URL or AGENTMESH_MODEL_BASE_URL)", cfg.Model)
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 30 * time.Second
	}
	policy := chat
	policy.BaseURL = cfg.BaseURL
	hc, err := httpClient(policy)
	if err != nil {
		return nil, fmt.Errorf("embedding model: %w", err)
	}
	oc := openai.DefaultConfig(cfg.APIKey)
	oc.BaseURL = cfg.BaseURL
	oc.HTTPClient = hc
	return &Embedder{cfg: cfg, client: openai.NewClientWithConfig(oc)}, nil
}

// Model is the embedding model's name.
func (e *Embedder) Model() string { return e.cfg.Model }

// embedTries bounds the tries of one embedding call.
const embedTries = 3

// Embed returns one vector per text, in order.
func (e *Embedder) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	if e == nil {
		return nil, ErrNoEmbeddingModel
	}
	req := openai.EmbeddingRequestStrings{Input: texts, Model: openai.EmbeddingModel(e.cfg.Model), Dimensions: e.cfg.Dimensions}
	var resp openai.EmbeddingResponse
	var err error
	for try := range embedTries {
		if try > 0 && !backoff.Sleep(ctx, backoff.Backoff{Initial: 200 * time.Millisecond, Max: 2 * time.Second}.Delay(try)) {
			break
		}
		cctx, cancel := context.WithTimeout(ctx, e.cfg.Timeout)
		resp, err = e.client.CreateEmbeddings(cctx, req)
		cancel()
		if err == nil || !embedRetryable(err) {
			break
		}
	}
	if err != nil {
		return nil, fmt.Errorf("embedding model %q at %s: %s", e.cfg.Model, e.cfg.BaseURL, clipEmbedError(err.Error()))
	}
	return e.check(resp, len(texts))
}

// check refuses an answer that does not have one finite vector of the
// configured length (or, with none configured, of one length) per text.
func (e *Embedder) check(resp openai.EmbeddingResponse, n int) ([][]float32, error) {
	if len(resp.Data) != n {
		return nil, fmt.Errorf("%w: %d vectors for %d texts", ErrEmbedding, len(resp.Data), n)
	}
	out := make([][]float32, n)
	for _, d := range resp.Data {
		if d.Index < 0 || d.Index >= n || out[d.Index] != nil {
			return nil, fmt.Errorf("%w: vector index %d", ErrEmbedding, d.Index)
		}
		want := e.cfg.Dimensions
		if want == 0 {
			want = len(resp.Data[0].Embedding)
		}
		if len(d.Embedding) != want || want == 0 {
			return nil, fmt.Errorf("%w: %d dimensions, want %d (AGENTMESH_EMBEDDING_DIMENSIONS or the model's first vector)", ErrEmbedding, len(d.Embedding), want)
		}
		for _, x := range d.Embedding {
			if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
				return nil, fmt.Errorf("%w: not a finite number", ErrEmbedding)
			}
		}
		out[d.Index] = d.Embedding
	}
	return out, nil
}

// embedRetryable: a transport failure, a timeout, 429 or 5xx.
func embedRetryable(err error) bool {
	var apiErr *openai.APIError
	var reqErr *openai.RequestError
	switch {
	case errors.Is(err, ErrResponseTooLarge):
		return false
	case errors.As(err, &apiErr):
		return apiErr.HTTPStatusCode == http.StatusTooManyRequests || apiErr.HTTPStatusCode >= 500
	case errors.As(err, &reqErr):
		return reqErr.HTTPStatusCode == http.StatusTooManyRequests || reqErr.HTTPStatusCode >= 500 || reqErr.HTTPStatusCode == 0
	}
	return true
}

// clipEmbedError cuts an error text at ErrorTextMax.
func clipEmbedError(s string) string {
	if len(s) > ErrorTextMax {
		return s[:ErrorTextMax] + "…"
	}
	return s
}
