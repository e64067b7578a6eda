// Package modeltable is the operator's model table (AGENTMESH_MODELS): the
// models agents may name, each with its wire format (provider), base URL,
// the variable that holds its key, its prices and its rate limits, and the
// rate limits of each org. The executor makes the calls by it; the
// registry reads it to find the model of the task analysis; agentspec
// checks an agent's provider against its provider names.
//
// The table is YAML or JSON (JSON is YAML), given inline (a value that
// starts with '{') or as the path of a file:
//
//	models:
//	  gpt-4o-mini:                      # the name agents use in model.model
//	    provider: openai                # openai (default) or anthropic
//	    base_url: https://api.openai.com/v1
//	    api_key_env: OPENAI_API_KEY     # the variable holding the key
//	    price: {prompt: 0.15, completion: 0.60, cache_read: 0.075}
//	    limits: {requests_per_minute: 500, tokens_per_minute: 200000}
//	  claude:
//	    provider: anthropic
//	    base_url: https://api.anthropic.com
//	    api_key_env: ANTHROPIC_API_KEY
//	    model: claude-sonnet-4-5        # the name at the provider (default: the entry's)
//	    max_tokens: 4096
//	    fallbacks: [gpt-4o-mini]
//	  llama:
//	    base_url: http://127.0.0.1:11434/v1
//	    no_key: true                    # a local server without keys
//	orgs:
//	  "*":  {requests_per_minute: 60}   # every org not named
//	  acme: {requests_per_minute: 600, tokens_per_minute: 1000000}
//
// Every mistake is refused with the field named (models.claude.base_url:
// required): an unknown provider, an entry without a base URL or a key
// reference, an unknown field, a negative or absurd limit or price, a
// fallback that names no entry.
package modeltable

import (
	"bytes"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"net/url"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"

	"gopkg.in/yaml.v3"
)

// Providers: the wire formats a model is spoken to in.
const (
	// ProviderOpenAI is any OpenAI-compatible Chat Completions server
	// (OpenAI, Azure OpenAI, Ollama, vLLM, llama.cpp, LM Studio, Groq,
	// Together, OpenRouter, Gemini's compatible endpoint …).
	ProviderOpenAI = "openai"
	// ProviderAnthropic is Anthropic's native Messages API.
	ProviderAnthropic = "anthropic"
)

// Providers lists the provider names.
var Providers = []string{ProviderOpenAI, ProviderAnthropic}

// ValidProvider reports whether p names a provider ("" does not).
func ValidProvider(p string) bool { return slices.Contains(Providers, p) }

// Bounds of a table.
const (
	MaxModels = 256
	// MaxRequestsPerMinute and MaxTokensPerMinute bound a limit: more is a
	// typo, not a provider's limit.
	MaxRequestsPerMinute = 10_000_000
	MaxTokensPerMinute   = 10_000_000_000
	// MaxPricePerM bounds a price (USD per 1M tokens).
	MaxPricePerM = 1_000_000
	// MaxMaxTokens bounds max_tokens per turn.
	MaxMaxTokens = 1 << 20
	// MaxFallbacks bounds a fallback list.
	MaxFallbacks = 8
	// AnyOrg is the orgs key whose limits apply to every org not named.
	AnyOrg = "*"
)

// Table is the parsed table.
type Table struct {
	// Models by the name agents use.
	Models map[string]Model `yaml:"models"`
	// Orgs' rate limits by org name (AnyOrg: every org not named).
	Orgs map[string]Limits `yaml:"orgs"`
}

// Model is one entry.
type Model struct {
	// Provider is the wire format (ProviderOpenAI when empty).
	Provider string `yaml:"provider"`
	BaseURL  string `yaml:"base_url"`
	// APIKeyEnv names the environment variable that holds the key; NoKey
	// says the server takes none (a local Ollama). One of them is required.
	APIKeyEnv string `yaml:"api_key_env"`
	NoKey     bool   `yaml:"no_key"`
	// Model is the name at the provider (the entry's name when empty).
	Model string `yaml:"model"`
	Price *Price `yaml:"price"`
	// Limits of the provider key this entry spends (LimitKey).
	Limits Limits `yaml:"limits"`
	// LimitKey names the budget the entry spends: entries that share a
	// provider's budget (one key, one model family) name the same key, and
	// then give the same limits. Default: the entry's name. Lower-case
	// letters, digits, '-' and '_'.
	LimitKey string `yaml:"limit_key"`
	// MaxTokens per turn when the agent sets none (Anthropic needs one;
	// 0: the provider's default, 4096 for Anthropic).
	MaxTokens int `yaml:"max_tokens"`
	// ToolCallsInText: the model writes tool calls as <tool_call>{…}
	// </tool_call> text; the executor reads them out (opt-in).
	ToolCallsInText bool `yaml:"tool_calls_in_text"`
	// Fallbacks are tried in order when this model is out or over its
	// limit (an agent's own model.fallbacks win). Entry names.
	Fallbacks []string `yaml:"fallbacks"`
}

// Price is what a model costs, USD per million tokens. CacheRead and
// CacheWrite price the prompt tokens read from and written to the
// provider's prompt cache; unset, they cost the prompt price.
type Price struct {
	Prompt     float64  `yaml:"prompt"`
	Completion float64  `yaml:"completion"`
	CacheRead  *float64 `yaml:"cache_read"`
	CacheWrite *float64 `yaml:"cache_write"`
}

// Limits are rate limits; zero fields do not limit.
type Limits struct {
	RequestsPerMinute int   `yaml:"requests_per_minute"`
	TokensPerMinute   int64 `yaml:"tokens_per_minute"`
	// Burst is how many requests may go at once before they are spaced
	// (1 when 0: requests are spaced evenly, 60/min is one a second, which
	// no provider's window refuses).
	Burst int `yaml:"burst"`
}

// Zero reports whether l limits nothing.
func (l Limits) Zero() bool { return l.RequestsPerMinute == 0 && l.TokensPerMinute == 0 }

// FieldError is a bad field of the table.
type FieldError struct {
	Field  string // e.g. models.claude.base_url
	Reason string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Reason }

// ErrTable is wrapped by every error of Parse and Load.
var ErrTable = errors.New("model table")

func fieldErr(field, format string, args ...any) error {
	return fmt.Errorf("%w: %w", ErrTable, &FieldError{Field: field, Reason: fmt.Sprintf(format, args...)})
}

var (
	nameRE     = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:/@-]{0,127}$`)
	limitKeyRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)
	orgRE      = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)
)

// Load reads the table v names: inline YAML/JSON when it starts with '{',
// else the path of a file. An empty v is an empty table.
func Load(v string) (*Table, error) {
	v = strings.TrimSpace(v)
	if v == "" {
		return &Table{}, nil
	}
	if strings.HasPrefix(v, "{") {
		return Parse([]byte(v))
	}
	data, err := os.ReadFile(v)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrTable, err)
	}
	t, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", v, err)
	}
	return t, nil
}

// Parse parses and checks a table.
func Parse(data []byte) (*Table, error) {
	var t Table
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&t); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%w: %v", ErrTable, oneLine(err.Error()))
	}
	if err := t.check(); err != nil {
		return nil, err
	}
	return &t, nil
}

// check validates every entry, in name order so the first error is stable.
func (t *Table) check() error {
	if len(t.Models) > MaxModels {
		return fieldErr("models", "%d models is over the limit of %d", len(t.Models), MaxModels)
	}
	keys := map[string]string{} // limit key → the entry that set its limits
	for _, name := range t.Names() {
		if err := t.checkModel(name, keys); err != nil {
			return err
		}
	}
	orgs := make([]string, 0, len(t.Orgs))
	for org := range t.Orgs {
		orgs = append(orgs, org)
	}
	sort.Strings(orgs)
	for _, org := range orgs {
		if org != AnyOrg && !orgRE.MatchString(org) {
			return fieldErr("orgs."+org, "not an org name (lower-case letters, digits and '-') or %q", AnyOrg)
		}
		if err := t.Orgs[org].check("orgs." + org + "."); err != nil {
			return err
		}
	}
	return nil
}

func (t *Table) checkModel(name string, keys map[string]string) error {
	m := t.Models[name]
	f := "models." + name + "."
	if !nameRE.MatchString(name) {
		return fieldErr("models."+name, "not a model name (letters, digits and ._:/@-, at most 128)")
	}
	if m.Provider != "" && !ValidProvider(m.Provider) {
		return fieldErr(f+"provider", "unknown provider %q (want %s)", m.Provider, strings.Join(Providers, " or "))
	}
	if m.BaseURL == "" {
		return fieldErr(f+"base_url", "required")
	}
	if u, err := url.Parse(m.BaseURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fieldErr(f+"base_url", "want an http(s) URL such as https://api.openai.com/v1, got %q", m.BaseURL)
	}
	switch {
	case m.APIKeyEnv == "" && !m.NoKey:
		return fieldErr(f+"api_key_env", "required: the variable that holds the key (or no_key: true for a server that takes none)")
	case m.APIKeyEnv != "" && m.NoKey:
		return fieldErr(f+"no_key", "set with api_key_env: choose one")
	case m.APIKeyEnv != "" && !envNameRE.MatchString(m.APIKeyEnv):
		return fieldErr(f+"api_key_env", "not a variable name: %q", m.APIKeyEnv)
	}
	if m.Model != "" && !nameRE.MatchString(m.Model) {
		return fieldErr(f+"model", "not a model name: %q", m.Model)
	}
	if m.MaxTokens < 0 || m.MaxTokens > MaxMaxTokens {
		return fieldErr(f+"max_tokens", "want 0 to %d", MaxMaxTokens)
	}
	if err := m.Price.check(f + "price."); err != nil {
		return err
	}
	if err := m.Limits.check(f + "limits."); err != nil {
		return err
	}
	if m.LimitKey != "" && !limitKeyRE.MatchString(m.LimitKey) {
		return fieldErr(f+"limit_key", "want lower-case letters, digits, '-' and '_' (at most 63), got %q", m.LimitKey)
	}
	key := t.LimitKey(name)
	if other, ok := keys[key]; ok && !m.Limits.Zero() && t.Models[other].Limits != m.Limits {
		return fieldErr(f+"limits", "limit key %q has other limits in models.%s: entries sharing a key give the same limits (or none)", key, other)
	}
	if !m.Limits.Zero() {
		keys[key] = name
	}
	if len(m.Fallbacks) > MaxFallbacks {
		return fieldErr(f+"fallbacks", "more than %d", MaxFallbacks)
	}
	for i, fb := range m.Fallbacks {
		if _, ok := t.Models[fb]; !ok || fb == name {
			return fieldErr(fmt.Sprintf("%sfallbacks[%d]", f, i), "%q is not another entry of the table", fb)
		}
	}
	return nil
}

var envNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,127}$`)

func (p *Price) check(f string) error {
	if p == nil {
		return nil
	}
	rates := []struct {
		name string
		v    *float64
	}{{"prompt", &p.Prompt}, {"completion", &p.Completion}, {"cache_read", p.CacheRead}, {"cache_write", p.CacheWrite}}
	for _, r := range rates {
		if r.v == nil {
			continue
		}
		if v := *r.v; math.IsNaN(v) || math.IsInf(v, 0) || v < 0 || v > MaxPricePerM {
			return fieldErr(f+r.name, "want a price from 0 to %d USD per 1M tokens, got %v", MaxPricePerM, v)
		}
	}
	return nil
}

func (l Limits) check(f string) error {
	switch {
	case l.RequestsPerMinute < 0 || l.RequestsPerMinute > MaxRequestsPerMinute:
		return fieldErr(f+"requests_per_minute", "want 0 to %d, got %d", MaxRequestsPerMinute, l.RequestsPerMinute)
	case l.TokensPerMinute < 0 || l.TokensPerMinute > MaxTokensPerMinute:
		return fieldErr(f+"tokens_per_minute", "want 0 to %d, got %d", int64(MaxTokensPerMinute), l.TokensPerMinute)
	case l.Burst < 0 || (l.Burst > 0 && l.Burst > max(l.RequestsPerMinute, 1)):
		return fieldErr(f+"burst", "want 0 to requests_per_minute (%d), got %d", l.RequestsPerMinute, l.Burst)
	}
	return nil
}

// Names lists the entries, sorted.
func (t *Table) Names() []string {
	out := make([]string, 0, len(t.Models))
	for n := range t.Models {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Lookup returns the entry name.
func (t *Table) Lookup(name string) (Model, bool) {
	if t == nil {
		return Model{}, false
	}
	m, ok := t.Models[name]
	return m, ok
}

// ProviderOf is m's provider (ProviderOpenAI when unset).
func (m Model) ProviderOf() string {
	if m.Provider == "" {
		return ProviderOpenAI
	}
	return m.Provider
}

// ModelName is the name at the provider of entry name.
func (m Model) ModelName(name string) string {
	if m.Model != "" {
		return m.Model
	}
	return name
}

// LimitKey is the budget entry name spends: its limit_key, or its name
// made a key (lower-cased; characters a key cannot hold become '_', and a
// name so changed gets a short hash so two names never share a key by
// accident).
func (t *Table) LimitKey(name string) string {
	if m, ok := t.Lookup(name); ok && m.LimitKey != "" {
		return m.LimitKey
	}
	return KeyOf(name)
}

// KeyOf makes s a limit key (see LimitKey).
func KeyOf(s string) string {
	var b strings.Builder
	changed := false
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '-', r == '_':
			b.WriteRune(r)
		case r >= 'A' && r <= 'Z':
			b.WriteRune(r + ('a' - 'A'))
			changed = true
		default:
			b.WriteByte('_')
			changed = true
		}
	}
	out := b.String()
	if len(out) > 40 {
		out, changed = out[:40], true
	}
	if changed {
		out += "-" + shortHash(s)
	}
	return out
}

// OrgLimits are the limits of org: its own, else the AnyOrg entry's.
func (t *Table) OrgLimits(org string) Limits {
	if t == nil {
		return Limits{}
	}
	if l, ok := t.Orgs[org]; ok {
		return l
	}
	return t.Orgs[AnyOrg]
}

// shortHash is 8 hex digits of s's FNV-1a hash.
func shortHash(s string) string {
	h := fnv.New32a()
	_, _ = h.Write([]byte(s))
	return fmt.Sprintf("%08x", h.Sum32())
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
