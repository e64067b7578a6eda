package llm

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// What a provider says of its rate limits, in its response headers:
// OpenAI (and the servers that copy it: Azure, Groq, Together,
// OpenRouter …) send x-ratelimit-{limit,remaining,reset}-{requests,tokens}
// with resets as durations ("1s", "6m0s"); Anthropic sends
// anthropic-ratelimit-{requests,tokens,input-tokens,output-tokens}-
// {limit,remaining,reset} with resets as RFC 3339 times. The rate limiter
// learns the limits (when the operator set none, or set more than the
// provider allows) and pauses a key the provider says is spent until its
// reset, for every executor.

// limitHeaders is what one response said.
type limitHeaders struct {
	// Limits per minute the provider reported (0: not said).
	rpm int
	tpm int64
	// resetAt is when a spent budget comes back: the latest reset of the
	// budgets whose remaining is 0 (zero: none is spent).
	resetAt time.Time
}

func (h limitHeaders) any() bool { return h.rpm > 0 || h.tpm > 0 || !h.resetAt.IsZero() }

// parseLimitHeaders reads the rate-limit headers of a response.
func parseLimitHeaders(h http.Header, now time.Time) limitHeaders {
	var out limitHeaders
	for _, fam := range []struct {
		prefix string
		tokens bool
	}{
		{"x-ratelimit-%s-requests", false}, {"x-ratelimit-%s-tokens", true},
		{"anthropic-ratelimit-requests-%s", false}, {"anthropic-ratelimit-tokens-%s", true},
		{"anthropic-ratelimit-input-tokens-%s", true}, {"anthropic-ratelimit-output-tokens-%s", true},
	} {
		get := func(what string) string { return h.Get(strings.Replace(fam.prefix, "%s", what, 1)) }
		if limit, err := strconv.ParseInt(strings.TrimSpace(get("limit")), 10, 64); err == nil && limit > 0 {
			switch {
			case !fam.tokens && (out.rpm == 0 || int(limit) < out.rpm):
				out.rpm = int(limit)
			case fam.tokens && (out.tpm == 0 || limit < out.tpm):
				out.tpm = limit
			}
		}
		rem, err := strconv.ParseInt(strings.TrimSpace(get("remaining")), 10, 64)
		if err != nil || rem > 0 {
			continue
		}
		if at, ok := parseReset(get("reset"), now); ok && at.After(out.resetAt) {
			out.resetAt = at
		}
	}
	if !out.resetAt.IsZero() && out.resetAt.Sub(now) > MaxRetryAfter {
		out.resetAt = now.Add(MaxRetryAfter)
	}
	return out
}

// parseReset reads a reset: a duration ("6m0s", "20ms"), a number of
// seconds, or an RFC 3339 time.
func parseReset(v string, now time.Time) (time.Time, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return time.Time{}, false
	}
	if d, err := time.ParseDuration(v); err == nil && d >= 0 {
		return now.Add(d), true
	}
	if s, err := strconv.ParseFloat(v, 64); err == nil && s >= 0 && s < 1e9 {
		return now.Add(time.Duration(s * float64(time.Second))), true
	}
	if t, err := time.Parse(time.RFC3339, v); err == nil {
		return t, true
	}
	return time.Time{}, false
}
