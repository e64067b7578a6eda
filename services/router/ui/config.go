package ui

import (
	"time"

	"github.com/agentmesh/agentmesh/pkg/envconf"
)

// Defaults of Config.
const (
	DefaultIdleTimeout = 30 * time.Minute
	DefaultMaxAge      = 12 * time.Hour
)

// MinSecretBytes is the shortest AGENTMESH_UI_SECRET accepted.
const MinSecretBytes = 32

// Config configures the dashboard.
type Config struct {
	// Off: no dashboard (the HTTP listener serves the REST API only).
	Off bool
	// Secret seals the session cookies: AES-256-GCM under a key derived
	// from it. Every router replica behind one address needs the same
	// secret, so that a session opened on one is honoured by the others.
	// Empty: a random secret per process (sessions end when the process
	// does, and hold on one replica only). At least MinSecretBytes.
	Secret []byte
	// IdleTimeout ends a session not used for this long; MaxAge ends any
	// session this long after sign-in. Defaults 30 min and 12 h.
	IdleTimeout time.Duration
	MaxAge      time.Duration
}

// ConfigFrom reads the dashboard's variables: AGENTMESH_UI (on, off),
// AGENTMESH_UI_SECRET, AGENTMESH_UI_SESSION_IDLE, AGENTMESH_UI_SESSION_MAX.
// The first bad value is the error, naming its variable.
func ConfigFrom(get envconf.Getter) (Config, error) {
	r := envconf.New(get)
	var c Config
	c.Off = r.Enum("AGENTMESH_UI", "on", "off") == "off"
	if s := r.String("AGENTMESH_UI_SECRET"); s != "" {
		if len(s) < MinSecretBytes {
			r.Failf("AGENTMESH_UI_SECRET", "want at least %d bytes (e.g. openssl rand -base64 32), got %d", MinSecretBytes, len(s))
		}
		c.Secret = []byte(s)
	}
	c.IdleTimeout = r.Duration("AGENTMESH_UI_SESSION_IDLE")
	c.MaxAge = r.Duration("AGENTMESH_UI_SESSION_MAX")
	if c.IdleTimeout < 0 || (c.IdleTimeout > 0 && c.IdleTimeout < time.Minute) {
		r.Failf("AGENTMESH_UI_SESSION_IDLE", "want a duration of at least 1m")
	}
	if c.MaxAge < 0 || (c.MaxAge > 0 && c.MaxAge < time.Minute) {
		r.Failf("AGENTMESH_UI_SESSION_MAX", "want a duration of at least 1m")
	}
	return c, r.Err()
}
