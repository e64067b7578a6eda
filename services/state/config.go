package state

import (
	"fmt"
	"time"

	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/busauth"
	"github.com/agentmesh/agentmesh/pkg/envconf"
)

// Config of the state service. ConfigFromEnv reads it from the variables
// named on its fields (their docs: services/app.EnvVars); a zero field takes
// its default (withDefaults).
type Config struct {
	// Prefix of every subject (AGENTMESH_PREFIX; "" means
	// subjects.DefaultPrefix).
	Prefix string
	// Streams tunes the bus streams New ensures (AGENTMESH_STREAM_REPLICAS).
	Streams bus.StreamOptions
	// Concurrency bounds the requests served at once; 0 means
	// DefaultConcurrency.
	Concurrency int
	// Taps mints tap credentials (taps.create); nil answers taps.create
	// with unimplemented. It comes with the bus identities (the binary
	// reads AGENTMESH_NATS_TAP_SIGNER), not from ConfigFromEnv.
	Taps *busauth.TapSigner
	// Retention: finished tasks last changed longer ago are deleted with
	// their history (graph.go); 0 keeps them for ever. From the
	// environment (AGENTMESH_RETENTION) an unset value is
	// DefaultRetention.
	Retention time.Duration
	// RetentionInterval between retention sweeps; 0 means
	// DefaultRetentionInterval.
	RetentionInterval time.Duration
	// Delegation limits (delegation.go); zero fields take the defaults of
	// package delegation.
	Delegation DelegationLimits
	// Memory bounds what agents keep (keep.go).
	Memory MemoryConfig
}

// Defaults.
const (
	// DefaultConcurrency bounds the requests served at once when the
	// config says 0.
	DefaultConcurrency = 256
	// DefaultRetention is the retention of the binary when
	// AGENTMESH_RETENTION is unset.
	DefaultRetention = 30 * 24 * time.Hour
	// DefaultRetentionInterval is how often the retention sweep runs.
	DefaultRetentionInterval = 10 * time.Minute
)

// EnvRetention is the state service's own variable.
const EnvRetention = "AGENTMESH_RETENTION"

// ConfigFromEnv reads the state service's settings through get; a bad
// value is an *envconf.Error naming its variable. The result has its
// defaults.
func ConfigFromEnv(get envconf.Getter) (Config, error) {
	r := envconf.New(get)
	var c Config
	c.Prefix, c.Streams = bus.ReadSettings(r)
	c.Memory = readMemoryConfig(r)
	c.Retention = DefaultRetention
	if r.String(EnvRetention) != "" {
		if c.Retention = r.Duration(EnvRetention); c.Retention < 0 {
			r.Fail(EnvRetention, "want a duration such as 720h, or 0 to keep for ever")
		}
	}
	if err := r.Err(); err != nil {
		return Config{}, err
	}
	c = c.withDefaults()
	return c, c.validate()
}

// withDefaults fills the zero fields with their defaults (Retention 0 keeps
// for ever: it has none).
func (c Config) withDefaults() Config {
	if c.Concurrency == 0 {
		c.Concurrency = DefaultConcurrency
	}
	if c.RetentionInterval == 0 {
		c.RetentionInterval = DefaultRetentionInterval
	}
	c.Delegation = c.Delegation.withDefaults()
	return c
}

// validate checks c (defaults applied).
func (c Config) validate() error {
	if c.Concurrency < 0 {
		return fmt.Errorf("concurrency %d is negative", c.Concurrency)
	}
	if c.Retention < 0 {
		return &envconf.Error{Name: EnvRetention, Value: c.Retention.String(), Reason: "Retention must not be negative"}
	}
	if c.RetentionInterval < 0 {
		return fmt.Errorf("retention interval %s is negative", c.RetentionInterval)
	}
	return nil
}
