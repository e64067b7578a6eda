package llm

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"unicode/utf8"

	"github.com/agentmesh/agentmesh/services/executor/webfetch"
)

// What a model server — whichever base URL an agent names — can make the
// executor do and hold. Model HTTP goes through web_fetch's address policy
// (every address checked at connect time and on every redirect; loopback,
// private, link-local … refused before any packet) with an allowlist made
// of Config.Allow and the host:port of the operator's own
// Config.BaseURL; credentials never follow a redirect to another
// origin; each response is capped at Config.MaxResponseBytes while
// it is read (streamed or not); an error body is cut at ErrorBodyMax
// before go-openai reads it; and the text that reaches a task's error is
// cut at ErrorTextMax. Config.Timeout bounds each attempt,
// stream included.
const (
	// DefaultMaxResponseBytes is Config.MaxResponseBytes's
	// default: 16 MiB of one response's body, SSE framing included
	// (a streamed token costs ~150 bytes of framing).
	DefaultMaxResponseBytes = 16 << 20
	// ErrorBodyMax is how much of a 4xx/5xx body is read.
	ErrorBodyMax = 4 << 10
	// ErrorTextMax caps the model error text a task records.
	ErrorTextMax = 4 << 10
)

// ErrResponseTooLarge is returned (wrapped) when a model response
// goes past Config.MaxResponseBytes. It is not retried: the same
// server would send the same answer.
var ErrResponseTooLarge = errors.New("model response too large")

// Capped returns a copy of c whose responses are capped as the model's
// are: error bodies cut at ErrorBodyMax, others failing with tooLarge
// (wrapped) past max bytes. The executor caps its HTTP MCP servers so.
func Capped(c *http.Client, max int64, tooLarge error) *http.Client {
	lc := *c
	base := lc.Transport
	if base == nil {
		base = http.DefaultTransport
	}
	lc.Transport = capTransport{base: base, max: max, tooLarge: tooLarge}
	return &lc
}

// httpClient builds the model's HTTP client: web_fetch's policy with
// the model allowlist, then the caps and the Retry-After recorder.
func httpClient(cfg Config) (*http.Client, error) {
	allow := append([]string(nil), cfg.Allow...)
	if hp := hostPort(cfg.BaseURL); hp != "" {
		allow = append(allow, hp) // the operator's own endpoint is trusted
	}
	if cfg.Table != nil {
		for _, name := range cfg.Table.Names() {
			if hp := hostPort(cfg.Table.Models[name].BaseURL); hp != "" {
				allow = append(allow, hp) // and so are its table's
			}
		}
	}
	f, err := webfetch.New(webfetch.Config{Allow: allow, Resolver: cfg.Resolver, DialContext: cfg.DialContext})
	if err != nil {
		return nil, fmt.Errorf("model allowlist: %w", err)
	}
	c := f.ServiceClient()
	max := cfg.MaxResponseBytes
	if max <= 0 {
		max = DefaultMaxResponseBytes
	}
	c.Transport = capTransport{base: hearTransport{base: c.Transport}, max: max, tooLarge: ErrResponseTooLarge}
	return c, nil
}

// hostPort returns "host:port" of an http(s) URL, the scheme's port made
// explicit; "" when raw is not one.
func hostPort(raw string) string {
	u, err := url.Parse(strings.TrimSpace(raw))
	if err != nil || u.Hostname() == "" {
		return ""
	}
	port := u.Port()
	switch strings.ToLower(u.Scheme) {
	case "http":
		if port == "" {
			port = "80"
		}
	case "https":
		if port == "" {
			port = "443"
		}
	default:
		return ""
	}
	return net.JoinHostPort(u.Hostname(), port)
}

// capTransport cuts error bodies at ErrorBodyMax (read into memory,
// the rest never read) and makes any other body fail with
// ErrResponseTooLarge past max bytes.
type capTransport struct {
	base     http.RoundTripper
	max      int64
	tooLarge error // wrapped in the error past max
}

func (t capTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.base.RoundTrip(req)
	if err != nil || resp == nil {
		return resp, err
	}
	if resp.StatusCode >= 400 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, ErrorBodyMax+1))
		resp.Body.Close()
		if len(b) > ErrorBodyMax {
			b = append(trimRune(b[:ErrorBodyMax]), "…[error body cut at 4 KiB]"...)
		}
		resp.Body = io.NopCloser(bytes.NewReader(b))
		resp.ContentLength = int64(len(b))
		resp.Header.Del("Content-Length")
		return resp, nil
	}
	resp.Body = &capBody{rc: resp.Body, left: t.max, max: t.max, tooLarge: t.tooLarge}
	return resp, nil
}

// capBody passes at most max bytes, then fails.
type capBody struct {
	rc       io.ReadCloser
	left     int64
	max      int64
	tooLarge error
}

func (b *capBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		var one [1]byte
		n, err := b.rc.Read(one[:])
		if n == 0 && err != nil {
			return 0, err // the body ended exactly at the cap
		}
		return 0, fmt.Errorf("%w: more than %d bytes in one answer", b.tooLarge, b.max)
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.rc.Read(p)
	b.left -= int64(n)
	return n, err
}

func (b *capBody) Close() error { return b.rc.Close() }

// notRetryable: errors no retry can mend — the address policy and the
// response cap.
func notRetryable(err error) bool {
	return errors.Is(err, ErrResponseTooLarge) || errors.Is(err, webfetch.ErrBlocked) ||
		errors.Is(err, webfetch.ErrScheme) || errors.Is(err, webfetch.ErrTooManyRedirects) || errors.Is(err, webfetch.ErrURL)
}

// cutText cuts s at max bytes (on a rune boundary) and says so.
func cutText(s string, max int) string {
	if len(s) <= max {
		return s
	}
	return string(trimRune([]byte(s[:max]))) + fmt.Sprintf("…[cut: %d bytes in all]", len(s))
}

// trimRune drops a partial UTF-8 sequence at the end of b.
func trimRune(b []byte) []byte {
	for i := len(b); i > 0 && i > len(b)-utf8.UTFMax; i-- {
		if utf8.RuneStart(b[i-1]) {
			if !utf8.FullRune(b[i-1:]) {
				return b[:i-1]
			}
			break
		}
	}
	return b
}

// redactURL hides a URL's user info (an agent's base_url may carry one).
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}
