package llm

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"

	agentmeshv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/v1"
)

// Price is what a model costs, in US dollars per million tokens. The
// prompt tokens read from the provider's prompt cache cost CacheReadPerM,
// those written to it CacheWritePerM; unset (nil), they cost PromptPerM.
type Price struct {
	PromptPerM     float64
	CompletionPerM float64
	CacheReadPerM  *float64
	CacheWritePerM *float64
}

// Prices is the price table: model name → price. A model that is not in
// it costs nothing (its usage is still counted in tokens).
type Prices map[string]Price

// maxPricePerM bounds one price (USD per 1M tokens): a typo like
// "gpt-4o=2500000/10" is refused rather than billed.
const maxPricePerM = 1_000_000

// ParsePrices parses a price table written as
// "model=prompt/completion,model2=prompt/completion" in US dollars per
// million prompt and completion tokens, e.g.
// "gpt-4o-mini=0.15/0.60,llama3.1=0/0", optionally followed by the prices
// of cached prompt tokens read and written:
// "claude-sonnet-4-5=3/15/0.30/3.75". Spaces around items are ignored;
// an empty string is an empty table. A model named twice, a negative or
// non-finite price, or anything else malformed is an error that names the
// item.
func ParsePrices(s string) (Prices, error) {
	p := Prices{}
	if strings.TrimSpace(s) == "" {
		return p, nil
	}
	for item := range strings.SplitSeq(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		model, rates, ok := strings.Cut(item, "=")
		model = strings.TrimSpace(model)
		if !ok || model == "" {
			return nil, fmt.Errorf("price %q: want model=prompt/completion (USD per 1M tokens)", item)
		}
		if strings.ContainsAny(model, " \t\n=/") {
			return nil, fmt.Errorf("price %q: model name %q holds a space, '=' or '/'", item, model)
		}
		parts := strings.Split(rates, "/")
		if len(parts) < 2 || len(parts) > 4 {
			return nil, fmt.Errorf("price %q: want prompt/completion[/cache_read[/cache_write]] after '=' (USD per 1M tokens)", item)
		}
		var pr Price
		for i, what := range []string{"prompt", "completion", "cache read", "cache write"}[:len(parts)] {
			v, err := parseRate(parts[i])
			if err != nil {
				return nil, fmt.Errorf("price %q: %s price: %w", item, what, err)
			}
			switch i {
			case 0:
				pr.PromptPerM = v
			case 1:
				pr.CompletionPerM = v
			case 2:
				pr.CacheReadPerM = &v
			case 3:
				pr.CacheWritePerM = &v
			}
		}
		if _, dup := p[model]; dup {
			return nil, fmt.Errorf("price %q: model %q is priced twice", item, model)
		}
		p[model] = pr
	}
	return p, nil
}

func parseRate(s string) (float64, error) {
	s = strings.TrimSpace(s)
	v, err := strconv.ParseFloat(s, 64)
	switch {
	case err != nil:
		return 0, fmt.Errorf("%q is not a number", s)
	case math.IsNaN(v) || math.IsInf(v, 0):
		return 0, fmt.Errorf("%q is not a finite number", s)
	case v < 0:
		return 0, fmt.Errorf("%q is negative", s)
	case v > maxPricePerM:
		return 0, fmt.Errorf("%q is over %d USD per 1M tokens", s, maxPricePerM)
	}
	return v, nil
}

// String writes the table back in ParsePrices' format, sorted by model.
func (p Prices) String() string {
	models := make([]string, 0, len(p))
	for m := range p {
		models = append(models, m)
	}
	sort.Strings(models)
	var b strings.Builder
	for i, m := range models {
		if i > 0 {
			b.WriteByte(',')
		}
		pr := p[m]
		fmt.Fprintf(&b, "%s=%s/%s", m, rate(pr.PromptPerM), rate(pr.CompletionPerM))
		if pr.CacheReadPerM != nil || pr.CacheWritePerM != nil {
			fmt.Fprintf(&b, "/%s", rate(orPrompt(pr.CacheReadPerM, pr.PromptPerM)))
		}
		if pr.CacheWritePerM != nil {
			fmt.Fprintf(&b, "/%s", rate(*pr.CacheWritePerM))
		}
	}
	return b.String()
}

// String writes one price as the table does (prompt/completion[/cache
// read[/cache write]]).
func (pr Price) String() string {
	return strings.TrimPrefix(Prices{"": pr}.String(), "=")
}

func rate(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }

func orPrompt(v *float64, prompt float64) float64 {
	if v == nil {
		return prompt
	}
	return *v
}

// Cost returns the cost in US dollars of u on the first of the models
// (the model table's name, the name the request asked for, then the name
// the provider answered with) that the table prices, and whether one was
// priced. Cached prompt tokens cost their own prices when given.
func (p Prices) Cost(u *agentmeshv1.Usage, models ...string) (float64, bool) {
	for _, m := range models {
		if pr, ok := p[m]; ok && m != "" {
			read, write := u.GetCacheReadTokens(), u.GetCacheWriteTokens()
			plain := max(u.GetPromptTokens()-read-write, 0)
			cost := float64(plain)*pr.PromptPerM + float64(read)*orPrompt(pr.CacheReadPerM, pr.PromptPerM) +
				float64(write)*orPrompt(pr.CacheWritePerM, pr.PromptPerM) + float64(u.GetCompletionTokens())*pr.CompletionPerM
			return cost / 1e6, true
		}
	}
	return 0, false
}
