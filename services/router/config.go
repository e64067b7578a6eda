package router

import (
	"fmt"
	"math"
	"net"
	"strings"
	"time"

	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/envconf"
	"github.com/agentmesh/agentmesh/pkg/netguard"
	"github.com/agentmesh/agentmesh/services/router/rest"
)

// Config configures the router. ConfigFromEnv reads it from the variables
// named on its fields (their docs: services/app.EnvVars); a zero field takes
// its default (withDefaults).
type Config struct {
	// Prefix of the bus subjects (AGENTMESH_PREFIX; "" means
	// subjects.DefaultPrefix).
	Prefix string
	// Listen is the gRPC listen address (AGENTMESH_LISTEN); default
	// DefaultListen. New opens the listener, so ":0" works and Addr reports
	// the port.
	Listen string
	// APIKeys maps an API key to "org" (role admin) or "org:role"
	// ("*:platform" for a platform key): the AGENTMESH_API_KEYS form
	// (ParseAPIKeys). With neither APIKeys nor KeysFile authentication is
	// off and every caller is an admin of org "default" (development only).
	APIKeys map[string]string
	// KeysFile is a JSON file of hashed keys with names, orgs and roles
	// (AGENTMESH_API_KEYS_FILE; see ParseKeysFile). It is re-read when it
	// changes (checked every KeysReload, default 2 s) and on SIGHUP; a file
	// that does not parse leaves the keys as they were (and is logged).
	KeysFile   string
	KeysReload time.Duration
	// TLSCert and TLSKey (PEM files; AGENTMESH_TLS_CERT, AGENTMESH_TLS_KEY)
	// serve the API over TLS; TLSClientCA (PEM; AGENTMESH_TLS_CLIENT_CA)
	// also requires clients to present a certificate it signed.
	TLSCert, TLSKey, TLSClientCA string
	// MaxConnections caps the connections held (AGENTMESH_MAX_CONNECTIONS,
	// default 4096, and never more than the open-file limit allows);
	// HandshakeTimeout bounds the TLS and HTTP/2 handshake (default 10 s);
	// AuthTimeout closes a connection that made no authenticated RPC that
	// long after it was accepted (AGENTMESH_AUTH_TIMEOUT, default 10 s);
	// IdleTimeout closes a connection without RPCs for that long (default
	// 5 min).
	MaxConnections   int
	HandshakeTimeout time.Duration
	AuthTimeout      time.Duration
	IdleTimeout      time.Duration
	// MaxStreamsPerConn caps concurrent RPCs on one connection (default 100).
	MaxStreamsPerConn uint32
	// MaxWatchesPerOrg caps the WatchTask streams an org holds open at
	// once (AGENTMESH_MAX_WATCHES_PER_ORG, default 256).
	MaxWatchesPerOrg int
	// OrgRate is each org's sustained request rate per second
	// (AGENTMESH_ORG_RATE, default 100; negative: unlimited) and OrgBurst
	// its burst (default 2×OrgRate). With authentication off there is one
	// org and no rate limit.
	OrgRate  float64
	OrgBurst int
	// MaxInputBytes bounds SubmitTask's input; default 256 KiB.
	MaxInputBytes int
	// MaxMetadataEntries and MaxMetadataBytes (keys plus values) bound a
	// task's metadata; defaults 64 and 16 KiB.
	MaxMetadataEntries int
	MaxMetadataBytes   int
	// MaxRequestBytes is the largest gRPC message accepted; default 4 MiB.
	MaxRequestBytes int
	// WatchRefetch is how long a WatchTask stream waits without news before
	// it asks state for the history again, a safety net for events lost
	// inside NATS (reconnects and dropped messages are noticed by
	// themselves, see hub.go); default 30 s.
	WatchRefetch time.Duration
	// StopTimeout bounds the graceful stop; default 10 s.
	StopTimeout time.Duration
	// WatchTasksInterval is how often WatchTasks streams get the changes
	// gathered since the last time (feed.go); default 250 ms.
	WatchTasksInterval time.Duration

	// HTTPListen is the address of the HTTP listener (http.go;
	// AGENTMESH_HTTP_LISTEN, "off" or empty: none): REST/JSON and SSE
	// (package rest) and the doors mounted with Mount, all through the
	// same authentication as gRPC. It takes the TLS settings above,
	// MaxConnections, AuthTimeout, IdleTimeout and MaxRequestBytes (the
	// largest request body) as gRPC does.
	HTTPListen string
	// HTTPCORSOrigins are the origins browsers may call the HTTP API from
	// (AGENTMESH_HTTP_CORS_ORIGINS: scheme://host[:port], or "*" for any);
	// empty = no CORS headers.
	HTTPCORSOrigins []string
	// Version is what GetVersion answers: the binary's version.
	Version string
	// WebhookAllow names the loopback, private or link-local destinations
	// a webhook endpoint's URL may name (AGENTMESH_WEBHOOK_ALLOW; the
	// scheduler, which delivers, reads it too): host, host:port, address or
	// CIDR, as netguard.ParseAllowlist reads them.
	WebhookAllow []string
}

// Defaults of Config.
// MaxHeaderBytes bounds the headers (gRPC metadata) of one request on
// every door: the gRPC server's header list and the HTTP server's
// MaxHeaderBytes. A key, a trace context and an org fit many times over.
const MaxHeaderBytes = 64 << 10

const (
	DefaultListen             = "127.0.0.1:7400"
	DefaultMaxInputBytes      = 256 << 10
	DefaultMaxMetadataEntries = 64
	DefaultMaxMetadataBytes   = 16 << 10
	DefaultMaxRequestBytes    = 4 << 20
	DefaultWatchRefetch       = 30 * time.Second
	DefaultStopTimeout        = 10 * time.Second
	DefaultKeysReload         = 2 * time.Second
	DefaultMaxConnections     = 4096
	DefaultHandshakeTimeout   = 10 * time.Second
	DefaultAuthTimeout        = 10 * time.Second
	DefaultIdleTimeout        = 5 * time.Minute
	DefaultMaxStreamsPerConn  = 100
	DefaultMaxWatchesPerOrg   = 256
	DefaultOrgRate            = 100
	// MaxOrgRate is the highest OrgRate accepted.
	MaxOrgRate = 1e6
)

// The router's own variables.
const (
	EnvListen           = "AGENTMESH_LISTEN"
	EnvAPIKeys          = "AGENTMESH_API_KEYS"
	EnvAPIKeysFile      = "AGENTMESH_API_KEYS_FILE"
	EnvTLSCert          = "AGENTMESH_TLS_CERT"
	EnvTLSKey           = "AGENTMESH_TLS_KEY"
	EnvTLSClientCA      = "AGENTMESH_TLS_CLIENT_CA"
	EnvMaxConnections   = "AGENTMESH_MAX_CONNECTIONS"
	EnvMaxWatchesPerOrg = "AGENTMESH_MAX_WATCHES_PER_ORG"
	EnvAuthTimeout      = "AGENTMESH_AUTH_TIMEOUT"
	EnvOrgRate          = "AGENTMESH_ORG_RATE"
	EnvHTTPListen       = "AGENTMESH_HTTP_LISTEN"
	EnvHTTPCORSOrigins  = "AGENTMESH_HTTP_CORS_ORIGINS"
	EnvWebhookAllow     = "AGENTMESH_WEBHOOK_ALLOW"
)

// ConfigFromEnv reads the router's settings through get; a bad value is an
// *envconf.Error naming its variable. The result has its defaults.
func ConfigFromEnv(get envconf.Getter) (Config, error) {
	r := envconf.New(get)
	c := Config{
		Listen: r.String(EnvListen), KeysFile: r.String(EnvAPIKeysFile),
		TLSCert: r.String(EnvTLSCert), TLSKey: r.String(EnvTLSKey), TLSClientCA: r.String(EnvTLSClientCA),
		MaxConnections:   r.IntRange(EnvMaxConnections, 0, math.MaxInt32),
		MaxWatchesPerOrg: r.IntRange(EnvMaxWatchesPerOrg, 0, math.MaxInt32),
	}
	c.Prefix, _ = bus.ReadSettings(r)
	if c.WebhookAllow = r.List(EnvWebhookAllow); len(c.WebhookAllow) > 0 {
		if _, err := netguard.ParseAllowlist(c.WebhookAllow); err != nil {
			r.Fail(EnvWebhookAllow, err.Error())
		}
	}
	r.Parse(EnvAPIKeys, func(v string) (err error) {
		c.APIKeys, err = parseAPIKeys(v)
		return err
	})
	if c.AuthTimeout = r.Duration(EnvAuthTimeout); c.AuthTimeout < 0 {
		r.Fail(EnvAuthTimeout, "want a positive duration such as 10s")
	}
	if c.OrgRate = r.Float(EnvOrgRate); r.String(EnvOrgRate) != "" && c.OrgRate == 0 {
		r.Fail(EnvOrgRate, "want requests per second (a positive number up to 1000000, or -1 for unlimited)")
	}
	switch v := r.String(EnvHTTPListen); v {
	case "", "off":
	default:
		if _, port, err := net.SplitHostPort(v); err != nil || port == "" {
			r.Fail(EnvHTTPListen, "want host:port (e.g. 127.0.0.1:7480) or off")
		}
		c.HTTPListen = v
	}
	r.Parse(EnvHTTPCORSOrigins, func(v string) (err error) {
		c.HTTPCORSOrigins, err = rest.ParseCORSOrigins(v)
		return err
	})
	if err := r.Err(); err != nil {
		return Config{}, err
	}
	c = c.withDefaults()
	return c, c.validate()
}

// withDefaults fills the zero fields with their defaults.
func (c Config) withDefaults() Config {
	if c.Listen == "" {
		c.Listen = DefaultListen
	}
	for _, v := range []struct {
		p   *int
		def int
	}{
		{&c.MaxInputBytes, DefaultMaxInputBytes}, {&c.MaxMetadataEntries, DefaultMaxMetadataEntries},
		{&c.MaxMetadataBytes, DefaultMaxMetadataBytes}, {&c.MaxRequestBytes, DefaultMaxRequestBytes},
	} {
		if *v.p == 0 {
			*v.p = v.def
		}
	}
	for _, d := range []struct {
		p   *time.Duration
		def time.Duration
	}{
		{&c.WatchRefetch, DefaultWatchRefetch}, {&c.StopTimeout, DefaultStopTimeout}, {&c.WatchTasksInterval, DefaultWatchTasksInterval}, {&c.KeysReload, DefaultKeysReload},
		{&c.HandshakeTimeout, DefaultHandshakeTimeout}, {&c.AuthTimeout, DefaultAuthTimeout}, {&c.IdleTimeout, DefaultIdleTimeout},
	} {
		if *d.p <= 0 {
			*d.p = d.def
		}
	}
	if c.MaxConnections <= 0 {
		c.MaxConnections = DefaultMaxConnections
	}
	if c.MaxStreamsPerConn == 0 {
		c.MaxStreamsPerConn = DefaultMaxStreamsPerConn
	}
	if c.MaxWatchesPerOrg <= 0 {
		c.MaxWatchesPerOrg = DefaultMaxWatchesPerOrg
	}
	if c.OrgRate == 0 {
		c.OrgRate = DefaultOrgRate
	}
	if c.OrgBurst <= 0 {
		c.OrgBurst = max(1, int(2*c.OrgRate))
	}
	return c
}

// validate checks c (defaults applied; the prefix, the keys and the TLS
// files are New's).
func (c Config) validate() error {
	for _, v := range []struct {
		name string
		n    int
	}{
		{"MaxInputBytes", c.MaxInputBytes}, {"MaxMetadataEntries", c.MaxMetadataEntries},
		{"MaxMetadataBytes", c.MaxMetadataBytes}, {"MaxRequestBytes", c.MaxRequestBytes},
	} {
		if v.n < 0 {
			return fmt.Errorf("%s must not be negative", v.name)
		}
	}
	// A task must fit in one bus message, with room for the rest of it.
	if c.MaxInputBytes+c.MaxMetadataBytes > bus.MaxPayload*3/4 {
		return fmt.Errorf("MaxInputBytes+MaxMetadataBytes must stay under %d bytes (the bus payload limit)", bus.MaxPayload*3/4)
	}
	if c.OrgRate > MaxOrgRate {
		return &envconf.Error{Name: EnvOrgRate, Value: fmt.Sprint(c.OrgRate), Reason: "want requests per second (a positive number up to 1000000, or -1 for unlimited)"}
	}
	return nil
}

// parseAPIKeys parses AGENTMESH_API_KEYS, "key=org,key2=org2:role", into
// Config.APIKeys.
func parseAPIKeys(v string) (map[string]string, error) {
	keys, err := envconf.ParsePairs(v)
	if err != nil {
		return nil, err
	}
	for k, org := range keys {
		if org == "" {
			return nil, fmt.Errorf("key %q names no org: want key=org or key=org:role", k)
		}
		if o, role, _ := strings.Cut(org, ":"); (o != "*" || role != string(RolePlatform)) && !ValidOrg(o) {
			return nil, fmt.Errorf("org %q must match %s", o, OrgPattern)
		}
	}
	return keys, nil
}
