package registry

import (
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/envconf"
	"github.com/agentmesh/agentmesh/pkg/modeltable"
)

// Config of the registry. ConfigFromEnv reads it from the variables named
// on its fields (their docs: services/app.EnvVars); a zero field takes its
// default (withDefaults).
type Config struct {
	// Prefix (AGENTMESH_PREFIX; "" = subjects.DefaultPrefix) and Streams
	// (AGENTMESH_STREAM_REPLICAS) of the bus.
	Prefix  string
	Streams bus.StreamOptions
	// Concurrency bounds requests served at once (default 256).
	Concurrency int
	// DefaultAgent runs tasks that name neither an agent nor skills
	// (default "assistant"; it must exist in the catalogue).
	DefaultAgent string
	// Weights of scored matching (AGENTMESH_MATCH_WEIGHTS; nil =
	// DefaultWeights; see ParseWeights).
	Weights *Weights
	// AffinityWindow: how far back an org's finished tasks count for
	// affinity (AGENTMESH_MATCH_AFFINITY_WINDOW; default 1h, at most 7 days).
	AffinityWindow time.Duration
	// CandidateTTL bounds how long matching uses cached candidates
	// (agentcache.go; 0 = the default CandidateTTL, < 0 = no cache).
	CandidateTTL time.Duration
	// Analysis is the model of the task analysis (analysis.go); an empty
	// BaseURL leaves the deterministic fallback alone.
	Analysis AnalysisConfig
	// Proposals: agents drafted when none fits (proposals.go).
	Proposals ProposalConfig
}

// AnalysisConfig is the model of the task analysis (AGENTMESH_ANALYSIS).
// An empty BaseURL or Model leaves the fallback alone, and Skipped says
// why, in every analysis.
type AnalysisConfig struct {
	// BaseURL of the OpenAI-compatible API: the model table's entry that
	// AGENTMESH_ANALYSIS_MODEL names, else the operator's
	// AGENTMESH_MODEL_BASE_URL (the only endpoints the registry calls).
	BaseURL string
	APIKey  string
	// Model name at BaseURL: AGENTMESH_ANALYSIS_MODEL (a cheaper model
	// than the agents' may do), else AGENTMESH_MODEL; none is guessed.
	Model string
	// Skipped says why no model is asked, when none is configured for
	// the analysis (the analyses say so: TaskAnalysis.model_skipped).
	Skipped string
	// Timeout of the call (AGENTMESH_ANALYSIS_TIMEOUT; 0 =
	// DefaultAnalysisTimeout; at most MaxAnalysisTimeout).
	Timeout time.Duration
	// FallbackOnly: never call a model, even one a dev stack offers.
	FallbackOnly bool
	// Off: no analysis; a task naming neither agent nor skills goes to
	// the default agent.
	Off bool
}

// ProposalConfig configures agent proposals.
type ProposalConfig struct {
	// Off keeps the refusal when no agent fits (AGENTMESH_PROPOSALS=off).
	Off bool
	// Threshold on the best candidate's capability part of the score, in
	// [0, 1) (AGENTMESH_PROPOSAL_THRESHOLD); nil = DefaultProposalThreshold.
	Threshold *float64
	// Model the drafted agents name; "" leaves it to the executor's
	// default model.
	Model string
}

// Defaults and bounds.
const (
	// DefaultAnalysisTimeout bounds the model call of the task analysis.
	DefaultAnalysisTimeout = 2 * time.Second
	// MaxAnalysisTimeout is the longest the analysis may wait for it.
	MaxAnalysisTimeout = time.Minute
	// DefaultAffinityWindow and MaxAffinityWindow bound AffinityWindow.
	DefaultAffinityWindow = time.Hour
	MaxAffinityWindow     = 7 * 24 * time.Hour
	// DefaultProposalThreshold is the capability a candidate must score
	// above for no proposal to be drafted: an agent covering more than
	// half of the required skills is used (or waited for, when busy)
	// rather than replaced.
	DefaultProposalThreshold = 0.5
)

// The registry's own variables (the model's are the executor's too).
const (
	EnvMatchWeights      = "AGENTMESH_MATCH_WEIGHTS"
	EnvAffinityWindow    = "AGENTMESH_MATCH_AFFINITY_WINDOW"
	EnvAnalysis          = "AGENTMESH_ANALYSIS"
	EnvAnalysisTimeout   = "AGENTMESH_ANALYSIS_TIMEOUT"
	EnvProposals         = "AGENTMESH_PROPOSALS"
	EnvProposalThreshold = "AGENTMESH_PROPOSAL_THRESHOLD"
	EnvModelBaseURL      = "AGENTMESH_MODEL_BASE_URL"
	EnvModelAPIKey       = "AGENTMESH_MODEL_API_KEY"
	EnvModel             = "AGENTMESH_MODEL"
	EnvModelProvider     = "AGENTMESH_MODEL_PROVIDER"
	EnvModels            = "AGENTMESH_MODELS"
	EnvAnalysisModel     = "AGENTMESH_ANALYSIS_MODEL"
)

// ConfigFromEnv reads the registry's settings through get; a bad value is
// an *envconf.Error naming its variable. The result has its defaults.
func ConfigFromEnv(get envconf.Getter) (Config, error) {
	r := envconf.New(get)
	var c Config
	c.Prefix, c.Streams = bus.ReadSettings(r)
	r.Parse(EnvMatchWeights, func(v string) error {
		w, err := ParseWeights(v)
		c.Weights = &w
		return err
	})
	if c.AffinityWindow = r.Duration(EnvAffinityWindow); c.AffinityWindow < 0 {
		r.Fail(EnvAffinityWindow, "want a duration up to 168h")
	}
	c.Analysis = readAnalysis(r)
	if r.String(EnvProposals) != "" {
		var err error
		if c.Proposals.Off, err = ParseProposals(r.String(EnvProposals)); err != nil {
			r.Fail(EnvProposals, "want on or off")
		}
	}
	if r.String(EnvProposalThreshold) != "" {
		th, err := ParseProposalThreshold(r.String(EnvProposalThreshold))
		if err != nil {
			r.Fail(EnvProposalThreshold, "want a number from 0 to below 1 (a capability is at most 1)")
		}
		c.Proposals.Threshold = &th
	}
	if err := r.Err(); err != nil {
		return Config{}, err
	}
	c = c.withDefaults()
	return c, c.validate()
}

// readAnalysis reads the task analysis settings: its model is
// AGENTMESH_ANALYSIS_MODEL (else AGENTMESH_MODEL) — an entry of the model
// table (AGENTMESH_MODELS), else a model at the operator's
// AGENTMESH_MODEL_BASE_URL.
func readAnalysis(r *envconf.Reader) AnalysisConfig {
	c := AnalysisConfig{Timeout: r.Duration(EnvAnalysisTimeout)}
	if c.Timeout < 0 {
		r.Fail(EnvAnalysisTimeout, "want a duration up to 1m")
	}
	var table *modeltable.Table
	r.Parse(EnvModels, func(v string) (err error) { table, err = modeltable.Load(v); return err })
	provider := r.Enum(EnvModelProvider, modeltable.Providers...)
	name, from := r.String(EnvAnalysisModel), EnvAnalysisModel
	if name == "" {
		name, from = r.String(EnvModel), EnvModel
	}
	switch r.Enum(EnvAnalysis, "auto", "fallback", "off") {
	case "fallback":
		c.FallbackOnly = true
		return c
	case "off":
		c.Off = true
		return c
	}
	if entry, ok := table.Lookup(name); ok {
		if entry.ProviderOf() != modeltable.ProviderOpenAI {
			r.Failf(from, "model %s of the model table is spoken to in %s: task analysis speaks the OpenAI-compatible format, name such a model", name, entry.ProviderOf())
		}
		c.BaseURL, c.Model = entry.BaseURL, entry.ModelName(name)
		if entry.APIKeyEnv != "" {
			c.APIKey = os.Getenv(entry.APIKeyEnv)
		}
		return c
	}
	c.BaseURL, c.Model, c.APIKey = r.String(EnvModelBaseURL), name, r.String(EnvModelAPIKey)
	switch {
	case c.BaseURL == "":
		c.Skipped = "no model endpoint is configured for task analysis (AGENTMESH_MODEL_BASE_URL, or AGENTMESH_ANALYSIS_MODEL naming a model of AGENTMESH_MODELS)"
	case provider == modeltable.ProviderAnthropic:
		c.BaseURL, c.Skipped = "", "the default model endpoint speaks Anthropic's API and task analysis the OpenAI-compatible format: set AGENTMESH_ANALYSIS_MODEL to an OpenAI-compatible model of AGENTMESH_MODELS"
	case c.Model == "":
		c.BaseURL, c.Skipped = "", "no model is configured for task analysis: set AGENTMESH_ANALYSIS_MODEL (a small, cheap model will do) or AGENTMESH_MODEL"
	}
	return c
}

// withDefaults fills the zero fields with their defaults.
func (c Config) withDefaults() Config {
	if c.Concurrency <= 0 {
		c.Concurrency = 256
	}
	if c.DefaultAgent == "" {
		c.DefaultAgent = DefaultAgent
	}
	if c.Weights == nil {
		w := DefaultWeights
		c.Weights = &w
	}
	if c.AffinityWindow <= 0 {
		c.AffinityWindow = DefaultAffinityWindow
	}
	c.Analysis = c.Analysis.withDefaults()
	c.Proposals = c.Proposals.withDefaults()
	return c
}

func (c AnalysisConfig) withDefaults() AnalysisConfig {
	if c.Timeout <= 0 {
		c.Timeout = DefaultAnalysisTimeout
	}
	return c
}

func (c ProposalConfig) withDefaults() ProposalConfig {
	if c.Threshold == nil {
		th := DefaultProposalThreshold
		c.Threshold = &th
	}
	return c
}

// validate checks c (defaults applied); an error names the variable of the
// bad setting.
func (c Config) validate() error {
	w := *c.Weights
	if w.Capability < 0 || w.Workload < 0 || w.Priority < 0 || w.Affinity < 0 || !(w.sum() > 0) {
		return &envconf.Error{Name: EnvMatchWeights, Value: fmt.Sprintf("%+v", w), Reason: "match weights: each must be ≥ 0 and their sum > 0"}
	}
	if c.AffinityWindow > MaxAffinityWindow {
		return &envconf.Error{Name: EnvAffinityWindow, Value: c.AffinityWindow.String(), Reason: "affinity window is over 7 days"}
	}
	if c.Analysis.Timeout > MaxAnalysisTimeout {
		return &envconf.Error{Name: EnvAnalysisTimeout, Value: c.Analysis.Timeout.String(), Reason: "want a duration up to 1m"}
	}
	return c.Proposals.validate()
}

// validate checks the threshold (defaults applied).
func (c ProposalConfig) validate() error {
	if t := *c.Threshold; math.IsNaN(t) || t < 0 || t >= 1 {
		return &envconf.Error{Name: EnvProposalThreshold, Value: fmt.Sprint(t), Reason: "proposal threshold: want a number from 0 to below 1"}
	}
	return nil
}

// ParseProposals reads AGENTMESH_PROPOSALS: "on" (or empty) or "off".
func ParseProposals(s string) (off bool, err error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "", "on", "true", "1":
		return false, nil
	case "off", "false", "0":
		return true, nil
	}
	return false, fmt.Errorf("AGENTMESH_PROPOSALS %q: want on or off", s)
}

// ParseProposalThreshold reads AGENTMESH_PROPOSAL_THRESHOLD: a number in
// [0, 1); empty gives DefaultProposalThreshold.
func ParseProposalThreshold(s string) (float64, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return DefaultProposalThreshold, nil
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, fmt.Errorf("AGENTMESH_PROPOSAL_THRESHOLD %q is not a number", s)
	}
	if f < 0 || f >= 1 {
		return 0, fmt.Errorf("AGENTMESH_PROPOSAL_THRESHOLD %v: want a number from 0 to below 1 (a capability is at most 1)", f)
	}
	return f, nil
}
