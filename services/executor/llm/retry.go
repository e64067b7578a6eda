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
// a Retry-After header said.
type retrier struct {
	timeout time.Duration
	retries int
	backoff time.Duration
	log     *slog.Logger
}

// maxBackoff caps the wait between two tries (a Retry-After may say more,
// up to MaxRetryAfter).
const maxBackoff = 8 * time.Second

// do runs try until it succeeds, fails for good (retryable says no, or
// notRetryable: the address policy, the response cap) or the tries run
// out; it returns how many tries were made and the last error (the cause
// of ctx's end when that ended it).
func (r retrier) do(ctx context.Context, ep Endpoint, try func(context.Context) error, retryable func(error) bool) (int, error) {
	box := &retryAfterBox{}
	attempts, made := 1+r.retries, 0
	var lastErr error
	for i := range attempts {
		if i > 0 {
			d := backoff.Backoff{Initial: r.backoff, Max: maxBackoff}.Delay(i)
			d += time.Duration(rand.Int64N(int64(d)/5 + 1))
			if ra, ok := box.take(); ok {
				d = ra // the server said when
			}
			if !backoff.Sleep(ctx, d) {
				break
			}
		}
		box.take()
		made++
		cctx, cancel := context.WithTimeout(context.WithValue(ctx, retryAfterKey{}, box), r.timeout)
		err := try(cctx)
		cancel()
		if err == nil {
			return made, nil
		}
		if ctx.Err() != nil {
			lastErr = context.Cause(ctx)
			break
		}
		lastErr = err
		if !retryable(err) || notRetryable(err) {
			break
		}
		r.log.Warn("model call failed; retrying", "model", ep.Model, "url", redactURL(ep.BaseURL), "attempt", i+1, "of", attempts, "err", cutText(err.Error(), ErrorTextMax))
	}
	return made, lastErr
}

// MaxRetryAfter caps how long a Retry-After header makes the executor wait.
const MaxRetryAfter = 60 * time.Second

type retryAfterKey struct{}

// retryAfterBox carries the Retry-After of a failed response from the
// transport (go-openai's errors do not keep headers) to the retry loop.
type retryAfterBox struct {
	mu sync.Mutex
	d  time.Duration
	ok bool
}

func (b *retryAfterBox) set(d time.Duration) {
	b.mu.Lock()
	b.d, b.ok = d, true
	b.mu.Unlock()
}

func (b *retryAfterBox) take() (time.Duration, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	d, ok := b.d, b.ok
	b.d, b.ok = 0, false
	return d, ok
}

// retryAfterTransport records the Retry-After of 429 and 5xx answers in
// the request context's box.
type retryAfterTransport struct{ base http.RoundTripper }

func (t retryAfterTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.base.RoundTrip(req)
	if err != nil || resp == nil {
		return resp, err
	}
	if resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500 {
		if box, ok := req.Context().Value(retryAfterKey{}).(*retryAfterBox); ok {
			if d, ok := parseRetryAfter(resp.Header.Get("Retry-After"), time.Now()); ok {
				box.set(d)
			}
		}
	}
	return resp, err
}

// parseRetryAfter reads a Retry-After value: delay seconds or an HTTP
// date. The wait is capped at MaxRetryAfter; a date in the past is 0.
func parseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		if n < 0 {
			return 0, false
		}
		if n > int64(MaxRetryAfter/time.Second) {
			return MaxRetryAfter, true
		}
		return time.Duration(n) * time.Second, true
	}
	if t, err := http.ParseTime(v); err == nil {
		d := t.Sub(now)
		return min(max(d, 0), MaxRetryAfter), true
	}
	return 0, false
}
