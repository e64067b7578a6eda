package llm

import (
	"math"
	"strings"
	"testing"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
)

func TestParsePrices(t *testing.T) {
	p, err := ParsePrices(" gpt-4o-mini=0.15/0.60, llama3.1=0/0 ,")
	if err != nil {
		t.Fatal(err)
	}
	if len(p) != 2 || p["gpt-4o-mini"] != (Price{PromptPerM: 0.15, CompletionPerM: 0.60}) || p["llama3.1"] != (Price{}) {
		t.Fatalf("prices = %v", p)
	}
	if p.String() != "gpt-4o-mini=0.15/0.6,llama3.1=0/0" {
		t.Errorf("String = %q", p.String())
	}
	u := &agentmeshv1.Usage{PromptTokens: 1_000_000, CompletionTokens: 2_000_000}
	if c, ok := p.Cost(u, "unknown", "gpt-4o-mini"); !ok || math.Abs(c-1.35) > 1e-12 {
		t.Errorf("cost = %v %v, want 1.35 (falls back to the answered model)", c, ok)
	}
	if c, ok := p.Cost(u, "nope"); ok || c != 0 {
		t.Errorf("unpriced cost = %v %v", c, ok)
	}
	if p, err := ParsePrices(""); err != nil || len(p) != 0 {
		t.Errorf("empty: %v %v", p, err)
	}
	for _, bad := range []string{"gpt", "gpt=1", "gpt=1/", "gpt=/1", "=1/2", "gpt=-1/2", "gpt=1/NaN", "gpt=1/Inf", "gpt=a/b", "gpt=1/2,gpt=1/2", "g p=1/2", "gpt=1/2/3/4/5", "gpt=1/2/-3", "gpt=2000000/1"} {
		if _, err := ParsePrices(bad); err == nil {
			t.Errorf("ParsePrices(%q) accepted", bad)
		}
	}
}

// Cached prompt tokens cost their own prices; without them, the prompt's.
func TestCachePrices(t *testing.T) {
	p, err := ParsePrices("claude=3/15/0.3/3.75,gpt=2/8/0.5,plain=1/1")
	if err != nil {
		t.Fatal(err)
	}
	if got := p.String(); got != "claude=3/15/0.3/3.75,gpt=2/8/0.5,plain=1/1" {
		t.Errorf("String = %q", got)
	}
	// 1M prompt tokens of which 600k read from the cache, 100k written.
	u := &agentmeshv1.Usage{PromptTokens: 1_000_000, CacheReadTokens: 600_000, CacheWriteTokens: 100_000, CompletionTokens: 1_000_000}
	want := map[string]float64{
		"claude": 0.3*3 + 0.6*0.3 + 0.1*3.75 + 15, // plain, read, written, completion
		"gpt":    0.3*2 + 0.6*0.5 + 0.1*2 + 8,     // a write costs the prompt price
		"plain":  1 + 1,
	}
	for m, w := range want {
		if c, ok := p.Cost(u, m); !ok || math.Abs(c-w) > 1e-9 {
			t.Errorf("%s: cost %v, want %v", m, c, w)
		}
	}
}

// FuzzParsePrices: never panics; an accepted table has finite,
// non-negative prices and survives a round trip through String.
func FuzzParsePrices(f *testing.F) {
	for _, s := range []string{"gpt-4o-mini=0.15/0.60,llama3.1=0/0", "a=1/2", "a=1e3/0x10", "a=.5/5.", ",,", "a=1/2,a=3/4"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		p, err := ParsePrices(in)
		if err != nil {
			return
		}
		for m, pr := range p {
			for _, v := range []float64{pr.PromptPerM, pr.CompletionPerM, orPrompt(pr.CacheReadPerM, 0), orPrompt(pr.CacheWritePerM, 0)} {
				if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 || v > maxPricePerM {
					t.Fatalf("model %q: price %v accepted", m, v)
				}
			}
			if m == "" || strings.ContainsAny(m, ",=/ ") {
				t.Fatalf("model name %q accepted", m)
			}
		}
		again, err := ParsePrices(p.String())
		if err != nil || len(again) != len(p) {
			t.Fatalf("round trip of %q: %v %v", p.String(), again, err)
		}
		for m, pr := range p {
			if again[m].String() != pr.String() {
				t.Fatalf("round trip: %q %v → %v", m, pr, again[m])
			}
		}
	})
}
