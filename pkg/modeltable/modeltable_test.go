package modeltable

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const example = `
models:
  gpt-4o-mini:
    base_url: https://api.openai.com/v1
    api_key_env: OPENAI_API_KEY
    price: {prompt: 0.15, completion: 0.60, cache_read: 0.075}
    limits: {requests_per_minute: 500, tokens_per_minute: 200000}
  claude:
    provider: anthropic
    base_url: https://api.anthropic.com
    api_key_env: ANTHROPIC_API_KEY
    model: claude-sonnet-4-5
    max_tokens: 4096
    fallbacks: [gpt-4o-mini]
  llama3.1:8b:
    base_url: http://127.0.0.1:11434/v1
    no_key: true
orgs:
  "*": {requests_per_minute: 60}
  acme: {requests_per_minute: 600, tokens_per_minute: 1000000}
`

func TestParseExample(t *testing.T) {
	tab, err := Parse([]byte(example))
	if err != nil {
		t.Fatal(err)
	}
	if got := tab.Names(); strings.Join(got, ",") != "claude,gpt-4o-mini,llama3.1:8b" {
		t.Errorf("names = %v", got)
	}
	c, ok := tab.Lookup("claude")
	if !ok || c.ProviderOf() != ProviderAnthropic || c.ModelName("claude") != "claude-sonnet-4-5" || c.MaxTokens != 4096 {
		t.Errorf("claude = %+v", c)
	}
	g, _ := tab.Lookup("gpt-4o-mini")
	if g.ProviderOf() != ProviderOpenAI || g.ModelName("gpt-4o-mini") != "gpt-4o-mini" || *g.Price.CacheRead != 0.075 || g.Price.CacheWrite != nil {
		t.Errorf("gpt = %+v", g)
	}
	if got := tab.OrgLimits("acme"); got.RequestsPerMinute != 600 || got.TokensPerMinute != 1000000 {
		t.Errorf("acme limits = %+v", got)
	}
	if got := tab.OrgLimits("globex"); got.RequestsPerMinute != 60 {
		t.Errorf("globex limits (the \"*\" entry) = %+v", got)
	}
	if got := tab.LimitKey("gpt-4o-mini"); got != "gpt-4o-mini" {
		t.Errorf("limit key = %q", got)
	}
	if got := tab.LimitKey("llama3.1:8b"); !strings.HasPrefix(got, "llama3_1_8b-") || len(got) != len("llama3_1_8b-")+8 {
		t.Errorf("limit key of a name with dots = %q", got)
	}
}

func TestParseJSON(t *testing.T) {
	tab, err := Parse([]byte(`{"models": {"m": {"base_url": "http://h:1/v1", "no_key": true}}}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := tab.Lookup("m"); !ok {
		t.Error("m missing")
	}
	if tab, err := Parse(nil); err != nil || len(tab.Models) != 0 {
		t.Errorf("empty table: %v %v", tab, err)
	}
}

// Every mistake is refused with its field named.
func TestParseRefuses(t *testing.T) {
	entry := func(body string) string { return "models:\n  m:\n" + body }
	ok := "    base_url: https://x.example/v1\n    api_key_env: K\n"
	tests := []struct {
		name, in, field string
	}{
		{"unknown provider", entry(ok + "    provider: cohere\n"), "models.m.provider"},
		{"no base url", entry("    api_key_env: K\n"), "models.m.base_url"},
		{"base url not http", entry("    base_url: ftp://x\n    api_key_env: K\n"), "models.m.base_url"},
		{"no key reference", entry("    base_url: https://x.example/v1\n"), "models.m.api_key_env"},
		{"key and no key", entry(ok + "    no_key: true\n"), "models.m.no_key"},
		{"bad key variable", entry("    base_url: https://x.example/v1\n    api_key_env: \"A B\"\n"), "models.m.api_key_env"},
		{"negative rpm", entry(ok + "    limits: {requests_per_minute: -1}\n"), "models.m.limits.requests_per_minute"},
		{"absurd rpm", entry(ok + "    limits: {requests_per_minute: 99999999999}\n"), "models.m.limits.requests_per_minute"},
		{"negative tpm", entry(ok + "    limits: {tokens_per_minute: -5}\n"), "models.m.limits.tokens_per_minute"},
		{"burst over rpm", entry(ok + "    limits: {requests_per_minute: 10, burst: 11}\n"), "models.m.limits.burst"},
		{"negative price", entry(ok + "    price: {prompt: -1, completion: 1}\n"), "models.m.price.prompt"},
		{"absurd cache price", entry(ok + "    price: {prompt: 1, completion: 1, cache_write: 2000000}\n"), "models.m.price.cache_write"},
		{"negative max tokens", entry(ok + "    max_tokens: -1\n"), "models.m.max_tokens"},
		{"unknown fallback", entry(ok + "    fallbacks: [nope]\n"), "models.m.fallbacks[0]"},
		{"bad limit key", entry(ok + "    limit_key: Has Space\n"), "models.m.limit_key"},
		{"bad org", "orgs:\n  Acme!: {requests_per_minute: 1}\n", "orgs.Acme!"},
		{"negative org limit", "orgs:\n  acme: {tokens_per_minute: -1}\n", "orgs.acme.tokens_per_minute"},
		{"unknown field", entry(ok + "    temperature: 1\n"), "temperature"},
		{"bad name", "models:\n  \"a b\":\n" + ok, "models.a b"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.in))
			if err == nil || !errors.Is(err, ErrTable) || !strings.Contains(err.Error(), tt.field) {
				t.Fatalf("err = %v, want one naming %s", err, tt.field)
			}
		})
	}
}

func TestSharedLimitKey(t *testing.T) {
	in := `models:
  a: {base_url: "https://x.example/v1", api_key_env: K, limit_key: main, limits: {requests_per_minute: 10}}
  b: {base_url: "https://x.example/v1", api_key_env: K, limit_key: main}
`
	tab, err := Parse([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	if tab.LimitKey("a") != "main" || tab.LimitKey("b") != "main" {
		t.Error("entries do not share their key")
	}
	bad := strings.Replace(in, "limit_key: main}", "limit_key: main, limits: {requests_per_minute: 20}}", 1)
	if _, err := Parse([]byte(bad)); err == nil || !strings.Contains(err.Error(), "models.b.limits") {
		t.Errorf("two limits on one key: err = %v", err)
	}
}

func TestLoad(t *testing.T) {
	path := filepath.Join(t.TempDir(), "models.yaml")
	if err := os.WriteFile(path, []byte(example), 0o600); err != nil {
		t.Fatal(err)
	}
	tab, err := Load(path)
	if err != nil || len(tab.Models) != 3 {
		t.Fatalf("Load(file) = %v, %v", tab, err)
	}
	if tab, err := Load(`{"models": {"m": {"base_url": "http://h/v1", "no_key": true}}}`); err != nil || len(tab.Models) != 1 {
		t.Fatalf("Load(inline) = %v, %v", tab, err)
	}
	if _, err := Load(filepath.Join(t.TempDir(), "missing.yaml")); err == nil {
		t.Error("a missing file loaded")
	}
}

func TestKeyOf(t *testing.T) {
	if KeyOf("gpt-4o") != "gpt-4o" {
		t.Error(KeyOf("gpt-4o"))
	}
	if KeyOf("a.b") == KeyOf("a_b") {
		t.Error("a.b and a_b share a key")
	}
	if k := KeyOf(strings.Repeat("x", 100)); len(k) != 49 {
		t.Errorf("long key %q", k)
	}
}

// FuzzParse: the parser never panics, and what it accepts passes its own
// checks again.
func FuzzParse(f *testing.F) {
	f.Add([]byte(example))
	f.Add([]byte(`{"models": {"m": {"base_url": "http://h/v1", "no_key": true, "limits": {"requests_per_minute": 5}}}}`))
	f.Add([]byte("orgs: {acme: {requests_per_minute: 1}}"))
	f.Fuzz(func(t *testing.T, data []byte) {
		tab, err := Parse(data)
		if err != nil {
			return
		}
		if err := tab.check(); err != nil {
			t.Fatalf("accepted a table its check refuses: %v", err)
		}
		for _, n := range tab.Names() {
			if k := tab.LimitKey(n); !limitKeyRE.MatchString(k) && !strings.Contains(k, "-") {
				t.Fatalf("limit key %q of %q", k, n)
			}
		}
	})
}
