package executor

import (
	"testing"

	"github.com/agentmesh/agentmesh/pkg/envconf"
	"github.com/agentmesh/agentmesh/pkg/envconf/envconftest"
)

// The embedding model's settings: read, a bad value refused naming it.
func TestEmbeddingConfigFromEnv(t *testing.T) {
	cfg, err := ConfigFromEnv(envconf.Map(map[string]string{EnvEmbeddingModel: "text-embedding-3-small",
		EnvEmbeddingBaseURL: "https://api.openai.com/v1", EnvEmbeddingAPIKey: "k", EnvEmbeddingDimensions: "512"}))
	e := cfg.Embedding
	if err != nil || e.Model != "text-embedding-3-small" || e.BaseURL != "https://api.openai.com/v1" || e.APIKey != "k" || e.Dimensions != 512 {
		t.Errorf("got %+v, %v", e, err)
	}
	envconftest.Refused(t, ConfigFromEnv, []envconftest.Bad{
		{EnvEmbeddingBaseURL, "ftp://x"},
		{EnvEmbeddingBaseURL, "not a url"},
		{EnvEmbeddingDimensions, "0"},
		{EnvEmbeddingDimensions, "lots"},
		{EnvEmbeddingDimensions, "99999"},
	})
}
