package llm

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agentmesh/agentmesh/pkg/backoff"
)

// retrier is the retry loop every Provider's calls go through: 1+retries
// tries, each bounded by timeout, waiting backoff before the first retry
// and doubling (at most maxBackoff, plus up to a fifth as jitter), or what
// the server said (Retry-After, or a 429's rate-limit reset). Only what
// can change is retried (classify): an outage, a timeout, a connection
// reset, a 429 whose wait is short (at most inPlace); a request the
// server refused, or an answer that does not parse, ends the call at
// once. A 429 that asks for longer than inPlace ends the call as
// KindRateLimited: the task waits in the queue, not here.
type retrier struct {
	timeout time.Duration
	retries int
	backoff time.Duration
	inPlace time.Duration
	log     *slog.Logger
}

// maxBackoff caps the wait between two tries (a Retry-After may say more,
// up to MaxRetryAfter).
const maxBackoff = 8 * time.Second

// MaxRetryAfter caps how long a server's Retry-After makes a call wait;
// a 429 asking for more than the in-place wait ends the call as a rate
// limit (the task is re-queued instead).
const MaxRetryAfter = 60 * time.Second

// call is one model call's state the tries share: the admission before
// each try (the rate limiter) and what the server said of its limits,
// which the transport records (hearTransport) — the body of an error
// answer does not carry its headers.
type call struct {
	// admit is asked before each try; an error ends the call (nil: none).
	admit func(ctx context.Context) error
	// heard is told every response's status and headers (nil: nobody).
	heard func(status int, h http.Header)

	mu      sync.Mutex
	wait    time.Duration
	hasWait bool
}

type callKey struct{}

// callOf is the call whose try ctx is.
func callOf(ctx context.Context) *call {
	c, _ := ctx.Value(callKey{}).(*call)
	return c
}

func (c *call) setWait(d time.Duration) {
	c.mu.Lock()
	c.wait, c.hasWait = d, true
	c.mu.Unlock()
}

// takeWait returns (and forgets) the wait the last answer asked for.
func (c *call) takeWait() (time.Duration, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	d, ok := c.wait, c.hasWait
	c.wait, c.hasWait = 0, false
	return d, ok
}

// do runs try until it succeeds or fails for good, and returns how many
// tries were made and the last error (the cause of ctx's end when that
// ended it). A KindRateLimited error from admit or from a 429 is returned
// as an *Error of that kind.
func (r retrier) do(ctx context.Context, ep Endpoint, c *call, try func(context.Context) error) (int, error) {
	attempts, made := 1+r.retries, 0
	ctx = context.WithValue(ctx, callKey{}, c)
	var lastErr error
	for i := range attempts {
		if i > 0 {
			d := backoff.Backoff{Initial: r.backoff, Max: maxBackoff}.Delay(i)
			d += time.Duration(rand.Int64N(int64(d)/5 + 1))
			if w, ok := c.takeWait(); ok {
				d = w // the server said when
			}
			if !backoff.Sleep(ctx, d) {
				break
			}
		}
		c.takeWait()
		if c.admit != nil {
			if err := c.admit(ctx); err != nil {
				return made, err
			}
		}
		made++
		tctx, cancel := context.WithTimeout(ctx, r.timeout)
		err := try(tctx)
		cancel()
		if err == nil {
			return made, nil
		}
		if ctx.Err() != nil {
			lastErr = context.Cause(ctx)
			break
		}
		lastErr = err
		kind := classify(err)
		if kind == KindRejected {
			break
		}
		if kind == KindRateLimited {
			if w, ok := c.takeWait(); ok && w > r.inPlace {
				until := time.Now().Add(w)
				return made, &Error{Kind: KindRateLimited, Until: until, NotBefore: until, Scope: "provider", cause: err, text: err.Error()}
			} else if ok {
				c.setWait(w)
			}
		}
		if i+1 < attempts {
			r.log.Warn("model call failed; retrying", "model", ep.Model, "url", redactURL(ep.BaseURL), "attempt", i+1, "of", attempts, "err", cutText(err.Error(), ErrorTextMax))
		}
	}
	return made, lastErr
}

// hearTransport tells the call of each request what the server answered
// (its status and headers: the rate limiter learns from them) and keeps
// the wait a 429 or 5xx asked for (Retry-After; on a 429, else the
// rate-limit reset headers).
type hearTransport struct{ base http.RoundTripper }

func (t hearTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.base.RoundTrip(req)
	if err != nil || resp == nil {
		return resp, err
	}
	c := callOf(req.Context())
	if c == nil {
		return resp, nil
	}
	if c.heard != nil {
		c.heard(resp.StatusCode, resp.Header)
	}
	if resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500 {
		now := time.Now()
		if d, ok := parseRetryAfter(resp.Header.Get("Retry-After"), now); ok {
			c.setWait(d)
		} else if resp.StatusCode == http.StatusTooManyRequests {
			if h := parseLimitHeaders(resp.Header, now); !h.resetAt.IsZero() {
				c.setWait(min(max(h.resetAt.Sub(now), 0), MaxRetryAfter))
			}
		}
	}
	return resp, nil
}

// parseRetryAfter reads a Retry-After value: delay seconds (fractions
// too, as some servers send) or an HTTP date. The wait is capped at
// MaxRetryAfter; a date in the past is 0.
func parseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if n, err := strconv.ParseFloat(v, 64); err == nil {
		if n < 0 || n != n {
			return 0, false
		}
		if n > MaxRetryAfter.Seconds() {
			return MaxRetryAfter, true
		}
		return time.Duration(n * float64(time.Second)), true
	}
	if t, err := http.ParseTime(v); err == nil {
		return min(max(t.Sub(now), 0), MaxRetryAfter), true
	}
	return 0, false
}
