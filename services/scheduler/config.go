package scheduler

import (
	"fmt"
	"strconv"
	"time"

	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/envconf"
	"github.com/agentmesh/agentmesh/pkg/netguard"
	"github.com/agentmesh/agentmesh/pkg/subjects"
	"github.com/agentmesh/agentmesh/pkg/webhook"
)

// Config of the scheduler. ConfigFromEnv reads it from the variables named
// on its fields (their docs: services/app.EnvVars); a zero field takes its
// default (withDefaults).
type Config struct {
	// Prefix (AGENTMESH_PREFIX) and Streams (AGENTMESH_STREAM_REPLICAS) of
	// the bus.
	Prefix  string
	Streams bus.StreamOptions
	// Workers dispatch tasks in parallel (default 64).
	Workers int
	// ReconcileInterval between scans for lost work (default 10s).
	ReconcileInterval time.Duration
	// QueuedGrace: a task queued this long that the leader does not know
	// is queued again (default 15s).
	QueuedGrace time.Duration
	// AssignedGrace: a task assigned this long without an executor taking
	// it gets its work republished (default 2m).
	AssignedGrace time.Duration
	// LeaseTTL is the leader lease (AGENTMESH_SCHEDULER_LEASE, default 6s,
	// at least 300ms): a dead leader is replaced within about this long.
	LeaseTTL time.Duration
	// Aging raises a waiting task's priority by one level per Aging of
	// waiting (AGENTMESH_PRIORITY_AGING, default 1m; negative = no aging).
	Aging time.Duration
	// OrgLimit is the default number of tasks one org may run at once
	// across the cluster (AGENTMESH_ORG_MAX_CONCURRENCY; 0 = no limit);
	// OrgLimits overrides it per org (AGENTMESH_ORG_LIMITS).
	OrgLimit  int
	OrgLimits map[string]int
	// NodeTTL is how long an executor may stay silent before it counts as
	// lost when its heartbeats do not say (default 15s).
	NodeTTL time.Duration
	// Clock is the time schedules fire by (nil: the real one; tests give
	// a fake one).
	Clock Clock
	// Webhooks: the delivery of webhook messages (webhooks.go).
	Webhooks WebhookConfig
}

// WebhookConfig tunes webhook delivery; a zero field takes its default.
type WebhookConfig struct {
	// Allow names the loopback, private or link-local destinations an
	// endpoint may reach (AGENTMESH_WEBHOOK_ALLOW).
	Allow []string
	// Timeout bounds one try (default 10s).
	Timeout time.Duration
	// Workers deliver at once on this replica (default 64);
	// PerEndpoint bounds the tries in flight to one endpoint on it
	// (default 16), so a slow endpoint holds at most that many.
	Workers, PerEndpoint int
	// FirstRetry, MaxRetry and GiveUpAfter are the retry plan (defaults
	// webhook.FirstRetry, MaxRetry, GiveUpAfter: 5s doubling to 1h, for a
	// day).
	FirstRetry, MaxRetry, GiveUpAfter time.Duration
}

// Defaults.
const (
	DefaultLeaseTTL = 6 * time.Second
	DefaultAging    = time.Minute
	DefaultNodeTTL  = 15 * time.Second
	// MinLeaseTTL is the shortest lease: renewals every quarter of it must
	// still fit a round trip to the server.
	MinLeaseTTL = 300 * time.Millisecond
)

// The scheduler's own variables.
const (
	EnvOrgMaxConcurrency = "AGENTMESH_ORG_MAX_CONCURRENCY"
	EnvOrgLimits         = "AGENTMESH_ORG_LIMITS"
	EnvPriorityAging     = "AGENTMESH_PRIORITY_AGING"
	EnvLease             = "AGENTMESH_SCHEDULER_LEASE"
	EnvWebhookAllow      = "AGENTMESH_WEBHOOK_ALLOW"
)

// ConfigFromEnv reads the scheduler's settings through get; a bad value is
// an *envconf.Error naming its variable. The result has its defaults.
func ConfigFromEnv(get envconf.Getter) (Config, error) {
	r := envconf.New(get)
	var c Config
	c.Prefix, c.Streams = bus.ReadSettings(r)
	c.OrgLimit = r.Int(EnvOrgMaxConcurrency)
	r.Parse(EnvOrgLimits, func(v string) (err error) {
		c.OrgLimits, err = parseOrgLimits(v)
		return err
	})
	c.Aging = r.Duration(EnvPriorityAging)
	if c.LeaseTTL = r.Duration(EnvLease); c.LeaseTTL < 0 {
		r.Fail(EnvLease, "want a positive duration such as 6s")
	}
	if c.Webhooks.Allow = r.List(EnvWebhookAllow); len(c.Webhooks.Allow) > 0 {
		if _, err := netguard.ParseAllowlist(c.Webhooks.Allow); err != nil {
			r.Fail(EnvWebhookAllow, err.Error())
		}
	}
	if err := r.Err(); err != nil {
		return Config{}, err
	}
	c = c.withDefaults()
	return c, c.validate()
}

// withDefaults fills the zero fields with their defaults.
func (c Config) withDefaults() Config {
	for _, d := range []struct {
		p   *time.Duration
		def time.Duration
	}{
		{&c.ReconcileInterval, 10 * time.Second}, {&c.QueuedGrace, 15 * time.Second}, {&c.AssignedGrace, 2 * time.Minute},
		{&c.LeaseTTL, DefaultLeaseTTL}, {&c.NodeTTL, DefaultNodeTTL},
	} {
		if *d.p <= 0 {
			*d.p = d.def
		}
	}
	if c.Workers <= 0 {
		c.Workers = 64
	}
	if c.Aging == 0 {
		c.Aging = DefaultAging
	}
	if c.Clock == nil {
		c.Clock = realClock{}
	}
	c.Webhooks = c.Webhooks.withDefaults()
	return c
}

func (w WebhookConfig) withDefaults() WebhookConfig {
	for _, d := range []struct {
		p   *time.Duration
		def time.Duration
	}{{&w.Timeout, 10 * time.Second}, {&w.FirstRetry, webhook.FirstRetry}, {&w.MaxRetry, webhook.MaxRetry}, {&w.GiveUpAfter, webhook.GiveUpAfter}} {
		if *d.p <= 0 {
			*d.p = d.def
		}
	}
	if w.Workers <= 0 {
		w.Workers = 64
	}
	if w.PerEndpoint <= 0 {
		w.PerEndpoint = 16
	}
	return w
}

// validate checks c (defaults applied; the prefix is New's and
// ReadSettings'); an error names the variable of the bad setting.
func (c Config) validate() error {
	if c.LeaseTTL < MinLeaseTTL {
		return &envconf.Error{Name: EnvLease, Value: c.LeaseTTL.String(), Reason: "LeaseTTL is below 300ms"}
	}
	if c.OrgLimit < 0 {
		return &envconf.Error{Name: EnvOrgMaxConcurrency, Value: strconv.Itoa(c.OrgLimit), Reason: "OrgLimit must not be negative"}
	}
	for org, n := range c.OrgLimits {
		if n < 0 || !subjects.ValidToken(org) {
			return &envconf.Error{Name: EnvOrgLimits, Value: fmt.Sprintf("%s=%d", org, n), Reason: "each org limit must name a valid org and be ≥ 0"}
		}
	}
	return nil
}

// parseOrgLimits reads "org=N,org2=M".
func parseOrgLimits(v string) (map[string]int, error) {
	pairs, err := envconf.ParsePairs(v)
	if err != nil {
		return nil, err
	}
	out := make(map[string]int, len(pairs))
	for org, n := range pairs {
		if !subjects.ValidToken(org) {
			return nil, fmt.Errorf("%q is not an org", org)
		}
		limit, err := strconv.Atoi(n)
		if err != nil || limit < 0 {
			return nil, fmt.Errorf("%s=%s: the limit must be a number ≥ 0", org, n)
		}
		out[org] = limit
	}
	return out, nil
}
