// Package webfetch implements the web_fetch tool: the executor fetches an
// http or https URL on an agent child's behalf (the child has no network)
// and returns the status, content type, final URL and the body, capped.
//
// It applies the SSRF defence of pkg/netguard (the address policy it shares
// with the model client, HTTP MCP servers and webhook deliveries). Every
// address is checked at connect time, in the dialer: a host name is resolved once, every address it resolves to is
// checked (Check), and the connection goes to a checked address — there is
// no window between the check and the connect for DNS rebinding. Redirects
// go through the same dialer, so every hop is checked; their number is
// capped, they may only lead to http or https, and once a hop leaves the
// first request's origin every credential header is dropped. Loopback, private,
// link-local (cloud metadata), CGNAT, unique-local, unspecified, multicast,
// broadcast and reserved addresses — including their IPv4-mapped, NAT64
// and 6to4 IPv6 forms and the numeric spellings inet_aton accepts
// (2130706433, 0177.0.0.1, 0x7f.1) — are refused before any packet is
// sent, unless Config.Allow names them. Proxies from the environment are
// never used.
package webfetch

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/agentmesh/agentmesh/pkg/netguard"
	"github.com/agentmesh/agentmesh/pkg/tools"
)

// Defaults of Config.
const (
	DefaultTimeout      = 30 * time.Second
	DefaultMaxBytes     = 50 << 10
	DefaultMaxRedirects = 5
	// maxBytesLimit bounds Config.MaxBytes: what tools.Call returns to the
	// model, less room for the header lines.
	maxBytesLimit = tools.MaxOutput - 4<<10
)

var (
	// ErrScheme is returned (wrapped) for a URL or a redirect whose scheme
	// is not http or https.
	ErrScheme = errors.New("only http and https URLs may be fetched")
	// ErrURL is returned (wrapped) for a URL that does not parse or names
	// no host.
	ErrURL = errors.New("invalid URL")
	// ErrTooManyRedirects is returned (wrapped) past Config.MaxRedirects.
	ErrTooManyRedirects = errors.New("too many redirects")
	// ErrTimeout is returned (wrapped) when the fetch takes longer than
	// Config.Timeout.
	ErrTimeout = errors.New("fetch timed out")
)

// Resolver resolves host names; *net.Resolver satisfies it.
type Resolver = netguard.Resolver

// ErrBlocked is returned (wrapped, with the address and the reason) when a
// URL names, resolves to or redirects to an address web_fetch must not
// reach (the address policy of pkg/netguard).
var ErrBlocked = netguard.ErrBlocked

// Check reports whether ip may be reached by web_fetch when no allowlist
// entry names it (netguard.Check).
func Check(ip netip.Addr) error { return netguard.Check(ip) }

// Config configures a Fetcher. The zero value is usable.
type Config struct {
	// Allow names destinations that may be reached even though they are
	// loopback, private, link-local...: a host name ("intranet.example",
	// matched as written in the URL, case-insensitively), a host:port
	// ("127.0.0.1:8080", "[::1]:8080", "intranet.example:8443"), an
	// address ("10.1.2.3") or a CIDR ("10.0.0.0/8"). Public addresses need
	// no entry.
	Allow []string
	// Timeout bounds a whole fetch: connects, redirects and reading the
	// body. 0 means DefaultTimeout (30 s).
	Timeout time.Duration
	// MaxBytes caps the body returned (a call's max_bytes can only lower
	// it). 0 means DefaultMaxBytes (50 KB); at most 252 KiB (the output
	// of a tool is cut at tools.MaxOutput).
	MaxBytes int64
	// MaxRedirects caps the redirects followed. 0 means
	// DefaultMaxRedirects (5); a negative value follows none (the 3xx
	// response is returned as it is).
	MaxRedirects int
	// Resolver resolves host names; nil means net.DefaultResolver.
	Resolver Resolver
	// DialContext opens a connection to an address that passed the
	// checks (always "ip:port", never a name). nil means a net.Dialer
	// whose Control hook checks the address once more. Tests set it to
	// record every dial.
	DialContext func(ctx context.Context, network, address string) (net.Conn, error)
	// UserAgent is sent when a call sets none; "" means
	// "agentmesh-web_fetch/1".
	UserAgent string
}

// Fetcher runs web_fetch calls. It is safe for concurrent use.
type Fetcher struct {
	cfg    Config
	guard  *netguard.Guard
	client *http.Client
}

// New validates cfg and returns a Fetcher.
func New(cfg Config) (*Fetcher, error) {
	if cfg.Timeout < 0 || cfg.MaxBytes < 0 {
		return nil, fmt.Errorf("webfetch: negative Timeout or MaxBytes")
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.MaxBytes == 0 {
		cfg.MaxBytes = DefaultMaxBytes
	}
	if cfg.MaxBytes > maxBytesLimit {
		return nil, fmt.Errorf("webfetch: MaxBytes %d over the limit of %d", cfg.MaxBytes, maxBytesLimit)
	}
	if cfg.MaxRedirects == 0 {
		cfg.MaxRedirects = DefaultMaxRedirects
	}
	if cfg.Resolver == nil {
		cfg.Resolver = net.DefaultResolver
	}
	if cfg.UserAgent == "" {
		cfg.UserAgent = "agentmesh-web_fetch/1"
	}
	guard, err := netguard.New(cfg.Allow, netguard.Options{Resolver: cfg.Resolver, DialContext: cfg.DialContext,
		Dialer: net.Dialer{Timeout: cfg.Timeout, KeepAlive: -1}})
	if err != nil {
		return nil, fmt.Errorf("webfetch: %w", err)
	}
	f := &Fetcher{cfg: cfg, guard: guard}
	tr := &http.Transport{
		Proxy:                  nil, // never the environment's proxies
		DialContext:            f.dial,
		ForceAttemptHTTP2:      true,
		DisableKeepAlives:      true,
		TLSHandshakeTimeout:    10 * time.Second,
		ResponseHeaderTimeout:  cfg.Timeout,
		MaxResponseHeaderBytes: 64 << 10,
	}
	f.client = &http.Client{Transport: tr, CheckRedirect: f.checkRedirect}
	return f, nil
}

// ServiceClient returns an HTTP client under the same address policy (every
// address checked at connect time and at every redirect, the same
// allowlist, no proxies) for other HTTP the executor does on an agent's
// behalf — e.g. HTTP MCP servers, whose URLs come from an agent's
// configuration. It keeps connections alive and sets no overall deadline
// (callers bound each call with their context).
//
// It keeps up to ServiceIdleConnsPerHost idle connections to each host:
// an executor runs up to its capacity of model calls to one endpoint at
// once, and with net/http's default of 2 every call beyond two ended by
// closing its connection and the next one dialled (and, over TLS, shook
// hands) again — over HTTP/1.1, as a local model server (Ollama, vLLM)
// speaks.
func (f *Fetcher) ServiceClient() *http.Client {
	tr := &http.Transport{
		Proxy:                  nil,
		DialContext:            f.dial,
		ForceAttemptHTTP2:      true,
		TLSHandshakeTimeout:    10 * time.Second,
		MaxResponseHeaderBytes: 64 << 10,
		IdleConnTimeout:        90 * time.Second,
		MaxIdleConnsPerHost:    ServiceIdleConnsPerHost,
	}
	return &http.Client{Transport: tr, CheckRedirect: f.checkRedirect}
}

// ServiceIdleConnsPerHost bounds the idle connections ServiceClient keeps
// to one host (a model endpoint, an HTTP MCP server).
const ServiceIdleConnsPerHost = 128

// Args are web_fetch's arguments (see the spec in pkg/tools).
type Args struct {
	URL      string            `json:"url"`
	Method   string            `json:"method,omitempty"`
	Headers  map[string]string `json:"headers,omitempty"`
	Body     string            `json:"body,omitempty"`
	MaxBytes int64             `json:"max_bytes,omitempty"`
	// IdempotencyKey, set by the executor (never by the model: it is not
	// read from the arguments), is sent as the Idempotency-Key header, so a
	// server can tell a repeated call (a resumed task) from a new one.
	IdempotencyKey string `json:"-"`
}

// HeaderIdempotencyKey carries Args.IdempotencyKey (the IETF draft
// "The Idempotency-Key HTTP Header Field", as Stripe and others use it).
const HeaderIdempotencyKey = "Idempotency-Key"

// Result is one fetch's outcome. Format renders it for the model; the
// executor records Bytes, Truncated and Size in the audit.
type Result struct {
	Status      int    // HTTP status code
	StatusText  string // e.g. "200 OK"
	ContentType string
	// URL is the final URL, after redirects.
	URL string
	// Redirects is the number of redirects followed.
	Redirects int
	// Body is the body read, at most the cap.
	Body []byte
	// Truncated is set when the body was longer than the cap.
	Truncated bool
	// Cap is the cap applied (bytes).
	Cap int64
	// Size is the body's full size when known: len(Body) when not
	// truncated, else the Content-Length the server announced, else -1.
	Size int64
}

// Run is the tools.Func of web_fetch: it parses args, fetches and returns
// Result.Format. Refused and failed fetches are errors the model can read.
func (f *Fetcher) Run(ctx context.Context, env tools.Env, args json.RawMessage) (string, error) {
	var a Args
	if err := json.Unmarshal(args, &a); err != nil {
		return "", fmt.Errorf("web_fetch: %w: %w", tools.ErrInvalidArguments, err)
	}
	a.IdempotencyKey = env.IdempotencyKey
	res, err := f.Fetch(ctx, a)
	if err != nil {
		return "", err
	}
	return res.Format(), nil
}

// Fetch fetches a.URL under the address policy and the caps.
func (f *Fetcher) Fetch(ctx context.Context, a Args) (*Result, error) {
	u, err := f.checkURL(a.URL)
	if err != nil {
		return nil, fmt.Errorf("web_fetch: %w", err)
	}
	method := a.Method
	if method == "" {
		method = http.MethodGet
	}
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodPost:
	default:
		return nil, fmt.Errorf("web_fetch: %w: method %q", tools.ErrInvalidArguments, method)
	}
	limit := f.cfg.MaxBytes
	if a.MaxBytes > 0 && a.MaxBytes < limit {
		limit = a.MaxBytes
	}
	ctx, cancel := context.WithTimeout(ctx, f.cfg.Timeout)
	defer cancel()
	var body io.Reader
	if a.Body != "" {
		body = strings.NewReader(a.Body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), body)
	if err != nil {
		return nil, fmt.Errorf("web_fetch: %w: %w", ErrURL, err)
	}
	for k, v := range a.Headers {
		req.Header.Set(k, v)
	}
	if req.Header.Get("User-Agent") == "" {
		req.Header.Set("User-Agent", f.cfg.UserAgent)
	}
	if a.IdempotencyKey != "" {
		req.Header.Set(HeaderIdempotencyKey, a.IdempotencyKey)
	}
	resp, err := f.client.Do(req)
	if err != nil {
		return nil, f.fetchError(ctx, err)
	}
	defer resp.Body.Close()
	res := &Result{
		Status:      resp.StatusCode,
		StatusText:  resp.Status,
		ContentType: resp.Header.Get("Content-Type"),
		URL:         resp.Request.URL.String(),
		Cap:         limit,
		Size:        -1,
	}
	for r := resp.Request; r.Response != nil; r = r.Response.Request {
		res.Redirects++
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return nil, f.fetchError(ctx, err)
	}
	if int64(len(b)) > limit {
		res.Truncated = true
		b = b[:limit]
		if resp.ContentLength > 0 {
			res.Size = resp.ContentLength
		}
	} else {
		res.Size = int64(len(b))
	}
	res.Body = b
	return res, nil
}

func (f *Fetcher) fetchError(ctx context.Context, err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err // its text repeats the URL; ours says it once
	}
	if errors.Is(err, ErrBlocked) || errors.Is(err, ErrScheme) || errors.Is(err, ErrTooManyRedirects) || errors.Is(err, ErrURL) {
		return fmt.Errorf("web_fetch: %w", err)
	}
	// The context's deadline and the transport's own timeouts (response
	// headers, dial) are the same bound; whichever fires first, it is a
	// timeout.
	var te interface{ Timeout() bool }
	if ctx.Err() == context.DeadlineExceeded || errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &te) && te.Timeout()) {
		return fmt.Errorf("web_fetch: %w after %s", ErrTimeout, f.cfg.Timeout)
	}
	return fmt.Errorf("web_fetch: %w", err)
}

// checkURL parses raw and refuses what can be refused before any dial: a
// scheme other than http or https, a missing host, and a host that is a
// refused IP literal. The dialer checks again whatever the host resolves
// to.
func (f *Fetcher) checkURL(raw string) (*url.URL, error) {
	u, err := url.Parse(strings.TrimSpace(raw))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrURL, err)
	}
	return u, f.checkParsed(u)
}

func (f *Fetcher) checkParsed(u *url.URL) error {
	switch strings.ToLower(u.Scheme) {
	case "http", "https":
	case "":
		return fmt.Errorf("%w: %q has no scheme (use http:// or https://)", ErrURL, u.Redacted())
	default:
		return fmt.Errorf("%w: refused scheme %q", ErrScheme, u.Scheme)
	}
	host := u.Hostname()
	if host == "" {
		return fmt.Errorf("%w: %q has no host", ErrURL, u.Redacted())
	}
	port := u.Port()
	if port == "" {
		port = "80"
		if strings.EqualFold(u.Scheme, "https") {
			port = "443"
		}
	}
	_, err := f.guard.Addrs(context.Background(), host, port, false)
	return err
}

// dial is the transport's DialContext: the guard's (it resolves the host
// once, checks every address, and connects only to checked addresses).
func (f *Fetcher) dial(ctx context.Context, network, address string) (net.Conn, error) {
	if _, _, err := net.SplitHostPort(address); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrURL, err)
	}
	return f.guard.DialContext(ctx, network, address)
}

func (f *Fetcher) checkRedirect(req *http.Request, via []*http.Request) error {
	if f.cfg.MaxRedirects < 0 {
		return http.ErrUseLastResponse
	}
	if len(via) > f.cfg.MaxRedirects {
		return fmt.Errorf("%w (more than %d)", ErrTooManyRedirects, f.cfg.MaxRedirects)
	}
	if err := f.checkParsed(req.URL); err != nil {
		return fmt.Errorf("redirect to %s: %w", req.URL.Redacted(), err)
	}
	StripCredentialsAcrossOrigins(req, via)
	return nil
}

// StripCredentialsAcrossOrigins is the credential half of a redirect
// policy (an http.Client's CheckRedirect calls it): once any hop of the
// chain — this one or an earlier one — leaves the origin (scheme, host
// and port) the first request was made to, every header that may carry a
// credential is removed from req, so no key follows a redirect to another
// server, another port of the same host, or from https to http.
// net/http alone keeps Authorization across ports of one host and to
// subdomains, and copies custom key headers (api-key, x-api-key) to any
// host.
func StripCredentialsAcrossOrigins(req *http.Request, via []*http.Request) {
	if len(via) == 0 {
		return
	}
	first := origin(via[0].URL)
	same := origin(req.URL) == first
	for _, v := range via[1:] {
		same = same && origin(v.URL) == first
	}
	if same {
		return
	}
	for k := range req.Header {
		if IsCredentialHeader(k) {
			req.Header.Del(k)
		}
	}
}

// IsCredentialHeader reports whether a header may carry a credential:
// Authorization, Proxy-Authorization, Cookie, and any header whose name
// mentions auth, key, token, secret, session, password or cookie (api-key,
// X-Api-Key, X-Auth-Token, …).
func IsCredentialHeader(name string) bool {
	n := strings.ToLower(name)
	for _, w := range []string{"auth", "key", "token", "secret", "session", "passw", "cookie"} {
		if strings.Contains(n, w) {
			return true
		}
	}
	return false
}

// origin is scheme://host:port with the default port made explicit.
func origin(u *url.URL) string {
	scheme := strings.ToLower(u.Scheme)
	port := u.Port()
	if port == "" {
		port = "80"
		if scheme == "https" {
			port = "443"
		}
	}
	return scheme + "://" + strings.ToLower(strings.TrimSuffix(u.Hostname(), ".")) + ":" + port
}

// Format renders r for the model: a short header, a blank line, the body
// (text as it is, binary summarised) and a truncation note.
func (r *Result) Format() string {
	var b strings.Builder
	fmt.Fprintf(&b, "status: %s\n", r.StatusText)
	if r.ContentType != "" {
		fmt.Fprintf(&b, "content-type: %s\n", r.ContentType)
	}
	fmt.Fprintf(&b, "url: %s\n", r.URL)
	if r.Redirects > 0 {
		fmt.Fprintf(&b, "redirects: %d\n", r.Redirects)
	}
	switch {
	case r.Truncated && r.Size > 0:
		fmt.Fprintf(&b, "bytes: %d of %d\n", len(r.Body), r.Size)
	case r.Truncated:
		fmt.Fprintf(&b, "bytes: %d of more\n", len(r.Body))
	default:
		fmt.Fprintf(&b, "bytes: %d\n", len(r.Body))
	}
	if len(r.Body) > 0 {
		b.WriteString("\n")
		if isText(r.ContentType, r.Body) {
			body := r.Body
			if r.Truncated {
				body = trimPartialRune(body)
			}
			b.WriteString(strings.ToValidUTF8(string(body), "\uFFFD"))
		} else {
			fmt.Fprintf(&b, "[binary content (%s), %d bytes, not shown]", orUnknown(r.ContentType), len(r.Body))
		}
	}
	if r.Truncated {
		fmt.Fprintf(&b, "\n[truncated at %d bytes]", r.Cap)
	}
	return b.String()
}

func orUnknown(ct string) string {
	if ct == "" {
		return "unknown type"
	}
	return ct
}

// isText decides whether a body is shown: text-like media types, or no
// declared type and valid UTF-8 without NULs.
func isText(contentType string, body []byte) bool {
	mt, _, _ := mime.ParseMediaType(contentType)
	switch {
	case strings.HasPrefix(mt, "text/"),
		mt == "application/json", strings.HasSuffix(mt, "+json"),
		mt == "application/xml", strings.HasSuffix(mt, "+xml"),
		mt == "application/javascript", mt == "application/ecmascript",
		mt == "application/x-www-form-urlencoded", mt == "application/yaml",
		mt == "application/x-yaml", mt == "application/toml", mt == "application/sql",
		mt == "image/svg+xml":
		return true
	case mt == "" || mt == "application/octet-stream":
		sample := trimPartialRune(body[:min(len(body), 4096)])
		return utf8.Valid(sample) && !bytes.ContainsRune(sample, 0)
	}
	return false
}

// trimPartialRune drops an incomplete UTF-8 sequence a cut left at the end.
func trimPartialRune(b []byte) []byte {
	for i := 1; i <= utf8.UTFMax && i <= len(b); i++ {
		c := b[len(b)-i]
		if c < 0x80 {
			return b
		}
		if utf8.RuneStart(c) {
			if !utf8.FullRune(b[len(b)-i:]) {
				return b[:len(b)-i]
			}
			return b
		}
	}
	return b
}
